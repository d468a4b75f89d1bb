"""The subcommands that analyse stored campaigns: ``labkit analyze``, ``compare``, ``report`` and
``dashboard``."""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from .common import data_dir_of, existing_campaign, print_table

__all__ = ["cmd_analyze", "cmd_compare", "cmd_dashboard", "cmd_report"]


def cmd_analyze(args: argparse.Namespace) -> int:
    """Effects (or ANOVA) and conclusions of a campaign, each term decided by the declared rules
    (docs/conclusions.md), with the suspect runs named and the analysis repeated without them."""
    from ..report import analyze

    a = analyze(
        data_dir_of(args),
        existing_campaign(args, args.campaign),
        response=args.response,
        factors=args.factors.split(",") if args.factors else None,
        alpha=args.alpha,
        hosts=args.hosts,
        practical=args.practical,
        family=args.family,
        focus=args.focus,
    )
    from ..report.tables import count_words

    print(f"{a.campaign}: {a.response} on {', '.join(a.factors)} ({a.kind}); runs: {count_words(a.status)}\n")
    decided = a.conclusions.decided
    if a.conclusions.rules:
        print(f"decision rules: {a.conclusions.rules}\n")
    table = decided if decided is not None else a.effects
    cols = [
        c
        for c in (
            "term",
            "effect",
            "df",
            "F",
            "p",
            "p_adjusted",
            "pct_variation",
            "verdict",
            "runs_to_resolve",
        )
        if c in table
    ]
    table = table[cols]
    if a.variation is not None:
        table = table.merge(a.variation, on="term", how="left")
    print_table(table)
    if a.levels is not None:
        print(f"\nvariance by level ({a.levels.method}):")
        print_table(a.levels.variance)
    if a.quantiles is not None:
        _print_quantiles(a.quantiles)
    if a.drift is not None and a.drift.attrs.get("changes"):
        print("\ndrift: each host's runs in order, cut where the level changes:")
        print_table(a.drift)
    if a.order_effects is not None:
        print("\norder effects: trend (Spearman) and carry-over (Kruskal-Wallis) in each host's run order:")
        print_table(a.order_effects)
    if a.suspect_runs is not None and len(a.suspect_runs):
        print(
            f"\nsuspect runs ({len(a.suspect_runs)} of {len(a.runs)}): "
            + ", ".join(a.suspect_runs.run_id.astype(str))
        )
    if a.run_length is not None:
        print(f"\nrun length: {a.run_length.sentence()}")
    if args.baseline:
        _print_baseline(a, args)
    print()
    print(a.conclusions)
    return 0


def _print_baseline(a, args: argparse.Namespace) -> None:
    """``labkit analyze --baseline FACTOR=LEVEL``: each level against the baseline per configuration
    of the other factors (:func:`labkit.report.decisions.baseline_table`), the verdicts in words."""
    from ..report.decisions import baseline_table

    factor, sep, level = args.baseline.partition("=")
    if not sep or not factor or not level:
        raise ConfigError(f"--baseline {args.baseline!r}: write FACTOR=LEVEL, e.g. platform=local")
    policy = a.policy
    margin = args.margin
    if (
        margin is None
        and policy is not None
        and policy.practical is not None
        and policy.practical_of == "mean"
    ):
        margin = policy.practical
    if margin is not None and (not margin > 0 or margin != margin):
        raise ConfigError(f"--margin must be a positive fraction of the baseline's mean, got {margin!r}")
    family = policy.family if policy is not None else "holm"
    alpha = policy.alpha if policy is not None else args.alpha
    others = [f for f in a.factors if f != factor]
    t = baseline_table(
        a.runs,
        response=a.response,
        factor=factor,
        baseline=level,
        factors=a.factors,
        margin=margin,
        alpha=alpha,
        family=family,
    )
    print(
        f"\nagainst {factor}={level}: ratio of means with the difference's "
        f"{100 * (1 - (2 if margin is not None else 1) * alpha):g} % interval"
        + (
            f", equivalence margin ±{100 * margin:g} % of the baseline (TOST)"
            if margin is not None
            else ", no margin declared (give --margin or practical:): equivalence not tested"
        )
        + f", {policy.correction(len(t), 'comparison') if policy is not None else 'Holm'}:"
    )
    print_table(t)
    counts = t["verdict"].value_counts()
    print(
        f"\n{a.response} against {factor}={level}: "
        + ", ".join(f"{c} {v}" for v, c in counts.items())
        + f" of {len(t)} comparisons"
        + (f" (per configuration of {', '.join(others)})" if others else "")
        + "."
    )


