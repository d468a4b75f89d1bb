"""What differs between two campaigns besides their results: designs, workloads, host facts.

:func:`setting_differences` lists, in words, how two stores' designs and workloads differ (used
by :func:`compare`, which refuses campaigns whose factors differ and says when
anything else does); :func:`fingerprint_groups` sorts the host facts that differ into facts
recorded on both sides with different values and facts recorded on one side only (a newer
labkit, another backend), and leaves out facts missing on both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError, did_you_mean
from .decisions import policy_for
from .declared import declared_levels, sorted_as_declared

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MISSING", "compare", "fingerprint_groups", "fingerprint_summary", "setting_differences"]

#: a host fact with one of these values (compared as lower-case text) was not recorded
MISSING = frozenset({"n/a", "none", "", "null", "nan", "[]", "{}"})


def _missing(value: object) -> bool:
    return str(value).strip().lower() in MISSING


def fingerprint_groups(diff: pd.DataFrame, a: str = "a", b: str = "b") -> pd.DataFrame:
    """:func:`labkit.core.fingerprint.fingerprint_diff` output (``fact``, ``a``, ``b``) with a
    ``kind`` column: "differs" (recorded on both sides), ``"only in <a>"``, ``"only in <b>"``;
    facts missing on both sides are dropped. Rows: the differing facts first, then those of
    ``a`` only, then of ``b`` only, each in their order."""
    import pandas as pd

    rows = []
    for rec in diff.itertuples(index=False):
        ma, mb = _missing(rec.a), _missing(rec.b)
        if ma and mb:
            continue
        kind = "differs" if not (ma or mb) else f"only in {a}" if mb else f"only in {b}"
        rows.append({"fact": rec.fact, "a": rec.a, "b": rec.b, "kind": kind})
    out = pd.DataFrame(rows, columns=["fact", "a", "b", "kind"])
    order = {"differs": 0, f"only in {a}": 1, f"only in {b}": 2}
    return out.sort_values("kind", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def fingerprint_summary(groups: pd.DataFrame, a: str = "a", b: str = "b", *, listed: int = 6) -> str:
    """A sentence or two from :func:`fingerprint_groups`: the facts that differ with both values
    (at most ``listed``), then how many facts only one side recorded (not counted as differences)."""
    if groups.empty:
        return "The host fingerprints are identical."
    parts = []
    differs = groups[groups.kind == "differs"]
    if len(differs):
        shown = [f"{r.fact} ({r.a} vs {r.b})" for r in differs.head(listed).itertuples()]
        more = f" and {len(differs) - listed} more" if len(differs) > listed else ""
        parts.append("Host facts that differ: " + "; ".join(shown) + more + ".")
    else:
        parts.append("No host fact recorded on both sides differs.")
    one_side = [
        f"{n} only {side} recorded" for side in (a, b) if (n := int((groups.kind == f"only in {side}").sum()))
    ]
    if one_side:
        parts.append("Facts one side did not record are not differences (" + "; ".join(one_side) + ").")
    return " ".join(parts)


def _params(workload: dict) -> dict:
    return {k: v for k, v in (workload.get("params") or {}).items() if k != "timeout_s"}


def _text(value: object) -> str:
    return json.dumps(value, default=str, sort_keys=True) if isinstance(value, dict | list) else str(value)


def setting_differences(meta_a: dict, meta_b: dict, a: str = "a", b: str = "b") -> list[str]:
    """Sentences saying how two stores' settings differ: workload (name, parameters, declared
    response), the design's factors (names, then levels per factor), replications and backend.
    Empty when they are the same. ``meta_*`` are :meth:`labkit.store.Store.meta` dicts."""
    out = []
    wa, wb = meta_a.get("workload") or {}, meta_b.get("workload") or {}
    if wa.get("name") != wb.get("name"):
        out.append(f"the workloads differ: {wa.get('name')} in {a}, {wb.get('name')} in {b}")
    else:
        pa, pb = _params(wa), _params(wb)
        changed = [k for k in dict.fromkeys([*pa, *pb]) if pa.get(k) != pb.get(k)]
        if changed:
            out.append(
                "the workload parameters differ: "
                + "; ".join(f"{k} {_text(pa.get(k, 'n/a'))} vs {_text(pb.get(k, 'n/a'))}" for k in changed)
            )
    if wa.get("response") != wb.get("response"):
        out.append(f"the declared responses differ: {wa.get('response')} vs {wb.get('response')}")
    da, db = meta_a.get("design") or {}, meta_b.get("design") or {}
    fa, fb = da.get("factors") or {}, db.get("factors") or {}
    if list(fa) != list(fb):
        out.append(f"the designs differ: factors {list(fa)} in {a}, {list(fb)} in {b}")
    else:
        for name in fa:
            if list(fa[name]) != list(fb[name]):
                out.append(
                    f"the designs differ: levels of {name} {_text(list(fa[name]))} vs "
                    f"{_text(list(fb[name]))} (only configurations in both are compared)"
                )
    if da.get("replications") != db.get("replications"):
        out.append(f"replications differ: {_text(da.get('replications'))} vs {_text(db.get('replications'))}")
    if meta_a.get("backend") != meta_b.get("backend"):
        out.append(f"the backends differ: {meta_a.get('backend')} vs {meta_b.get('backend')}")
    return out


def compare(
    data_dir: str | Path,
    a: str,
    b: str,
    *,
    response: str | None = None,
    alpha: float = 0.05,
    min_effect_pct: float = 2.0,
    margin: float | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Same design measured twice (two hosts, two dates): per-configuration drift from ``a`` to ``b``.

    Returns ``(table, fingerprint_diff, verdict)``. ``table`` is
    :func:`labkit.stats.compare.config_differences` (one row per configuration present in
    both, in the level order ``a``'s design declares: factor columns, ``n_a``, ``n_b``,
    ``mean_a``, ``mean_b``, ``diff`` (b - a), ``ci_low``/``ci_high`` (Welch), ``diff_pct``, ``ratio`` with Fieller's
    ``ratio_low``/``ratio_high``, ``p`` (Welch), ``p_holm`` (Holm over the configurations)
    and ``drift`` (p_holm < alpha and |diff_pct| >= ``min_effect_pct``, a minimum practical
    effect)); ``table.attrs["overall"]`` is :func:`labkit.stats.compare.drift_test` (one
    shift common to all configurations, as a percent with its CI) when the response is
    positive; ``table.attrs["notes"]`` lists how the two campaigns' settings differ
    (:func:`labkit.report.comparison.setting_differences`: workloads, parameters, levels,
    replications, backends). ``fingerprint_diff`` lists host facts that differ
    (:func:`labkit.report.comparison.fingerprint_groups`: ``fact``, ``a``, ``b``, ``kind``;
    facts missing on both sides left out, facts only one side recorded marked so);
    ``verdict`` says the notes, the drift and the host facts in words.

    Each configuration also gets an equivalence verdict (:func:`labkit.stats.equivalence` of b
    against a, TOST at ``alpha``) against ``margin`` (a fraction of a's mean; default the
    practical threshold of the mean ``a``'s design declares; none: not tested, said so), the
    p-values Holm-corrected over the configurations: columns ``p_tost``, ``p_tost_holm`` (NaN
    without a margin) and ``equivalence`` ("equivalent", "different", "negligible difference",
    "inconclusive", or "not tested"); ``table.attrs["margin"]``.

    Campaigns whose factors differ cannot be compared configuration by configuration: ConfigError
    saying how the designs (and workloads) differ. A response only one of them measured (other
    workloads) is a ConfigError too.
    """
    from ..core.fingerprint import fingerprint_diff
    from ..stats.compare import config_differences, drift_test
    from ..store import Store, load_results
    from ..store.results import responses
    from .catalog import primary_response, require_campaign
    from .comparison import fingerprint_groups, fingerprint_summary, setting_differences

    metas: list[dict] = []
    tidies: list[pd.DataFrame] = []
    fps: list[dict] = []
    for cid in (a, b):
        with Store(Path(data_dir) / require_campaign(data_dir, cid) / "store.sqlite", readonly=True) as st:
            metas.append(st.meta())
            fps.append(next(iter(st.fingerprints().values()), {}))
        tidies.append(load_results(data_dir, cid))
    notes = setting_differences(metas[0], metas[1], a, b)
    fa, fb = (list(m.get("design", {}).get("factors", {})) for m in metas)
    if fa != fb:
        raise ConfigError(
            f"compare: {a!r} and {b!r} have different factors ({fa} vs {fb}): "
            + "; ".join(notes)
            + ". Compare campaigns of one design."
        )
    if response is None:
        response = primary_response(metas[0], tidies[0])[0] or "wall_time_s"
    for cid, tidy in zip((a, b), tidies):
        have = sorted(tidy.metric.dropna().unique())
        if response not in have:
            why = next((n for n in notes if n.startswith("the workloads differ")), "")
            raise ConfigError(
                f"compare: {cid!r} has no metric {response!r}{did_you_mean(response, have)}"
                + (f" ({why})" if why else "")
                + f"; its metrics: {', '.join(map(str, have))}"
            )
    ra, rb = (responses(t, response, fa) for t in tidies)
    try:
        table = config_differences(
            ra, rb, response=response, factors=fa, alpha=alpha, min_effect_pct=min_effect_pct
        )
    except ConfigError:
        raise ConfigError(
            f"compare: no configuration has >= 2 successful runs in both {a!r} and {b!r}"
            + (f" ({'; '.join(notes)})" if notes else "")
        ) from None
    table = table.rename(columns={"p_adj": "p_holm"})
    # configurations in the design's declared level order (as the analysis and its figures)
    table = sorted_as_declared(table, fa, declared_levels(metas[0], fa, table))
    if (ra[response] > 0).all() and (rb[response] > 0).all():
        try:
            table.attrs["overall"] = drift_test(
                ra, rb, response=response, factors=fa, alpha=alpha, min_effect_pct=min_effect_pct
            )
        except ConfigError:
            pass
    if margin is None:
        rule = policy_for(metas[0]).practical, policy_for(metas[0]).practical_of
        margin = rule[0] if rule[1] == "mean" else None
    table = _equivalence_columns(table, ra, rb, response=response, factors=fa, margin=margin, alpha=alpha)
    n = int(table.drift.sum())
    fpd = fingerprint_groups(fingerprint_diff(fps[0], fps[1]), a, b)
    kinds = list(dict.fromkeys(re.sub(r"^the ", "", n_.split(" differ")[0]) for n_ in notes))
    verdict = (
        f"Note: the {', '.join(kinds[:-1]) + ' and ' + kinds[-1] if len(kinds) > 1 else kinds[0]} "
        f"differ (see the notes). "
        if kinds
        else ""
    )
    verdict += (
        f"{response}: {n} of {len(table)} configurations drifted significantly from {a} to {b} "
        f"(Welch, Holm-adjusted, α = {alpha:g}, |change| >= {min_effect_pct:g} %)"
    )
    if n:
        verdict += f"; median change {table.loc[table.drift, 'diff_pct'].median():+.1f} %"
    overall = table.attrs.get("overall")
    if overall is not None:
        o = overall.iloc[0]
        verdict += (
            f"; overall shift {o.shift_pct:+.1f} % [{o.ci_low_pct:+.1f}, {o.ci_high_pct:+.1f}] "
            f"(p = {o.p:.2g})"
        )
    if margin is not None:
        counts = table["equivalence"].value_counts()
        verdict += (
            f". Equivalence of {b} to {a} within ±{100 * margin:g} % of {a}'s mean (TOST, Holm over "
            f"{len(table)} configurations, α = {alpha:g}): "
            + ", ".join(f"{c} {k}" for k, c in counts.items())
        )
    else:
        verdict += (
            ". No equivalence margin declared (practical: in the design, or --margin): a "
            "configuration that did not drift is not shown the same"
        )
    verdict += ". " + fingerprint_summary(fpd, a, b)
    table.attrs.update(
        {
            "response": response,
            "alpha": alpha,
            "notes": notes,
            "a": a,
            "b": b,
            "factors": fa,
            "margin": margin,
        }
    )
    return table, fpd, verdict


