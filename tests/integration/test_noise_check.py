"""labkit noise-check on the real local backend (root + cgroups: marker ``root``): a short A/A
campaign of N-queens (board 12, a few seconds) into a temporary data dir that is removed, its noise
table and the minimum detectable effects of a design (labkit.run.noisecheck)."""

from __future__ import annotations

import numpy as np
import pytest

from labkit.cli import main
from labkit.run.noisecheck import noise_check
from labkit.stats import detectable_effect

pytestmark = pytest.mark.root

DESIGN = {
    "name": "target",
    "factors": {"vcpus": [1, 2], "affinity": ["floating", "pinned"]},
    "replications": 3,
    "seed": 1,
}


def test_noise_check_measures_the_local_host(tmp_path):
    result = noise_check(backend="local", runs=6, board=12, design=DESIGN, data_dir=tmp_path, seed=5)
    noise = result.noise
    assert len(noise) == 1
    row = noise.iloc[0]
    assert (row["platform"], row["host"], row["n"]) == ("local", "local", 6)
    assert row["mean"] > 0 and 0 < row["cv_low"] <= row["cv"] <= row["cv_high"]
    assert 0 <= row["aa_p"] <= 1 and np.isfinite(row["aa_diff_pct"])
    assert row["median_low"] <= row["median"] <= row["median_high"]
    mde = result.mde.set_index("factor")
    assert list(mde.index) == ["vcpus", "affinity"]
    # 12 runs, 4 configurations: 6 runs per level, 8 error df
    assert (mde["runs_per_level"] == 6).all() and (mde["df"] == 8).all()
    assert mde.loc["vcpus", "mde_pct"] == pytest.approx(100 * detectable_effect(row["cv"], n=6, df=8))
    assert (tmp_path / result.campaign / "store.sqlite").exists()  # a named data dir is kept
    text = result.text()
    assert "local on local: 6 runs" in text and "vcpus (2 levels, 6 runs per level, df 8)" in text


def test_cli_noise_check_uses_a_temporary_data_dir(tmp_path, capsys, monkeypatch):
    made = []
    import tempfile

    real = tempfile.mkdtemp

    def spy(*a, **k):
        made.append(real(*a, dir=tmp_path, **{x: y for x, y in k.items() if x != "dir"}))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", spy)
    assert main(["noise-check", "--backend", "local", "--runs", "4", "--board", "11"]) == 0
    out = capsys.readouterr().out
    assert "noise check noisecheck-" in out and "local on local: 4 runs" in out and "CV " in out
    assert made and not any(__import__("os").path.exists(p) for p in made)  # removed afterwards
