"""Structured claims: every number a notebook states, with where it came from.

A :class:`Claim` is one number a notebook says in words: its ``value``, its interval
(``low``, ``high``), how many runs it rests on (``n``, ``n_base``), its ``unit`` and its
``source``, which is either

* :class:`Measured`: how to recompute it from the stored campaigns (campaign ids, metric,
  the levels selected, the statistic, the baseline of a ratio, the validity rule that left
  runs out), so that a test can recompute every rendered claim from the store without the
  notebook's code; or
* :class:`Quote`: a number as a paper states it, with the seed file, the table, figure or
  section and page, and the ``data/reference`` row it was read from (:func:`quote`).

A claim that sets ours beside a paper's carries both (``paper``) and gets a verdict from
:func:`verdict`, decided by intervals, never by sign alone:

=================================  ==============================================================
``not comparable``                 a different platform (QEMU TCG for KVM, a veth for InfiniBand):
                                   stated, never scored
``not measured``                   no value of ours (no comparable test here)
``inconclusive``                   our interval contains both 0 and the paper's value
``reproduced``                     the paper's value inside our interval (and 0 outside it), or
                                   both effects significant with overlapping intervals (when the
                                   paper gives one); a claim in words ("slower") whose direction
                                   our interval shows
``same direction, different size`` our interval excludes 0 on the paper's side and excludes
                                   the paper's value
``opposite``                       our interval excludes 0 on the other side
``not reproduced``                 our interval excludes the paper's value and does not show a
                                   direction: it contains 0 while the paper's value is not 0,
                                   or the paper says "no difference" and ours excludes 0
=================================  ==============================================================

Interval bounds count as inside. An unbounded interval (Fieller with a baseline that is not
significantly different from 0: NaN or infinite bounds) contains everything: with a paper
value it is ``inconclusive``.

Rendering: :func:`render` writes claims as Markdown sentences (escaped), :func:`claims_table`
as the table each notebook ends with, and :func:`display_claims` displays both with the
claims as JSON (mimetype :data:`MIMETYPE`) for the tests to check against the store.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError

__all__ = ["MIMETYPE", "VERDICTS", "Claim", "Derived", "Measured", "Quote", "claims_table", "compute", "display_claims",
           "mean_interval", "measured_claim", "quote", "render", "run_values", "verdict"]

#: the mimetype under which :func:`display_claims` stores the claims in a notebook's outputs
MIMETYPE = "application/vnd.labkit.claims+json"

NOT_COMPARABLE = "not comparable"
NOT_MEASURED = "not measured"
INCONCLUSIVE = "inconclusive"
REPRODUCED = "reproduced"
DIFFERENT_SIZE = "same direction, different size"
OPPOSITE = "opposite"
NOT_REPRODUCED = "not reproduced"
VERDICTS = (REPRODUCED, DIFFERENT_SIZE, OPPOSITE, INCONCLUSIVE, NOT_REPRODUCED, NOT_COMPARABLE, NOT_MEASURED)

#: the statistics a :class:`Measured` claim can name (tests recompute each from the store)
STATISTICS = ("mean", "slowdown_pct", "change_pct", "runs", "excluded", "share")
SEED_FILE = re.compile(r"\b\d{3}_[0-9a-f]{16}\.txt\b")


def _num(x: Any) -> float:
    """``x`` as a float; None and NaN stay NaN."""
    if x is None:
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError):
        raise ConfigError(f"claims: {x!r} is not a number") from None


def verdict(low: float | None, high: float | None, paper: float | None = None, *,
            direction: int | None = None, paper_low: float | None = None, paper_high: float | None = None,
            comparable: bool = True, measured: bool = True) -> str:
    """Ours beside the paper's, decided by intervals (see the module's table).

    ``low``/``high``: our interval of the relative change (or of any quantity where 0 means
    "no effect"); NaN or infinite bounds are unbounded. ``paper``: the paper's value on the same
    scale, or None for a claim in words, whose ``direction`` (+1, -1, or 0 for "no
    difference") is then used. ``paper_low``/``paper_high``: the paper's own interval, when it
    gives one. ``comparable=False`` (another platform) gives ``not comparable`` whatever the
    numbers; ``measured=False`` (no value of ours) ``not measured``.
    """
    if not comparable:
        return NOT_COMPARABLE
    if not measured:
        return NOT_MEASURED
    lo, hi = _num(low), _num(high)
    lo = -math.inf if math.isnan(lo) else lo
    hi = math.inf if math.isnan(hi) else hi
    if lo > hi:
        raise ConfigError(f"verdict: interval [{lo}, {hi}] has its low bound above its high bound")
    p = _num(paper)
    if math.isnan(p):
        if direction not in (-1, 0, 1):
            raise ConfigError(f"verdict: give the paper's value or a direction -1, 0 or +1, got {direction!r}")
        p_sign = direction
        has_value = False
    else:
        p_sign = int(np.sign(p))
        has_value = True
    contains0 = lo <= 0 <= hi
    if not has_value:        # a claim in words: the direction only
        if p_sign == 0:
            return INCONCLUSIVE if contains0 else NOT_REPRODUCED
        if contains0:
            return INCONCLUSIVE
        return REPRODUCED if (lo > 0) == (p_sign > 0) else OPPOSITE
    contains_p = lo <= p <= hi
    if contains0 and contains_p:
        return INCONCLUSIVE
    if contains_p:
        return REPRODUCED
    if contains0:
        return NOT_REPRODUCED
    ours_sign = 1 if lo > 0 else -1
    if p_sign == 0:
        return NOT_REPRODUCED
    if ours_sign != p_sign:
        return OPPOSITE
    plo, phi = _num(paper_low), _num(paper_high)
    if not (math.isnan(plo) or math.isnan(phi)):
        paper_significant = plo > 0 or phi < 0
        if paper_significant and plo <= hi and lo <= phi:
            return REPRODUCED
    return DIFFERENT_SIZE


def mean_interval(values: Iterable[float], *, alpha: float = 0.05, positive: bool | None = None) -> dict:
    """Mean of ``values`` with its ``1 - alpha`` interval.

    For a positive quantity (``positive``; None: when every value is > 0) the interval is
    computed on the log scale (delta method: log(mean) +- t * s / (mean * sqrt(n)), then
    exponentiated), so it is never negative and is asymmetric; otherwise the t interval.
    Returns ``mean``, ``low``, ``high``, ``n``, ``sd``, ``half_width_pct`` (the larger side of
    the interval in % of the mean; NaN with fewer than 2 values) and ``scale`` ("log", "linear").
    """
    x = np.asarray(list(values), dtype=float).ravel()
    x = x[np.isfinite(x)]
    n = len(x)
    out = {"mean": math.nan, "low": math.nan, "high": math.nan, "n": n, "sd": math.nan,
           "half_width_pct": math.nan, "scale": "linear"}
    if n == 0:
        return out
    m = float(x.mean())
    out["mean"] = m
    if positive is None:
        positive = bool((x > 0).all())
    if n < 2:
        return out
    sd = float(x.std(ddof=1))
    t = float(sps.t.ppf(1 - alpha / 2, n - 1))
    se = sd / math.sqrt(n)
    if positive and m > 0:
        f = math.exp(t * se / m)
        lo, hi = m / f, m * f
        out["scale"] = "log"
    else:
        lo, hi = m - t * se, m + t * se
    out.update(low=lo, high=hi, sd=sd,
               half_width_pct=100 * max(hi - m, m - lo) / abs(m) if m else math.nan)
    return out


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
    variation of the 2^k terms ``terms`` of ``factors``, Jain's allocation). ``baseline``:
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

    def __post_init__(self):
        if isinstance(self.campaigns, str):
            object.__setattr__(self, "campaigns", (self.campaigns,))
        if self.statistic not in STATISTICS:
            raise ConfigError(f"Measured: statistic {self.statistic!r}; use one of {', '.join(STATISTICS)}")
        if self.statistic in ("slowdown_pct", "change_pct") and not self.baseline:
            raise ConfigError(f"Measured: statistic {self.statistic!r} needs a baseline selection")
        if self.statistic == "share" and not (self.factors and self.terms):
            raise ConfigError("Measured: statistic 'share' needs factors and terms")
        object.__setattr__(self, "select", {str(k): _plain(v) for k, v in dict(self.select).items()})
        if self.baseline is not None:
            object.__setattr__(self, "baseline", {str(k): _plain(v) for k, v in dict(self.baseline).items()})


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

    def citation(self) -> str:
        return f"seed {self.seed}, {self.where}"


def _plain(v: Any) -> Any:
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


def quote(path: str | Path, match: Mapping[str, Any], column: str, *, where: str, unit: str = "%",
          direction: int | None = None, scale: float = 1.0) -> Quote:
    """The paper's number in ``column`` of the one row of reference file ``path`` whose
    columns equal ``match`` (compared as text), as a :class:`Quote`.

    ``where`` (e.g. "Table 7.2, p. 46") must appear in the file's citation (its ``#`` lines,
    or the README of its folder) or in the row's ``source`` column, and the citation must name
    the seed file: ConfigError otherwise. An empty cell is a claim in words: give its
    ``direction``. ``scale`` multiplies the value (e.g. -1 for a "% better" read as a change)."""
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
        cited += " " + " ".join(ln for ln in readme.read_text(encoding="utf-8").splitlines()
                                if path.name in ln)
    source = str(row.get("source", "")) + " " + str(row.get("figure", ""))
    if where not in cited and where not in source:
        raise ConfigError(f"quote: {where!r} is not how {path.name} cites its source")
    seeds = SEED_FILE.findall(cited)
    if not seeds:
        raise ConfigError(f"quote: {path.name} names no seed file in its citation")
    cell = str(row[column]).strip()
    value = None if cell == "" else float(cell) * scale
    if value is None and direction not in (-1, 0, 1):
        raise ConfigError(f"quote: {path.name} row {dict(match)} has no number in {column!r}: "
                          "give the claim's direction (-1, 0, +1)")
    return Quote(value=value, seed=seeds[0], where=where, reference=path.name,
                 row={k: str(v) for k, v in match.items()}, column=column, unit=unit, direction=direction)


@dataclass
class Claim:
    """One number a notebook states (see the module docstring).

    ``key``: a stable name (unique in the notebook); ``what``: the claim in words (plain text,
    escaped when rendered); ``value``/``low``/``high`` (NaN: none; a NaN or infinite bound of
    an interval: unbounded); ``n``/``n_base``: runs behind it (and behind its baseline);
    ``unit``; ``source``: :class:`Measured` or :class:`Quote`; ``paper``: the paper's
    :class:`Quote` set beside ours (then :attr:`verdict` applies); ``comparable``: False when
    ours ran on another platform than the paper's (``why`` says which); ``excluded``: runs
    left out as invalid (said beside the result); ``note``: anything else a reader must
    know (a target of replication not reached, ...)."""
    key: str
    what: str
    value: float
    unit: str
    source: Measured | Quote | Derived
    low: float = math.nan
    high: float = math.nan
    n: int | None = None
    n_base: int | None = None
    paper: Quote | None = None
    comparable: bool = True
    why: str = ""
    excluded: int = 0
    note: str = ""

    def __post_init__(self):
        if not isinstance(self.key, str) or not self.key:
            raise ConfigError("Claim: key must be a non-empty string")
        if not isinstance(self.source, (Measured, Quote, Derived)):
            raise ConfigError(f"Claim {self.key!r}: source must be Measured, Derived or Quote")
        if self.paper is not None and not isinstance(self.paper, Quote):
            raise ConfigError(f"Claim {self.key!r}: paper must be a Quote")
        self.value = _num(self.value)
        self.low, self.high = _num(self.low), _num(self.high)
        if not self.comparable and not self.why:
            raise ConfigError(f"Claim {self.key!r}: say why it is not comparable")

    @property
    def measured(self) -> bool:
        return math.isfinite(self.value)

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def verdict(self) -> str:
        """The verdict of ours beside ``paper`` (:func:`verdict`); "" without a paper."""
        if self.paper is None:
            return ""
        lo, hi = (self.low, self.high) if self.measured else (math.nan, math.nan)
        return verdict(lo, hi, self.paper.value, direction=self.paper.direction,
                       paper_low=self.paper.low, paper_high=self.paper.high,
                       comparable=self.comparable, measured=self.measured)

    def interval_text(self) -> str:
        if not self.measured:
            return ""
        if math.isnan(self.low) and math.isnan(self.high):
            return "" if self.n is None or self.n < 2 else "interval unbounded"
        lo = "-inf" if not math.isfinite(self.low) else _fmt(self.low)
        hi = "+inf" if not math.isfinite(self.high) else _fmt(self.high)
        return f"{lo} to {hi}" + (f" {self.unit}" if self.unit else "")

    def ours_text(self) -> str:
        if not self.measured:
            return "not measured here"
        sign = "+" if self.unit == "%" and getattr(self.source, "statistic", "") in (
            "slowdown_pct", "change_pct", "gain_pct") and self.value > 0 else ""
        s = f"{sign}{_fmt(self.value)}" + (f" {self.unit}" if self.unit else "")
        ci = self.interval_text()
        runs = f"{self.n} runs" if self.n is not None and self.n_base is None else \
            f"{self.n}+{self.n_base} runs" if self.n is not None else ""
        inner = "; ".join(x for x in (f"95 % CI {ci}" if ci and ci != "interval unbounded" else ci, runs,
                                      f"{self.excluded} invalid left out" if self.excluded else "") if x)
        return s + (f" ({inner})" if inner else "")

    def sentence(self) -> str:
        """The claim in one plain-text sentence: what, ours, the paper's with its source, the
        verdict, notes."""
        parts = [f"{self.what}: {self.ours_text()}"]
        if self.paper is not None:
            pv = "stated in words" if self.paper.value is None else f"{self.paper.value:g} {self.paper.unit}".strip()
            parts.append(f"the paper {pv} ({self.paper.citation()})")
            parts.append(f"verdict: {self.verdict}" + (f" ({self.why})" if not self.comparable else ""))
        elif isinstance(self.source, Quote):
            parts[0] = f"{self.what}: {_fmt(self.value)} {self.unit} ({self.source.citation()})".rstrip()
        if self.note:
            parts.append(self.note)
        return "; ".join(parts) + "."

    def to_dict(self) -> dict:
        d = asdict(self)
        d["source_kind"] = type(self.source).__name__
        d["paper_kind"] = type(self.paper).__name__ if self.paper is not None else None
        d["verdict"] = self.verdict
        return json.loads(json.dumps(d, default=_plain, allow_nan=True))


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "unbounded"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 0.1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def render(claims: Sequence[Claim], *, title: str | None = None) -> str:
    """Claims as a Markdown list, one escaped sentence each (bold ``title`` first)."""
    from . import escape_md
    lines = [f"**{escape_md(title)}**", ""] if title else []
    lines += [f"- {escape_md(c.sentence())}" for c in claims]
    return "\n".join(lines)


def claims_table(claims: Sequence[Claim]) -> pd.DataFrame:
    """One row per claim set beside a paper's: ``claim``, ``ours`` (value and unit), ``ci``,
    ``runs``, ``excluded``, ``paper``, ``source`` (seed, table or figure, page), ``verdict``
    and ``note`` (why not comparable, what else to know)."""
    rows = []
    for c in claims:
        if c.paper is None:
            continue
        rows.append({"claim": c.what,
                     "ours": f"{_fmt(c.value)} {c.unit}".strip() if c.measured else "not measured",
                     "ci": c.interval_text(),
                     "runs": "" if c.n is None else (f"{c.n}" if c.n_base is None else f"{c.n}+{c.n_base}"),
                     "excluded": c.excluded,
                     "paper": ("in words" if c.paper.value is None else f"{c.paper.value:g} {c.paper.unit}".strip()),
                     "source": c.paper.citation(),
                     "verdict": c.verdict,
                     "note": "; ".join(x for x in (c.why if not c.comparable else "", c.note) if x)})
    return pd.DataFrame(rows, columns=["claim", "ours", "ci", "runs", "excluded", "paper", "source", "verdict",
                                       "note"])


def display_claims(claims: Sequence[Claim], *, title: str | None = None, table: bool = False) -> None:
    """Display ``claims`` in a notebook: the Markdown of :func:`render` (or, with ``table``,
    :func:`claims_table` as Markdown under ``title``) with the claims as JSON under
    :data:`MIMETYPE`, which the notebook tests read back and recompute from the store."""
    from IPython.display import display
    keys = [c.key for c in claims]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(f"display_claims: keys {dup} used twice")
    if table:
        from . import escape_md
        t = claims_table(claims)
        head = f"**{escape_md(title)}**\n\n" if title else ""
        if t.empty:
            md = head + "No claim of this notebook is set beside a paper's number."
        else:
            cols = list(t.columns)
            md = head + "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n" + "\n".join(
                "| " + " | ".join(escape_md(v) for v in r) + " |" for r in t.astype(str).itertuples(index=False))
    else:
        md = render(claims, title=title)
    display({"text/markdown": md, MIMETYPE: [json_safe(c.to_dict()) for c in claims]}, raw=True)


def json_safe(x):
    """``x`` with every non-finite float as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``
    (what ``float()`` reads back): a notebook's display data must be strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