def _equivalence_columns(
    table: pd.DataFrame,
    ra: pd.DataFrame,
    rb: pd.DataFrame,
    *,
    response: str,
    factors: Sequence[str],
    margin: float | None,
    alpha: float,
) -> pd.DataFrame:
    """``table`` (one row per configuration of ``factors``) with ``p_tost``, ``p_tost_holm`` and
    ``equivalence``: TOST of ``rb`` against ``ra`` within ``margin`` (a fraction of ra's mean),
    Holm over the rows, the verdict from the Holm-corrected TOST and Welch p-values."""
    from ..stats import adjust_p, equivalence
    from ..stats.equivalence import verdict as tost_verdict

    out = table.copy()
    out.attrs = dict(table.attrs)
    if margin is None:
        out["p_tost"], out["p_tost_holm"], out["equivalence"] = np.nan, np.nan, "not tested"
        return out
    p_tost, p_diff = [], []
    for _, row in out.iterrows():
        sa, sb = np.ones(len(ra), dtype=bool), np.ones(len(rb), dtype=bool)
        for f in factors:
            sa &= (ra[f] == row[f]).to_numpy()
            sb &= (rb[f] == row[f]).to_numpy()
        try:
            e = equivalence(rb.loc[sb, response], ra.loc[sa, response], margin=margin, alpha=alpha).iloc[0]
            p_tost.append(e.p_tost)
            p_diff.append(e.p_diff)
        except ConfigError:
            p_tost.append(np.nan)
            p_diff.append(np.nan)
    pt, pd_ = np.asarray(p_tost, float), np.asarray(p_diff, float)
    ok = np.isfinite(pt) & np.isfinite(pd_)
    adj_t, adj_d = np.full(len(pt), np.nan), np.full(len(pt), np.nan)
    if ok.any():
        adj_t[ok], adj_d[ok] = adjust_p(pt[ok], method="holm"), adjust_p(pd_[ok], method="holm")
    out["p_tost"], out["p_tost_holm"] = pt, adj_t
    out["equivalence"] = [
        tost_verdict(t, d, alpha) if k else "not tested" for t, d, k in zip(adj_t, adj_d, ok)
    ]
    return out


#: the effects table's columns a report shows, in this order (:func:`labkit.report.tables.effects_table`:
