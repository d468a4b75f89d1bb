"""Did a campaign reproduce elsewhere? The verdicts of ``labkit replicate`` (issue 43, item 2).

A replica runs the stored design of an *original* campaign on another backend or testbed
(:mod:`labkit.run.replicate`). This module reads both campaigns and says, per configuration,
whether the replica reproduced the original within a declared margin, which host facts differ
between the two, and which effects of the 2^k analysis kept their sign and significance:

* :func:`replication_table` (pure: two tidy frames in, one row per configuration out): the
  ratio replica / original with its interval, Schuirmann's TOST with Welch's t
  (:func:`labkit.stats.equivalence`, replica against original, the margin a fraction of the
  original's mean) beside Welch's test of no difference, both Holm-corrected over the
  configurations (:func:`labkit.stats.adjust_p`), and the verdict of reproduction;
* :func:`host_differences`: the stores' host fingerprints, fact by fact
  (:func:`labkit.core.fingerprint.fingerprint_table`);
* :func:`effects_kept`: :func:`labkit.stats.factorial_effects` on each side, Holm over the terms
  of each analysis, term by term;
* :func:`replication_report`: all three from two stored campaigns, with a summary in words.

Verdicts of reproduction (:data:`REPRODUCTION`, from the equivalence verdicts of
:mod:`labkit.stats.equivalence` after Holm):

==========================  =================================================================
``reproduced (equivalent)``  shown within ±margin of the original, no difference shown
``changed``                  a difference shown, not shown to be within the margin
``negligible difference``    a difference shown, and shown to be within the margin
``inconclusive``             neither: too few runs or too much noise to say at this n
``not measured``             fewer than 2 successful runs on a side (no test possible)
``not testable``             no variation on either side, or an original mean of 0 (a relative
                             margin needs one): the ``note`` says which
==========================  =================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "REPRODUCTION",
    "TABLE_COLUMNS",
    "Replication",
    "effects_kept",
    "host_differences",
    "replication_report",
    "replication_table",
]

#: equivalence verdict (:data:`labkit.stats.equivalence.VERDICTS`) -> verdict of reproduction
REPRODUCTION = {
    "equivalent": "reproduced (equivalent)",
    "different": "changed",
    "negligible difference": "negligible difference",
    "inconclusive": "inconclusive",
}
NOT_MEASURED, NOT_TESTABLE = "not measured", "not testable"

#: the columns of :func:`replication_table` after the factor columns
TABLE_COLUMNS = [
    "n_original",
    "n_replica",
    "mean_original",
    "mean_replica",
    "ratio",
    "ratio_low",
    "ratio_high",
    "margin",
    "p_tost",
    "p_diff",
    "p_tost_holm",
    "p_diff_holm",
    "equivalence",
    "verdict",
    "note",
]

#: the columns of :func:`effects_kept`
EFFECT_COLUMNS = [
    "term",
    "effect_original",
    "p_holm_original",
    "significant_original",
    "effect_replica",
    "p_holm_replica",
    "significant_replica",
    "same_sign",
    "kept",
    "status",
]


def _factors(tidy: pd.DataFrame, name: str) -> list[str]:
    """The factor columns of a tidy frame (:meth:`labkit.store.Store.tidy`): those between
    ``config`` and ``instance``."""
    cols = list(tidy.columns)
    if "config" not in cols or "instance" not in cols or cols.index("instance") < cols.index("config"):
        raise ConfigError(
            f"replication_table: {name} is not a tidy frame of labkit.store.Store.tidy() "
            f"(its factor columns lie between 'config' and 'instance'); pass factors= "
            f"explicitly. Columns: {cols[:20]}"
        )
    return cols[cols.index("config") + 1 : cols.index("instance")]


def _check_margin(margin: object) -> float:
    if (
        isinstance(margin, bool)
        or not isinstance(margin, (int, float, np.integer, np.floating))
        or not np.isfinite(margin)
        or not 0 < margin < 1
    ):
        raise ConfigError(
            f"margin must be a fraction of the original's mean between 0 and 1 (0.05 = ±5 %), got {margin!r}"
        )
    return float(margin)


def _run_values(tidy: pd.DataFrame, response: str, factors: list[str]) -> pd.DataFrame:
    """One row per successful run: factor columns and ``response`` (the mean of its instances'
    values); empty (with those columns) when no run measured it."""
    import pandas as pd

    from ..store.results import responses

    if "metric" in tidy.columns and (tidy["metric"] == response).any() and (tidy["status"] == "ok").any():
        try:
            return responses(tidy, response, factors)
        except ConfigError:  # no successful row of the metric
            pass
    return pd.DataFrame(columns=["run_id", "replicate", *factors, response])


def replication_table(
    original_tidy: pd.DataFrame,
    replica_tidy: pd.DataFrame,
    *,
    response: str,
    margin: float,
    alpha: float = 0.05,
    factors: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per configuration, did ``replica_tidy`` reproduce ``original_tidy`` within ``margin``?

    Parameters
    ----------
    original_tidy, replica_tidy : long-format measurements (:meth:`labkit.store.Store.tidy`: one row
        per measurement with ``run_id``, ``replicate``, the factor columns, ``metric``, ``value``,
        ``status``). A run's value is the mean over its instances; failed runs are left out.
    response : the metric compared (e.g. ``"wall_time_s"``).
    margin : the largest change that does not matter, a fraction of the original's mean
        (0.05 = ±5 %), in (0, 1).
    alpha : the level of each test; the family is the configurations (Holm).
    factors : the factor columns (default: the columns between ``config`` and ``instance``, where
        :meth:`~labkit.store.Store.tidy` puts them).

    Returns
    -------
    DataFrame, one row per configuration of either side (the original's first, sorted by level),
    with the factor columns, then:

    * ``n_original``, ``n_replica`` -- successful runs measured;
    * ``mean_original``, ``mean_replica`` -- mean of the runs' values;
    * ``ratio`` -- ``mean_replica / mean_original`` (1 = the same);
    * ``ratio_low``, ``ratio_high`` -- the 1 - 2·alpha Welch interval of the difference
      ``mean_replica - mean_original`` divided by ``mean_original`` and added to 1: the interval
      TOST reads, so it lies inside ``[1 - margin, 1 + margin]`` exactly when the uncorrected
      ``p_tost < alpha`` (Holm asks more of a family of several);
    * ``margin`` -- the margin as given (a fraction of the original's mean);
    * ``p_tost`` -- Schuirmann's TOST of replica against original within ±margin·mean_original,
      Welch's t (statsmodels' ``ttost_ind(replica, original, -m, m, usevar="unequal")[0]``);
    * ``p_diff`` -- Welch's two-sided p of no difference (scipy's ``ttest_ind(..., equal_var=False)``);
    * ``p_tost_holm``, ``p_diff_holm`` -- each Holm-corrected over the tested configurations
      (R's ``p.adjust(p, "holm")``);
    * ``equivalence`` -- :func:`labkit.stats.equivalence.verdict` of the two corrected p-values:
      ``equivalent``, ``different``, ``negligible difference``, ``inconclusive``; empty when untested;
    * ``verdict`` -- the verdict of reproduction: ``reproduced (equivalent)``, ``changed``,
      ``negligible difference``, ``inconclusive``, or ``not measured`` / ``not testable`` (module
      docstring); every configuration has one;
    * ``note`` -- why a configuration was not tested ("" otherwise).

    The p-value and interval columns are NaN where no test ran. ``attrs``: ``response``,
    ``margin``, ``alpha``, ``factors``, ``correction`` (``{"method": "holm", "family": n}``),
    ``test`` ("TOST, Welch's t, replica against original").

    ConfigError for a margin outside (0, 1), alpha outside (0, 0.5), factor columns missing on a
    side, and an original without one successful run measuring ``response``.
    """
    import pandas as pd

    from ..stats import equivalence
    from ..stats import validate as v
    from ..stats.equivalence import family_verdicts

    margin = _check_margin(margin)
    alpha = v.alpha(alpha)
    if alpha >= 0.5:
        raise ConfigError(f"alpha must be below 0.5 (the interval has confidence 1 - 2·alpha), got {alpha!r}")
    v.frame(original_tidy, "original_tidy")
    if not isinstance(replica_tidy, pd.DataFrame):  # empty: no run stored yet, every verdict "not measured"
        raise ConfigError(
            f"replica_tidy must be a pandas DataFrame (Store.tidy()), got {type(replica_tidy).__name__}"
        )
    for name, frame in (("original_tidy", original_tidy), ("replica_tidy", replica_tidy)):
        v.columns(frame, ["metric", "value", "status", "run_id", "replicate"], f"{name}: tidy columns")
    if not isinstance(response, str) or not response:
        raise ConfigError(f"response must be a metric name, got {response!r}")
    fs = list(factors) if factors is not None else _factors(original_tidy, "original_tidy")
    v.columns(original_tidy, fs, "original_tidy: factors")
    v.columns(replica_tidy, fs, "replica_tidy: factors (the replica must run the original's design)")
    ro = _run_values(original_tidy, response, fs)
    if ro.empty:
        have = sorted(map(str, original_tidy["metric"].dropna().unique()))
        raise ConfigError(
            f"replication_table: the original has no successful run measuring {response!r}; "
            f"its metrics: {', '.join(have) or 'none'}"
        )
    rr = _run_values(replica_tidy, response, fs)

    def keys(frame: pd.DataFrame) -> list[tuple]:
        if not fs:
            return [()]
        return [tuple(k) for k in frame[fs].drop_duplicates().itertuples(index=False, name=None)]

    configs = list(dict.fromkeys(keys(original_tidy) + keys(replica_tidy)))
    if fs:
        order = {f: v.level_order(pd.concat([original_tidy[f], replica_tidy[f]]), present=None) for f in fs}
        in_original = set(keys(original_tidy))
        configs.sort(
            key=lambda k: (
                k not in in_original,
                *(order[f].index(x) if x in order[f] else len(order[f]) for f, x in zip(fs, k)),
            )
        )

    def values(frame: pd.DataFrame, key: tuple) -> np.ndarray:
        sel = np.ones(len(frame), dtype=bool)
        for f, x in zip(fs, key):
            sel &= (frame[f] == x).to_numpy()
        return frame.loc[sel, response].to_numpy(dtype=float)

    rows = []
    for key in configs:
        xo, xr = values(ro, key), values(rr, key)
        row: dict = {
            **dict(zip(fs, key)),
            "n_original": len(xo),
            "n_replica": len(xr),
            "mean_original": float(xo.mean()) if len(xo) else np.nan,
            "mean_replica": float(xr.mean()) if len(xr) else np.nan,
            "ratio_low": np.nan,
            "ratio_high": np.nan,
            "margin": margin,
            "p_tost": np.nan,
            "p_diff": np.nan,
            "equivalence": "",
            "verdict": NOT_MEASURED,
            "note": "",
        }
        mo = row["mean_original"]
        row["ratio"] = row["mean_replica"] / mo if len(xo) and mo != 0 else np.nan
        few = [
            f"{side} has {n} successful run{'s' if n != 1 else ''}"
            for side, n in (("the original", len(xo)), ("the replica", len(xr)))
            if n < 2
        ]
        if few:
            row["note"] = "; ".join(few) + " (a test needs 2 on each side)"
        else:
            try:
                e = equivalence(xr, xo, margin=margin, relative=True, alpha=alpha).iloc[0]
            except ConfigError as exc:
                row.update(verdict=NOT_TESTABLE, note=str(exc))
            else:
                row.update(
                    p_tost=float(e.p_tost),
                    p_diff=float(e.p_diff),
                    ratio_low=1 + float(e.ci_low) / mo,
                    ratio_high=1 + float(e.ci_high) / mo,
                )
        rows.append(row)
    table = pd.DataFrame(rows, columns=[*fs, *TABLE_COLUMNS])
    tested = np.isfinite(table["p_tost"].to_numpy(dtype=float))
    table["p_tost_holm"], table["p_diff_holm"], eq = family_verdicts(
        table["p_tost"], table["p_diff"], alpha=alpha
    )
    table["equivalence"] = eq
    table.loc[tested, "verdict"] = [REPRODUCTION[x] for x in eq[tested]]
    table = table[[*fs, *TABLE_COLUMNS]]
    table.attrs.update(
        {
            "response": response,
            "margin": margin,
            "alpha": alpha,
            "factors": fs,
            "correction": {"method": "holm", "family": int(tested.sum())},
            "test": "TOST, Welch's t, replica against original",
        }
    )
    return table


