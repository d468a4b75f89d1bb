"""Loads tests/vectors/stats_vectors.py: the worked examples labkit.stats is checked against.

The other test_stats_* modules import :func:`load_vectors`, :func:`printed`
and the ``sv`` fixture from here. A missing vectors file FAILS the tests that
need it (never skips). The file is a copy, with its citations, of the shared
repository's test-vectors/stats_vectors.py, so the tests need nothing beside this repo.
"""

from __future__ import annotations

import importlib.util
import math
from decimal import Decimal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors" / "stats_vectors.py"
_cache = {}


def load_vectors():
    """The stats_vectors module, or pytest.fail with where it was looked for."""
    if "module" not in _cache:
        path = VECTORS.resolve()
        if not path.is_file():
            pytest.fail(
                f"statistics test vectors not found at {path} (<repo>/tests/vectors/stats_vectors.py)",
                pytrace=False,
            )
        spec = importlib.util.spec_from_file_location("stats_vectors", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _cache["module"] = module
    return _cache["module"]


@pytest.fixture(scope="module")
def sv():
    """The worked examples of tests/vectors (fails the test if the file is absent)."""
    return load_vectors()


def printed(expected):
    """pytest.approx to the precision ``expected`` is printed with.

    Integers are exact (to 1e-9); a float matches within half a unit of its
    last printed digit (0.07939 -> ±5e-6, 2.93e-8 -> ±5e-11).
    """
    if isinstance(expected, (tuple, list)):
        return type(expected)(printed(e) for e in expected)
    if isinstance(expected, int):
        return pytest.approx(expected, abs=1e-9, rel=0)
    exponent = Decimal(repr(float(expected))).as_tuple().exponent
    return pytest.approx(expected, abs=0.5 * 10.0**exponent * (1 + 1e-9), rel=0)


def test_vectors_file_is_present_and_complete(sv):
    for name in (
        "JAIN_22",
        "JAIN_23",
        "JAIN_22R3",
        "SLEEP_G1",
        "SLEEP_G2",
        "WELCH",
        "STUDENT",
        "PAIRED",
        "SW_WEIGHTS",
        "PG_CTRL",
        "PG_TRT1",
        "PG_TRT2",
        "ONEWAY",
    ):
        assert hasattr(sv, name), f"stats_vectors.py lacks {name}"


def test_printed_tolerance_follows_the_printed_digits():
    assert 0.079394 == printed(0.07939)
    assert 0.079396 != printed(0.07939)
    assert 2.9277e-8 == printed(2.93e-8)
    assert 2.936e-8 != printed(2.93e-8)
    assert 1600.0 == printed(1600)
    assert not math.isnan(printed(1.5).expected)


def test_a_missing_vectors_file_fails_rather_than_skips(monkeypatch, tmp_path):
    import sys

    module = sys.modules[__name__]
    monkeypatch.setattr(module, "VECTORS", tmp_path / "absent" / "stats_vectors.py")
    monkeypatch.setattr(module, "_cache", {})
    with pytest.raises(pytest.fail.Exception, match="statistics test vectors not found"):
        load_vectors()
