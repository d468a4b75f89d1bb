"""The run-order check in words: :func:`order_sentences` says, per host, whether the runs show a
trend or carry-over (:func:`labkit.stats.order_effects`); :data:`ORDER_COLUMNS` is the table the
report prints."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .labels import label

__all__ = ["ORDER_COLUMNS", "order_sentences"]

#: the order-effects table as the report prints it (the adjusted p-values decide; the raw ones, the
#: slope and the carry-over groups stay in :attr:`Analysis.order_effects` and the export)
ORDER_COLUMNS = ("host", "n", "rho", "p_trend_adj", "H", "p_carry_adj", "trend", "carryover", "trusted")


def order_sentences(order: pd.DataFrame, response: str) -> list[str]:
    """The order-effects check (:func:`labkit.stats.order_effects`) in words: per host, trend
    (Spearman) and carry-over (Kruskal-Wallis on the previous run's configuration), and whether
    the randomization is to be trusted."""
    alpha = order.attrs.get("alpha", 0.05)
    tests = order.attrs.get("tests", 0)
    parts, bad = [], []
    for r in order.itertuples(index=False):
        carry = (
            f"carry-over H = {r.H:.3g}, p = {r.p_carry:.2g}"
            if np.isfinite(r.p_carry)
            else "carry-over not tested (fewer than 2 previous configurations with 2 runs)"
        )
        parts.append(
            f"host {r.host} ({r.n} runs): trend ρ = {r.rho:+.2f}, p = {r.p_trend:.2g} "
            f"(slope {r.slope:+.3g} per run), {carry}"
        )
        if not r.trusted:
            bad.append(
                f"host {r.host}: "
                + " and ".join(
                    x
                    for x, flag in (
                        ("a trend in run order", r.trend),
                        ("carry-over from the previous run", r.carryover),
                    )
                    if flag
                )
            )
    head = (
        f"Order effects (residuals of {label(response)} after the configuration means, in each "
        f"host's run order; Spearman for a trend, Kruskal-Wallis on the previous run's "
        f"configuration for carry-over; Holm over {tests} tests, α = {alpha:g}): " + "; ".join(parts) + "."
    )
    if bad:
        head += (
            " Found: " + "; ".join(bad) + ". The randomization spreads it over the configurations "
            "but does not remove it: trust the effects only as far as the error term absorbs it "
            "(block by time or re-run to be sure)."
        )
    else:
        head += " No trend and no carry-over: the randomization can be trusted."
    short = order.attrs.get("short") or []
    if short:
        head += f" Not checked on {', '.join(map(str, short))} (fewer than 6 runs)."
    return [head]