def host_differences(original: dict, replica: dict) -> pd.DataFrame:
    """The host facts that differ between two stores' fingerprints (:meth:`Store.fingerprints
    <labkit.store.Store.fingerprints>`: id -> ``{host: ..., backend: ...}``; several hosts on a
    side are merged, their distinct values joined by ``" | "``).

    Returns a DataFrame with columns ``fact`` (e.g. ``host.kernel``, ``backend.backend``),
    ``original``, ``replica`` (the values, as text) and ``kind``: ``differs`` (recorded on both
    sides with other values), ``only in original`` or ``only in replica`` (the other side did not
    record it: a newer labkit, another backend; not a difference); facts missing on both sides are
    left out (:func:`labkit.report.comparison.fingerprint_groups`). The differing facts come first.
    """
    import pandas as pd

    from ..core.fingerprint import fingerprint_table
    from .comparison import fingerprint_groups

    def merged(fps: dict) -> dict[str, str]:
        if not fps:
            return {}
        table = fingerprint_table(fps)
        return {
            row[0]: " | ".join(dict.fromkeys(str(x) for x in row[1:]))
            for row in table.itertuples(index=False, name=None)
        }

    a, b = merged(original or {}), merged(replica or {})
    rows = [
        {"fact": f, "a": a.get(f, "n/a"), "b": b.get(f, "n/a")}
        for f in dict.fromkeys([*a, *b])
        if a.get(f, "n/a") != b.get(f, "n/a")
    ]
    groups = fingerprint_groups(pd.DataFrame(rows, columns=["fact", "a", "b"]), "original", "replica")
    return groups.rename(columns={"a": "original", "b": "replica"})


