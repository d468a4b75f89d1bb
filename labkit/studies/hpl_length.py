"""HPCC's HPL against the minimum run length: the HPL size that would time HPL long enough, and
what a run of the whole suite would cost there (notebook 05b says it where its runs are short).

HPL's work grows as n³ (``2/3 n³ + 3/2 n²`` operations, :func:`labkit.workloads.mpi.hpl_seconds`),
so at the Gflop/s a run reached, ``n · (minimum / seconds)^(1/3)`` would have lasted the minimum.
HPCC sizes its RandomAccess, STREAM and FFT tests from the memory of its largest HPL problem
(``n² · 8`` bytes per process: ``HPLMaxProcMem`` in HPCC's ``src/io.c``), so the rest of an
HPCC run is projected to grow as n² (an estimate: it is said as one), the instances' set-up around
it not at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from ..errors import ConfigError
from ..run.runlength import RunLength, run_length_of

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["HplProjection", "hpl_projection", "hpl_projection_of"]


@dataclass(frozen=True)
class HplProjection:
    """HPL's seconds in a campaign's runs at size ``n`` against ``minimum_s``: ``shortest``,
    ``median`` and ``longest`` of them; ``n_needed`` (the size, rounded up to 100, at which the
    run whose HPL was shortest would have lasted the minimum); ``run_s`` (the median run's
    seconds, set-up included) and ``projected_s`` (that run at ``n_needed``: its HPL part × r³,
    the rest of HPCC × r², its set-up as it was; r = n_needed / n); ``runs`` (successful runs)."""

    n: int
    minimum_s: float
    shortest: float
    median: float
    longest: float
    n_needed: int
    run_s: float
    projected_s: float
    runs: int

    @property
    def short(self) -> bool:
        """Is any run's HPL shorter than the minimum?"""
        return self.shortest < self.minimum_s

    def sentence(self) -> str:
        """The projection in words (for a campaign whose HPL runs are short)."""
        hours = self.runs * self.projected_s / 3600
        return (
            f"HPL's part of a run took {_s(self.shortest)}-{_s(self.longest)} s at n = {self.n} (median "
            f"{_s(self.median)} s), under the workload's {_s(self.minimum_s)} s minimum for a trustworthy "
            f"timing; every run's HPL would last that long at n ≈ {self.n_needed} (its work grows as n³). "
            f"HPCC sizes its RandomAccess, STREAM and FFT tests from the memory of the largest HPL problem "
            f"(n² · 8 bytes per process), so if the rest of a run grows as n², the median run would take "
            f"about {self.projected_s:.0f} s instead of {self.run_s:.0f} s, about {hours:.1f} h for this "
            f"campaign's {self.runs} runs (an estimate). The campaign keeps n = {self.n}: its HPL Gflop/s "
            f"rests on HPL runs too short to time (HPCC's PingPong and the suite's wall time are other "
            f"timings than HPL's)"
        )


def _s(x: float) -> str:
    return f"{x:.2g}"


def hpl_projection(
    length: RunLength, n: int, wall_s: pd.Series, duration_s: pd.Series
) -> HplProjection | None:
    """The projection of one campaign: ``length`` (its :class:`RunLength`, HPL's seconds by run
    id), ``n`` (its HPL size), ``wall_s`` (each run's HPCC wall time by run id: the ``wall_time_s``
    metric) and ``duration_s`` (each run's whole duration by run id). None when no run has all
    three. ConfigError for an n that is not a positive integer."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"hpl_projection: n must be a positive integer, got {n!r}")
    ids = length.measured.index.intersection(wall_s.index).intersection(duration_s.index)
    hpl = length.measured.reindex(ids).astype(float)
    ok = hpl[(hpl > 0) & hpl.map(math.isfinite)]
    if ok.empty:
        return None
    ids = ok.index
    shortest = float(ok.min())
    ratio = (length.minimum_s / shortest) ** (1 / 3)
    n_needed = max(n, int(math.ceil(n * ratio / 100) * 100))
    r = n_needed / n
    med_hpl = float(ok.median())
    wall = float(wall_s.reindex(ids).astype(float).median())
    run = float(duration_s.reindex(ids).astype(float).median())
    rest = max(wall - med_hpl, 0.0)
    setup = max(run - wall, 0.0)
    return HplProjection(
        n=n,
        minimum_s=length.minimum_s,
        shortest=shortest,
        median=med_hpl,
        longest=float(ok.max()),
        n_needed=n_needed,
        run_s=run,
        projected_s=setup + rest * r**2 + med_hpl * r**3,
        runs=len(ids),
    )


def hpl_projection_of(store: Store) -> HplProjection | None:
    """:func:`hpl_projection` of a stored ``hpcc`` campaign; None for any other workload, or one
    without the runs to project."""
    tidy, runs, meta = store.tidy(), store.runs(), store.meta()
    found = meta.get("workload")
    wl: dict = found if isinstance(found, dict) else {}
    if wl.get("name") != "hpcc":
        return None
    length = run_length_of(tidy, runs, meta)
    n = (wl.get("params") or {}).get("n")
    if length is None or not isinstance(n, int):
        return None
    rows = tidy[tidy["metric"] == "wall_time_s"]
    wall = pd.to_numeric(rows["value"], errors="coerce").groupby(rows["run_id"].astype(str)).median()
    ok = runs[runs["status"] == "ok"]
    duration = pd.Series(ok["duration_s"].to_numpy(float), index=ok["run_id"].astype(str))
    return hpl_projection(length, n, wall, duration)
