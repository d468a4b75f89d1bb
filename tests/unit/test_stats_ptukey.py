"""The vectorized studentized range distribution (labkit.stats._ptukey) against SciPy's
``scipy.stats.studentized_range`` (the reference implementation Games-Howell used before),
and a published table value: the upper 5 % point of the studentized range for k = 3 means
and 10 degrees of freedom, q(0.05; 3, 10) = 3.877 (H. L. Harter (1960), "Tables of range and
studentized range", Annals of Mathematical Statistics 31, reproduced in the appendix tables
of design-of-experiments textbooks)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from labkit.stats import _ptukey


@pytest.mark.parametrize("k", [2, 3, 8, 20])
def test_sf_and_ppf_match_scipy(k):
    df = np.array([2.5, 4.0, 7.3, 15.0, 40.0, 120.0, 800.0])
    q = np.array([3.0, 4.5, 5.0, 2.0, 6.0, 4.3, 4.0])
    ours = _ptukey.sf(q, k, df)
    ref = np.array([sps.studentized_range.sf(x, k, d) for x, d in zip(q, df)])
    assert np.abs(ours - ref).max() < 1e-8
    ours = _ptukey.ppf(0.95, k, df)
    ref = np.array([sps.studentized_range.ppf(0.95, k, d) for d in df])
    assert np.abs(ours - ref).max() < 1e-6


def test_published_quantile_and_chunking():
    assert _ptukey.ppf(0.95, 3, [10.0])[0] == pytest.approx(3.877, abs=5e-4)
    many = np.full(300, 12.0)  # more pairs than one chunk
    assert np.allclose(_ptukey.ppf(0.95, 4, many), _ptukey.ppf(0.95, 4, [12.0])[0])