def effects_kept(
    original_runs: pd.DataFrame,
    replica_runs: pd.DataFrame,
    *,
    factors: Sequence[str],
    response: str,
    alpha: float = 0.05,
    levels: object = None,
) -> pd.DataFrame:
    """Which effects of the 2^k analysis kept their sign and significance in the replica?

    ``original_runs``, ``replica_runs``: one row per run (factor columns and ``response``, e.g.
    :func:`labkit.store.results.responses`); each side is analysed with
    :func:`labkit.stats.factorial_effects` (``levels``: the low/high level of each factor, e.g.
    the original design's order), its terms' p-values Holm-corrected over the terms of that
    analysis. Returns one row per term (Yates order, no ``I`` nor ``error``):

    * ``term`` -- e.g. ``vcpus``, ``vcpus:affinity``;
    * ``effect_original``, ``effect_replica`` -- the effect (``2q``) on each side;
    * ``p_holm_original``, ``p_holm_replica`` -- its Holm-corrected p-value (NaN when the side's
      design is unreplicated or has no variation within cells);
    * ``significant_original``, ``significant_replica`` -- ``p_holm < alpha``;
    * ``same_sign`` -- the two effects have the same sign;
    * ``kept`` -- same significance, and the same sign when significant;
    * ``status`` -- ``kept (significant, same sign)``, ``kept (not significant)``, ``reversed``
      (significant both times, opposite signs), ``lost significance``, ``gained significance``
      or ``not tested`` (a p-value missing).

    Empty (with these columns) and ``attrs["note"]`` saying why, when either side cannot be
    analysed as a balanced 2^k·r design (a factor with more than two levels, failed runs leaving
    a cell short, no factor). ``attrs``: ``alpha``, ``note``, ``correction`` ("holm over the terms
    of each analysis").
    """
    import pandas as pd

    from ..stats import adjust_p, factorial_effects

    fs = list(factors)
    out = pd.DataFrame(columns=EFFECT_COLUMNS)
    out.attrs.update({"alpha": alpha, "note": "", "correction": "holm over the terms of each analysis"})
    if not fs:
        out.attrs["note"] = "the design has no factor: no effects"
        return out
    tables = []
    for side, runs in (("original", original_runs), ("replica", replica_runs)):
        try:
            t = factorial_effects(runs, factors=fs, response=response, alpha=alpha, levels=levels)
        except ConfigError as exc:
            out.attrs["note"] = f"no 2^k analysis of the {side}: {exc}"
            return out
        t = t[~t.term.isin(["I", "error"])].reset_index(drop=True)
        p = t["p"].to_numpy(dtype=float) if "p" in t.columns else np.full(len(t), np.nan)
        t["p_holm"] = adjust_p(p)
        tables.append(t.set_index("term"))
    o, r = tables
    rows = []
    for term in o.index:
        eo, er = float(o.at[term, "effect"]), float(r.at[term, "effect"])
        po, pr = float(o.at[term, "p_holm"]), float(r.at[term, "p_holm"])
        so, sr = bool(po < alpha), bool(pr < alpha)
        same = bool(np.sign(eo) == np.sign(er))
        if not (np.isfinite(po) and np.isfinite(pr)):
            status, kept = "not tested", False
        elif so and sr:
            status, kept = ("kept (significant, same sign)", True) if same else ("reversed", False)
        elif not so and not sr:
            status, kept = "kept (not significant)", True
        else:
            status, kept = ("lost significance" if so else "gained significance"), False
        rows.append(
            {
                "term": term,
                "effect_original": eo,
                "p_holm_original": po,
                "significant_original": so,
                "effect_replica": er,
                "p_holm_replica": pr,
                "significant_replica": sr,
                "same_sign": same,
                "kept": kept,
                "status": status,
            }
        )
    table = pd.DataFrame(rows, columns=EFFECT_COLUMNS)
    table.attrs.update(out.attrs)
    return table


