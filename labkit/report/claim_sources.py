"""Where a claim's number comes from: :class:`Measured` (how to recompute it from the stored
campaigns), :class:`Derived` (computed from other claims) or :class:`Quote` (a paper's number as a
seed file's ``data/reference`` row gives it, read by :func:`quote`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import ConfigError

__all__ = ["SEED_FILE", "STATISTICS", "Derived", "Measured", "Quote", "plain_value", "quote"]

#: the statistics a :class:`Measured` claim can name (tests recompute each from the store)
STATISTICS = ("mean", "slowdown_pct", "change_pct", "runs", "excluded", "share", "rank")
SEED_FILE = re.compile(r"\b\d{3}_[0-9a-f]{16}\.txt\b")


@dataclass(frozen=True)
class Measured:
    """How a claim is recomputed from the store.

    ``campaigns``: campaign ids under the data directory (their successful runs, one value
    per run: the mean over its instances). ``metric``: the metric. ``select``: column ->
    level of the runs the claim is about (levels compared as text). ``statistic``: one of
    :data:`STATISTICS`: ``mean`` (log-scale interval for a positive metric, see
    :func:`mean_interval`), ``slowdown_pct`` (100 (slowdown - 1), Fieller interval; the
    slowdown is selected/baseline for a metric where ``lower_is_better``, baseline/selected
    otherwise), ``change_pct`` (100 (mean/baseline mean - 1), Fieller), ``runs`` (successful
    runs selected), ``excluded`` (runs selected that ``exclude`` left out), ``share`` (% of the
    variation of the 2^k terms ``terms`` of ``factors``, Jain's allocation), ``rank`` (the
    rank of the one level ``select`` names among ``levels`` of the same column, 1 = best: the
    highest mean, the lowest where ``lower_is_better``; judged with Tukey-Kramer intervals, see
    the module docstring). ``baseline``:
    column -> level of the baseline runs of a ratio. ``exclude``: a validity rule of
    :mod:`labkit.report.validity` applied before the statistic."""

    campaigns: tuple[str, ...]
    metric: str
    statistic: str = "mean"
    select: Mapping[str, Any] = field(default_factory=dict)
    baseline: Mapping[str, Any] | None = None
    lower_is_better: bool = False
    exclude: str | None = None
    factors: tuple[str, ...] = ()
    terms: tuple[str, ...] = ()
    levels: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.campaigns, str):
            object.__setattr__(self, "campaigns", (self.campaigns,))
        if self.statistic not in STATISTICS:
            raise ConfigError(f"Measured: statistic {self.statistic!r}; use one of {', '.join(STATISTICS)}")
        if self.statistic in ("slowdown_pct", "change_pct") and not self.baseline:
            raise ConfigError(f"Measured: statistic {self.statistic!r} needs a baseline selection")
        if self.statistic == "share" and not (self.factors and self.terms):
            raise ConfigError("Measured: statistic 'share' needs factors and terms")
        object.__setattr__(self, "levels", tuple(str(x) for x in self.levels))
        if self.statistic == "rank":
            if len(dict(self.select)) != 1 or len(self.levels) < 2:
                raise ConfigError(
                    "Measured: statistic 'rank' needs select of one column (the level ranked) and "
                    f"levels (at least 2 compared), got select={dict(self.select)}, levels={self.levels}"
                )
            if str(next(iter(dict(self.select).values()))) not in self.levels:
                raise ConfigError(
                    f"Measured: the ranked level {dict(self.select)} is not among levels {self.levels}"
                )
        object.__setattr__(self, "select", {str(k): plain_value(v) for k, v in dict(self.select).items()})
        if self.baseline is not None:
            object.__setattr__(
                self, "baseline", {str(k): plain_value(v) for k, v in dict(self.baseline).items()}
            )


@dataclass(frozen=True)
class Derived:
    """A number recomputed from a paper's published tables (no campaign): ``references`` (the
    ``data/reference`` files), ``statistic`` (``gain_pct``: 100 (t_slower / t_faster - 1) of
    Table 5.1 run times, with the delta-method interval of the log ratio from their Gaussian
    half-widths at ``ci_z`` standard errors) and ``keys`` (app, faster, slower)."""

    references: tuple[str, ...]
    statistic: str
    keys: Mapping[str, Any]
    ci_z: float = 3.0


@dataclass(frozen=True)
class Quote:
    """A number (or a claim in words: ``value`` None, ``direction`` +1/-1/0) as a paper
    states it: ``seed`` (the seed file), ``where`` (table, figure or section and page, as the
    reference file cites it), ``reference`` (the ``data/reference`` file), ``row`` (the
    columns identifying its row) and ``column`` (the one holding the value). Made by
    :func:`quote`, which checks all of it against the file."""

    value: float | None
    seed: str
    where: str
    reference: str
    row: Mapping[str, Any]
    column: str
    unit: str = "%"
    direction: int | None = None
    low: float | None = None
    high: float | None = None
    precision: float | None = None

    def citation(self) -> str:
        return f"seed {self.seed}, {self.where}"


def plain_value(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


def _citation(path: Path) -> str:
    head = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            head.append(line[1:].strip())
    return " ".join(head)


def quote(
    path: str | Path,
    match: Mapping[str, Any],
    column: str,
    *,
    where: str,
    unit: str = "%",
    direction: int | None = None,
    scale: float = 1.0,
) -> Quote:
    """The paper's number in ``column`` of the one row of reference file ``path`` whose
    columns equal ``match`` (compared as text), as a :class:`Quote`.

    ``where`` (e.g. "Table 7.2, p. 46") must appear in the file's citation (its ``#`` lines,
    or the README of its folder) or in the row's ``source`` column, and the citation must name
    the seed file: ConfigError otherwise. An empty cell is a claim in words: give its
    ``direction``. ``scale`` multiplies the value (e.g. -1 for a "% better" read as a change).
    ``precision`` of the quote: half the last digit printed in the cell (0.5 for "28", 0.05 for
    "3.2"), times ``|scale|``: a gap within it is a rounding gap (:func:`verdict`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"quote: reference file {path} not found")
    table = pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)
    missing = sorted(set(match) - set(table.columns) | ({column} - set(table.columns)))
    if missing:
        raise ConfigError(f"quote: {path.name} has no column(s) {missing} (has {list(table.columns)})")
    sel = table
    for k, v in match.items():
        sel = sel[sel[k].astype(str) == str(v)]
    if len(sel) != 1:
        raise ConfigError(f"quote: {path.name}: {len(sel)} rows match {dict(match)}; need exactly one")
    row = sel.iloc[0]
    cited = _citation(path)
    readme = path.parent / "README.md"
    if readme.is_file():
        cited += " " + " ".join(
            ln for ln in readme.read_text(encoding="utf-8").splitlines() if path.name in ln
        )
    source = str(row.get("source", "")) + " " + str(row.get("figure", ""))
    if where not in cited and where not in source:
        raise ConfigError(f"quote: {where!r} is not how {path.name} cites its source")
    seeds = SEED_FILE.findall(cited)
    if not seeds:
        raise ConfigError(f"quote: {path.name} names no seed file in its citation")
    cell = str(row[column]).strip()
    value = None if cell == "" else float(cell) * scale
    precision = None
    if value is not None:
        digits = len(cell.split(".")[1]) if "." in cell and "e" not in cell.lower() else 0
        precision = 0.5 * 10.0 ** (-digits) * abs(scale)
    if value is None and direction not in (-1, 0, 1):
        raise ConfigError(
            f"quote: {path.name} row {dict(match)} has no number in {column!r}: "
            "give the claim's direction (-1, 0, +1)"
        )
    return Quote(
        value=value,
        seed=seeds[0],
        where=where,
        reference=path.name,
        row={k: str(v) for k, v in match.items()},
        column=column,
        unit=unit,
        direction=direction,
        precision=precision,
    )
