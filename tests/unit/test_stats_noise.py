"""The noise check's statistics: the minimum detectable effect of a design and the coefficient of
variation's interval (labkit.stats.detectable_effect, labkit.stats.cv_ci).

Reference values: tests/vectors/noise_results.csv, made by tests/vectors/noise_vectors.R with
R 4.2.2 (power.t.test; the noncentral t with a factorial's error df; Vangel's 1996 modified
McKay interval). The simulation oracle checks the CV interval's coverage on normal data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from labkit.errors import ConfigError
from labkit.stats import cv_ci, detectable_effect

REF = pd.read_csv(Path(__file__).resolve().parents[1] / "vectors" / "noise_results.csv")


@pytest.mark.parametrize("row", REF[REF.kind != "cv_modmckay"].to_dict("records"))
def test_detectable_effect_equals_r(row):
    df = None if row["kind"] == "power.t.test" else row["df"]
    assert detectable_effect(1.0, n=int(row["n"]), df=df) == pytest.approx(row["value"], rel=1e-6)
    # in the unit of the sd
    assert detectable_effect(2.5, n=int(row["n"]), df=df) == pytest.approx(2.5 * row["value"], rel=1e-6)


@pytest.mark.parametrize("alpha", [0.05, 0.10])
def test_cv_interval_equals_vangels_modified_mckay(alpha):
    ref = REF[(REF.kind == "cv_modmckay") & (REF.alpha == alpha)].set_index("what")["value"]
    x = [float(v) for v in REF[REF.kind == "cv_modmckay"]["x"].iloc[0].split()]
    got = cv_ci(x, confidence=1 - alpha).iloc[0]
    assert (got["cv"], got["cv_low"], got["cv_high"]) == pytest.approx(
        (ref["cv"], ref["cv_low"], ref["cv_high"]), rel=1e-9
    )


def test_cv_interval_covers_at_about_the_nominal_rate():
    """Normal data, CV 5 %, n = 10: Vangel's interval is near exact (his table 2)."""
    rng = np.random.default_rng(17)
    n = 3000
    hits = sum(
        row["cv_low"] <= 0.05 <= row["cv_high"]
        for row in (cv_ci(rng.normal(100, 5, size=10)).iloc[0] for _ in range(n))
    )
    assert sps.binom.ppf(0.001, n, 0.95) <= hits <= sps.binom.ppf(0.999, n, 0.95), hits


def test_bad_arguments():
    with pytest.raises(ConfigError, match="at least 2"):
        detectable_effect(1.0, n=1)
    with pytest.raises(ConfigError, match="sd"):
        detectable_effect(0.0, n=5)
    with pytest.raises(ConfigError, match="power"):
        detectable_effect(1.0, n=5, power=0.01)
    with pytest.raises(ConfigError, match="positive mean"):
        cv_ci([-1.0, -2.0])
    with pytest.raises(ConfigError, match="at least 2 values"):
        cv_ci([1.0])