@dataclass
class Replication:
    """What :func:`replication_report` found; :meth:`text` says it in words."""

    original: str
    replica: str
    response: str
    margin: float
    margin_source: str
    alpha: float
    table: pd.DataFrame  # replication_table
    hosts: pd.DataFrame  # host_differences
    effects: pd.DataFrame  # effects_kept
    notes: list[str] = field(default_factory=list)  # how the two campaigns' settings differ

    def counts(self) -> dict[str, int]:
        """Verdict -> number of configurations."""
        return {str(k): int(c) for k, c in self.table["verdict"].value_counts(sort=False).items()}

    def text(self) -> str:
        """A summary in words: verdicts, host facts, effects."""
        from .comparison import fingerprint_summary

        counts = self.counts()
        n = len(self.table)
        fam = self.table.attrs.get("correction", {}).get("family", 0)
        lines = [
            f"Replication of {self.original} as {self.replica}, {self.response}: ratio replica/original per "
            f"configuration; reproduced = equivalent within ±{100 * self.margin:g} % of the original's mean "
            f"({self.margin_source}; TOST with Welch's t, Holm over {fam} configuration"
            f"{'s' if fam != 1 else ''}, α = {self.alpha:g}): "
            + ", ".join(f"{c} of {n} {k}" for k, c in counts.items())
            + ". The two campaigns were not randomized together: a verdict says whether the result "
            "reproduced, not which platform is faster."
        ]
        groups = self.hosts.rename(columns={"original": "a", "replica": "b"})
        lines.append(fingerprint_summary(groups, "original", "replica"))
        e = self.effects
        if e.empty:
            lines.append(f"Effects not compared: {e.attrs.get('note') or 'no effects'}.")
        else:
            kept = int(e.kept.sum())
            changed = [f"{r.term} ({r.status})" for r in e.itertuples() if not r.kept]
            lines.append(
                f"Effects of the 2^k analysis (Holm over the terms of each side, α = {self.alpha:g}): "
                f"{kept} of {len(e)} kept their significance (and their sign where significant)"
                + (f"; not kept: {', '.join(changed)}" if changed else "")
                + "."
            )
        return "\n".join(lines)


