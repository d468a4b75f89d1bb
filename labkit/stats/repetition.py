"""How many repetitions at each level: Kalibera & Jones' multi-level experiment plan.

A performance result has several nested sources of variation: instances (boots of a VM, starts of
a container), runs on an instance, iterations in a run. Repeating at a level costs what that level
costs (a boot costs far more than an iteration) and removes only that level's share of the
uncertainty. Kalibera & Jones, "Rigorous benchmarking in reasonable time" (ISMM 2013, doi
10.1145/2464157.2464160; section 9 and the revised version's corrected variance estimators, Kent
Academic Repository 33611) give, for a balanced pilot with ``n`` levels (level ``n`` the highest,
level 1 the measurements themselves, ``r_i`` repetitions of level ``i`` inside each unit of level
``i + 1``):

* the biased estimators ``S_i^2 = 1 / (prod_{k>i} r_k (r_i - 1)) * sum (Ybar_unit - Ybar_parent)^2``
  over every unit of level ``i`` (its mean against its parent's; for ``i = n`` the parent is the
  grand mean);
* the unbiased estimators of the variance components ``T_1^2 = S_1^2`` and
  ``T_i^2 = S_i^2 - S_{i-1}^2 / r_{i-1}`` (the revised paper's form: the ISMM text had
  ``T_{i-1}^2`` in place of ``S_{i-1}^2``); these are the balanced ANOVA (method-of-moments)
  estimators and may be negative;
* with ``c_i`` the cost of one repetition at level ``i`` (not counting the levels below it: a
  boot's time for an instance, one iteration's time for an iteration), the repetition counts that
  minimise the variance of the grand mean for a given total cost:
  ``r_i = ceil(sqrt(c_{i+1} T_i^2 / (c_i T_{i+1}^2)))`` for ``i = 1 .. n-1``;
* the count at the top level then sets the precision: the top-level means are independent with
  variance ``V = sum_i T_i^2 / prod_{k=i}^{n-1} r_k``, and ``r_n`` is the fewest with the t
  interval's half-width ``t(1 - a/2, r_n - 1) sqrt(V / r_n)`` at most the target.

:func:`runs_needed` estimates the components from a pilot (K&J's estimators for a balanced pilot,
else the REML fit of :func:`labkit.stats.mixed_effects`) and returns the plan;
:func:`plan_repetitions` plans from known components. ``assurance`` asks for more: ``r_n`` such
that the half-width a campaign will observe (its own sample variance is random) is at most the
target with that probability (Kupper & Hafner, "How appropriate are popular sample size
formulas?", The American Statistician 43(2), 1989: ``(r - 1) s^2 / V`` is chi-square with
``r - 1`` df).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from ..errors import ConfigError
from . import validate as v

__all__ = ["kj_estimators", "plan_repetitions", "runs_needed"]

#: repetitions per level are capped at this by default
MAX_REPS = 1000


def _positive(x: object, arg: str) -> float:
    if (
        isinstance(x, bool)
        or not isinstance(x, (int, float, np.integer, np.floating))
        or not math.isfinite(float(x))
        or float(x) <= 0
    ):
        raise ConfigError(f"{arg} must be a positive number, got {x!r}")
    return float(x)


def _fraction(x: object, arg: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating)) or not 0 < float(x) < 1:
        raise ConfigError(f"{arg} must be a number strictly between 0 and 1, got {x!r}")
    return float(x)


def _unit_codes(data: pd.DataFrame, levels: list[str]) -> list[np.ndarray]:
    """For each level (high to low), a code per row naming its unit (the unit of a nested level is
    the combination of its label with its parents' labels)."""
    codes = []
    for j in range(len(levels)):
        keys = data[levels[: j + 1]].astype(str).agg("\x1f".join, axis=1)
        codes.append(pd.factorize(keys)[0])
    return codes


def _structure(data: pd.DataFrame, levels: list[str]) -> tuple[list[np.ndarray], list[int] | None]:
    """Unit codes per level and the balanced repetition counts (None when unbalanced).
    ConfigError when the levels do not identify each row or a level holds one unit only."""
    codes = _unit_codes(data, levels)
    if len(np.unique(codes[-1])) != len(data):
        raise ConfigError(
            f"levels {levels!r} must identify each row (the lowest, {levels[-1]!r}, "
            f"names the observations): some rows share all of their labels"
        )
    reps: list[int] | None = []
    parent = np.zeros(len(data), dtype=np.int64)
    for j, c in enumerate(codes):
        pairs = pd.DataFrame({"p": parent, "c": c}).drop_duplicates()
        per = pairs.groupby("p").size().to_numpy()
        if per.max() < 2:
            raise ConfigError(
                f"level {levels[j]!r} has one unit per {'campaign' if j == 0 else levels[j - 1]!r}: "
                f"a pilot needs at least 2 units at every level to estimate its variance"
            )
        if reps is not None:
            reps = reps + [int(per[0])] if (per == per[0]).all() else None
        parent = c
    return codes, reps


def kj_estimators(data: pd.DataFrame, *, response: str, levels: v.Columns) -> pd.DataFrame:
    """Kalibera & Jones' estimators of a balanced pilot, one row per level, highest first.

    ``levels``: the columns naming each level's units, highest first, down to the level whose
    units are the rows (e.g. ``["instance", "run_id", "iteration"]``); nested labels need not be
    unique (iteration 1 of every run). Returns columns ``level``, ``i`` (K&J's index: ``n`` for the
    highest, 1 for the rows), ``r`` (repetitions of the level inside each unit of the level above;
    for the highest, its units), ``S2`` (biased, ``S_i^2``) and ``T2`` (unbiased component
    ``T_i^2``, may be negative); ``attrs["mean"]`` is the grand mean. See the module docstring.
    ConfigError for an unbalanced pilot (use :func:`runs_needed`, which falls back to REML).
    """
    data = v.frame(data, "pilot")
    levels = v.names(levels, "levels")
    v.columns(data, levels, "levels")
    y = v.response(data, response)
    codes, reps = _structure(data, levels)
    if reps is None:
        raise ConfigError(
            f"kj_estimators needs a balanced pilot (the same number of units of each "
            f"level in every unit above it); levels {levels!r} are unbalanced"
        )
    return _kj(y, codes, reps, levels)


def _kj(y: np.ndarray, codes: list[np.ndarray], reps: list[int], levels: list[str]) -> pd.DataFrame:
    n = len(levels)
    grand = float(np.mean(y))
    s2 = np.zeros(n)
    parent_mean = np.full(len(y), grand)
    for j, c in enumerate(codes):  # high (j = 0) to low
        sums = np.bincount(c, weights=y)
        counts = np.bincount(c)
        unit_mean = (sums / counts)[c]
        # one term per unit: take each unit's first row
        first = np.unique(c, return_index=True)[1]
        ss = float(np.sum((unit_mean[first] - parent_mean[first]) ** 2))
        s2[j] = ss / (math.prod(reps[:j]) * (reps[j] - 1))
        parent_mean = unit_mean
    t2 = s2.copy()
    for j in range(n - 2, -1, -1):  # T_i^2 = S_i^2 - S_{i-1}^2 / r_{i-1}
        t2[j] = s2[j] - s2[j + 1] / reps[j + 1]
    out = pd.DataFrame({"level": levels, "i": np.arange(n, 0, -1), "r": reps, "S2": s2, "T2": t2})
    out.attrs["mean"] = grand
    return out


def _reml(
    data: pd.DataFrame, y: np.ndarray, codes: list[np.ndarray], levels: list[str], within: Sequence[str] = ()
) -> np.ndarray:
    """Variance components (high to low) from the REML fit of :func:`mixed_effects` (the
    configurations of ``within`` as fixed blocks; ``codes`` then name units within them)."""
    from .mixed import mixed_effects

    frame = pd.DataFrame({f"u{j}": codes[j] for j in range(len(levels) - 1)})
    frame["y"] = y
    blocks = None
    if within:
        frame["config"] = pd.factorize(data[list(within)].astype(str).agg("\x1f".join, axis=1))[0]
        blocks = ["config"]
    fit = mixed_effects(frame, response="y", random=[f"u{j}" for j in range(len(levels) - 1)], blocks=blocks)
    return fit.variance["variance"].to_numpy(dtype=float)


def runs_needed(
    pilot: pd.DataFrame,
    *,
    response: str,
    levels: v.Columns,
    costs: Mapping[str, float] | Sequence[float],
    target_ci: float,
    relative: bool = True,
    confidence: float = 0.95,
    assurance: float | None = None,
    method: str = "auto",
    max_reps: int = MAX_REPS,
    within: v.Columns = None,
) -> pd.DataFrame:
    """The cheapest repetition counts per level for a target confidence-interval half-width.

    Parameters
    ----------
    pilot : long-format DataFrame of one configuration (or of several: ``within``), one row per
        observation.
    response : the numeric response column.
    levels : the columns naming each level's units, highest first, down to the level whose units
        are the rows: ``["instance", "run_id"]`` (runs on instances) or
        ``["instance", "run_id", "iteration"]``.
    costs : the cost of one repetition at each level, not counting the levels below it (seconds
        to boot an instance, to set up a run, one iteration's time), as ``{level: cost}`` or a
        sequence in the order of ``levels``.
    target_ci : the half-width wanted for the mean's interval, a fraction of the mean when
        ``relative`` (0.01 = +-1 %), else in the response's unit.
    confidence : of the interval.
    assurance : None: K&J's rule (the half-width at the expected variance; a campaign's own
        interval comes out wider about half the time); a probability: the top-level count that
        makes the observed half-width at most the target with that probability.
    method : ``"kj"`` (K&J's balanced estimators; negative components count as 0), ``"reml"``
        (:func:`labkit.stats.mixed_effects`, unbalanced pilots too) or ``"auto"`` (``kj`` when
        the pilot is balanced).
    max_reps : the most repetitions planned at one level.
    within : the columns naming a pilot's configurations (a design's factors), when it holds
        more than one: the components are then estimated within each configuration and pooled
        (K&J's estimators averaged over the configurations, which must share one balanced
        structure; else REML with the configurations as fixed blocks), so that differences
        between configurations are not taken for instance-to-instance variance; a relative
        target is relative to the configuration mean nearest 0 (the plan meets it for each).
        Without ``within``, every row is taken as a repetition of one configuration.

    Returns
    -------
    DataFrame, one row per level, highest first: ``level``, ``pilot_reps`` (repetitions in the
    pilot; NaN when unbalanced), ``S2`` and ``T2`` (K&J's estimators; NaN for REML), ``variance``
    (the component used: ``T2`` or REML, at least 0), ``pct`` (its share), ``cost``,
    ``reps_exact`` (K&J's unrounded optimum; NaN at the top level) and ``reps`` (the plan:
    repetitions of the level inside each unit of the level above; for the highest, how many of
    its units). ``attrs``: ``mean``, ``target`` (absolute half-width), ``half_width`` (expected
    with the plan), ``cost`` (of the whole plan), ``total`` (observations), ``confidence``,
    ``assurance``, ``method`` and ``note``.

    ConfigError for missing columns, levels that do not identify the rows, a level with one unit
    (in a configuration), costs that are not positive or miss a level, a target that is not
    positive, and a zero mean with a relative target.
    """
    data = v.frame(pilot, "pilot")
    levels = v.names(levels, "levels")
    v.columns(data, levels, "levels")
    within = v.names(within, "within", allow_empty=True)
    v.columns(data, within, "within")
    if set(within) & set(levels):
        raise ConfigError(f"within {within!r} and levels {levels!r} must not share a column")
    y = v.response(data, response)
    if method not in ("auto", "kj", "reml"):
        raise ConfigError(f"method must be 'auto', 'kj' or 'reml', got {method!r}")
    target = _positive(target_ci, "target_ci")
    parts = (
        [np.arange(len(data))]
        if not within
        else list(data.groupby(within, sort=True, dropna=False).indices.values())
    )
    structures = [_structure(data.iloc[ix], levels) for ix in parts]
    shapes = {tuple(r) if r is not None else None for _, r in structures}
    reps = structures[0][1] if len(shapes) == 1 else None
    if method == "kj" and reps is None:
        raise ConfigError(
            f"method='kj' needs a balanced pilot; levels {levels!r} are unbalanced"
            + (f" or differ between the configurations of {within!r}" if within else "")
            + " (use method='reml' or 'auto')"
        )
    means = [float(np.mean(y[ix])) for ix in parts]
    mean = min(means, key=abs)
    if relative:
        if mean == 0:
            raise ConfigError(
                "target_ci is relative to the mean, which is 0: give an absolute target (relative=False)"
            )
        target *= abs(mean)
    if reps is not None and method != "reml":
        # balanced in every configuration alike: K&J's S^2 per configuration, pooled (averaged)
        s2 = np.mean(
            [_kj(y[ix], codes, reps, levels)["S2"].to_numpy() for ix, (codes, _) in zip(parts, structures)],
            axis=0,
        )
        t2 = s2.copy()
        for j in range(len(levels) - 2, -1, -1):  # T_i^2 = S_i^2 - S_{i-1}^2 / r_{i-1}
            t2[j] = s2[j] - s2[j + 1] / reps[j + 1]
        comps, used = np.maximum(t2, 0.0), "kj"
    else:
        blocks = within if len(parts) > 1 else []
        comps, used = (
            _reml(data, y, _unit_codes(data, blocks + levels)[len(blocks) :], levels, blocks),
            "reml",
        )
        s2 = t2 = np.full(len(levels), np.nan)
    plan = plan_repetitions(
        dict(zip(levels, comps)),
        costs=costs,
        target=target,
        confidence=confidence,
        assurance=assurance,
        max_reps=max_reps,
    )
    plan.insert(
        1, "pilot_reps", np.asarray(reps, dtype=float) if reps is not None else np.full(len(levels), np.nan)
    )
    plan.insert(2, "S2", s2)
    plan.insert(3, "T2", t2)
    plan.attrs.update(mean=mean, method=used, relative=relative)
    return plan


def _costs(costs: Mapping[str, float] | Sequence[float], levels: list[str]) -> np.ndarray:
    if isinstance(costs, Mapping):
        missing = [lv for lv in levels if lv not in costs]
        extra = [k for k in costs if k not in levels]
        if missing or extra:
            raise ConfigError(
                f"costs must give one cost per level {levels!r}"
                + (f"; missing {missing!r}" if missing else "")
                + (f"; unknown {extra!r}" if extra else "")
            )
        values = [costs[lv] for lv in levels]
    elif isinstance(costs, (list, tuple, np.ndarray)):
        if len(costs) != len(levels):
            raise ConfigError(f"costs: {len(costs)} values for {len(levels)} levels {levels!r}")
        values = list(costs)
    else:
        raise ConfigError(f"costs must be a mapping level -> cost or a list, got {type(costs).__name__}")
    return np.array([_positive(c, f"costs[{lv!r}]") for c, lv in zip(values, levels)])


def _top_variance(comps: np.ndarray, reps: np.ndarray) -> float:
    """Variance of one top-level unit's mean: sum_j comps_j / prod_{1<=k<=j} reps_k."""
    return float(sum(comps[j] / np.prod(reps[1 : j + 1]) for j in range(len(comps))))


def _top_reps(
    var_top: float, target: float, confidence: float, assurance: float | None, max_reps: int
) -> int:
    """The fewest top-level units (>= 2) meeting the target (see the module docstring)."""
    if var_top <= 0:
        return 2
    q = 0.5 + confidence / 2

    def ok(r: int) -> bool:
        t = sps.t.ppf(q, r - 1)
        if assurance is None:
            return bool(t * math.sqrt(var_top / r) <= target)
        limit = (r - 1) * r * target**2 / (t**2 * var_top)
        return bool(sps.chi2.cdf(limit, r - 1) >= assurance)

    lo, hi = 2, 2
    while not ok(hi):
        if hi >= max_reps:
            return max_reps + 1  # not reachable within max_reps
        lo, hi = hi + 1, min(2 * hi, max_reps)
    while lo < hi:  # both conditions become true and stay true as r grows
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return hi


def _cost(reps: np.ndarray, costs: np.ndarray) -> float:
    """Total cost: c_n r_n + c_{n-1} r_n r_{n-1} + ... (each level's cost times its repetitions)."""
    return float(sum(costs[j] * np.prod(reps[: j + 1]) for j in range(len(reps))))


def plan_repetitions(
    variances: Mapping[str, float],
    *,
    costs: Mapping[str, float] | Sequence[float],
    target: float,
    confidence: float = 0.95,
    assurance: float | None = None,
    max_reps: int = MAX_REPS,
) -> pd.DataFrame:
    """The repetition plan for known variance components (``{level: variance}``, highest first,
    the last the observations' own) and per-level ``costs``, for an absolute half-width
    ``target``. Returns the columns ``level``, ``variance``, ``pct``, ``cost``, ``reps_exact``,
    ``reps`` and the ``attrs`` of :func:`runs_needed`.

    K&J's ``r_i = ceil(sqrt(c_{i+1} T_i^2 / (c_i T_{i+1}^2)))`` for every level below the top (at
    least 1; 1 when the level has no variance); when the level above has no variance of its own
    the formula has no finite answer, and that level's count is the cheapest one in
    ``1..max_reps`` that meets the target with the fewest top-level units. The top level's count
    is the fewest (at least 2) meeting the target (``assurance``: see :func:`runs_needed`).
    """
    if not isinstance(variances, Mapping) or len(variances) < 1:
        raise ConfigError("variances must be a mapping level -> variance component (highest level first)")
    levels = [str(k) for k in variances]
    comps = np.array([float(x) for x in variances.values()])
    if not np.all(np.isfinite(comps)) or (comps < 0).any():
        raise ConfigError(f"variances must be finite numbers >= 0, got {dict(variances)!r}")
    c = _costs(costs, levels)
    target = _positive(target, "target")
    confidence = _fraction(confidence, "confidence")
    if assurance is not None:
        assurance = _fraction(assurance, "assurance")
    if (
        isinstance(max_reps, bool)
        or not isinstance(max_reps, (int, np.integer))
        or not 2 <= max_reps <= 10**6
    ):
        raise ConfigError(f"max_reps must be a whole number from 2 to 1000000, got {max_reps!r}")
    n = len(levels)
    exact = np.full(n, np.nan)
    reps = np.ones(n)
    open_levels = []
    for j in range(1, n):  # level j (K&J's i = n - j) below level j - 1 (i + 1)
        if comps[j] == 0:
            exact[j] = 0.0
        elif comps[j - 1] == 0:
            exact[j] = np.inf
            open_levels.append(j)
            continue
        else:
            exact[j] = math.sqrt(c[j - 1] * comps[j] / (c[j] * comps[j - 1]))
        reps[j] = min(max(1, math.ceil(exact[j] - 1e-9)), max_reps)
    note = ""

    def finish(r: np.ndarray) -> np.ndarray:
        r = r.copy()
        r[0] = _top_reps(_top_variance(comps, r), target, confidence, assurance, max_reps)
        return r

    for j in open_levels:  # no finite optimum: search this level's count
        best = None
        for k in range(1, max_reps + 1):
            trial = reps.copy()
            trial[j] = k
            trial = finish(trial)
            key = (trial[0] > max_reps, _cost(trial, c))
            if best is None or key < best[0]:
                best = (key, k)
            if trial[0] == 2:  # more repetitions here cannot lower the cost further
                break
        reps[j] = best[1] if best else 1
        note = (
            f"{', '.join(levels[j - 1] for j in open_levels)} shows no variance of its own: "
            f"repetitions below it are set to meet the target with the fewest units of it"
        )
    reps = finish(reps)
    if reps[0] > max_reps:
        reps[0] = max_reps
        note = (note + "; " if note else "") + (
            f"the target is not reached with max_reps = {max_reps} units of {levels[0]!r}"
        )
    var_top = _top_variance(comps, reps)
    total_var = comps.sum()
    half = float(sps.t.ppf(0.5 + confidence / 2, reps[0] - 1) * math.sqrt(var_top / reps[0]))
    out = pd.DataFrame(
        {
            "level": levels,
            "variance": comps,
            "pct": 100 * comps / total_var if total_var > 0 else np.full(n, np.nan),
            "cost": c,
            "reps_exact": exact,
            "reps": reps.astype(int),
        }
    )
    out.attrs.update(
        target=target,
        half_width=half,
        cost=_cost(reps, c),
        total=int(np.prod(reps)),
        confidence=confidence,
        assurance=assurance,
        note=note,
    )
    return out
