"""The subcommands that look after the host and the testbed: ``labkit images``, ``clean``,
``cloud-check``, ``fingerprint``, ``doctor`` and ``notebooks``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import ConfigError
from .common import data_dir_of, parse_params

__all__ = [
    "DEFAULT_GRACE",
    "cmd_clean",
    "cmd_cloud_check",
    "cmd_doctor",
    "cmd_fingerprint",
    "cmd_images",
    "cmd_notebooks",
    "duration",
]


def cmd_images(args: argparse.Namespace) -> int:
    from .. import images

    spec = "docker,lxd" if args.only is None else args.only
    only = tuple(x.strip() for x in spec.split(",") if x.strip() and x.strip() != "none")
    result = images.build(
        targets=only,
        vm=args.vm,
        force=args.force,
        profile=args.profile,
        packages=args.packages,
        variant=args.variant,
    )
    print(json.dumps(result, indent=2, default=str))
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove labkit-owned leftovers (instances, cgroups, work dirs) of one campaign, or of every
    campaign that is not running (:mod:`labkit.run.clean`; shown first, removed with ``--yes``)."""
    from ..backends import REGISTRY, get_backend
    from ..run.clean import find_leftovers, remove_leftovers, running_ids, stopped_ids
    from ..run.slurm_testbed import QueuedJobs

    args.data_dir = str(data_dir_of(args))
    if args.campaign_id:
        return _clean_campaign(args)
    backends = {}
    try:
        for name in [args.backend] if args.backend else list(REGISTRY):
            try:
                # slurm: this user's labkit jobs in the queue (a node's instances go with their job)
                backends[name] = (
                    QueuedJobs()
                    if name == "slurm"
                    else get_backend(name, **(parse_params(args.backend_option) if args.backend else {}))
                )
            except Exception as exc:  # an unavailable backend has nothing of ours to clean here
                if args.backend:
                    raise
                print(f"{name}: skipped ({str(exc).splitlines()[0][:160]})")
        found = find_leftovers(
            backends,
            running_ids(args.data_dir),
            stopped=stopped_ids(),
            grace_s=args.grace,
            data_dirs=[args.data_dir],
        )
        doomed = [x for x in found if x.doomed or (args.include_unknown and x.state == "unknown")]
        for x in found:
            hint = " (pass --include-unknown to remove)" if x.state == "unknown" and x not in doomed else ""
            print(f"{x.backend}: {x.name}: {'remove' if x in doomed else 'kept'}: {x.why}{hint}")
        if not doomed:
            print("nothing to remove")
            return 0
        if not (args.yes or _confirm(f"remove these {len(doomed)} object(s)? [y/N] ")):
            print(f"nothing removed: pass --yes to remove the {len(doomed)} object(s) marked 'remove'")
            return 1
        for name, removed in remove_leftovers(backends, found, include_unknown=args.include_unknown).items():
            print(f"{name}: removed {len(removed)} leftover(s): {' '.join(removed)}")
    finally:
        for backend in backends.values():
            backend.close()
    return 0


DEFAULT_GRACE = "10m"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """``--grace``: seconds from ``30s``, ``10m``, ``2h``, ``1d`` or a bare number of seconds."""
    import math

    value, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    try:
        seconds = float(value) * _UNITS[unit]
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration such as 30s, 10m or 2h (0 or more)")
    return seconds


