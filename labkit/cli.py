"""Command line: ``labkit run``, ``images build``, ``export``, ``clean``, ``fingerprint``, ``list``,
``show``, ``status``, ``check``, ``analyze``, ``noise-check``, ``compare``, ``report``, ``dashboard`` and ``cloud check``. ``--data-dir`` defaults to the repository's
``data/`` (found from the working directory or the package; see :mod:`labkit.core.paths`), else ``./data``."""
from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import signal
import sqlite3
import sys
import threading
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
    from .store import RUN_OUTPUT_ENV, run_output_policy
    args.data_dir = str(_data_dir(args))
    if args.run_output:
        os.environ[RUN_OUTPUT_ENV] = args.run_output   # read by each run's keep_output
    run_output_policy()   # a bad LABKIT_RUN_OUTPUT fails before the first run
    params = _parse_workload_params(args.param, args.workload)
    backend_options = _parse_params(args.backend_option)
    quarantine_line = quarantine_default(args)
    if quarantine_line:
        print(quarantine_line, flush=True)
    store = Campaign(args.design, backend=args.backend, workload=args.workload,
                     workload_params=params,
                     backend_options=backend_options,
                     campaign_id=args.campaign_id, data_dir=args.data_dir,
                     run_timeout=args.timeout, group_readable=args.group_readable, testbed=args.testbed,
                     **_guard_options(args)).run(retry_failed=args.retry_failed, retries=args.retries, new_store=args.new_store)
    runs = store.runs()
    print(f"{len(runs)} runs stored in {store.path}: {runs.status.value_counts().to_dict()}")
    return 0


def quarantine_default(args: argparse.Namespace) -> str:
    """Quarantine is on by default for campaigns started by ``labkit run`` (docs/conclusions.md):
    sets ``args.quarantine`` to True unless ``--no-quarantine`` or the design's ``quarantine:`` says
    otherwise, and returns the line saying so with its cap (each suspect run re-run at most once:
    :func:`labkit.run.campaign.forget_suspect`, so at most one re-run per planned run); "" when
    quarantine is off."""
    from .design import Design
    if args.quarantine is None:
        declared = Design.from_yaml(args.design).quarantine
        args.quarantine = True if declared is None else declared
        why = "the default of labkit run; --no-quarantine turns it off" if declared is None else "the design's"
    else:
        why = "--quarantine"
    if not args.quarantine:
        return ""
    design = Design.from_yaml(args.design)
    per_config = design.replications if design.adaptive is None else int(design.adaptive["max"])
    cap = design.n_configurations * per_config
    return (f"quarantine on ({why}): runs the telemetry flags suspect are run once more at the end, "
            f"each at most once (cap: {cap:,} re-runs, one per planned run); the first attempt is kept "
            f"in the store's attempts")


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


def cmd_check(args: argparse.Namespace) -> int:
    """``labkit check ID``: verify the campaign's store (:mod:`labkit.store.check`): integrity, schema,
    every row's JSON columns and types, orphan measurements; exit 1 when something is wrong."""
    from .store.check import check_store
    from .store.results import store_path
    cid = _existing(args, args.campaign)
    result = check_store(store_path(_data_dir(args), cid), cid)
    print(result.text())
    return 0 if result.ok else 1


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
    from .run.clean import find_leftovers, remove_leftovers, running_ids, stopped_ids
    from .run.slurm import QueuedJobs
    args.data_dir = str(_data_dir(args))
    if args.campaign_id:
        return _clean_campaign(args)
    backends = {}
    try:
        for name in ([args.backend] if args.backend else list(REGISTRY)):
            try:
                # slurm: this user's labkit jobs in the queue (a node's instances go with their job)
                backends[name] = QueuedJobs() if name == "slurm" else get_backend(
                    name, **(_parse_params(args.backend_option) if args.backend else {}))
            except Exception as exc:  # an unavailable backend has nothing of ours to clean here
                if args.backend:
                    raise
                print(f"{name}: skipped ({str(exc).splitlines()[0][:160]})")
        found = find_leftovers(backends, running_ids(args.data_dir), stopped=stopped_ids(), grace_s=args.grace,
                               data_dirs=[args.data_dir])
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