def _print_quantiles(table) -> None:
    """The mean and the quantiles whose distribution-free interval some configuration has
    (enough runs), and which quantiles need more runs."""
    needs = table.attrs["needs"]
    shown = [q for q in needs if table[f"{q}_low"].notna().any()]
    missing = [f"{q} needs {n}" for q, n in needs.items() if q not in shown]
    by = table.attrs["by"]
    conf = 100 * table.attrs["confidence"]
    print(
        f"\nper configuration: mean{''.join(', ' + q for q in shown)} with {conf:g} % intervals"
        + (f" (runs per configuration for a quantile's interval: {', '.join(missing)})" if missing else "")
        + ":"
    )
    tails = [q for q in ("p95", "p99") if f"{q}_upper" in table and table[f"{q}_upper"].notna().any()]
    print_table(
        table[
            by
            + ["n", "mean", "ci_low", "ci_high"]
            + [c for q in shown for c in (q, f"{q}_low", f"{q}_high")]
            + [f"{q}_upper" for q in tails]
        ]
    )
    upper = table.attrs.get("needs_upper", {})
    if any(q in upper for q in ("p95", "p99")):
        print(
            f"tail KPIs: pXX_upper is a one-sided {conf:g} % upper bound (the pXX is at most that); it needs "
            + ", ".join(f"{n} runs for {q}" for q, n in upper.items() if q in ("p95", "p99"))
            + " per configuration"
            + (f" (shown: {', '.join(tails)})" if tails else " (none has enough)")
        )


def cmd_compare(args: argparse.Namespace) -> int:
    from ..report import compare

    table, fpd, verdict = compare(
        data_dir_of(args),
        existing_campaign(args, args.a),
        existing_campaign(args, args.b),
        response=args.response,
        alpha=args.alpha,
        min_effect_pct=args.min_effect,
        margin=args.margin,
    )
    for note in table.attrs.get("notes", []):
        print(f"note: {note}")
    print_table(table)
    differs = fpd[fpd.kind == "differs"]
    if len(differs):
        print("\nhost facts that differ:")
        print_table(differs.drop(columns="kind").rename(columns={"a": args.a, "b": args.b}))
    for side in (args.a, args.b):
        only = fpd[fpd.kind == f"only in {side}"]
        if len(only):
            print(
                f"\nrecorded only for {side} (the other side did not record them; not differences): "
                + ", ".join(only.fact)
            )
    print("\n" + verdict)
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Serve notebooks/00_explorer.ipynb with Voila (read-only; :mod:`labkit.report.dashboard`):
    Voila and its kernels stop with this command, however it ends (SIGTERM, SIGINT, SIGHUP, SIGKILL)."""
    from ..report.dashboard import DEFAULT_MAX_KERNELS, serve, voila_command

    try:
        import voila  # noqa: F401
    except ImportError:
        raise ConfigError(
            "labkit dashboard needs voila: pip install -r requirements.txt (or pip install voila)"
        ) from None
    limits = {
        k: getattr(args, k)
        for k in ("max_kernels", "unconnected_timeout", "idle_timeout")
        if getattr(args, k) is not None
    }
    argv, env, url = voila_command(
        port=args.port, ip=args.ip, token="" if args.no_token else None, data_dir=args.data_dir, **limits
    )
    if args.ip not in ("127.0.0.1", "::1", "localhost"):
        print(
            f"warning: listening on {args.ip}: anyone who can reach it"
            + (" (and has the token)" if not args.no_token else "")
            + " can browse the campaigns",
            file=sys.stderr,
        )
    print(
        f"labkit dashboard (Voila, read-only): open {url}   (Ctrl-C stops it; at most "
        f"{limits.get('max_kernels', DEFAULT_MAX_KERNELS)} pages at once)",
        flush=True,
    )
    return serve(argv, env)


def cmd_report(args: argparse.Namespace) -> int:
    from ..report import write_bundle, write_report

    base, cid = data_dir_of(args), existing_campaign(args, args.campaign)
    if args.out:
        print(
            write_report(
                base,
                cid,
                args.out,
                response=args.response,
                alpha=args.alpha,
                practical=args.practical,
                family=args.family,
            )
        )
    if args.bundle:
        print(write_bundle(base, cid, args.bundle, response=args.response, alpha=args.alpha))
    if not (args.out or args.bundle):
        raise ConfigError("labkit report: give -o report.html and/or --bundle out.zip")
    return 0
