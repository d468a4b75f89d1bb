"""``labkit run`` (a campaign from a design file), ``labkit noise-check`` and ``labkit replicate``:
the subcommands that run workloads."""

from __future__ import annotations

import argparse

from ..errors import ConfigError
from .common import data_dir_of, existing_campaign, parse_params, print_table

__all__ = [
    "chosen_workload",
    "cmd_noise_check",
    "cmd_replicate",
    "cmd_run",
    "quarantine_default",
    "telemetry_arg",
]


def _parse_workload_params(items: list[str], workload: str) -> dict:
    """``--param KEY=VALUE`` items read by the workload's parameter schema (a string
    parameter keeps its text: ``argv=true`` is the string "true")."""
    from ..workloads import workload_class

    cls = workload_class(workload)
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--param {item!r}: write KEY=VALUE (VALUE may be JSON, e.g. board=12)")
        out[key] = cls.param_from_text(key, value) if key in cls.defaults else value
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from ..run.campaign import Campaign

    args.data_dir = str(data_dir_of(args))
    name, params, named = chosen_workload(args)
    from ..design import Design
    from ..workloads import get_workload

    workload = get_workload(name, **params)
    # every bad key, factor and level of the file in one error, the workload's parameters included
    Design.from_yaml(args.design, workload=workload)
    if named is not None and name != named["name"]:
        print(
            f"--workload {name} given: running it, not the design's workload {named['name']} "
            f"(the command line wins)",
            flush=True,
        )
    backend_options = parse_params(args.backend_option)
    quarantine_line = quarantine_default(args)
    if quarantine_line:
        print(quarantine_line, flush=True)
    store = Campaign(
        args.design,
        backend=args.backend,
        workload=name,
        workload_params=params,
        backend_options=backend_options,
        campaign_id=args.campaign_id,
        data_dir=args.data_dir,
        run_timeout=args.timeout,
        group_readable=args.group_readable,
        testbed=args.testbed,
        run_output=args.run_output,
        **_guard_options(args),
    ).run(retry_failed=args.retry_failed, retries=args.retries, new_store=args.new_store)
    runs = store.runs()
    from ..report.tables import count_words

    print(f"{len(runs)} runs stored in {store.path}: {count_words(runs.status.value_counts().to_dict())}")
    return 0


def chosen_workload(args: argparse.Namespace) -> tuple[str, dict, dict | None]:
    """The workload ``labkit run`` runs, its parameters and the design's ``workload:`` key (None when
    the file names none): ``--workload`` when given (the command line wins), else the design's.
    Parameters are the design's (for the same workload) updated by ``--param``. Neither given is a
    ConfigError naming the workloads and both ways to choose one (issue 46: no silent default)."""
    named = _declared_workload(args.design)
    if args.workload is not None:
        name = args.workload
        from ..workloads import workload_class

        try:
            workload_class(name)
        except ConfigError as exc:
            raise ConfigError(f"--workload: {exc}") from None
    elif named is not None:
        name = named["name"]
    else:
        from ..design import Design

        Design.from_yaml(args.design)  # a bad workload: key, or any problem of the file, is said first
        raise ConfigError(no_workload_text(args.design))
    given = _parse_workload_params(args.param, name)
    base = named["params"] if named is not None and named["name"] == name else {}
    return name, {**base, **given}, named


def no_workload_text(design: str) -> str:
    """What ``labkit run`` says when neither ``--workload`` nor the design names a workload."""
    from ..workloads import REGISTRY

    return (
        f"{design} names no workload: pass --workload NAME, or add 'workload: NAME' to the design file "
        f"(with parameters: 'workload: {{name: NAME, params: {{...}}}}'); "
        f"workloads: {', '.join(sorted(REGISTRY))}"
    )


def _declared_workload(path: str) -> dict | None:
    """The design file's ``workload:`` key as :func:`labkit.design.workload_key.check_workload_key`
    reads it; None when the file names none or a bad one (reading the whole design says why, with
    its other problems)."""
    from ..core.yamlsafe import load_yaml
    from ..design.workload_key import check_workload_key

    data = load_yaml(path)
    raw = data.get("workload") if isinstance(data, dict) else None
    if raw is None:
        return None
    try:
        return check_workload_key(raw)
    except ConfigError:
        return None


