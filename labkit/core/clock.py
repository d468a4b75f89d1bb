"""Timestamps labkit records (UTC, ISO 8601, milliseconds): one format in stores, locks and the
registry of running campaigns. Imports nothing of labkit, so every layer may use it."""

from __future__ import annotations

from datetime import UTC, datetime


def now_iso() -> str:
    """The current time in UTC, e.g. ``2026-11-25T14:22:28.123+00:00``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")
