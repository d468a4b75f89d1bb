"""Command line: ``labkit run``, ``images build``, ``export``, ``clean``, ``fingerprint``, ``list``,
``show``, ``status``, ``analyze``, ``compare``, ``report`` and ``cloud check``. ``--data-dir`` defaults to the repository's
``data/`` (found from the working directory or the package; see :mod:`labkit.core.paths`), else ``./data``."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import ConfigError, LabkitError


def _parse_params(items: list[str]) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--param {item!r}: write KEY=VALUE (VALUE may be JSON, e.g. board=12)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
        except RecursionError:
            raise ConfigError(f"option {key!r}: value nested too deeply") from None
    return out


def _parse_workload_params(items: list[str], workload: str) -> dict:
    """``--param KEY=VALUE`` items read by the workload's parameter schema (a string
    parameter keeps its text: ``argv=true`` is the string "true")."""
    from .workloads import workload_class
    cls = workload_class(workload)
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--param {item!r}: write KEY=VALUE (VALUE may be JSON, e.g. board=12)")
        out[key] = cls.param_from_text(key, value) if key in cls.defaults else value
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from .run.campaign import Campaign
    args.data_dir = str(_data_dir(args))
    store = Campaign(args.design, backend=args.backend, workload=args.workload,
                     workload_params=_parse_workload_params(args.param, args.workload),
                     backend_options=_parse_params(args.backend_option),
                     campaign_id=args.campaign_id, data_dir=args.data_dir,
                     run_timeout=args.timeout, group_readable=args.group_readable, testbed=args.testbed,
                     **_guard_options(args)).run(retry_failed=args.retry_failed, retries=args.retries, new_store=args.new_store)
    runs = store.runs()
    print(f"{len(runs)} runs stored in {store.path}: {runs.status.value_counts().to_dict()}")
    return 0


def _guard_options(args: argparse.Namespace) -> dict:
    """The options of ``labkit run`` that override the design's telemetry, exclusive and quarantine
    (only those given)."""
    out: dict = {}
    if args.telemetry is not None:
        out["telemetry"] = args.telemetry
    if args.exclusive is not None:
        out["exclusive"] = args.exclusive
    if args.quarantine is not None:
        out["quarantine"] = args.quarantine
    return out


def _telemetry_arg(text: str):
    """``--telemetry off|on|SECONDS`` as Campaign takes it (checked there)."""
    try:
        return float(text)
    except ValueError:
        return text


def cmd_status(args: argparse.Namespace) -> int:
    from .run.status import status_text
    from .store import Store
    cid = _existing(args, args.campaign)
    with Store.for_campaign(_data_dir(args), cid, readonly=True) as st:
        print(status_text(st, cid))
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    from . import images
    spec = "docker,lxd" if args.only is None else args.only
    only = tuple(x.strip() for x in spec.split(",") if x.strip() and x.strip() != "none")
    result = images.build(targets=only, vm=args.vm, force=args.force, profile=args.profile,
                          packages=args.packages, variant=args.variant)
    print(json.dumps(result, indent=2, default=str))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .store import Store
    with Store.for_campaign(_data_dir(args), _existing(args, args.campaign_id), readonly=True) as st:
        for path in st.export(args.out, formats=tuple(args.format.split(","))):
            print(path)
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove labkit-owned leftovers (instances, cgroups, work dirs) of one campaign, or of every
    campaign that is not running (:mod:`labkit.run.clean`; shown first, removed with ``--yes``)."""
    from .backends import REGISTRY, get_backend
    from .run.clean import find_leftovers, remove_leftovers, running_ids
    args.data_dir = str(_data_dir(args))
    if args.campaign_id:
        return _clean_campaign(args)
    backends = {}
    try:
        for name in ([args.backend] if args.backend else list(REGISTRY)):
            try:
                backends[name] = get_backend(name, **(_parse_params(args.backend_option) if args.backend else {}))
            except Exception as exc:  # an unavailable backend has nothing of ours to clean here
                if args.backend:
                    raise
                print(f"{name}: skipped ({str(exc).splitlines()[0][:160]})")
        busy = running_ids(args.data_dir)
        found = find_leftovers(backends, busy)
        doomed = [x for x in found if x.state == "stopped" or (args.include_unknown and x.state == "unknown")]
        for x in found:
            why = {"running": f"kept: campaign {x.campaign} is running ({busy.get(x.campaign or '')})",
                   "unknown": "kept: not made by a campaign (pass --include-unknown to remove)"}
            print(f"{x.backend}: {x.name}: "
                  f"{'remove' if x in doomed else why[x.state]}")
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
    from .backends import get_backend
    from .core.ids import campaign_prefix, check_campaign_id
    from .core.lock import LOCK_NAME, CampaignLock
    from .core.redact import without_redacted
    from .errors import StoreError
    from .store import Store
    cid = check_campaign_id(args.campaign_id)
    with Store.for_campaign(args.data_dir, cid, readonly=True) as st:
        meta = st.meta()
    lock = CampaignLock(Path(args.data_dir) / cid / LOCK_NAME, f"campaign {cid!r}", readonly_ok=True,
                        register={"campaign_id": cid, "data_dir": args.data_dir, "kind": "clean"})
    if meta.get("testbed"):
        from .run.engine import clean_testbed
        with lock:
            for where, removed in clean_testbed(meta, campaign_prefix(cid), args.testbed).items():
                print(f"{where}: removed {len(removed)} leftover(s) of campaign {cid}: {' '.join(removed)}")
        return 0
    if not meta.get("backend"):
        raise StoreError(f"campaign {cid!r}: its store records no backend; use `labkit clean` "
                         "without a campaign")
    options = {**without_redacted(meta.get("backend_options") or {}), **_parse_params(args.backend_option)}
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
    from .backends.clouds import get_provider
    from .backends.clouds.contract import check_contract
    provider = get_provider(args.provider, **_parse_params(args.option))
    check_contract(provider, args.flavor, args.image)
    return 0