def _confirm(question: str) -> bool:
    """Ask on the terminal; False without one (stdin not a tty)."""
    if not sys.stdin.isatty():
        return False
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _clean_campaign(args) -> int:
    """``labkit clean <id>``: that campaign's leftovers, holding its lock and its registry entry
    (refused while it runs, here or from another data dir)."""
    from ..backends import get_backend
    from ..core.ids import campaign_prefix, check_campaign_id
    from ..core.lock import LOCK_NAME, CampaignLock
    from ..core.redact import without_redacted
    from ..errors import StoreError
    from ..store import Store

    cid = check_campaign_id(args.campaign_id)
    with Store.for_campaign(args.data_dir, cid, readonly=True) as st:
        meta = st.meta()
    lock = CampaignLock(
        Path(args.data_dir) / cid / LOCK_NAME,
        f"campaign {cid!r}",
        readonly_ok=True,
        register={"campaign_id": cid, "data_dir": args.data_dir, "kind": "clean"},
    )
    if meta.get("testbed"):
        from ..run.clean import clean_testbed

        with lock:
            for where, removed in clean_testbed(meta, campaign_prefix(cid), args.testbed).items():
                print(f"{where}: removed {len(removed)} leftover(s) of campaign {cid}: {' '.join(removed)}")
        return 0
    if not meta.get("backend"):
        raise StoreError(
            f"campaign {cid!r}: its store records no backend; use `labkit clean` without a campaign"
        )
    options = {**without_redacted(meta.get("backend_options") or {}), **parse_params(args.backend_option)}
    with lock:
        backend = get_backend(meta["backend"], **options)
        try:
            removed = backend.cleanup(campaign_prefix(cid))
        finally:
            backend.close()
    print(f"{meta['backend']}: removed {len(removed)} leftover(s) of campaign {cid}: {' '.join(removed)}")
    return 0


def cmd_cloud_check(args: argparse.Namespace) -> int:
    """Run the cloud provider contract (labkit.backends.clouds.contract) against a real account."""
    from ..backends.clouds import get_provider
    from ..backends.clouds.contract import check_contract

    provider = get_provider(args.provider, **parse_params(args.option))
    check_contract(provider, args.flavor, args.image)
    return 0


def cmd_fingerprint(args: argparse.Namespace) -> int:
    from ..core.fingerprint import host_fingerprint

    print(json.dumps(host_fingerprint(), indent=2))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """What each backend needs from the host (docs/install.md) and what this machine has, as this
    user (:mod:`labkit.backends.needs`); exit 0 whatever is missing (it is a report)."""
    import getpass

    from .. import __version__
    from ..backends.needs import NEEDS, doctor
    from ..core.fingerprint import labkit_commit
    from ..core.paths import checkout

    found = {f.backend: f for f in doctor()}
    where = checkout()
    print(
        f"labkit {__version__} ({labkit_commit()}), {'checkout ' + str(where) if where else 'installed'}, "
        f"user {getpass.getuser()} (uid {os.geteuid()})"
    )
    for need in NEEDS:
        f = found[need.backend]
        print(f"\n{need.backend:<10}{'ok' if f.ok else 'NOT READY'}")
        print(f"  needs   {need.host}" + (f" (pip install 'labkit[{need.extra}]')" if need.extra else ""))
        print(f"  here    {f.here}")
        if not f.ok:
            print(f"  fix     {need.fix}")
    return 0


def cmd_notebooks(args: argparse.Namespace) -> int:
    """``labkit notebooks copy DIR``: the seed notebooks and the explorer that ship with labkit into a
    folder of the user's (an existing notebook is kept unless ``--force``); ``labkit notebooks list``."""
    import shutil

    from ..core.paths import notebooks_dir

    shipped = sorted(notebooks_dir().glob("*.ipynb"))
    if not shipped:
        raise ConfigError(
            f"no notebooks in {notebooks_dir()}: this labkit was installed without its package "
            "data; reinstall it (pip install --force-reinstall labkit)"
        )
    if args.action == "list":
        for nb in shipped:
            print(nb.name)
        return 0
    if not args.dir:
        raise ConfigError("labkit notebooks copy DIR: name the folder to copy the notebooks into")
    dest = Path(args.dir).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    kept = []
    for nb in shipped:
        target = dest / nb.name
        if target.exists() and not args.force:
            kept.append(nb.name)
            continue
        shutil.copyfile(nb, target)
        print(target)
    if kept:
        print(f"kept (exists; --force overwrites): {', '.join(kept)}", file=sys.stderr)
    print(
        f"run one from {dest}: papermill 01_affinity_factorial.ipynb out.ipynb -p mode run -p data_dir data "
        "(campaigns go to ./data; the papers' tables ship with labkit)",
        file=sys.stderr,
    )
    return 0
