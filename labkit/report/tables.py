"""Tables people read: numbers to a few significant digits, every cell escaped.

:func:`format_number` writes one number the way a results table should show it (``2787``,
``0.3003``, ``1.2e-49``; never ``2786.855000`` or ``3.347664e+01``); :func:`readable` applies
it to a DataFrame's numeric columns; :func:`html_table` renders a DataFrame as an HTML table
whose every cell and header is escaped (names and levels come from stores: text, never markup);
:func:`readable_display` makes pandas show every float that way in Jupyter;
:func:`effects_table` is the effects table a reader sees, each estimate beside its own interval;
:func:`count_words` says counts by status in words (``96 ok, 2 failed``).
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DIGITS",
    "EFFECT_COLUMNS",
    "count_words",
    "effects_table",
    "format_number",
    "html_table",
    "readable",
    "readable_display",
]

#: significant digits shown by default: enough to compare configurations, not more than a
#: benchmark's run-to-run noise supports
DIGITS = 4
#: a table with more columns than this gets the class ``lk-wide`` (a smaller font in reports)
WIDE_COLUMNS = 9
#: the columns of :func:`effects_table`, in this order (those it has values for)
EFFECT_COLUMNS = [
    "term",
    "q",
    "effect",
    "effect_low",
    "effect_high",
    "df",
    "t",
    "F",
    "p",
    "pct_variation",
    "pct_low",
    "pct_high",
]


def count_words(counts: dict) -> str:
    """Counts by status (or any label) as words, largest first: ``{'ok': 96, 'failed': 2}`` ->
    ``"96 ok, 2 failed"``; ``"none"`` when empty (issue 46: dict reprs were printed).

    >>> count_words({"failed": 2, "ok": 96})
    '96 ok, 2 failed'
    """
    shown = sorted(((int(n), str(k)) for k, n in counts.items()), key=lambda nk: (-nk[0], nk[1]))
    return ", ".join(f"{n:,} {k}" for n, k in shown) or "none"


#: per-run rows a report table shows at most (issue 45: 10,000 runs made a report of tables); the
#: rest are in the export
PER_RUN_ROWS = 200


def capped(df: pd.DataFrame, *, limit: int = PER_RUN_ROWS, what: str = "runs") -> list:
    """``[df]`` when it has at most ``limit`` rows, else ``[its first limit rows, a sentence]``
    saying "first N of M runs shown; all M are in the export (labkit export)"."""
    if len(df) <= limit:
        return [df]
    return [
        df.head(limit),
        f"First {limit} of {len(df)} {what} shown; all {len(df)} are in the export "
        "(labkit export CAMPAIGN, or the bundle's runs.csv).",
    ]


def format_number(x: object, digits: int = DIGITS) -> str:
    """``x`` with ``digits`` significant digits, in fixed notation from 0.001 to 10^9 (whole
    numbers without decimals: ``32262``, ``1``), else in scientific notation with 2 significant
    digits (``1.2e-49``). NaN and None are "", booleans "yes"/"no", anything else ``str(x)``."""
    if not isinstance(digits, int) or not 1 <= digits <= 15:
        raise ConfigError(f"digits must be an integer in [1, 15], got {digits!r}")
    if x is None:
        return ""
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return "yes" if x else "no"
    if not isinstance(x, numbers.Real):
        try:
            import pandas as pd

            if pd.isna(x):  # pd.NA, NaT
                return ""
        except (TypeError, ValueError):
            pass
        return str(x)
    v = float(x)
    if math.isnan(v):
        return ""
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if v == 0:
        return "0"
    mag = abs(v)
    if mag < 1e-3 or mag >= 1e9:
        return f"{v:.{max(digits - 3, 1)}e}".replace("e-0", "e-").replace("e+0", "e+")
    if v == int(v):
        return f"{int(v)}"
    decimals = max(0, digits - 1 - math.floor(math.log10(mag)))
    return f"{v:.{decimals}f}"


def readable(df: pd.DataFrame, digits: int = DIGITS) -> pd.DataFrame:
    """A copy of ``df`` whose float columns are strings from :func:`format_number` (integer,
    text and other columns unchanged; ``attrs`` kept)."""
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        s = out[col]
        if pd.api.types.is_float_dtype(s) or pd.api.types.is_bool_dtype(s):
            out[col] = s.map(lambda x: format_number(x, digits))
        elif s.dtype == object:
            out[col] = s.map(lambda x: format_number(x, digits) if isinstance(x, float | bool) else x)
    return out


def html_table(
    df: pd.DataFrame,
    *,
    digits: int = DIGITS,
    caption: str | None = None,
    max_rows: int | None = None,
    css_class: str = "lk-table",
) -> str:
    """``df`` as an HTML ``<table>``: numbers from :func:`format_number`, every header and cell
    escaped (``<``, ``>``, ``&``, quotes become entities), numeric columns right-aligned (class
    ``num``), an optional ``<caption>``; with ``max_rows``, the first rows and a last row saying
    how many were left out. A table of more than :data:`WIDE_COLUMNS` columns also gets the class
    ``lk-wide``."""
    import pandas as pd

    from .escape import escape_html

    if max_rows is not None and len(df) > max_rows:
        shown, more = df.iloc[:max_rows], len(df) - max_rows
    else:
        shown, more = df, 0
    numeric = {
        c
        for c in shown.columns
        if pd.api.types.is_numeric_dtype(shown[c]) and not pd.api.types.is_bool_dtype(shown[c])
    }
    text = readable(shown, digits)
    # headers may wrap after an underscore (pct_variation), never inside a word
    head = "".join(
        f"<th{' class=num' if c in numeric else ''}>{escape_html(c).replace('_', '_<wbr>')}</th>"
        for c in text.columns
    )
    rows = []
    for rec in text.itertuples(index=False, name=None):
        cells = "".join(
            f"<td{' class=num' if c in numeric else ''}>{escape_html(format_number(x, digits))}</td>"
            for c, x in zip(text.columns, rec)
        )
        rows.append(f"<tr>{cells}</tr>")
    if more:
        rows.append(f'<tr><td colspan="{max(len(text.columns), 1)}">… {more} more rows</td></tr>')
    cap = f"<caption>{escape_html(caption)}</caption>" if caption else ""
    wide = " lk-wide" if len(text.columns) > WIDE_COLUMNS else ""
    return (
        f'<table class="{escape_html(css_class)}{wide}">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def readable_display(digits: int = DIGITS) -> None:
    """Make pandas show floats with :func:`format_number` (Jupyter's HTML and plain text) and
    "$" as text rather than math: for notebooks, whose tables then read ``2787`` and
    ``1.2e-49`` rather than ``2786.855000`` and ``1.209442e-49``."""
    import pandas as pd

    pd.set_option("display.float_format", lambda x: format_number(x, digits))
    pd.set_option("display.html.use_mathjax", False)


def effects_table(effects: pd.DataFrame, variation: pd.DataFrame | None = None) -> pd.DataFrame:
    """The effects table a reader sees (the report, the explorer): every estimate beside its own
    interval, named after it.

    ``effects`` is a :func:`labkit.stats.factorial_effects` table (or :func:`labkit.stats.blocked_effects`,
    :class:`labkit.stats.LevelEffects`' ``effects``, whose ``ci_low``/``ci_high`` are the interval
    of ``q``) or an ANOVA table (``effect`` NaN, no ``q``); ``variation`` is
    :func:`labkit.report.variation_ci` of the same design, or None. Returns one row per term, the
    columns of :data:`EFFECT_COLUMNS` that have a value in some row: ``term``; Jain's ``q`` (for
    ``I`` the mean); the effect ``2q`` with its interval ``effect_low``/``effect_high``, twice q's
    limits (NaN for ``I``, which has no effect; q's own interval is half the effect's, so it is
    not repeated: the table stays within an A4 page); ``df``; ``t`` (``F`` only when there is no
    ``t``: an ANOVA); ``p``; ``pct_variation`` with its bootstrap interval ``pct_low``/``pct_high``.
    No interval stands beside an estimate it does not belong to. ConfigError when ``effects`` has
    no ``term`` column."""
    import numpy as np
    import pandas as pd

    if not isinstance(effects, pd.DataFrame) or "term" not in effects.columns:
        raise ConfigError("effects_table needs an effects table with a 'term' column")
    out = pd.DataFrame({"term": effects["term"].to_numpy()})
    nan = np.full(len(effects), np.nan)

    def col(name: str) -> np.ndarray:
        return effects[name].to_numpy(float) if name in effects.columns else nan

    low, high, effect = col("ci_low"), col("ci_high"), col("effect")
    out["q"] = col("q")
    has = np.isfinite(effect)  # the interval of an effect exists where the effect does
    out["effect"] = effect
    out["effect_low"] = np.where(has, 2 * low, np.nan)
    out["effect_high"] = np.where(has, 2 * high, np.nan)
    for name in ("df", "t", "F", "p", "pct_variation"):
        if name in effects.columns and not (name == "F" and "t" in effects.columns):
            out[name] = effects[name].to_numpy()
    if variation is not None:
        if not {"term", "pct_low", "pct_high"} <= set(variation.columns):
            raise ConfigError("effects_table: variation needs the columns term, pct_low, pct_high")
        out = out.merge(variation[["term", "pct_low", "pct_high"]], on="term", how="left")
    keep = [c for c in EFFECT_COLUMNS if c in out.columns and (c == "term" or out[c].notna().any())]
    return out[keep]


#: the columns of :func:`decisions_table`, in this order
DECISION_COLUMNS = ["term", "p", "p_adjusted", "size", "threshold", "verdict", "runs_to_resolve"]


def decisions_table(decided: pd.DataFrame) -> pd.DataFrame:
    """Each term's verdict under the declared rules (:func:`labkit.report.decisions.decide_terms`):
    one row per term of the family (the rows with a verdict), the columns of
    :data:`DECISION_COLUMNS` it has: ``term``, ``p`` (the test's p-value), ``p_adjusted`` (after the
    family correction), ``size`` (the size held to the threshold: the effect, q, or the ANOVA
    term's range), ``threshold`` (the practical threshold in that unit; 0 without one),
    ``verdict`` ("matters", "does not matter", "negligible", "not resolved at this n") and
    ``runs_to_resolve`` (the runs that would resolve an open term, from the observed variance).
    ConfigError without ``term`` and ``verdict`` columns."""
    import pandas as pd

    if not isinstance(decided, pd.DataFrame) or not {"term", "verdict"} <= set(decided.columns):
        raise ConfigError("decisions_table needs a decided table (columns term and verdict)")
    rows = decided[decided["verdict"].notna()]
    return rows[[c for c in DECISION_COLUMNS if c in rows.columns]].reset_index(drop=True)
