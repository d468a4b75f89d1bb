"""Issue 45, item 5: what the report and the explorer show stays bounded at scale. Per-run tables
are capped with "first N of M" and the export named; a failed analysis is kept, so that the
explorer's widgets do not run it again on every change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.report.tables import PER_RUN_ROWS, capped

REPO = Path(__file__).resolve().parents[2]


def test_a_per_run_table_longer_than_the_cap_is_cut_and_says_so():
    runs = pd.DataFrame({"run_id": [f"r{i:05d}" for i in range(10_000)], "x": range(10_000)})
    head, note = capped(runs)
    assert len(head) == PER_RUN_ROWS and list(head.run_id[:2]) == ["r00000", "r00001"]
    assert note.startswith(f"First {PER_RUN_ROWS} of 10000 runs shown; all 10000 are in the export")
    [whole] = capped(runs.head(PER_RUN_ROWS))  # at the cap: the table whole, no sentence
    assert len(whole) == PER_RUN_ROWS


def test_the_explorer_keeps_a_failed_analysis(tmp_path, monkeypatch):
    from labkit.report import analysis
    from labkit.report.explore import Explorer

    shutil.copytree(REPO / "data" / "affinity-local", tmp_path / "affinity-local")
    ex = Explorer(tmp_path)
    calls = []

    def failing(*a, **k):
        calls.append(a)
        raise ConfigError("this analysis cannot be made (test)")

    monkeypatch.setattr(analysis, "analyze", failing)
    for _ in range(3):  # three widget changes asking for the same analysis
        with pytest.raises(ConfigError, match="cannot be made"):
            ex.analysis("affinity-local")
    assert len(calls) == 1
