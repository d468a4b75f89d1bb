"""Invalid measurements: the runs whose own validity check failed, left out and counted.

A benchmark can finish and still not measure what it claims: iperf3 UDP at a nominal rate
the path cannot carry measures the loss, not the path (Table 7.2 of seed 004 was taken with
no stated loss); ab with failed requests, sysbench OLTP with errors. Each :class:`Rule` names
the metric that decides (``check``), the threshold, and the metrics it invalidates in the same
run. :func:`screen` applies rules to a tidy table (:func:`labkit.store.load_results`) and
returns what is kept and one row per excluded run, so that a notebook shows the count
excluded beside every result it states.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from ..errors import ConfigError

__all__ = ["RULES", "Rule", "excluded_runs", "rule", "screen"]


@dataclass(frozen=True)
class Rule:
    """Runs whose ``check`` metric (mean over the run's instances) is above ``threshold`` are
    invalid for the ``metrics`` (the ``check`` itself included)."""

    name: str
    check: str
    threshold: float
    metrics: tuple[str, ...]
    why: str

    def describe(self) -> str:
        return f"{self.why} (runs with {self.check} > {self.threshold:g} left out)"


#: the rules labkit applies; the threshold of UDP loss is the one a notebook states
RULES = {
    "udp_loss": Rule(
        "udp_loss",
        "udp_lost_percent",
        5.0,
        ("udp_mbit_per_s", "udp_jitter_ms", "udp_lost_percent"),
        "iperf3 UDP lost more datagrams than the threshold: the rate measured is the "
        "sender's overload, not the path",
    ),
    "ab_failed": Rule(
        "ab_failed",
        "failed_requests",
        0.0,
        ("requests_per_s", "time_per_request_ms", "transfer_kb_per_s", "failed_requests"),
        "ab counted failed requests",
    ),
    "oltp_errors": Rule(
        "oltp_errors",
        "errors",
        0.0,
        ("transactions_per_s", "queries_per_s", "latency_avg_ms", "latency_p95_ms", "errors"),
        "sysbench OLTP counted errors",
    ),
}


def rule(name: str, threshold: float | None = None) -> Rule:
    """The rule ``name`` of :data:`RULES`, with another ``threshold`` if given."""
    if name not in RULES:
        raise ConfigError(f"validity rule {name!r}: use one of {', '.join(RULES)}")
    r = RULES[name]
    if threshold is None:
        return r
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 0:
        raise ConfigError(f"validity rule {name!r}: threshold must be a number >= 0, got {threshold!r}")
    return Rule(r.name, r.check, float(threshold), r.metrics, r.why)


def excluded_runs(tidy: pd.DataFrame, rules: Iterable[Rule]) -> pd.DataFrame:
    """One row per (run, rule) that fails: ``run_id``, ``rule``, ``check``, ``value`` (the
    check metric, mean over the run's instances), ``threshold``, ``metrics`` (the metrics it
    invalidates, comma-joined). Only successful runs are looked at."""
    rows = []
    ok = tidy[tidy.status == "ok"] if "status" in tidy.columns else tidy
    for r in rules:
        vals = ok[ok.metric == r.check].groupby("run_id", sort=True).value.mean()
        for run_id, v in vals[vals > r.threshold].items():
            rows.append(
                {
                    "run_id": run_id,
                    "rule": r.name,
                    "check": r.check,
                    "value": float(v),
                    "threshold": r.threshold,
                    "metrics": ",".join(r.metrics),
                }
            )
    return pd.DataFrame(rows, columns=["run_id", "rule", "check", "value", "threshold", "metrics"])


def screen(
    tidy: pd.DataFrame, rules: Sequence[Rule | str] = tuple(RULES)
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(kept, excluded)``: ``tidy`` without the measurements the ``rules`` invalidate, and
    :func:`excluded_runs`. A run is kept for its other metrics (a UDP run above the loss
    threshold still counts for TCP)."""
    if not isinstance(tidy, pd.DataFrame) or not {"run_id", "metric", "value"} <= set(tidy.columns):
        raise ConfigError("screen: tidy must be a results table with run_id, metric and value")
    rs = [rule(r) if isinstance(r, str) else r for r in rules]
    bad = excluded_runs(tidy, rs)
    drop = pd.Series(False, index=tidy.index)
    for r in bad.itertuples():
        drop |= (tidy.run_id == r.run_id) & tidy.metric.isin(r.metrics.split(","))
    return tidy[~drop].copy(), bad
