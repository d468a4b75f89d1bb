"""Input checks shared by labkit.stats and the plots and reports drawn from its tables: every
failure is a ConfigError naming the argument."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from ..errors import ConfigError
from ._numeric import group_order

#: a sample: a sequence, array or Series of numbers
Sample = ArrayLike
#: column names: one name, a list of them, or None for none
Columns = str | Sequence[str] | None
#: a ``levels`` argument (see :func:`level_map`): None, a mapping ``{factor: (low, high)}`` or
#: ``{factor: {level: -1/+1}}``, or a :class:`labkit.design.Design` (stats does not import it)
Levels = object
#: a seed of :func:`numpy.random.default_rng`: None (fresh entropy), an int or a Generator
Seed = int | np.random.Generator | None


def frame(data: object, arg: str = "data") -> pd.DataFrame:
    """``data`` itself, after checking it is a non-empty DataFrame."""
    if not isinstance(data, pd.DataFrame):
        raise ConfigError(
            f"{arg} must be a pandas DataFrame in long format "
            f"(one row per observation), got {type(data).__name__}"
        )
    if data.empty:
        raise ConfigError(f"{arg} is empty: there are no observations to analyse")
    return data


def names(value: object, arg: str, *, allow_empty: bool = False) -> list[str]:
    """A column name or a list of them, as a list without duplicates."""
    if value is None:
        value = []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Iterable):
        raise ConfigError(f"{arg} must be a column name or a list of column names, got {value!r}")
    out = list(value)
    if not out and not allow_empty:
        raise ConfigError(f"{arg} must name at least one column")
    for v in out:
        if not isinstance(v, str):
            raise ConfigError(f"{arg}: column names must be strings, got {v!r}")
    dup = sorted({v for v in out if out.count(v) > 1})
    if dup:
        raise ConfigError(f"{arg} names {', '.join(map(repr, dup))} more than once")
    return out


def columns(data: pd.DataFrame, cols: Sequence[str], arg: str) -> None:
    """Raise unless every name in ``cols`` is a column of ``data``."""
    missing = [c for c in cols if c not in data.columns]
    if missing:
        raise ConfigError(
            f"{arg}: no column {', '.join(map(repr, missing))} in data; "
            f"columns are {', '.join(map(repr, map(str, data.columns)))}"
        )


def response(data: pd.DataFrame, name: object, arg: str = "response") -> np.ndarray:
    """The response column as float64, refusing non-numeric or missing values."""
    if not isinstance(name, str):
        raise ConfigError(f"{arg} must be a column name, got {name!r}")
    columns(data, [name], arg)
    col = data[name]
    if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col):
        raise ConfigError(f"{arg} column {name!r} must be numeric, it has dtype {col.dtype}")
    y = col.to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isfinite(y)
    if bad.any():
        raise ConfigError(
            f"{arg} column {name!r} has {int(bad.sum())} missing or infinite value(s) "
            f"(first at row {data.index[np.argmax(bad)]!r}); drop failed runs first, "
            f"e.g. data[data.status == 'ok']"
        )
    return y


def alpha(value: object) -> float:
    """A significance level strictly between 0 and 1."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating))
        or not 0 < float(value) < 1
    ):
        raise ConfigError(f"alpha must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def no_missing(data: pd.DataFrame, cols: Sequence[str], arg: str) -> None:
    for c in cols:
        missing_levels(int(data[c].isna().sum()), c, arg)


def missing_levels(n: int, col: str, arg: str) -> None:
    """Raise if ``n`` observations of factor column ``col`` have no level."""
    if n:
        raise ConfigError(f"{arg}: column {col!r} has {n} missing value(s); every observation needs a level")


def factorize(data: pd.DataFrame, factor: str, arg: str = "factor") -> tuple[np.ndarray, list]:
    """``(codes, levels in order of appearance)`` of a factor column without missing values."""
    codes, uniques = data[factor].array.factorize()  # the array's own: no Index built
    missing_levels(int(np.count_nonzero(codes < 0)), factor, arg)
    return codes, [scalar(u) for u in uniques.tolist()]


class DesignOrder(tuple):
    """Level order taken from a design: may list more levels than the data holds."""


def level_map(levels: Levels, arg: str = "levels") -> dict:
    """``levels`` as ``{factor: levels}``.

    Accepts None, a mapping ``{factor: (low, high)}`` / ``{factor: {level: -1/+1}}``,
    or an object with ``.factors`` whose items have ``.name`` and ``.levels``
    (a :class:`labkit.design.Design`), whose order is then used as declared.
    """
    if levels is None:
        return {}
    if isinstance(levels, Mapping):
        return dict(levels)
    factors = getattr(levels, "factors", None)
    if factors is not None:
        try:
            return {f.name: DesignOrder(f.levels) for f in factors}
        except (AttributeError, TypeError) as e:
            raise ConfigError(
                f"{arg}: {type(levels).__name__}.factors must hold objects with .name and .levels"
            ) from e
    raise ConfigError(
        f"{arg} must be a mapping {{factor: (low, high)}} or a labkit Design, got {type(levels).__name__}"
    )


def level_order(
    col: pd.Series, explicit: object = None, *, arg: str = "levels", present: list | None = None
) -> list:
    """The levels of a factor column, in analysis order.

    ``explicit`` (a sequence of levels, e.g. the design's) wins; then a pandas
    Categorical's category order; otherwise the levels are sorted (numbers
    and booleans low to high, strings alphabetically), so the order never
    depends on the (randomised) order of the runs. Only levels present in the
    data are returned.
    """
    if present is None:
        present = [scalar(x) for x in pd.unique(col.dropna())]
    if explicit is not None:
        if isinstance(explicit, (str, bytes)) or not isinstance(explicit, Iterable):
            raise ConfigError(f"{arg}[{col.name!r}] must be a sequence of levels, got {explicit!r}")
        order = list(explicit)
        extra = [v for v in present if v not in order]
        if extra:
            raise ConfigError(
                f"{arg}[{col.name!r}] = {order!r} does not list level(s) "
                f"{', '.join(map(repr, extra))} found in column {col.name!r}"
            )
        present_set = set(present)
        return [v for v in order if v in present_set]
    if isinstance(col.dtype, pd.CategoricalDtype):
        present_set = set(present)
        return [v for v in col.cat.categories if v in present_set]
    if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
        return sorted(present)
    try:
        return sorted(present)
    except TypeError:
        return sorted(present, key=lambda x: (type(x).__name__, str(x)))


def two_levels(col: pd.Series, explicit: object = None, *, arg: str = "levels", hint: str = "") -> tuple:
    """(low, high) of a two-level factor; see :func:`level_order` for the rules.

    ``explicit`` may be a (low, high) pair, a mapping ``{level: -1 or +1}``
    or a design's level order (of which the data must hold exactly two).
    """
    if isinstance(explicit, Mapping):
        bad = ConfigError(
            f"{arg}[{col.name!r}] must map one level to -1 and one to +1, got {dict(explicit)!r}"
        )
        inv = {}
        for level, code in explicit.items():
            if isinstance(code, bool) or code not in (-1, 1) or code in inv:
                raise bad
            inv[code] = level
        if set(inv) != {-1, 1}:
            raise bad
        explicit = [inv[-1], inv[1]]
    if (
        explicit is not None
        and not isinstance(explicit, (str, bytes, DesignOrder))
        and isinstance(explicit, Iterable)
        and len(list(explicit)) != 2
    ):
        raise ConfigError(
            f"{arg}[{col.name!r}] must give exactly two levels (low, high), got {list(explicit)!r}{hint}"
        )
    order = level_order(col, explicit, arg=arg)
    if len(order) != 2:
        shown = ", ".join(map(repr, order[:8])) + (", ..." if len(order) > 8 else "")
        raise ConfigError(
            f"factor {col.name!r} has {len(order)} level(s) in the data ({shown}); "
            f"a two-level design needs exactly two{hint}"
        )
    return scalar(order[0]), scalar(order[1])


def scalar(x: Any) -> Any:
    """numpy scalars as plain Python values (for readable attrs and labels)."""
    return x.item() if isinstance(x, np.generic) else x


def groups(data: pd.DataFrame, response: str, factor: str, *, min_groups: int = 2) -> tuple[list, list]:
    """``(levels, samples)``: the response of each level of ``factor``, levels in analysis order."""
    levels, y, g = coded_groups(data, response, factor, min_groups=min_groups)
    order = group_order(g, len(levels))
    bounds = np.cumsum(np.bincount(g, minlength=len(levels)))[:-1]
    return levels, np.split(y[order], bounds)


def coded_groups(
    data: pd.DataFrame, response: str, factor: str, *, min_groups: int = 2
) -> tuple[list, np.ndarray, np.ndarray]:
    """``(levels, y, codes)``: the response and each observation's level index (analysis order).

    ConfigError for a missing or non-string factor, a factor that is the response,
    missing factor values, a bad response or fewer than ``min_groups`` levels."""
    data = frame(data)
    if not isinstance(factor, str):
        raise ConfigError(f"factor must be one column name, got {factor!r}")
    columns(data, [factor], "factor")
    if response == factor:
        raise ConfigError(f"response {response!r} is also the factor")
    y = _response_column(data, response)
    codes, present = factorize(data, factor)
    levels = level_order(data[factor], present=present)
    if len(levels) < min_groups:
        raise ConfigError(
            f"factor {factor!r} has {len(levels)} level(s) in the data; at least {min_groups} are needed"
        )
    rank = {lv: i for i, lv in enumerate(levels)}
    g = np.array([rank[u] for u in present], dtype=np.int64)[codes]
    return levels, y, g


def sample(x: Sample, arg: str) -> np.ndarray:
    """A 1-d float array of finite numbers."""
    try:
        a = np.asarray(x, dtype=float).ravel()
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{arg} must be a sequence of numbers") from e
    if not np.all(np.isfinite(a)):
        raise ConfigError(f"{arg} has {int((~np.isfinite(a)).sum())} missing or infinite value(s)")
    return a


_response_column = response  # groups() has a parameter of that name