def cmd_fingerprint(args: argparse.Namespace) -> int:
    from .core.fingerprint import host_fingerprint
    print(json.dumps(host_fingerprint(), indent=2))
    return 0


def _data_dir(args) -> Path:
    from .core.paths import data_dir
    if args.data_dir is not None:
        return Path(args.data_dir)
    try:
        return data_dir()
    except ConfigError:
        return Path("data")


def _existing(args, campaign: str) -> str:
    """``campaign`` if it is a valid campaign id (no ``..``, no ``/``: :func:`~labkit.core.ids.check_campaign_id`)
    and ``data_dir/campaign/store.sqlite`` exists, else a ConfigError listing them."""
    from .core.ids import check_campaign_id
    from .store.results import list_campaigns
    check_campaign_id(campaign)
    base = _data_dir(args)
    if not (base / campaign / "store.sqlite").is_file():
        have = ", ".join(list_campaigns(base).campaign) or "none"
        raise ConfigError(f"no campaign {campaign!r} under {base} (stored: {have})")
    return campaign


def _print_table(df) -> None:
    import pandas as pd
    with pd.option_context("display.width", 200, "display.max_columns", 40, "display.max_rows", 500):
        print(df.to_string(index=False))


def cmd_list(args: argparse.Namespace) -> int:
    from .store.results import list_campaigns
    table = list_campaigns(_data_dir(args))
    if table.empty:
        print(f"no campaign stored under {_data_dir(args)}")
    else:
        _print_table(table.drop(columns=["first_run"]))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from .core.fingerprint import fingerprint_table
    from .store import Store
    cid = _existing(args, args.campaign)
    with Store.for_campaign(_data_dir(args), cid, readonly=True) as st:
        meta, runs, fps = st.meta(), st.runs(), st.fingerprints()
    design = meta.get("design", {})
    print(f"campaign   {cid}\ndesign     {design.get('name')}: {design.get('factors')}, "
          f"{design.get('replications')} replications, seed {design.get('seed')}")
    print(f"backend    {meta.get('backend')} {meta.get('backend_options') or ''}")
    print(f"workload   {json.dumps(meta.get('workload'), default=str)}")
    print(f"runs       {len(runs)}: {runs.status.value_counts().to_dict() if len(runs) else {}}")
    print("fingerprints:")
    _print_table(fingerprint_table(fps))
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    from .report import analyze
    a = analyze(_data_dir(args), _existing(args, args.campaign), response=args.response,
                factors=args.factors.split(",") if args.factors else None, alpha=args.alpha)
    print(f"{a.campaign}: {a.response} on {', '.join(a.factors)} ({a.kind}); runs {a.status}\n")
    cols = [c for c in ("term", "effect", "df", "F", "p", "pct_variation") if c in a.effects]
    table = a.effects[cols]
    if a.variation is not None:
        table = table.merge(a.variation, on="term", how="left")
    _print_table(table)
    print()
    print(a.conclusions)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .report import compare
    table, fpd, verdict = compare(_data_dir(args), _existing(args, args.a), _existing(args, args.b),
                                  response=args.response, alpha=args.alpha,
                                  min_effect_pct=args.min_effect)
    _print_table(table)
    if len(fpd):
        print("\nfingerprint differences:")
        _print_table(fpd)
    print("\n" + verdict)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .report import write_bundle, write_report
    base, cid = _data_dir(args), _existing(args, args.campaign)
    if args.out:
        print(write_report(base, cid, args.out, response=args.response, alpha=args.alpha))
    if args.bundle:
        print(write_bundle(base, cid, args.bundle))
    if not (args.out or args.bundle):
        raise ConfigError("labkit report: give -o report.html and/or --bundle out.zip")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="labkit", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    from . import __version__
    p.add_argument("--version", action="version", version=f"labkit {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run (or resume) a campaign from a YAML design")
    r.add_argument("design", help="design YAML (factors, replications, seed)")
    r.add_argument("--backend", help="backend, or platform on a testbed (default local; ssh on remote hosts)")
    r.add_argument("--testbed", help="testbed YAML: hosts and platforms to run on in parallel")
    r.add_argument("--workload", default="nqueens")
    r.add_argument("--param", action="append", metavar="KEY=VALUE", help="workload parameter")
    r.add_argument("--backend-option", action="append", metavar="KEY=VALUE")
    r.add_argument("--campaign-id")
    r.add_argument("--data-dir", help="default: the repository's data/")
    r.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    r.add_argument("--retry-failed", action="store_true", help="run failed/timed-out runs again")
    r.add_argument("--retries", type=int, default=0, metavar="N",
                   help="then run the failed/timed-out runs again, up to N more times")
    r.add_argument("--new-store", action="store_true",
                   help="start a new store even though results.csv of a lost one remains (overwritten)")
    r.add_argument("--group-readable", action="store_true", help="store files 0640 (default 0600)")
    r.add_argument("--telemetry", type=_telemetry_arg, metavar="off|SECONDS",
                   help="seconds between samples of the host and the instances during each run, or off "
                        "(default: the design's telemetry, else 1)")
    r.add_argument("--exclusive", action=argparse.BooleanOptionalAction, default=None,
                   help="refuse to run beside another campaign on this host (default: the design's; else warn "
                        "and flag the runs that overlap as suspect)")
    r.add_argument("--quarantine", action=argparse.BooleanOptionalAction, default=None,
                   help="run the runs flagged suspect once more at the end (default: the design's)")
    r.set_defaults(func=cmd_run)

    im = sub.add_parser("images", help="build instance images")
    imsub = im.add_subparsers(dest="images_cmd", required=True)
    b = imsub.add_parser("build", help="Debian 12 rootfs -> Docker and LXD images (and a VM disk with --vm)")
    b.add_argument("--vm", action="store_true", help="also build the libvirt VM disk")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    b.add_argument("--only", help="comma list of docker,lxd; 'none' or '' for neither; default both")
    from .images import add_variant_arguments
    add_variant_arguments(b)
    b.set_defaults(func=cmd_images)

    e = sub.add_parser("export", help="write results.csv/parquet of a campaign")
    e.add_argument("campaign_id")
    e.add_argument("--data-dir", help="default: the repository's data/")
    e.add_argument("--out", help="directory (default beside the store)")
    e.add_argument("--format", default="csv,parquet")
    e.set_defaults(func=cmd_export)

    c = sub.add_parser("clean", help="remove labkit leftovers (instances, cgroups) of a killed campaign")
    c.add_argument("campaign_id", nargs="?", help="only this campaign's (refused while it runs); default: those "
                   "of every campaign not running on this host, listed first and removed with --yes")
    c.add_argument("--data-dir", help="default: the repository's data/")
    c.add_argument("--backend", help="without a campaign: only this backend")
    c.add_argument("--backend-option", action="append", metavar="KEY=VALUE",
                   help="e.g. a password the store does not keep")
    c.add_argument("--testbed", help="testbed YAML to reach a testbed campaign's hosts with (default: the "
                   "store's copy, whose secrets were redacted)")
    c.add_argument("--yes", action="store_true", help="without a campaign: remove what is listed (default: "
                   "only list it, and ask on a terminal)")
    c.add_argument("--include-unknown", action="store_true", help="without a campaign: also remove labkit-* "
                   "objects no campaign made (test fixtures, hand-made); never those of a running campaign")
    c.set_defaults(func=cmd_clean)

    cl = sub.add_parser("cloud", help="cloud providers (openstack, cloudstack, azure)")
    ck = cl.add_subparsers(dest="cloud_cmd", required=True).add_parser(
        "check", help="check a provider's credentials; with --flavor and --image, its whole contract on one server")
    ck.add_argument("--provider", required=True, help="openstack, cloudstack or azure")
    ck.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="provider option (e.g. cloud=labkit, key_filename=~/.ssh/id_ed25519)")
    ck.add_argument("--flavor", help="flavor / service offering / VM size of the test server")
    ck.add_argument("--image", help="image / template / image URN of the test server")
    ck.set_defaults(func=cmd_cloud_check)

    f = sub.add_parser("fingerprint", help="print this host's fingerprint")
    f.set_defaults(func=cmd_fingerprint)

    def with_data_dir(sp):
        sp.add_argument("--data-dir", help="default: the repository's data/")
        return sp

    with_data_dir(sub.add_parser("list", help="stored campaigns")).set_defaults(func=cmd_list)
    stt = with_data_dir(sub.add_parser("status", help="per-host progress, lost hosts and failures"))
    stt.add_argument("campaign")
    stt.set_defaults(func=cmd_status)
    sh = with_data_dir(sub.add_parser("show", help="a campaign's design, runs and host fingerprints"))
    sh.add_argument("campaign")
    sh.set_defaults(func=cmd_show)
    an = with_data_dir(sub.add_parser("analyze", help="effects or ANOVA and conclusions of a campaign"))
    an.add_argument("campaign")
    an.add_argument("--response", help="metric (default: the workload's response)")
    an.add_argument("--factors", help="comma list (default: the design's factors that vary)")
    an.add_argument("--alpha", type=float, default=0.05)
    an.set_defaults(func=cmd_analyze)
    co = with_data_dir(sub.add_parser("compare", help="per-configuration drift between two campaigns "
                                                      "of the same design"))
    co.add_argument("a")
    co.add_argument("b")
    co.add_argument("--response")
    co.add_argument("--alpha", type=float, default=0.05)
    co.add_argument("--min-effect", type=float, default=2.0,
                    help="smallest change (%%) called drift (default 2)")
    co.set_defaults(func=cmd_compare)
    rp = with_data_dir(sub.add_parser("report", help="one self-contained HTML report and/or a zip bundle"))
    rp.add_argument("campaign")
    rp.add_argument("-o", "--out", help="HTML file to write")
    rp.add_argument("--bundle", help="zip to write: results CSV and Parquet, store, environment")
    rp.add_argument("--response")
    rp.add_argument("--alpha", type=float, default=0.05)
    rp.set_defaults(func=cmd_report)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except LabkitError as exc:
        print(f"labkit: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:      # e.g. `labkit list | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("labkit: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
