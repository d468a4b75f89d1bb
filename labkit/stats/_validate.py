"""Input checks shared by labkit.stats: every failure is a ConfigError naming the argument."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import ConfigError


def frame(data, arg: str = "data") -> pd.DataFrame:
    """``data`` itself, after checking it is a non-empty DataFrame."""
    if not isinstance(data, pd.DataFrame):
        raise ConfigError(f"{arg} must be a pandas DataFrame in long format "
                          f"(one row per observation), got {type(data).__name__}")
    if data.empty:
        raise ConfigError(f"{arg} is empty: there are no observations to analyse")
    return data


def names(value, arg: str, *, allow_empty: bool = False) -> list[str]:
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
            f"columns are {', '.join(map(repr, map(str, data.columns)))}")


def response(data: pd.DataFrame, name, arg: str = "response") -> np.ndarray:
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
            f"e.g. data[data.status == 'ok']")
    return y


def alpha(value) -> float:
    """A significance level strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) \
            or not 0 < float(value) < 1:
        raise ConfigError(f"alpha must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def no_missing(data: pd.DataFrame, cols: Sequence[str], arg: str) -> None:
    for c in cols:
        n = int(data[c].isna().sum())
        if n:
            raise ConfigError(f"{arg}: column {c!r} has {n} missing value(s); "
                              f"every observation needs a level")


def level_order(col: pd.Series, explicit=None, *, arg: str = "levels") -> list:
    """The levels of a factor column, in analysis order.

    ``explicit`` (a sequence of levels) wins; then an ordered pandas
    Categorical's category order; numbers and booleans sort low to high;
    anything else (strings) keeps the order of first appearance in the data.
    Only levels present in the data are returned.
    """
    present = pd.unique(col.dropna())
    if explicit is not None:
        if isinstance(explicit, (str, bytes)) or not isinstance(explicit, Iterable):
            raise ConfigError(f"{arg}[{col.name!r}] must be a sequence of levels, got {explicit!r}")
        order = list(explicit)
        extra = [v for v in present if v not in order]
        if extra:
            raise ConfigError(f"{arg}[{col.name!r}] = {order!r} does not list level(s) "
                              f"{', '.join(map(repr, extra))} found in column {col.name!r}")
        return [v for v in order if v in set(present)]
    if isinstance(col.dtype, pd.CategoricalDtype):
        present_set = set(present)
        return [v for v in col.cat.categories if v in present_set]
    if pd.api.types.is_bool_dtype(col) or pd.api.types.is_numeric_dtype(col):
        return sorted(present)
    return list(present)


def two_levels(col: pd.Series, explicit=None, *, arg: str = "levels", hint: str = "") -> tuple:
    """(low, high) of a two-level factor; see :func:`level_order` for the rules.

    ``explicit`` may also be a mapping ``{level: -1 or +1}``.
    """
    if isinstance(explicit, Mapping):
        inv = {}
        for level, code in explicit.items():
            if code not in (-1, 1) or isinstance(code, bool) or code in inv:
                raise ConfigError(
                    f"{arg}[{col.name!r}] must map one level to -1 and one to +1, got {dict(explicit)!r}")
            inv[code] = level
        if set(inv) != {-1, 1}:
            raise ConfigError(
                f"{arg}[{col.name!r}] must map one level to -1 and one to +1, got {dict(explicit)!r}")
        explicit = [inv[-1], inv[1]]
    if explicit is not None and not isinstance(explicit, (str, bytes)) \
            and isinstance(explicit, Iterable) and len(list(explicit)) != 2:
        raise ConfigError(f"{arg}[{col.name!r}] must give exactly two levels (low, high), "
                          f"got {list(explicit)!r}{hint}")
    order = level_order(col, explicit, arg=arg)
    if len(order) != 2:
        shown = ", ".join(map(repr, order[:8])) + (", ..." if len(order) > 8 else "")
        raise ConfigError(f"factor {col.name!r} has {len(order)} level(s) in the data ({shown}); "
                          f"a two-level design needs exactly two{hint}")
    return scalar(order[0]), scalar(order[1])


def scalar(x):
    """numpy scalars as plain Python values (for readable attrs and labels)."""
    return x.item() if isinstance(x, np.generic) else x