def replication_report(
    data_dir: str | Path,
    original: str,
    replica: str,
    *,
    response: str | None = None,
    margin: float | None = None,
    alpha: float = 0.05,
) -> Replication:
    """Compare a stored replica with its original (both under ``data_dir``, read-only).

    ``response``: default the original workload's declared response
    (:func:`labkit.report.catalog.primary_response`). ``margin``: a fraction of the original's
    mean; default the practical threshold of the mean the original design declares
    (``practical:``), else 0.05. Returns a :class:`Replication` whose ``table`` is
    :func:`replication_table` (configurations in the design's declared level order), ``hosts``
    :func:`host_differences` and ``effects`` :func:`effects_kept` (levels in the design's order);
    ``notes``: how the two campaigns' settings differ
    (:func:`labkit.report.comparison.setting_differences`: the backends, at least).

    ConfigError for a campaign that is not stored, factors that differ between the two (not a
    replica of that design), and the errors of :func:`replication_table`.
    """
    from ..store import Store
    from ..store.results import responses, store_path
    from .catalog import primary_response, require_campaign
    from .comparison import setting_differences
    from .decisions import policy_for
    from .declared import declared_levels, sorted_as_declared

    metas, tidies, fps = [], [], []
    for cid in (original, replica):
        with Store(store_path(data_dir, require_campaign(data_dir, cid)), readonly=True) as st:
            metas.append(st.meta())
            tidies.append(st.tidy())
            fps.append(st.fingerprints())
    fo, fr = (list((m.get("design") or {}).get("factors") or {}) for m in metas)
    if fo != fr:
        raise ConfigError(
            f"replicate: {replica!r} is not a replica of {original!r}: its factors are {fr}, "
            f"the original's {fo}"
        )
    if response is None:
        response = primary_response(metas[0], tidies[0])[0] or "wall_time_s"
    if margin is None:
        policy = policy_for(metas[0])
        if policy.practical is not None and policy.practical_of == "mean":
            margin, source = float(policy.practical), "the practical threshold the design declares"
        else:
            margin, source = 0.05, "the default margin; the design declares none (practical:)"
    else:
        source = "--margin"
    table = replication_table(tidies[0], tidies[1], response=response, margin=margin, alpha=alpha, factors=fo)
    order = declared_levels(metas[0], fo, table)
    table = sorted_as_declared(table, fo, order)
    runs = []
    for tidy in tidies:
        try:
            runs.append(responses(tidy, response, fo))
        except ConfigError:
            runs.append(None)
    if runs[0] is None or runs[1] is None:
        import pandas as pd

        effects = pd.DataFrame(columns=EFFECT_COLUMNS)
        effects.attrs.update({"alpha": alpha, "note": "a side has no successful run to analyse"})
    else:
        levels = {f: list(order[f]) for f in fo if f in order} or None
        effects = effects_kept(runs[0], runs[1], factors=fo, response=response, alpha=alpha, levels=levels)
    return Replication(
        original,
        replica,
        response,
        float(margin),
        source,
        alpha,
        table,
        host_differences(fps[0], fps[1]),
        effects,
        setting_differences(metas[0], metas[1], original, replica),
    )
