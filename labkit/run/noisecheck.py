"""How noisy is this host, this platform: a short A/A campaign before the real one (issue 32).

:func:`noise_check` runs a fixed workload (N-queens on a small board) a few times per platform,
in a randomized design whose one factor changes nothing: the solver's kill deadline
(``timeout_s``: two levels far beyond the run's seconds), so the two arms are the same
configuration (an A/A test). From the runs it measures, per platform and host:

* the noise: the coefficient of variation of the wall time with Vangel's interval
  (:func:`labkit.stats.cv_ci`), the mean and the median with its distribution-free interval;
* the A/A difference between the two identical arms (Welch t test): a significant one means
  the runs are not exchangeable (drift, a neighbour, warm-up), whatever the CV says;
* with a design (``design=``, the YAML the real campaign will run), the minimum detectable effect
  of each of its factors at ``alpha`` 0.05 and power 0.8 (:func:`labkit.stats.detectable_effect`:
  the design's runs per level and its error df), in % of the mean, before that campaign starts.

The campaign goes into a temporary data dir (removed afterwards, unless ``keep``) or a named
one, under a fresh campaign id, like any campaign (the lock, the registry, telemetry, clean-up).
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..design import Design
from ..errors import ConfigError
from ..stats import cv_ci, detectable_effect, quantile_ci, ttest

__all__ = ["NoiseCheck", "aa_design", "design_mde", "noise_check", "noise_table"]

#: the A/A factor: the solver's kill deadline (seconds), far beyond a small board's run
AA_FACTOR = "timeout_s"
AA_LEVELS = (600, 601)
RESPONSE = "wall_time_s"


@dataclass
class NoiseCheck:
    """What :func:`noise_check` measured.

    * ``noise`` -- one row per platform and host: ``platform``, ``host``, ``n``, ``mean`` (s),
      ``cv``, ``cv_low``, ``cv_high`` (fractions, Vangel's interval), ``median``,
      ``median_low``, ``median_high`` (NaN below 6 runs), ``aa_diff_pct`` (arm A' minus arm A in
      % of the mean) and ``aa_p`` (Welch).
    * ``mde`` -- None without a design, else one row per platform, host and factor of the design:
      ``factor``, ``levels``, ``runs_per_level``, ``df`` (the design's error df), ``mde_pct`` (the
      smallest difference between two of its levels detected with ``power`` at ``alpha``, in %
      of the mean; NaN for an unreplicated design) and ``note``.
    * ``campaign``, ``data_dir`` (None when the temporary one was removed), ``design`` (its
      name), ``alpha``, ``power``.
    """

    noise: pd.DataFrame
    mde: pd.DataFrame | None
    campaign: str
    data_dir: Path | None
    design: str | None
    alpha: float
    power: float

    def text(self) -> str:
        """The report ``labkit noise-check`` prints."""
        lines = [f"noise check {self.campaign}: N-queens wall time, an A/A design (two identical arms)"]
        for _, r in self.noise.iterrows():
            med = (
                f"median {r['median']:.4g} s [{r['median_low']:.4g}, {r['median_high']:.4g}]"
                if np.isfinite(r["median_low"])
                else f"median {r['median']:.4g} s"
            )
            aa = "differ" if r["aa_p"] < self.alpha else "agree"
            lines.append(
                f"  {r['platform']} on {r['host']}: {r['n']} runs, mean {r['mean']:.4g} s, {med}; "
                f"CV {100 * r['cv']:.2f} % [{100 * r['cv_low']:.2f}, {100 * r['cv_high']:.2f}] "
                f"(95 %); A/A arms {aa} ({r['aa_diff_pct']:+.2f} %, p = {r['aa_p']:.2g})"
            )
            if r["aa_p"] < self.alpha:
                lines.append(
                    "    the identical arms differ: runs are not exchangeable here (drift, a "
                    "neighbour, warm-up); fix that before trusting a comparison"
                )
        from ..stats import runs_for_quantile

        conf = 1 - self.alpha
        need = {q: runs_for_quantile(q, confidence=conf, side="upper") for q in (0.95, 0.99)}
        most = int(self.noise["n"].max()) if len(self.noise) else 0
        lines.append(
            f"tail KPIs: a one-sided {100 * conf:g} % upper bound on p95 needs {need[0.95]} runs per "
            f"configuration, on p99 {need[0.99]} (order statistics, TriScale; this check ran {most}"
            f"{'' if most >= need[0.95] else ': plan more runs for a tail KPI'})"
        )
        if self.mde is not None:
            lines.append(
                f"minimum detectable effect of design {self.design} (alpha {self.alpha:g}, "
                f"power {self.power:g}; a difference between two levels of a factor, % of the mean):"
            )
            for _, r in self.mde.iterrows():
                value = f"{r['mde_pct']:.2f} %" if np.isfinite(r["mde_pct"]) else "n/a"
                lines.append(
                    f"  {r['platform']} on {r['host']}: {r['factor']} ({r['levels']} levels, "
                    f"{r['runs_per_level']:g} runs per level, df {r['df']:g}): {value}"
                    + (f" ({r['note']})" if r["note"] else "")
                )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def aa_design(platforms: list[str], runs: int, seed: int | None = None) -> Design:
    """The A/A design: ``timeout_s`` at two levels that change nothing, ``runs`` runs per platform
    (half per arm), plus a ``platform`` factor when there are several."""
    if isinstance(runs, bool) or not isinstance(runs, int) or not 4 <= runs <= 1000:
        raise ConfigError(f"runs must be a whole number from 4 to 1000 (per platform), got {runs!r}")
    factors: dict[str, list[Any]] = {AA_FACTOR: list(AA_LEVELS)}
    if len(platforms) > 1:
        factors["platform"] = list(platforms)
    return Design.from_dict(
        {
            "name": "noise-check",
            "factors": factors,
            "replications": (runs + 1) // 2,
            "seed": seed if seed is not None else secrets.randbelow(2**31),
            "description": "A/A: the two timeout_s levels are the same configuration",
        },
        source="noise check",
    )


def noise_table(tidy: pd.DataFrame, platform: str) -> pd.DataFrame:
    """The ``noise`` table of :class:`NoiseCheck` from a campaign's tidy rows."""
    ok = tidy[(tidy["status"] == "ok") & (tidy["metric"] == RESPONSE) & tidy["value"].notna()].copy()
    if ok.empty:
        raise ConfigError("noise check: no run succeeded; see the campaign's errors")
    if "platform" not in ok.columns:
        ok["platform"] = platform
    ok["host"] = ok["host"].astype(object).where(ok["host"].notna(), "local").astype(str)
    rows = []
    for (plat, host), part in ok.groupby(["platform", "host"], sort=True):
        y = part["value"].to_numpy(float)
        row: dict[str, Any] = {"platform": plat, "host": host}
        if len(y) < 2:
            rows.append(row | {"n": len(y), "mean": float(np.mean(y))})
            continue
        cv = cv_ci(y).iloc[0]
        row |= {
            "n": len(y),
            "mean": cv["mean"],
            "cv": cv["cv"],
            "cv_low": cv["cv_low"],
            "cv_high": cv["cv_high"],
            "median": float(np.median(y)),
        }
        try:
            med = quantile_ci(y, q=0.5).iloc[0]
            row |= {"median_low": med["low"], "median_high": med["high"]}
        except ConfigError:
            row |= {"median_low": np.nan, "median_high": np.nan}
        a = part.loc[part[AA_FACTOR] == AA_LEVELS[0], "value"].to_numpy(float)
        b = part.loc[part[AA_FACTOR] == AA_LEVELS[1], "value"].to_numpy(float)
        if len(a) >= 2 and len(b) >= 2:
            t = ttest(b, a).iloc[0]
            row |= {"aa_diff_pct": 100 * (b.mean() - a.mean()) / cv["mean"], "aa_p": float(t["p"])}
        rows.append(row)
    cols = [
        "platform",
        "host",
        "n",
        "mean",
        "cv",
        "cv_low",
        "cv_high",
        "median",
        "median_low",
        "median_high",
        "aa_diff_pct",
        "aa_p",
    ]
    return pd.DataFrame(rows).reindex(columns=cols)


def design_mde(
    design: Design, noise: pd.DataFrame, *, alpha: float = 0.05, power: float = 0.8
) -> pd.DataFrame:
    """The ``mde`` table of :class:`NoiseCheck`: for each noise row and each factor of ``design``,
    the smallest difference between two of its levels the design detects.

    With ``N`` runs (configurations x replications; an adaptive design's minimum) and ``c``
    configurations, a factor of ``L`` levels has ``N/L`` runs per level and the design's error df
    are ``N - c``; the difference of two level means is tested like a two-sample t test of ``N/L``
    runs per group with those df (for a two-level factor of a 2^k·r design this is its main
    effect's test). When runs share instances (``runs_per_instance`` k > 1) the units are the
    ``N/k`` instances and the CV measured on fresh instances is used for them: an upper bound
    (an instance mean varies less than one run)."""
    k = int(getattr(design, "runs_per_instance", 1) or 1)
    n_runs = design.n_configurations * design.replications
    units, configs = n_runs / k, design.n_configurations
    df = units - configs
    rows = []
    for _, r in noise.iterrows():
        for f in design.factors:
            L = len(f.levels)
            per = units / L
            note = "" if k == 1 else f"{k} runs per instance: instance means as units, an upper bound"
            mde = np.nan
            if df < 1:
                note = "unreplicated: no error df (effects judged by Lenth's method)"
            elif per >= 2 and np.isfinite(r.get("cv", np.nan)):
                mde = 100 * detectable_effect(float(r["cv"]), n=per, df=df, alpha=alpha, power=power)
            rows.append(
                {
                    "platform": r["platform"],
                    "host": r["host"],
                    "factor": f.name,
                    "levels": L,
                    "runs_per_level": per,
                    "df": df,
                    "mde_pct": mde,
                    "note": note,
                }
            )
    return pd.DataFrame(
        rows, columns=["platform", "host", "factor", "levels", "runs_per_level", "df", "mde_pct", "note"]
    )


def noise_check(
    *,
    backend: str = "local",
    testbed: Any = None,
    design: Design | dict | str | Path | None = None,
    runs: int = 10,
    board: int = 13,
    data_dir: str | Path | None = None,
    backend_options: dict | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    keep: bool = False,
    progress: bool = False,
    seed: int | None = None,
) -> NoiseCheck:
    """Run the A/A campaign (module docstring) and measure each platform's and host's noise.

    ``backend``: a backend or platform name, or several joined by commas (one ``platform``
    factor); ``testbed``: a testbed (YAML path or object) whose hosts run it; ``design``: the
    design whose minimum detectable effects to print; ``runs`` per platform (half per arm);
    ``board``: the N-queens board (13: about a tenth of a second per run); ``data_dir``: where the
    campaign is stored (default: a temporary directory, removed afterwards unless ``keep``).
    Returns a :class:`NoiseCheck`.
    """
    from ..store import Store
    from .campaign import Campaign

    if not isinstance(backend, str) or not backend.strip():
        raise ConfigError(
            f"backend must be a backend or platform name (or several, comma-separated), got {backend!r}"
        )
    platforms = [p.strip() for p in backend.split(",") if p.strip()]
    target = None
    if design is not None:
        target = (
            design
            if isinstance(design, Design)
            else (Design.from_dict(design) if isinstance(design, dict) else Design.from_yaml(design))
        )
    aa = aa_design(platforms, runs, seed)
    temporary = data_dir is None
    base = Path(tempfile.mkdtemp(prefix="labkit-noisecheck-")) if data_dir is None else Path(data_dir)
    cid = f"noisecheck-{secrets.token_hex(4)}"
    try:
        Campaign(
            aa,
            backend=platforms[0],
            workload="nqueens",
            workload_params={"board": board},
            campaign_id=cid,
            data_dir=base,
            backend_options=backend_options,
            testbed=testbed,
            progress=progress,
            run_timeout=max(AA_LEVELS) + 60,
        ).run()
        with Store.for_campaign(base, cid, readonly=True) as st:
            tidy = st.tidy()
        noise = noise_table(tidy, platforms[0])
        mde = design_mde(target, noise, alpha=alpha, power=power) if target is not None else None
    finally:
        if temporary and not keep:
            shutil.rmtree(base, ignore_errors=True)
    return NoiseCheck(
        noise,
        mde,
        cid,
        None if temporary and not keep else base,
        target.name if target is not None else None,
        alpha,
        power,
    )