def _duration(text: str) -> float:
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


def cmd_doctor(args: argparse.Namespace) -> int:
    """What each backend needs from the host (docs/install.md) and what this machine has, as this
    user (:mod:`labkit.backends.needs`); exit 0 whatever is missing (it is a report)."""
    import getpass

    from . import __version__
    from .backends.needs import NEEDS, doctor
    from .core.fingerprint import labkit_commit
    from .core.paths import checkout
    found = {f.backend: f for f in doctor()}
    where = checkout()
    print(f"labkit {__version__} ({labkit_commit()}), {'checkout ' + str(where) if where else 'installed'}, "
          f"user {getpass.getuser()} (uid {os.geteuid()})")
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

    from .core.paths import notebooks_dir
    shipped = sorted(notebooks_dir().glob("*.ipynb"))
    if not shipped:
        raise ConfigError(f"no notebooks in {notebooks_dir()}: this labkit was installed without its package "
                          "data; reinstall it (pip install --force-reinstall labkit)")
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
    print(f"run one from {dest}: papermill 01_affinity_factorial.ipynb out.ipynb -p mode run -p data_dir data "
          "(campaigns go to ./data; the papers' tables ship with labkit)", file=sys.stderr)
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
    and ``data_dir/campaign/store.sqlite`` exists, else a ConfigError with the closest stored ids
    (:func:`labkit.report.catalog.require_campaign`)."""
    from .core.ids import check_campaign_id
    from .report.catalog import require_campaign
    return require_campaign(_data_dir(args), check_campaign_id(campaign))


def _print_table(df) -> None:
    """``df`` as text, numbers to 4 significant digits (:func:`labkit.report.tables.readable`)."""
    import pandas as pd

    from .report.tables import readable
    with pd.option_context("display.width", 200, "display.max_columns", 40, "display.max_rows", 500):
        print(readable(df).to_string(index=False))


def cmd_list(args: argparse.Namespace) -> int:
    from .report.catalog import campaign_catalog
    from .report.explore import CATALOG_SHOWN
    table = campaign_catalog(_data_dir(args))
    if table.empty:
        print(f"no campaign stored under {_data_dir(args)}")
    else:
        _print_table(table[CATALOG_SHOWN])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from .core.fingerprint import fingerprint_table
    from .store import Store
    cid = _existing(args, args.campaign)
    with Store.for_campaign(_data_dir(args), cid, readonly=True) as st:
        if args.output is not None:
            return _show_output(st, cid, args.output)
        # counts by SQL aggregates: no run's metadata JSON is parsed in Python
        meta, counts, fps = st.meta(), st.run_counts(), st.fingerprints()
        notes_md = st.measurement_metadata()
    from .report.catalog import design_table
    design = meta.get("design", {})
    print(f"campaign   {cid}\ndesign     {design.get('name')}: "
          f"{design.get('replications')} replications, seed {design.get('seed')}")
    for line in design_table(meta).to_string(index=False).splitlines():
        print(f"           {line}")
    print(f"backend    {meta.get('backend')} {meta.get('backend_options') or ''}")
    print(f"workload   {json.dumps(meta.get('workload'), default=str)}")
    by_status = dict(sorted(counts["by_status"].items(), key=lambda kv: (-kv[1], kv[0])))
    print(f"runs       {counts['runs']}: {by_status}")
    from .run.telemetry import measurement_notes
    for note in measurement_notes(notes_md):   # not measured, not enforced: said beside the runs
        print(f"note       {note}")
    print("fingerprints:")
    _print_table(fingerprint_table(fps))
    return 0


def _show_output(st, cid: str, run_id: str) -> int:
    """``labkit show <campaign> --output <run_id>``: the run's kept command output on stdout
    (``--output ''`` lists the runs that have one)."""
    have = st.run_outputs()
    if not run_id:
        print("\n".join(have) if have else f"campaign {cid}: no run output kept")
        return 0
    text = st.run_output(run_id)
    if text is None:
        shown = ", ".join(have[:20]) + (f" and {len(have) - 20} more" if len(have) > 20 else "")
        raise ConfigError(f"campaign {cid}: no output kept for run {run_id[:80]!r} (runs with output: "
                          f"{shown or 'none'}; see LABKIT_RUN_OUTPUT)")
    sys.stdout.write(text)
    return 0


def cmd_analyze(args: argparse.Namespace) -> int:
    """Effects (or ANOVA) and conclusions of a campaign, each term decided by the declared rules
    (docs/conclusions.md), with the suspect runs named and the analysis repeated without them."""
    from .report import analyze
    a = analyze(_data_dir(args), _existing(args, args.campaign), response=args.response,
                factors=args.factors.split(",") if args.factors else None, alpha=args.alpha,
                hosts=args.hosts, practical=args.practical, family=args.family, focus=args.focus)
    print(f"{a.campaign}: {a.response} on {', '.join(a.factors)} ({a.kind}); runs {a.status}\n")
    decided = a.conclusions.decided
    if a.conclusions.rules:
        print(f"decision rules: {a.conclusions.rules}\n")
    table = decided if decided is not None else a.effects
    cols = [c for c in ("term", "effect", "df", "F", "p", "p_adjusted", "pct_variation", "verdict",
                        "runs_to_resolve") if c in table]
    table = table[cols]
    if a.variation is not None:
        table = table.merge(a.variation, on="term", how="left")
    _print_table(table)
    if a.levels is not None:
        print(f"\nvariance by level ({a.levels.method}):")
        _print_table(a.levels.variance)
    if a.quantiles is not None:
        _print_quantiles(a.quantiles)
    if a.drift is not None and a.drift.attrs.get("changes"):
        print("\ndrift: each host's runs in order, cut where the level changes:")
        _print_table(a.drift)
    if a.order_effects is not None:
        print("\norder effects: trend (Spearman) and carry-over (Kruskal-Wallis) in each host's run order:")
        _print_table(a.order_effects)
    if a.suspect_runs is not None and len(a.suspect_runs):
        print(f"\nsuspect runs ({len(a.suspect_runs)} of {len(a.runs)}): "
              + ", ".join(a.suspect_runs.run_id.astype(str)))
    if args.baseline:
        _print_baseline(a, args)
    print()
    print(a.conclusions)
    return 0


def _print_baseline(a, args: argparse.Namespace) -> None:
    """``labkit analyze --baseline FACTOR=LEVEL``: each level against the baseline per configuration
    of the other factors (:func:`labkit.report.decisions.baseline_table`), the verdicts in words."""
    from .report.decisions import baseline_table
    factor, sep, level = args.baseline.partition("=")
    if not sep or not factor or not level:
        raise ConfigError(f"--baseline {args.baseline!r}: write FACTOR=LEVEL, e.g. platform=local")
    policy = a.policy
    margin = args.margin
    if margin is None and policy is not None and policy.practical is not None and policy.practical_of == "mean":
        margin = policy.practical
    if margin is not None and (not margin > 0 or margin != margin):
        raise ConfigError(f"--margin must be a positive fraction of the baseline's mean, got {margin!r}")
    family = policy.family if policy is not None else "holm"
    alpha = policy.alpha if policy is not None else args.alpha
    others = [f for f in a.factors if f != factor]
    t = baseline_table(a.runs, response=a.response, factor=factor, baseline=level, factors=a.factors,
                       margin=margin, alpha=alpha, family=family)
    print(f"\nagainst {factor}={level}: ratio of means with the difference's "
          f"{100 * (1 - (2 if margin is not None else 1) * alpha):g} % interval"
          + (f", equivalence margin ±{100 * margin:g} % of the baseline (TOST)" if margin is not None
             else ", no margin declared (give --margin or practical:): equivalence not tested")
          + f", {policy.correction(len(t), 'comparison') if policy is not None else 'Holm'}:")
    _print_table(t)
    counts = t["verdict"].value_counts()
    print(f"\n{a.response} against {factor}={level}: "
          + ", ".join(f"{c} {v}" for v, c in counts.items()) + f" of {len(t)} comparisons"
          + (f" (per configuration of {', '.join(others)})" if others else "") + ".")


def _print_quantiles(table) -> None:
    """The mean and the quantiles whose distribution-free interval some configuration has
    (enough runs), and which quantiles need more runs."""
    needs = table.attrs["needs"]
    shown = [q for q in needs if table[f"{q}_low"].notna().any()]
    missing = [f"{q} needs {n}" for q, n in needs.items() if q not in shown]
    by = table.attrs["by"]
    conf = 100 * table.attrs["confidence"]
    print(f"\nper configuration: mean{''.join(', ' + q for q in shown)} with {conf:g} % intervals"
          + (f" (runs per configuration for a quantile's interval: {', '.join(missing)})" if missing else "")
          + ":")
    tails = [q for q in ("p95", "p99") if f"{q}_upper" in table and table[f"{q}_upper"].notna().any()]
    _print_table(table[by + ["n", "mean", "ci_low", "ci_high"]
                       + [c for q in shown for c in (q, f"{q}_low", f"{q}_high")]
                       + [f"{q}_upper" for q in tails]])
    upper = table.attrs.get("needs_upper", {})
    if any(q in upper for q in ("p95", "p99")):
        print(f"tail KPIs: pXX_upper is a one-sided {conf:g} % upper bound (the pXX is at most that); it needs "
              + ", ".join(f"{n} runs for {q}" for q, n in upper.items() if q in ("p95", "p99"))
              + " per configuration" + (f" (shown: {', '.join(tails)})" if tails else " (none has enough)"))


def cmd_noise_check(args: argparse.Namespace) -> int:
    """A short A/A campaign measuring each platform's and host's noise, and the minimum detectable
    effect of ``--design`` (:mod:`labkit.run.noisecheck`)."""
    from .run.noisecheck import noise_check
    result = noise_check(backend=args.backend, testbed=args.testbed, design=args.design, runs=args.runs,
                         board=args.board, data_dir=args.data_dir,
                         backend_options=_parse_params(args.backend_option) or None,
                         alpha=args.alpha, power=args.power, keep=args.keep, progress=args.progress)
    print(result.text())
    if result.data_dir is not None:
        print(f"campaign stored in {result.data_dir / result.campaign}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from .report import compare
    table, fpd, verdict = compare(_data_dir(args), _existing(args, args.a), _existing(args, args.b),
                                  response=args.response, alpha=args.alpha,
                                  min_effect_pct=args.min_effect, margin=args.margin)
    for note in table.attrs.get("notes", []):
        print(f"note: {note}")
    _print_table(table)
    differs = fpd[fpd.kind == "differs"]
    if len(differs):
        print("\nhost facts that differ:")
        _print_table(differs.drop(columns="kind").rename(columns={"a": args.a, "b": args.b}))
    for side in (args.a, args.b):
        only = fpd[fpd.kind == f"only in {side}"]
        if len(only):
            print(f"\nrecorded only for {side} (the other side did not record them; not differences): "
                  + ", ".join(only.fact))
    print("\n" + verdict)
    return 0


def cmd_replicate(args: argparse.Namespace) -> int:
    """Run a stored campaign's design on another backend or testbed (:mod:`labkit.run.replicate`),
    then print the verdicts of reproduction (:mod:`labkit.report.replication`)."""
    from .report.replication import replication_report
    from .run.replicate import replicate
    data_dir = _data_dir(args)
    original = _existing(args, args.campaign)
    _, replica = replicate(data_dir, original, backend=args.backend, testbed=args.testbed,
                           campaign_id=args.campaign_id, backend_options=_parse_params(args.backend_option),
                           run_timeout=args.timeout, progress=args.progress)
    for note in replica.notes:
        print(f"note: {note}")
    result = replication_report(data_dir, original, replica.campaign_id, response=args.response,
                                margin=args.margin, alpha=args.alpha)
    for note in result.notes:
        print(f"note: {note}")
    shown = [*result.table.attrs["factors"], "n_original", "n_replica", "ratio", "ratio_low", "ratio_high",
             "p_tost_holm", "p_diff_holm", "verdict"]
    _print_table(result.table[shown])
    differs = result.hosts[result.hosts.kind == "differs"]
    if len(differs):
        print("\nhost facts that differ:")
        _print_table(differs.drop(columns="kind"))
    if len(result.effects):
        print("\neffects of the 2^k analysis:")
        _print_table(result.effects[["term", "effect_original", "p_holm_original", "effect_replica",
                                     "p_holm_replica", "status"]])
    print("\n" + result.text())
    print(f"replica stored as {replica.campaign_id} in {data_dir}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve notebooks/00_explorer.ipynb with Voila (read-only; :mod:`labkit.report.dashboard`):
    Voila and its kernels stop with this command, however it ends (SIGTERM, SIGINT, SIGHUP, SIGKILL)."""
    from .report.dashboard import DEFAULT_MAX_KERNELS, serve, voila_command
    try:
        import voila  # noqa: F401
    except ImportError:
        raise ConfigError("labkit dashboard needs voila: pip install -r requirements.txt "
                          "(or pip install voila)") from None
    limits = {k: getattr(args, k) for k in ("max_kernels", "unconnected_timeout", "idle_timeout")
              if getattr(args, k) is not None}
    argv, env, url = voila_command(port=args.port, ip=args.ip, token="" if args.no_token else None,
                                   data_dir=args.data_dir, **limits)
    if args.ip not in ("127.0.0.1", "::1", "localhost"):
        print(f"warning: listening on {args.ip}: anyone who can reach it"
              + (" (and has the token)" if not args.no_token else "") + " can browse the campaigns",
              file=sys.stderr)
    print(f"labkit dashboard (Voila, read-only): open {url}   (Ctrl-C stops it; at most "
          f"{limits.get('max_kernels', DEFAULT_MAX_KERNELS)} pages at once)", flush=True)
    return serve(argv, env)