def quarantine_default(args: argparse.Namespace) -> str:
    """Quarantine is on by default for campaigns started by ``labkit run`` (docs/conclusions.md):
    sets ``args.quarantine`` to True unless ``--no-quarantine`` or the design's ``quarantine:`` says
    otherwise, and returns the line saying so with its cap (each suspect run re-run at most once:
    :func:`labkit.store.forget.forget_suspect`, so at most one re-run per planned run); "" when
    quarantine is off."""
    from ..design import Design

    if args.quarantine is None:
        declared = Design.from_yaml(args.design).quarantine
        args.quarantine = True if declared is None else declared
        why = (
            "the default of labkit run; --no-quarantine turns it off" if declared is None else "the design's"
        )
    else:
        why = "--quarantine"
    if not args.quarantine:
        return ""
    design = Design.from_yaml(args.design)
    per_config = design.replications if design.adaptive is None else int(design.adaptive["max"])
    cap = design.n_configurations * per_config
    return (
        f"quarantine on ({why}): runs the telemetry flags suspect are run once more at the end, "
        f"each at most once (cap: {cap:,} re-runs, one per planned run); the first attempt is kept "
        f"in the store's attempts"
    )


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


def telemetry_arg(text: str):
    """``--telemetry off|on|SECONDS`` as Campaign takes it (checked there)."""
    try:
        return float(text)
    except ValueError:
        return text


def cmd_noise_check(args: argparse.Namespace) -> int:
    """A short A/A campaign measuring each platform's and host's noise, and the minimum detectable
    effect of ``--design`` (:mod:`labkit.run.noisecheck`)."""
    from ..run.noisecheck import noise_check

    result = noise_check(
        backend=args.backend,
        testbed=args.testbed,
        design=args.design,
        runs=args.runs,
        board=args.board,
        data_dir=args.data_dir,
        backend_options=parse_params(args.backend_option) or None,
        alpha=args.alpha,
        power=args.power,
        keep=args.keep,
        progress=args.progress,
    )
    print(result.text())
    if result.data_dir is not None:
        print(f"campaign stored in {result.data_dir / result.campaign}")
    return 0


def cmd_replicate(args: argparse.Namespace) -> int:
    """Run a stored campaign's design on another backend or testbed (:mod:`labkit.run.replicate`),
    then print the verdicts of reproduction (:mod:`labkit.report.replication`)."""
    from ..report.replication import replication_report
    from ..run.replicate import replicate

    data_dir = data_dir_of(args)
    original = existing_campaign(args, args.campaign)
    _, replica = replicate(
        data_dir,
        original,
        backend=args.backend,
        testbed=args.testbed,
        campaign_id=args.campaign_id,
        backend_options=parse_params(args.backend_option),
        run_timeout=args.timeout,
        progress=args.progress,
    )
    for note in replica.notes:
        print(f"note: {note}")
    result = replication_report(
        data_dir, original, replica.campaign_id, response=args.response, margin=args.margin, alpha=args.alpha
    )
    for note in result.notes:
        print(f"note: {note}")
    shown = [
        *result.table.attrs["factors"],
        "n_original",
        "n_replica",
        "ratio",
        "ratio_low",
        "ratio_high",
        "p_tost_holm",
        "p_diff_holm",
        "verdict",
    ]
    print_table(result.table[shown])
    differs = result.hosts[result.hosts.kind == "differs"]
    if len(differs):
        print("\nhost facts that differ:")
        print_table(differs.drop(columns="kind"))
    if len(result.effects):
        print("\neffects of the 2^k analysis:")
        print_table(
            result.effects[
                ["term", "effect_original", "p_holm_original", "effect_replica", "p_holm_replica", "status"]
            ]
        )
    print("\n" + result.text())
    print(f"replica stored as {replica.campaign_id} in {data_dir}")
    return 0
