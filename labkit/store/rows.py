"""Reading a stored row: what labkit wrote, or :class:`Malformed` naming the column that does
not hold it (a tampered or damaged store; :attr:`labkit.store.Store.problems`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .schema import STATUSES


class Malformed(Exception):
    """A stored value that is not what labkit wrote: ``column`` and ``why`` (one line)."""

    def __init__(self, column: str, why: str):
        super().__init__(f"column {column}: {why}")
        self.column, self.why = column, why


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _whole(value: object, column: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(column, f"{_shown(value)} is not a whole number")
    return value


def _text(value: object, column: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise Malformed(column, f"{_shown(value)} is not text")
    return value


def json_object(value: object, column: str) -> dict:
    """``value`` (a stored JSON text) read as a JSON object; :class:`Malformed` otherwise."""
    if not isinstance(value, str):
        raise Malformed(column, f"{_shown(value)} is not JSON text")
    try:
        out = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise Malformed(column, f"not JSON ({str(exc).splitlines()[0][:80]}): {_shown(value)}") from None
    if not isinstance(out, dict):
        raise Malformed(column, f"a JSON {type(out).__name__} where an object is expected: {_shown(value)}")
    return out


def parse_run(row: Sequence) -> dict:
    """A ``runs`` row (:data:`RUN_COLUMNS`) as a dict with ``levels`` and ``metadata`` read;
    :class:`Malformed` naming the first column that does not hold what labkit writes."""
    rid, order, cfg, rep, levels, status, error, started, dur, md, fp = row
    _text(rid, "run_id")
    if isinstance(dur, bool) or not isinstance(dur, (int, float)):
        raise Malformed("duration_s", f"{_shown(dur)} is not a number")
    if status not in STATUSES:
        raise Malformed("status", f"{_shown(status)} is not one of {', '.join(STATUSES)}")
    return {
        "run_id": rid,
        "run_order": _whole(order, "run_order"),
        "config": _whole(cfg, "config"),
        "replicate": _whole(rep, "replicate"),
        "levels": json_object(levels, "levels"),
        "status": status,
        "error": _text(error, "error", optional=True),
        "started": _text(started, "started"),
        "duration_s": dur,
        "metadata": json_object(md, "metadata"),
        "fingerprint_id": _text(fp, "fingerprint_id", optional=True),
    }


def check_measurement(
    instance: object, metric: object, value: object, unit: object, iteration: object
) -> None:
    """:class:`Malformed` (column ``measurements.<name>``) unless a measurement row holds what
    labkit writes."""
    _whole(instance, "measurements.instance")
    if not isinstance(metric, str) or not metric:
        raise Malformed("measurements.metric", f"{_shown(metric)} is not a metric name")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise Malformed("measurements.value", f"{_shown(value)} is not a number")
    _text(unit, "measurements.unit", optional=True)
    if iteration is not None and _whole(iteration, "measurements.iteration") < 0:
        raise Malformed("measurements.iteration", f"{iteration} is below 0")


def json_value(kind: str, value: Any) -> Any:
    """What ``json.loads`` gives for a value SQLite's ``json_extract`` returned, of JSON type ``kind``."""
    if kind == "true":
        return True
    if kind == "false":
        return False
    if kind in ("array", "object"):
        return json.loads(value)
    return value
