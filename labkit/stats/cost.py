"""Cost efficiency: performance per price (Roloff et al. 2012; Maliszewski 2021, eq. 4.1).

    cost efficiency = (1 hour / execution time in hours) / price per hour

i.e. how many executions one dollar-hour buys; higher is better. The price
is that of everything the execution occupies (e.g. all 8 instances of a
cluster), which the caller supplies.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import ConfigError
from . import validate as v

__all__ = ["cost_efficiency"]

SECONDS = {"s": 1.0, "ms": 1e-3, "min": 60.0, "h": 3600.0}


def cost_efficiency(
    data: pd.DataFrame, *, time: str, price: str, unit: str = "s", by: v.Columns = None
) -> pd.DataFrame:
    """Executions per hour divided by the price per hour, per row of ``data``.

    ``time`` is the column of execution times (in ``unit``: "s", "ms", "min"
    or "h"), ``price`` the column of the price per hour of all the resources
    one execution uses. ``by`` (e.g. the application) names the groups within
    which platforms are ranked.

    Returns a copy of ``data`` plus ``executions_per_hour`` (3600 s / time),
    ``cost_efficiency`` (executions_per_hour / price) and, with ``by``,
    ``rank`` (1 = most cost-efficient in its group) and ``vs_best`` (cost
    efficiency relative to the group's best, 1.0 for the best).
    """
    data = v.frame(data)
    if unit not in SECONDS:
        raise ConfigError(f"unit must be one of {', '.join(map(repr, SECONDS))}, got {unit!r}")
    by = v.names(by, "by", allow_empty=True)
    v.columns(data, by, "by")
    t = v.response(data, time, "time") * SECONDS[unit]
    p = v.response(data, price, "price")
    if np.any(t <= 0):
        raise ConfigError(f"time column {time!r} has values <= 0")
    if np.any(p <= 0):
        raise ConfigError(f"price column {price!r} has values <= 0")
    out = data.copy()
    out["executions_per_hour"] = 3600.0 / t
    out["cost_efficiency"] = out["executions_per_hour"] / p
    if by:
        g = out.groupby(by, observed=True)["cost_efficiency"]
        out["rank"] = g.rank(ascending=False, method="min").astype(int)
        out["vs_best"] = out["cost_efficiency"] / g.transform("max")
    return out
