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
``not measured``                   no value of ours (nothing comparable was run here); said first
``not comparable``                 a different platform (QEMU TCG for KVM, a veth for InfiniBand)
                                   or a stand-in workload (sysbench cpu for PARSEC): stated, never
                                   scored
``not randomized together``        ours compares platforms (or levels) from separate campaigns,
                                   run at other times, not in one randomized plan: stated, never
                                   scored
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

Interval bounds count as inside. The paper's value is a printed number: a gap within its printed
precision (28 % printed, ours 28.6 %: the paper's 28 stands for 27.5 to 28.5) is no gap, so the
paper's value counts as inside our interval when its rounding interval overlaps it
(:attr:`Quote.precision`, read by :func:`quote` from the digits printed).

**"No difference" claims ("≈ native")** with a declared ``margin`` (:attr:`Claim.margin`, in
the claim's unit: the practical threshold of issue 41's rules, :mod:`labkit.report.decisions`)
are decided by equivalence, as :func:`labkit.stats.equivalence` decides them (Schuirmann's
TOST: equivalent at α exactly when the 1 − 2α interval lies inside ±margin, Schuirmann 1987):
``reproduced`` when our 1 − 2α interval lies inside ±margin ("equivalent", or a "negligible
difference"), ``not reproduced`` when our 1 − α interval excludes 0 and the 1 − 2α one is not
inside ±margin ("different"), ``inconclusive`` otherwise. Without a margin a "no difference"
claim is never reproduced: a wide interval holding 0 is ``inconclusive``.

**Rankings** ("Docker: worst disk throughput of all platforms") are judged as rankings
(:class:`Measured` with ``statistic="rank"``): our mean of the level against every other level
compared, with Tukey-Kramer simultaneous intervals of the pairwise differences (Tukey 1953,
Kramer 1956; equal to statsmodels' ``pairwise_tukeyhsd``): ``reproduced`` when the level is
significantly worse (for "worst"; better for "best") than every other; ``opposite`` when our data
rank it at the other end and it is significantly better than at least one other level;
``not reproduced`` when it is significantly better than some other level without being at the
other end; ``inconclusive`` otherwise.

**The family: the scored claims of a notebook.** A notebook tests each claim it scores, so its
verdicts form one family: :func:`claims_table`, :func:`render` and :func:`display_claims`
decide every scored claim (a paper's value beside a measured, comparable, randomized-together
value of ours) on its **Bonferroni-adjusted simultaneous interval** at 1 − α/m, m the number of
scored claims shown together (the notebook's closing table holds all of them), so that with
probability at least 1 − α every one of the m intervals covers its true value at once and no
verdict drawn from them is wrong (Dunn 1961, "Multiple comparisons among means", JASA 56:52-64;
Miller 1981, *Simultaneous Statistical Inference*, ch. 1-2). A claim whose interval excludes 0 is
then significant exactly when Bonferroni's adjusted p-value (statsmodels' ``multipletests(p,
method="bonferroni")``) is below α. Holm's step-down procedure rejects more, but it has no
simultaneous intervals matching its rejections, and these verdicts are read from intervals
(whether the paper's value is inside, on which side of 0), so Bonferroni's intervals are the
correct choice. The rule is printed with the table (:func:`family_rule`). The 95 % interval is
still the one shown in ``ci``; ``ci_family`` shows the one the verdict used. Claims made directly
with ``low``/``high`` and no :attr:`Claim.spread` are widened as normal (z) intervals on the
scale where they are symmetric (exact for :class:`Derived`' delta-method intervals).

An unbounded interval (Fieller with a baseline that is not
significantly different from 0: NaN or infinite bounds) contains everything: with a paper
value it is ``inconclusive``.

Rendering: :func:`render` writes claims as Markdown sentences (escaped), :func:`claims_table`
as the table each notebook ends with, and :func:`display_claims` displays both with the
claims as JSON (mimetype :data:`MIMETYPE`) for the tests to check against the store.

Computing a :class:`Measured` claim from the store (:func:`~labkit.report.claim_compute.compute`,
:func:`~labkit.report.claim_compute.measured_claim`) lives in :mod:`labkit.report.claim_compute`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from .claim_sources import Derived, Measured, Quote, plain_value, quote
from .claim_verdicts import (
    UNSCORED,
    VERDICTS,
    as_number,
    mean_interval,
    rank_verdict,
    tukey_pairs,
    verdict,
)

__all__ = [
    "MIMETYPE",
    "UNSCORED",
    "VERDICTS",
    "Claim",
    "Derived",
    "Measured",
    "Quote",
    "apply_family",
    "claims_table",
    "display_claims",
    "family_rule",
    "interval_at",
    "mean_interval",
    "quote",
    "rank_verdict",
    "render",
    "tukey_pairs",
    "verdict",
]

#: the mimetype under which :func:`display_claims` stores the claims in a notebook's outputs
MIMETYPE = "application/vnd.labkit.claims+json"


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
    know (a target of replication not reached, ...); ``randomized``: False when ours compares
    levels from separate campaigns (never scored: ``not randomized together``, ``why`` says so);
    ``margin``: for a "no difference" claim, the practical margin (claim's unit) equivalence is
    judged against; ``spread``: the statistics the interval was computed from
    (:func:`interval_at` recomputes it at any level; :func:`~labkit.report.claim_compute.compute` fills it); ``family``/
    ``alpha``: set by :func:`apply_family` (m scored claims, family-wise alpha)."""

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
    randomized: bool = True
    margin: float | None = None
    spread: dict | None = None
    family: int | None = None
    alpha: float = 0.05

    def __post_init__(self):
        if not isinstance(self.key, str) or not self.key:
            raise ConfigError("Claim: key must be a non-empty string")
        if not isinstance(self.source, (Measured, Quote, Derived)):
            raise ConfigError(f"Claim {self.key!r}: source must be Measured, Derived or Quote")
        if self.paper is not None and not isinstance(self.paper, Quote):
            raise ConfigError(f"Claim {self.key!r}: paper must be a Quote")
        self.value = as_number(self.value)
        self.low, self.high = as_number(self.low), as_number(self.high)
        if not self.comparable and not self.why:
            raise ConfigError(f"Claim {self.key!r}: say why it is not comparable")
        if not self.randomized and not self.why:
            raise ConfigError(f"Claim {self.key!r}: say which campaigns were not randomized together")

    @property
    def measured(self) -> bool:
        return math.isfinite(self.value)

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def scored(self) -> bool:
        """Set beside a paper's value and neither not measured, not comparable nor not
        randomized together: a member of the notebook's family."""
        return self.paper is not None and self.measured and self.comparable and self.randomized

    @property
    def level(self) -> float:
        """The confidence level the verdict uses: 1 - alpha/m in a family of m, else 1 - alpha."""
        return 1 - self.alpha / (self.family or 1)

    def family_interval(self) -> tuple[float, float]:
        """Our interval at :attr:`level` (:func:`interval_at`)."""
        return interval_at(self, self.level)

    @property
    def verdict(self) -> str:
        """The verdict of ours beside ``paper`` (:func:`verdict`, :func:`rank_verdict` for a
        ranking) on our interval at the family's level; "" without a paper."""
        if self.paper is None:
            return ""
        if not self.scored:
            return verdict(
                math.nan,
                math.nan,
                self.paper.value,
                direction=self.paper.direction,
                comparable=self.comparable,
                measured=self.measured,
                randomized=self.randomized,
            )
        if isinstance(self.source, Measured) and self.source.statistic == "rank":
            if self.paper.direction not in (-1, 1):
                raise ConfigError(
                    f"Claim {self.key!r}: a ranking claim needs the paper's direction -1 (worst) or "
                    f"+1 (best), got {self.paper.direction!r}"
                )
            return rank_verdict(self.spread or {}, self.paper.direction, level=self.level)
        lo, hi = self.family_interval()
        tlo, thi = (
            interval_at(self, 1 - 2 * self.alpha / (self.family or 1))
            if self.margin is not None
            else (math.nan, math.nan)
        )
        return verdict(
            lo,
            hi,
            self.paper.value,
            direction=self.paper.direction,
            paper_low=self.paper.low,
            paper_high=self.paper.high,
            paper_precision=self.paper.precision,
            margin=self.margin,
            tost_low=tlo,
            tost_high=thi,
        )

    def interval_text(self) -> str:
        if not self.measured or (self.spread or {}).get("kind") == "rank":
            return ""
        if math.isnan(self.low) and math.isnan(self.high):
            return "" if self.n is None or self.n < 2 else "interval unbounded"
        lo = "-inf" if not math.isfinite(self.low) else _fmt(self.low)
        hi = "+inf" if not math.isfinite(self.high) else _fmt(self.high)
        return f"{lo} to {hi}" + (f" {self.unit}" if self.unit else "")

    def ours_text(self) -> str:
        if not self.measured:
            return "not measured here"
        sign = (
            "+"
            if self.unit == "%"
            and getattr(self.source, "statistic", "") in ("slowdown_pct", "change_pct", "gain_pct")
            and self.value > 0
            else ""
        )
        s = f"{sign}{_fmt(self.value)}" + (f" {self.unit}" if self.unit else "")
        ci = self.interval_text()
        runs = (
            f"{self.n} runs"
            if self.n is not None and self.n_base is None
            else f"{self.n}+{self.n_base} runs"
            if self.n is not None
            else ""
        )
        inner = "; ".join(
            x
            for x in (
                f"95 % CI {ci}" if ci and ci != "interval unbounded" else ci,
                runs,
                f"{self.excluded} invalid left out" if self.excluded else "",
            )
            if x
        )
        return s + (f" ({inner})" if inner else "")

    def sentence(self) -> str:
        """The claim in one plain-text sentence: what, ours, the paper's with its source, the
        verdict, notes."""
        parts = [f"{self.what}: {self.ours_text()}"]
        if self.paper is not None:
            pv = (
                "stated in words"
                if self.paper.value is None
                else f"{self.paper.value:g} {self.paper.unit}".strip()
            )
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
        d["level"] = self.level
        d["ci_family"] = list(self.family_interval()) if self.scored else [math.nan, math.nan]
        return json.loads(json.dumps(d, default=plain_value, allow_nan=True))


def interval_at(claim: Claim, level: float) -> tuple[float, float]:
    """``claim``'s interval at confidence ``level`` (0 < level < 1).

    From its :attr:`Claim.spread`: ``{"kind": "mean", "x": [...]}`` (:func:`mean_interval`),
    ``{"kind": "slowdown_pct" | "change_pct", "x": [...], "y": [...]}`` (100 (Fieller - 1) of
    mean(x)/mean(y)); a ranking has no interval (NaN). Without a spread: the stored interval,
    taken as a normal (z) interval at ``1 - claim.alpha`` and widened by the ratio of the normal
    quantiles, each side on the scale where the interval is symmetric (the log of 1 + x/100 for a
    % change whose interval is symmetric there, as :class:`Derived`' is; else linear). Unbounded
    stays unbounded."""
    from ..stats import fieller_ratio

    if not 0 < level < 1:
        raise ConfigError(f"interval_at: level must be in (0, 1), got {level!r}")
    if not claim.measured:
        return math.nan, math.nan
    sp = claim.spread
    alpha = 1 - level
    if sp:
        kind = sp.get("kind")
        if kind == "mean":
            m = mean_interval(sp["x"], alpha=alpha)
            return m["low"], m["high"]
        if kind in ("slowdown_pct", "change_pct"):
            f = fieller_ratio(np.asarray(sp["x"], float), np.asarray(sp["y"], float), alpha=alpha)
            return 100 * (f["ci_low"] - 1), 100 * (f["ci_high"] - 1)
        if kind == "rank":
            return math.nan, math.nan
        raise ConfigError(f"interval_at: claim {claim.key!r} has a spread of unknown kind {kind!r}")
    lo, hi, v = claim.low, claim.high, claim.value
    if not (math.isfinite(lo) and math.isfinite(hi)) or abs(level - (1 - claim.alpha)) < 1e-12:
        return lo, hi
    k = float(sps.norm.ppf(1 - alpha / 2) / sps.norm.ppf(1 - claim.alpha / 2))
    if claim.unit == "%" and min(lo, v, hi) > -100:
        a, b, c = (math.log1p(x / 100) for x in (lo, v, hi))
        if math.isclose(b - a, c - b, rel_tol=1e-6, abs_tol=1e-12):
            return 100 * math.expm1(b - k * (b - a)), 100 * math.expm1(b + k * (c - b))
    return v - k * (v - lo), v + k * (hi - v)


def apply_family(claims: Sequence[Claim], *, alpha: float | None = None) -> int:
    """Make the scored claims of ``claims`` one family: each gets ``family`` = m (their number)
    and ``alpha`` (the family-wise level; None: the claims' own, which must agree), so that its
    verdict is decided on its 1 - alpha/m interval (module docstring). Returns m."""
    scored = [c for c in claims if c.scored]
    alphas = {c.alpha for c in scored} if alpha is None else {float(alpha)}
    if len(alphas) > 1:
        raise ConfigError(
            f"apply_family: the scored claims have different alpha {sorted(alphas)}; give alpha"
        )
    a = alphas.pop() if alphas else 0.05
    if not 0 < a < 1:
        raise ConfigError(f"apply_family: alpha must be in (0, 1), got {a!r}")
    for c in scored:
        c.family, c.alpha = len(scored), a
    return len(scored)


def family_rule(claims: Sequence[Claim]) -> str:
    """The rule the verdicts of ``claims`` were decided by, in words (after :func:`apply_family`)."""
    scored = [c for c in claims if c.scored]
    unscored = sum(1 for c in claims if c.paper is not None and not c.scored)
    tail = (
        f"; {unscored} claim(s) stated, not scored (not measured, not comparable or not randomized together)"
        if unscored
        else ""
    )
    if not scored:
        return (
            "No claim is scored: none has a comparable, randomized-together measurement of ours" + tail + "."
        )
    m, a = scored[0].family or 1, scored[0].alpha
    return (
        f"Verdicts: Bonferroni over the {m} scored claims of this notebook, α = {a:g} family-wise: each "
        f"decided on its {100 * (1 - a / m):.4g} % simultaneous interval (1 − α/{m}; ci_family), rankings on "
        f'Tukey-Kramer intervals at that level, "no difference" claims by equivalence (TOST) against their '
        f"margin, gaps within the paper's printed precision are no gaps" + tail + "."
    )


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
    from .escape import escape_md

    apply_family(claims)
    lines = [f"**{escape_md(title)}**", ""] if title else []
    lines += [f"- {escape_md(c.sentence())}" for c in claims]
    if any(c.paper is not None for c in claims):
        lines += ["", escape_md(family_rule(claims))]
    return "\n".join(lines)


def claims_table(claims: Sequence[Claim]) -> pd.DataFrame:
    """One row per claim set beside a paper's: ``claim``, ``ours`` (value and unit), ``ci``,
    ``ci_family`` (the simultaneous interval the verdict used, :func:`apply_family`),
    ``runs``, ``excluded``, ``paper``, ``source`` (seed, table or figure, page), ``verdict``
    and ``note`` (why not comparable, what else to know). The scored claims form one family."""
    apply_family(claims)
    rows = []
    for c in claims:
        if c.paper is None:
            continue
        fam = ""
        if c.scored and not (isinstance(c.source, Measured) and c.source.statistic == "rank"):
            lo, hi = c.family_interval()
            fam = (
                (f"{_fmt(lo)} to {_fmt(hi)}" + (f" {c.unit}" if c.unit else ""))
                if (math.isfinite(lo) and math.isfinite(hi))
                else "unbounded"
            )
        elif c.scored:
            fam = f"Tukey-Kramer at {100 * c.level:.4g} %"
        rows.append(
            {
                "claim": c.what,
                "ours": f"{_fmt(c.value)} {c.unit}".strip() if c.measured else "not measured",
                "ci": c.interval_text(),
                "ci_family": fam,
                "runs": "" if c.n is None else (f"{c.n}" if c.n_base is None else f"{c.n}+{c.n_base}"),
                "excluded": c.excluded,
                "paper": (
                    "in words" if c.paper.value is None else f"{c.paper.value:g} {c.paper.unit}".strip()
                ),
                "source": c.paper.citation(),
                "verdict": c.verdict,
                "note": "; ".join(x for x in (c.why if not c.comparable else "", c.note) if x),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "claim",
            "ours",
            "ci",
            "ci_family",
            "runs",
            "excluded",
            "paper",
            "source",
            "verdict",
            "note",
        ],
    )


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
        from .escape import escape_md

        t = claims_table(claims)
        head = f"**{escape_md(title)}**\n\n" if title else ""
        if t.empty:
            md = head + "No claim of this notebook is set beside a paper's number."
        else:
            cols = list(t.columns)
            md = (
                head
                + "| "
                + " | ".join(cols)
                + " |\n|"
                + "---|" * len(cols)
                + "\n"
                + "\n".join(
                    "| " + " | ".join(escape_md(v) for v in r) + " |"
                    for r in t.astype(str).itertuples(index=False)
                )
            )
            md += "\n\n" + escape_md(family_rule(claims))
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