# -- computing a Measured claim from the store ---------------------------------------------------
def run_values(data_dir: str | Path, measured: Measured, *, tidy: pd.DataFrame | None = None
               ) -> tuple[pd.DataFrame, int]:
    """``(runs, excluded)``: one row per successful run of ``measured.campaigns`` with a value
    of ``measured.metric`` (the mean over the run's instances, column ``value``) and the run's
    columns (campaign, factors), after ``measured.exclude``; ``excluded`` counts the runs that
    rule left out. ``tidy``: the campaigns' tidy results, if already loaded."""
    from ..store import load_results
    from .validity import rule, screen
    if tidy is None:
        tidy = pd.concat([with_fixed_params(load_results(data_dir, c), data_dir, c,
                                            {**measured.select, **(measured.baseline or {})})
                          for c in measured.campaigns], ignore_index=True)
    tidy = tidy[tidy.status == "ok"]
    if "campaign" in tidy.columns and tidy.campaign.nunique() > 1:   # run ids repeat across campaigns
        tidy = tidy.assign(run_id=tidy.campaign.astype(str) + "/" + tidy.run_id.astype(str))
    excluded = 0
    all_runs = tidy.drop_duplicates("run_id")
    if measured.exclude:
        tidy, bad = screen(tidy, [rule(measured.exclude)])
        excluded = int(bad.run_id.nunique())
        # only the runs the claim selects count
        if excluded:
            runs = all_runs[all_runs.run_id.isin(bad.run_id)]
            excluded = int(len(_select(runs, measured.select)))
    rows = tidy[tidy.metric == measured.metric]
    keep = [c for c in rows.columns if c not in ("metric", "value", "unit", "instance", "error", "started",
                                                  "duration_s", "fingerprint_id")]
    per_run = (rows.groupby("run_id", sort=True).value.mean().rename("value").reset_index()
               .merge(rows[keep].drop_duplicates("run_id"), on="run_id"))
    return per_run, excluded


