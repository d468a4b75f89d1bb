"""What a campaign's answer rests on: the suspect runs and every verdict recomputed without them
(:func:`suspect_sentences`), the runs' telemetry beside them (:func:`telemetry_table`) and the
factors whose treatment did not take (:func:`treatment_hook`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..stats import validate as v
from .conclude import Conclusions, decided_effects, focus_answer
from .decisions import Policy
from .design_fit import fit_design
from .labels import term_label
from .level_analysis import LevelDesign

__all__ = ["suspect_sentences", "telemetry_table", "treatment_hook"]


def treatment_hook(tidy: pd.DataFrame, runs: pd.DataFrame | None, factors: Sequence[str]) -> dict[str, str]:
    """``{factor: why it is not concluded on}`` for the factors of the analysis whose treatment did
    not take on some runs (issue 41, item 4: :func:`labkit.report.treatments.untaken` reads the
    per-run manipulation checks from the store's ``runs`` metadata): "KSM on merged no pages in 30
    of 30 runs: the treatment did not take". Empty without checks (``runs`` None, older stores)."""
    from .treatments import untaken

    if runs is None:
        return {}
    table = untaken(runs)
    bad = table[(table["failed"] > 0) & table["factor"].isin([str(f) for f in factors])]
    return {
        str(f): "; ".join(str(x) for x in g["sentence"].dropna()) + "."
        for f, g in bad.groupby("factor", sort=False)
    }


def suspect_sentences(
    runs_table: pd.DataFrame,
    obs: pd.DataFrame,
    response: str,
    factors: list,
    plan: LevelDesign,
    policy: Policy,
    concl: Conclusions,
    *,
    levels: v.Levels,
    n_boot: int,
    why: str | None,
    focus: str | None = None,
    watched: bool = True,
) -> list[str]:
    """The suspect runs in the answer (issue 41, item 3): how many, which configurations are left
    with no clean run, whether the flags concentrate on a level of a factor
    (:func:`labkit.report.decisions.suspect_association`), and every verdict recomputed without
    them: the same, or "not robust to the N suspect runs" with both verdicts shown (``watched``:
    False when no telemetry is stored, said so instead of "none flagged"). Says in
    ``concl.headline`` whether the answer about ``focus`` is the same without them."""
    from .decisions import empty_cells, suspect_association
    from .level_analysis import level_design

    sus = runs_table["suspect"].astype(bool)
    n_sus, n = int(sus.sum()), len(runs_table)
    if not n_sus:
        return [
            f"Suspect runs: none of the {n} runs is flagged by the telemetry."
            if watched
            else f"Suspect runs: none flagged, but no telemetry is stored for these {n} runs (campaigns "
            f"run before telemetry was kept): they were not checked for a busy host."
        ]
    reasons = runs_table.loc[sus, "suspect_reason"].dropna().astype(str)
    # the kind of reason: its words up to the first number ("... used 35.1 % of a CPU" -> "... used")
    top = reasons.map(lambda r: re.split(r"\d", r)[0].strip(" ,:(") or r).value_counts().head(2)
    ids = runs_table.loc[sus, "run_id"].astype(str).tolist()
    out = [
        f"Suspect runs: {n_sus} of {n} runs are flagged by the telemetry"
        + (
            f" (reasons: {'; '.join(f'{k} … ({c} run{chr(115) * (c != 1)})' for k, c in top.items())})"
            if len(top)
            else ""
        )
        + f": {', '.join(ids[:12])}"
        + (f" and {len(ids) - 12} more" if len(ids) > 12 else "")
        + "."
    ]
    empty = empty_cells(runs_table, factors)
    if len(empty):
        cells = ["; ".join(f"{f}={row[f]}" for f in factors) for _, row in empty.iterrows()]
        out.append(
            f"Configurations with no clean run ({len(empty)}): "
            + " | ".join(cells[:8])
            + (f" and {len(cells) - 8} more" if len(cells) > 8 else "")
            + "."
        )
    assoc = suspect_association(
        runs_table, factors, alpha=policy.alpha, family="none" if policy.family == "none" else policy.family
    )
    if len(assoc) and not assoc["confounded"].any():
        out.append(
            f"The suspect runs are not concentrated on a level of any factor (Fisher's exact test, "
            f"chi-square for more than two levels; {policy.correction(len(assoc), 'factor')}: "
            f"smallest adjusted p = {float(assoc['p_adjusted'].min()):.2g})."
        )
    for r in assoc[assoc["confounded"]].itertuples(index=False):
        test = "Fisher's exact test" if r.test == "fisher" else "chi-square test"
        out.append(
            f"The suspect runs are confounded with {term_label(r.factor)}: {r.suspect_there} of the "
            f"{r.suspect} suspect runs are at {r.factor}={r.level}, which holds {r.runs_there} of "
            f"the {r.runs} runs ({test}, {policy.correction(len(assoc), 'factor')}, adjusted "
            f"p = {r.p_adjusted:.2g}): a difference between its levels may be the disturbance, "
            f"not {term_label(r.factor)}."
        )
    if why or concl.decided is None:
        return out
    clean_runs = runs_table[~sus].reset_index(drop=True)
    clean_obs = obs[~obs["run_id"].isin(ids)].reset_index(drop=True)
    verdict_all = concl.decided.set_index("term")["verdict"].dropna()
    verdict_all = verdict_all[verdict_all != "not concluded on"]
    try:
        if len(clean_runs) < 3:
            raise ConfigError(f"{len(clean_runs)} clean runs")
        clean_plan = level_design(clean_obs, factors, hosts=plan.host_mode)
        k2, eff2, _, _, _, _, why2 = fit_design(
            clean_obs,
            clean_runs,
            response,
            factors,
            clean_plan,
            levels=levels,
            alpha=policy.alpha,
            n_boot=n_boot,
            extras=False,
        )
        if why2:
            raise ConfigError(why2)
        dec2 = decided_effects(eff2, policy, runs=clean_runs, response=response)
    except (ConfigError, ValueError, np.linalg.LinAlgError) as exc:
        out.append(
            f"Without the {n_sus} suspect runs no analysis is possible ({exc}): every conclusion "
            f"above rests on suspect runs; not robust to the {n_sus} suspect runs."
        )
        if concl.headline:
            concl.headline += f" Not robust to the {n_sus} suspect runs (without them nothing can be tested)."
        return out
    verdict_clean = dec2.set_index("term")["verdict"].dropna()
    changed = [
        (t, verdict_all[t], verdict_clean.get(t, "not tested"))
        for t in verdict_all.index
        if verdict_clean.get(t, "not tested") != verdict_all[t]
    ]
    head = f"Without the {n_sus} suspect runs ({len(clean_runs)} clean runs, {dec2.attrs['rules']})"
    if not changed:
        out.append(head + ": every verdict is the same; the conclusions are robust to the suspect runs.")
    else:
        out.append(
            head
            + f": not robust to the {n_sus} suspect runs: "
            + "; ".join(f"{term_label(t)} {a!r} with them, {b!r} without" for t, a, b in changed[:10])
            + (f"; and {len(changed) - 10} more" if len(changed) > 10 else "")
            + "."
        )
    if focus is not None and focus in factors and concl.answer not in ("", "Not concluded on"):
        answer2, _ = focus_answer(dec2, focus)
        if answer2 != concl.answer:
            concl.headline += (
                f" Not robust to the {n_sus} suspect runs: with them {concl.answer}, without them {answer2}."
            )
        else:
            concl.headline += f" The same without the {n_sus} suspect runs."
    return out


def telemetry_table(
    stored: pd.DataFrame | None, runs_table: pd.DataFrame, notes: list[str]
) -> pd.DataFrame | None:
    """One row per analysed run: run_id, run_order, host, run_seq, suspect, suspect_reason and the
    runs' telemetry summaries (:func:`labkit.run.telemetry.covariates`), or None without them;
    ``notes``: :func:`labkit.run.telemetry.measurement_notes` of ``stored``."""
    if stored is None or not len(stored) or "metadata" not in stored:
        return None
    from ..run.telemetry import covariates

    cov = covariates(stored)
    if len(cov.columns) <= 1:
        return None
    keep = ["run_id", "run_order", "host", "run_seq", "suspect", "suspect_reason"]
    out = runs_table[keep].merge(cov, on="run_id", how="left")
    # what was not measured ("telemetry off: psutil missing: suspect runs unknown"): never "0 flagged"
    out.attrs["unmeasured"] = [n for n in notes if n.startswith("telemetry off")]
    return out
