"""Seed 001's disk image format question (notebook 04): raw vs qcow2 on libvirt.

Baum et al. (seed ``001_94cd1ff94cd4e3e1.txt``, section 4) ran KVM instances on qcow2 disks only
and blamed qcow2 for Dedup's slowdown on KVM; they measured no raw disk. Here the format is a
**platform option** of the libvirt backend (``disk_format: qcow2 | raw``), so the two formats are
two declared platforms of one randomized campaign (:func:`disk_format_testbed`,
:func:`disk_format_design`). labkit's designs cross every factor with every other, with no factor
nested in one platform, hence platforms and not a ``disk_format`` factor; the analysis reads the
format each run's instance recorded (:func:`disk_format_responses`) and treats it as the factor.

* :func:`disk_format_comparison`: per group (app, threads), qcow2 against raw: Welch t-test with
  the CI of the difference, the slowdown ratio with its Fieller CI, and the assumption checks.
* :func:`claim_verdicts`: the paper's stated direction (qcow2 slower, or no difference) against
  our interval, in the vocabulary of :func:`labkit.report.claims.verdict`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

PLATFORM_PREFIX = "kvm"
FACTOR = "disk_format"


def _formats(formats: Iterable[str] | None) -> list[str]:
    from ..run.platforms import disk_formats

    checked = disk_formats(None if formats is None else list(formats), "disk_formats")
    if len(set(checked)) != len(checked) or len(checked) < 2:
        raise ConfigError(
            f"disk_formats={checked!r}: give at least two distinct formats of {', '.join(disk_formats())}"
        )
    return checked


def platform_name(disk_format: str) -> str:
    """The declared platform running libvirt with ``disk_format`` (``kvm-qcow2``, ``kvm-raw``)."""
    return f"{PLATFORM_PREFIX}-{disk_format}"


def disk_format_testbed(formats: Iterable[str] | None = None, options: dict | None = None) -> dict:
    """A testbed mapping for this machine alone declaring one libvirt platform per format:
    ``{"name": "disk-format", "platforms": {"kvm-qcow2": {"backend": "libvirt", "disk_format":
    "qcow2", **options}, ...}, "hosts": [{"name": "local"}]}``. ``options``: further libvirt
    options shared by every platform (``uri``, ``image``, ``disk_cache`` ...; not
    ``disk_format``). ConfigError for an unknown format or a ``disk_format`` in ``options``."""
    options = dict(options or {})
    if not isinstance(options, dict) or FACTOR in options or "backend" in options:
        raise ConfigError(
            "disk_format_testbed: options are libvirt options shared by every platform; "
            "'disk_format' and 'backend' are set per platform"
        )
    platforms = {platform_name(f): {"backend": "libvirt", FACTOR: f, **options} for f in _formats(formats)}
    return {"name": "disk-format", "platforms": platforms, "hosts": [{"name": "local"}]}


def disk_format_design(
    *,
    apps: Iterable[str],
    threads_levels: Iterable[int],
    replications: int,
    seed: int,
    formats: Iterable[str] | None = None,
    name: str = "pipeline-disk",
) -> dict:
    """The design mapping: factor ``platform`` (one :func:`platform_name` per format), ``app``
    when it has >= 2 levels, ``threads`` when it has >= 2 levels (a single level is fixed in
    the workload parameters instead: see :func:`fixed_params`)."""
    factors: dict[str, list] = {"platform": [platform_name(f) for f in _formats(formats)]}
    given: tuple[tuple[str, Iterable], ...] = (("app", apps), ("threads", threads_levels))
    for key, values in given:
        levels = list(values)
        if not levels:
            raise ConfigError(f"disk_format_design: {key} needs at least one level")
        if len(levels) > 1:
            factors[key] = levels
    return {
        "name": name,
        "factors": factors,
        "replications": replications,
        "seed": seed,
        "description": "seed 001: disk image format (raw vs qcow2) of libvirt instances, pipeline "
        "stand-in (NOT PARSEC)",
    }


def fixed_params(*, apps: Sequence[str], threads_levels: Sequence[int]) -> dict:
    """Workload parameters for the factors :func:`disk_format_design` left out (one level)."""
    out: dict = {}
    if len(list(apps)) == 1:
        out["app"] = list(apps)[0]
    if len(list(threads_levels)) == 1:
        out["threads"] = list(threads_levels)[0]
    return out


def disk_format_responses(
    data_dir: str | Path,
    campaign_id: str,
    response: str = "stages_s",
    factors: Sequence[str] = ("app", "threads"),
) -> pd.DataFrame:
    """The successful runs of a stored disk-format campaign (read-only), one row per run:
    ``run_id``, ``replicate``, ``platform``, each of ``factors`` (a design factor, else the
    workload parameter the campaign fixed, else left out), ``response`` (default ``stages_s``,
    the pipeline's timed stages; a campaign stored before the workload reported it gets the sum
    of its stage times, :func:`labkit.studies.with_stages_total`), and what the run's
    libvirt instance recorded: ``disk_format`` (the disk it booted) and ``domain_type`` ("kvm",
    or "qemu" for TCG emulation). ``attrs["excluded"]``: failed or timed-out runs left out.
    StoreError when the campaign is not stored; ConfigError when a run's recorded format is not
    the one its platform declares (``kvm-<format>``)."""
    from ..store import Store, load_results
    from ..store.results import responses, store_path
    from .stage_times import with_stages_total

    tidy = with_stages_total(load_results(data_dir, campaign_id))
    with Store(store_path(data_dir, campaign_id), readonly=True) as st:
        meta, runs = st.meta(), st.runs()
    params = (meta.get("workload") or {}).get("params") or {}
    present = [f for f in factors if f in tidy.columns]
    out = responses(tidy, response, ["platform", *present])
    for f in factors:
        if f not in present and f in params:
            out[f] = params[f]
    inst = {r.run_id: (r.metadata.get("instances") or [{}])[0] for r in runs.itertuples()}
    out[FACTOR] = [inst.get(r, {}).get(FACTOR) for r in out.run_id]
    out["domain_type"] = [inst.get(r, {}).get("domain_type") for r in out.run_id]
    wrong = out[out.platform.astype(str) != [platform_name(str(f)) for f in out[FACTOR]]]
    if len(wrong):
        raise ConfigError(
            f"campaign {campaign_id}: run {wrong.run_id.iloc[0]} on platform "
            f"{wrong.platform.iloc[0]!r} recorded disk_format {wrong[FACTOR].iloc[0]!r}"
        )
    return out


def disk_format_comparison(
    data: pd.DataFrame,
    response: str,
    *,
    by: Sequence[str] = ("app",),
    treatment: str = "qcow2",
    baseline: str = "raw",
    alpha: float = 0.05,
) -> pd.DataFrame:
    """``treatment`` against ``baseline`` per group of ``by``; ``data``: one row per run with a
    ``disk_format`` column, the ``by`` columns and ``response`` (a time: lower is better).

    Returns one row per group: the ``by`` columns, ``n_a``/``n_b`` (runs of treatment and
    baseline), ``mean_a``/``mean_b``, ``diff`` (mean_a - mean_b) with ``ci_low``/``ci_high``
    (Welch, 1 - alpha), ``t``, ``df``, ``p`` and ``p_holm`` (Holm over the groups), ``ratio``
    (mean_a / mean_b: > 1, treatment slower) with ``ratio_low``/``ratio_high`` (Fieller),
    ``slower_pct`` (100 (ratio - 1)), ``bf_p`` (Brown-Forsythe test of equal variances,
    NaN with fewer than 3 runs per format) and ``note``.
    """
    import numpy as np
    import pandas as pd

    from .. import stats

    by = list(by)
    if FACTOR not in data.columns:
        raise ConfigError(f"disk_format_comparison: data has no {FACTOR!r} column; have {list(data.columns)}")
    sub = data[data[FACTOR].isin([treatment, baseline])].assign(**{FACTOR: lambda d: d[FACTOR].astype(str)})
    if sub[FACTOR].nunique() < 2:
        raise ConfigError(
            f"disk_format_comparison: need runs of both {treatment!r} and {baseline!r}; "
            f"have {sorted(data[FACTOR].dropna().astype(str).unique())}"
        )
    tt = stats.ttest_by(
        sub, factor=FACTOR, response=response, by=by, levels=(treatment, baseline), alpha=alpha
    )
    ratios = stats.overhead_ratios(
        sub, response=response, platform=FACTOR, baseline=baseline, by=by, lower_is_better=True, alpha=alpha
    )
    ratios = ratios[by + ["ratio", "ci_low", "ci_high", "note"]].rename(
        columns={"ci_low": "ratio_low", "ci_high": "ratio_high", "note": "ratio_note"}
    )
    out = tt.merge(ratios, on=by, how="left") if by else pd.concat([tt, ratios], axis=1)
    bf, few = [], []
    for _key, grp in sub.groupby(by, sort=True, observed=True) if by else [((), sub)]:
        ok = grp.groupby(FACTOR)[response].size().min() >= 3  # with 2 runs both |x - median| are equal
        bf.append(
            float(stats.levene(grp, response=response, factor=FACTOR, alpha=alpha).p.iloc[0])
            if ok
            else np.nan
        )
        few.append("" if ok else "Brown-Forsythe needs >= 3 runs per format")
    out["bf_p"] = bf
    out["p_holm"] = stats.adjust_p(out.p, method="holm")
    out["slower_pct"] = 100 * (out.ratio - 1)
    out["note"] = [
        "; ".join(s for s in (str(a or ""), str(b or ""), c) if s and s != "nan")
        for a, b, c in zip(out.note, out.ratio_note, few)
    ]
    return out[
        by
        + [
            "n_a",
            "n_b",
            "mean_a",
            "mean_b",
            "diff",
            "ci_low",
            "ci_high",
            "t",
            "df",
            "p",
            "p_holm",
            "ratio",
            "ratio_low",
            "ratio_high",
            "slower_pct",
            "bf_p",
            "note",
        ]
    ]


def residual_checks(
    data: pd.DataFrame, response: str, factors: Sequence[str], *, alpha: float = 0.05
) -> pd.DataFrame:
    """The ANOVA's assumptions on ``data`` (one row per run, the ``factors`` columns and
    ``response``): Shapiro-Wilk on the residuals from the cell means of the full factorial model
    (pooled over cells, as R's ``shapiro.test(residuals(aov(y ~ A*B)))``) and Brown-Forsythe
    across the cells (R ``car::leveneTest``; NaN when a cell has fewer than 3 runs).

    Returns one row per check: ``check`` ("normal residuals", "equal variances"), ``test``,
    ``statistic``, ``p``, ``holds`` (p > alpha; NA when it cannot be tested), ``n`` and ``note``."""
    import pandas as pd

    from .. import stats

    factors = list(factors)
    missing = [c for c in [*factors, response] if c not in data.columns]
    if missing:
        raise ConfigError(f"residual_checks: column(s) {missing} missing; have {list(data.columns)}")
    cell = data[factors].astype(str).agg("/".join, axis=1)
    resid = data[response] - data.groupby(cell)[response].transform("mean")
    rows = []
    if len(resid) >= 3 and resid.abs().max() > 0:
        sw = stats.shapiro(resid.to_numpy(float), alpha=alpha).iloc[0]
        rows.append(
            {
                "check": "normal residuals",
                "test": "shapiro-wilk",
                "statistic": sw.W,
                "p": sw.p,
                "n": int(sw.n),
                "note": sw.note,
            }
        )
    else:
        rows.append(
            {
                "check": "normal residuals",
                "test": "shapiro-wilk",
                "statistic": float("nan"),
                "p": float("nan"),
                "n": len(resid),
                "note": "fewer than 3 runs or no residual variation",
            }
        )
    frame = data.assign(_cell=cell)
    sizes = frame.groupby("_cell").size()
    if len(sizes) >= 2 and sizes.min() >= 3:
        lv = stats.levene(frame, response=response, factor="_cell", alpha=alpha).iloc[0]
        rows.append(
            {
                "check": "equal variances",
                "test": lv.test,
                "statistic": lv.W,
                "p": lv.p,
                "n": len(frame),
                "note": lv.note,
            }
        )
    else:
        rows.append(
            {
                "check": "equal variances",
                "test": "brown-forsythe",
                "statistic": float("nan"),
                "p": float("nan"),
                "n": len(frame),
                "note": "one cell only" if len(sizes) < 2 else "a cell has fewer than 3 runs",
            }
        )
    out = pd.DataFrame(rows)
    out["holds"] = [pd.NA if pd.isna(p) else bool(p > alpha) for p in out.p]
    return out[["check", "test", "statistic", "p", "holds", "n", "note"]]


def claim_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """The paper's stated direction against ours, in the one vocabulary of
    :func:`labkit.report.claims.verdict`: ``table`` as :func:`labkit.studies.seeds.
    headline_comparison` returns it plus a ``stated_direction`` column ("slower": the platform is
    slower than the baseline; "no difference"). Returns ``table`` plus ``verdict``: for
    "slower", "reproduced" (the CI lies above 0), "opposite" (below 0) or "inconclusive" (it
    contains 0, or is unbounded); for "no difference", "inconclusive" (the CI contains 0: a
    wide interval shows no equivalence) or "not reproduced" (it excludes 0); "not measured"
    where ``ours_pct`` is NaN."""
    import math

    from ..report.claims import verdict

    allowed = {"slower": 1, "no difference": 0}
    out = []
    for r in table.to_dict("records"):
        d = r.get("stated_direction")
        if d not in allowed:
            raise ConfigError(
                f"claim_verdicts: stated_direction {d!r} of {r.get('claim')!r}; use one of {tuple(allowed)}"
            )
        ours = r.get("ours_pct", 0.0)
        measured = ours is not None and not (isinstance(ours, float) and math.isnan(ours))
        out.append(verdict(r.get("ci_low"), r.get("ci_high"), None, direction=allowed[d], measured=measured))
    return table.assign(verdict=out)