def with_fixed_params(tidy: pd.DataFrame, data_dir: str | Path, campaign: str,
                      keys: Mapping[str, Any]) -> pd.DataFrame:
    """``tidy`` with a constant column for each of ``keys`` that is not a factor of ``campaign``
    but one of its fixed workload parameters (a one-level ``app`` set in the workload's
    parameters instead of the design), so a claim selects on it either way."""
    from ..store import Store
    missing = [k for k in keys if k not in tidy.columns]
    if not missing:
        return tidy
    with Store(Path(data_dir) / campaign / "store.sqlite", readonly=True) as st:
        params = (st.meta().get("workload") or {}).get("params") or {}
    fixed = {k: params[k] for k in missing if params.get(k) is not None}
    return tidy.assign(**fixed) if fixed else tidy


def _select(runs: pd.DataFrame, where: Mapping[str, Any]) -> pd.DataFrame:
    for k, v in where.items():
        if k not in runs.columns:
            raise ConfigError(f"claims: the runs have no column {k!r} (have {list(runs.columns)})")
        runs = runs[runs[k].astype(str) == str(v)]
    return runs


def compute(measured: Measured, data_dir: str | Path, *, alpha: float = 0.05,
            tidy: pd.DataFrame | None = None) -> dict:
    """``value``, ``low``, ``high``, ``n``, ``n_base`` and ``excluded`` of ``measured`` from
    the store under ``data_dir`` (see :class:`Measured` for each statistic)."""
    from ..stats import fieller_ratio
    runs, excluded = run_values(data_dir, measured, tidy=tidy)
    sel = _select(runs, measured.select)
    out = {"value": math.nan, "low": math.nan, "high": math.nan, "n": int(len(sel)), "n_base": None,
           "excluded": excluded}
    st = measured.statistic
    if st == "runs":
        out["value"] = float(len(sel))
    elif st == "excluded":
        out["value"] = float(excluded)
    elif st == "mean":
        m = mean_interval(sel.value, alpha=alpha)
        out.update(value=m["mean"], low=m["low"], high=m["high"])
    elif st in ("slowdown_pct", "change_pct"):
        base = _select(runs, measured.baseline or {})
        out["n_base"] = int(len(base))
        if len(sel) and len(base):
            num, den = sel.value.to_numpy(float), base.value.to_numpy(float)
            if st == "slowdown_pct" and not measured.lower_is_better:
                num, den = den, num
            f = fieller_ratio(num, den, alpha=alpha)
            out.update(value=100 * (f["ratio"] - 1), low=100 * (f["ci_low"] - 1), high=100 * (f["ci_high"] - 1))
    elif st == "share":
        from ..stats import factorial_effects
        eff = factorial_effects(sel, factors=list(measured.factors), response="value", alpha=alpha)
        pct = eff.set_index("term")["pct_variation"]
        out["value"] = float(sum(pct.get(t, 0.0) for t in measured.terms))
    return out


def measured_claim(key: str, what: str, measured: Measured, data_dir: str | Path, *, unit: str,
                   alpha: float = 0.05, tidy: pd.DataFrame | None = None, **kwargs: Any) -> Claim:
    """A :class:`Claim` whose numbers :func:`compute` takes from the store; ``kwargs`` go to
    :class:`Claim` (``paper``, ``comparable``, ``why``, ``note``)."""
    c = compute(measured, data_dir, alpha=alpha, tidy=tidy)
    return Claim(key=key, what=what, value=c["value"], low=c["low"], high=c["high"], n=c["n"],
                 n_base=c["n_base"], unit=unit, source=measured, excluded=c["excluded"], **kwargs)
