"""The decision rules a design declares: ``practical:`` and ``family:`` (docs/conclusions.md).

::

    practical: 0.05                       # a term matters from 5 % of the response's mean
    practical: {share_of_variation: 1}    # ... or from 1 % of the total variation (percent)
    family: holm                          # holm (default), bonferroni, bh, or none (printed)

Neither changes the plan: they say how the analysis decides (``labkit analyze`` and the report
hold every conclusion to them; ``--practical`` and ``--alpha`` override them there).
"""

from __future__ import annotations

import math

from ..errors import ConfigError

__all__ = ["DECISION_KEYS", "FAMILIES", "check_family", "check_practical", "practical_rule"]

#: the design keys of this module (left out of a design's digest: a resume may change them)
DECISION_KEYS = ("practical", "family")
#: the family corrections a design may declare ("none": each term tested alone, said so)
FAMILIES = ("holm", "bonferroni", "bh", "none")


def check_practical(value: object, src: str = "design") -> float | dict | None:
    """``value`` of ``practical:`` checked: None, a number in (0, 10] (a fraction of the
    response's mean: 0.05 = 5 %) or ``{share_of_variation: P}`` with P in (0, 100) (percent of the
    total variation). Returns it normalized (a float, or ``{"share_of_variation": float}``);
    ConfigError naming ``src`` otherwise."""
    if value is None:
        return None
    if isinstance(value, dict):
        if set(value) != {"share_of_variation"}:
            raise ConfigError(
                f"{src}: 'practical' as a mapping takes one key, share_of_variation "
                f"(percent of the total variation), got keys {sorted(map(str, value))}"
            )
        pct = value["share_of_variation"]
        if (
            isinstance(pct, bool)
            or not isinstance(pct, (int, float))
            or not math.isfinite(pct)
            or not 0 < pct < 100
        ):
            raise ConfigError(
                f"{src}: 'practical: {{share_of_variation: P}}' needs P in (0, 100) "
                f"(percent of the total variation, e.g. 1), got {pct!r}"
            )
        return {"share_of_variation": float(pct)}
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 < value <= 10
    ):
        raise ConfigError(
            f"{src}: 'practical' must be a fraction of the response's mean in (0, 10] "
            f"(0.05 = 5 %) or {{share_of_variation: P}} (percent), got {value!r}"
        )
    return float(value)


def check_family(value: object, src: str = "design") -> str | None:
    """``value`` of ``family:`` checked: None or one of :data:`FAMILIES`; ConfigError otherwise."""
    if value is None:
        return None
    if not isinstance(value, str) or value.lower() not in FAMILIES:
        raise ConfigError(
            f"{src}: 'family' must be one of {', '.join(FAMILIES)} (the correction over "
            f"the terms of one analysis), got {value!r}"
        )
    return value.lower()


def practical_rule(value: object, src: str = "design") -> tuple[float, str] | None:
    """``(fraction, kind)`` of a ``practical:`` value (:func:`check_practical`): kind ``"mean"``
    (a fraction of the mean) or ``"variation"`` (a fraction of SST: percent / 100); None when
    none is declared. A text (``"0.05"``, ``"variation=1"``, as ``--practical`` gives it) is
    parsed first."""
    if isinstance(value, str):
        text = value.strip()
        key, sep, rest = text.partition("=")
        try:
            if sep and key.strip() in ("variation", "share_of_variation"):
                value = {"share_of_variation": float(rest)}
            elif text.endswith("%"):
                value = float(text[:-1]) / 100
            else:
                value = float(text)
        except ValueError:
            raise ConfigError(
                f"{src}: practical {value!r}: write a fraction of the mean (0.05 or 5%) "
                f"or variation=P (percent of the total variation)"
            ) from None
    checked = check_practical(value, src)
    if checked is None:
        return None
    if isinstance(checked, dict):
        return checked["share_of_variation"] / 100, "variation"
    return checked, "mean"