def cmd_report(args: argparse.Namespace) -> int:
    from .report import write_bundle, write_report
    base, cid = _data_dir(args), _existing(args, args.campaign)
    if args.out:
        print(write_report(base, cid, args.out, response=args.response, alpha=args.alpha,
                           practical=args.practical, family=args.family))
    if args.bundle:
        print(write_bundle(base, cid, args.bundle, response=args.response, alpha=args.alpha))
    if not (args.out or args.bundle):
        raise ConfigError("labkit report: give -o report.html and/or --bundle out.zip")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """``labkit import MANIFEST.yaml``: other tools' reports as a new campaign (docs/import.md)."""
    from .store.imports import import_manifest
    path = import_manifest(args.manifest, _data_dir(args))
    from .store import Store
    with Store(path, readonly=True) as st:
        imported = st.meta().get("imported", {})
    files = imported.get("files", [])
    print(f"imported {imported.get('reports')} run(s) from {len(files)} file(s) with the "
          f"{imported.get('parser')} parser (version {imported.get('parser_version')}) into {path}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """``labkit verify BUNDLE``: digests and re-computation (docs/verify.md)."""
    from .report.verify import verify_bundle
    verdict = verify_bundle(args.bundle)
    if verdict.ok:
        print(f"labkit verify: {verdict.summary()}")
        return 0
    for line in verdict.problems:
        print(f"labkit verify: DIFFERS: {line}", file=sys.stderr)
    print(f"labkit verify: {verdict.summary()}", file=sys.stderr)
    return 1


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
    r.add_argument("--run-output", choices=("all", "failed", "off"), help="whose command output to keep beside "
                   "the store as output/<run_id>.log (first and last MiB): every run's (default), the runs "
                   "that did not end ok, or none (sets LABKIT_RUN_OUTPUT)")
    r.add_argument("--telemetry", type=_telemetry_arg, metavar="off|SECONDS",
                   help="seconds between samples of the host and the instances during each run, or off "
                        "(default: the design's telemetry, else 1)")
    r.add_argument("--exclusive", action=argparse.BooleanOptionalAction, default=None,
                   help="refuse to run beside another campaign on this host (default: the design's; else warn "
                        "and flag the runs that overlap as suspect)")
    r.add_argument("--quarantine", action=argparse.BooleanOptionalAction, default=None,
                   help="run the runs flagged suspect once more at the end, each at most once (default: on, "
                        "unless the design says quarantine: false; --no-quarantine turns it off)")
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
    c.add_argument("--grace", type=_duration, default=DEFAULT_GRACE, metavar="DURATION",
                   help="without a campaign: keep the objects of a campaign no registry on this host knows "
                   "until its newest sign of life (object made, store written) is this old (default 10m; "
                   "30s, 10m, 2h; a bare number is seconds; 0 removes them at once)")
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

    dr = sub.add_parser("doctor", help="what each backend needs from this host (groups, sockets, daemons, "
                                       "polkit, cgroup delegation) and what it has, as this user")
    dr.set_defaults(func=cmd_doctor)
    nbp = sub.add_parser("notebooks", help="the seed notebooks and the explorer that ship with labkit")
    nbp.add_argument("action", choices=("copy", "list"), help="copy: into DIR; list: their names")
    nbp.add_argument("dir", nargs="?", help="the folder to copy them into (made if missing)")
    nbp.add_argument("--force", action="store_true", help="overwrite notebooks already in DIR")
    nbp.set_defaults(func=cmd_notebooks)
    f = sub.add_parser("fingerprint", help="print this host's fingerprint")
    f.set_defaults(func=cmd_fingerprint)

    def with_data_dir(sp):
        sp.add_argument("--data-dir", help="default: the repository's data/")
        return sp

    with_data_dir(sub.add_parser("list", help="stored campaigns")).set_defaults(func=cmd_list)
    stt = with_data_dir(sub.add_parser("status", help="per-host progress, lost hosts and failures"))
    stt.add_argument("campaign")
    stt.set_defaults(func=cmd_status)
    chk = with_data_dir(sub.add_parser("check", help="verify a campaign's store: integrity, schema, every row "
                                                     "(exit 1 when something is wrong)"))
    chk.add_argument("campaign")
    chk.set_defaults(func=cmd_check)
    sh = with_data_dir(sub.add_parser("show", help="a campaign's design, runs and host fingerprints"))
    sh.add_argument("campaign")
    sh.add_argument("--output", metavar="RUN_ID", help="print the command output kept for this run "
                    "(its first and last MiB; '' lists the runs that have one)")
    sh.set_defaults(func=cmd_show)
    an = with_data_dir(sub.add_parser("analyze", help="effects or ANOVA and conclusions of a campaign"))
    an.add_argument("campaign")
    an.add_argument("--response", help="metric (default: the workload's response)")
    an.add_argument("--factors", help="comma list (default: the design's factors that vary)")
    an.add_argument("--alpha", type=float, default=0.05, help="the family's significance level (default 0.05)")
    an.add_argument("--hosts", choices=("block", "random"), default="block",
                    help="hosts of a fleet as fixed blocks (conclusions about these hosts, default) or a "
                         "random level (conclusions about hosts like these)")
    an.add_argument("--practical", metavar="FRACTION|variation=P",
                    help="the smallest effect that matters, overriding the design's practical: a fraction of "
                         "the response's mean (0.05 = 5 %%) or variation=P (P %% of the total variation)")
    an.add_argument("--family", choices=("holm", "bonferroni", "bh", "none"),
                    help="the correction over the terms of the analysis (default: the design's, else holm)")
    an.add_argument("--focus", metavar="FACTOR", help="answer 'does FACTOR matter?' first")
    an.add_argument("--baseline", metavar="FACTOR=LEVEL",
                    help="each level of FACTOR against LEVEL (e.g. platform=local), per configuration of the "
                         "other factors: ratio with its interval and the equivalence verdict")
    an.add_argument("--margin", type=float, metavar="FRACTION",
                    help="equivalence margin of --baseline, a fraction of the baseline's mean (default: the "
                         "practical threshold of the mean, when one is declared)")
    an.set_defaults(func=cmd_analyze)
    nc = sub.add_parser("noise-check", help="a short A/A campaign: each host's and platform's noise (CV) and "
                                            "the minimum detectable effect of a design, before running it")
    nc.add_argument("--backend", default="local", help="backend or platform; several comma-separated (default local)")
    nc.add_argument("--testbed", help="testbed YAML: its hosts each run the check")
    nc.add_argument("--design", help="design YAML whose minimum detectable effects to print")
    nc.add_argument("--runs", type=int, default=10, help="runs per platform, half per arm (default 10)")
    nc.add_argument("--board", type=int, default=13, help="N-queens board (default 13: about 0.1 s a run)")
    nc.add_argument("--data-dir", help="store the campaign here (default: a temporary directory, removed)")
    nc.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    nc.add_argument("--backend-option", action="append", metavar="KEY=VALUE")
    nc.add_argument("--alpha", type=float, default=0.05)
    nc.add_argument("--power", type=float, default=0.8)
    nc.add_argument("--progress", action="store_true", help="show a progress bar")
    nc.set_defaults(func=cmd_noise_check)
    co = with_data_dir(sub.add_parser("compare", help="per-configuration drift between two campaigns "
                                                      "of the same design"))
    co.add_argument("a")
    co.add_argument("b")
    co.add_argument("--response")
    co.add_argument("--alpha", type=float, default=0.05)
    co.add_argument("--margin", type=float, metavar="FRACTION",
                    help="equivalence margin, a fraction of a's mean (default: the practical threshold a's "
                         "design declares; none: no equivalence verdict)")
    co.add_argument("--min-effect", type=float, default=2.0,
                    help="smallest change (%%) called drift (default 2)")
    co.set_defaults(func=cmd_compare)
    rpl = with_data_dir(sub.add_parser("replicate", help="run a stored campaign's design on another backend or "
                                       "testbed, with a verdict of reproduction per configuration"))
    rpl.add_argument("campaign", help="the original campaign (its design, workload and parameters are run again)")
    where = rpl.add_argument_group("where (one of them, or --testbed with --backend naming its platform)")
    where.add_argument("--backend", help="backend to run the replica on (docker, lxd, libvirt, local, ssh, ...)")
    where.add_argument("--testbed", help="testbed YAML: hosts and platforms to run the replica on")
    rpl.add_argument("--campaign-id", help="the replica's id (default <campaign>-on-<backend>)")
    rpl.add_argument("--backend-option", action="append", metavar="KEY=VALUE",
                     help="option of the new backend (the original's options it does not take are dropped, said)")
    rpl.add_argument("--margin", type=float, metavar="FRACTION",
                     help="equivalence margin, a fraction of the original's mean (default: the practical "
                          "threshold its design declares, else 0.05)")
    rpl.add_argument("--response", help="metric compared (default: the workload's declared response)")
    rpl.add_argument("--alpha", type=float, default=0.05)
    rpl.add_argument("--timeout", type=float, default=3600, help="seconds a run may take (default 3600)")
    rpl.add_argument("--progress", action="store_true", help="show a progress bar")
    rpl.set_defaults(func=cmd_replicate)
    db = sub.add_parser("dashboard", help="serve the explorer (notebooks/00_explorer.ipynb) read-only with Voila")
    db.add_argument("--data-dir", help="the campaigns shown (default: the repository's data/, or ./data "
                                       "outside a checkout)")
    db.add_argument("--port", type=int, default=8866, help="TCP port (default 8866)")
    db.add_argument("--ip", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1: this machine only)")
    db.add_argument("--no-token", action="store_true",
                    help="do not ask for the token (anyone who can reach the address may browse)")
    # defaults: labkit.report.dashboard's DEFAULT_* (not imported here: it would load pandas for every command)
    db.add_argument("--max-kernels", type=int, metavar="N",
                    help="pages served at once, at most (one kernel each, ~0.5 GB); past it a page load gets "
                         "HTTP 503 (default 4)")
    db.add_argument("--unconnected-timeout", type=int, metavar="SECONDS",
                    help="shut down a kernel whose page never connected (or was closed) after this many idle "
                         "seconds (default 60)")
    db.add_argument("--idle-timeout", type=int, metavar="SECONDS",
                    help="shut down the kernel of an open page left idle this long; the reader reloads "
                         "(default 1800)")
    db.set_defaults(func=cmd_dashboard)
    rp = with_data_dir(sub.add_parser("report", help="one self-contained HTML report and/or a zip bundle"))
    rp.add_argument("campaign")
    rp.add_argument("-o", "--out", help="HTML file to write")
    rp.add_argument("--bundle", help="zip to write: results CSV and Parquet, store, environment")
    rp.add_argument("--response")
    rp.add_argument("--alpha", type=float, default=0.05)
    rp.add_argument("--practical", metavar="FRACTION|variation=P",
                    help="the smallest effect that matters, overriding the design's (as for labkit analyze)")
    rp.add_argument("--family", choices=("holm", "bonferroni", "bh", "none"),
                    help="the correction over the terms of the analysis (default: the design's, else holm)")
    rp.set_defaults(func=cmd_report)
    ip = with_data_dir(sub.add_parser("import", help="import other tools' results (STREAM, fio, sysbench, iperf3, "
                                      "HPCC, ab, redis-benchmark, NPB, PARSEC, CSV) as a campaign, from a manifest"))
    ip.add_argument("manifest", help="YAML manifest: campaign, workload (the parser), factors, files (docs/import.md)")
    ip.set_defaults(func=cmd_import)
    vp = sub.add_parser("verify", help="check a bundle (labkit report --bundle): digests, and every table and "
                        "claim re-computed from its store")
    vp.add_argument("bundle")
    vp.set_defaults(func=cmd_verify)
    return p


#: OSError numbers ``main`` reports as one line (a resource ran out), not as a traceback
_RESOURCE_ERRNOS = frozenset({errno.ENOMEM, errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE,
                              errno.EAGAIN, errno.EFBIG})


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
        # (the command line only) a second Ctrl-C while the interpreter shuts down (threads joined) would kill
        # it by SIGINT instead of exiting 130: what was interrupted is already said and safe
        if argv is None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("labkit: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except MemoryError:
        print("labkit: error: out of memory (MemoryError): the campaign's data did not fit in this "
              "machine's memory; free memory or run on a larger machine, and report the command "
              "(every step is meant to stay bounded)", file=sys.stderr)
        return 2
    except sqlite3.DatabaseError as exc:    # damage a read-only open does not look for (O(1) open)
        print(f"labkit: error: the store cannot be read ({str(exc).splitlines()[0][:200] if str(exc) else exc!r}); "
              "`labkit check ID` says what is damaged", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in _RESOURCE_ERRNOS:
            raise
        print(f"labkit: error: out of a system resource: {exc.strerror or exc} "
              f"({errno.errorcode.get(exc.errno or 0, exc.errno)}{': ' + str(exc.filename) if exc.filename else ''})",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
