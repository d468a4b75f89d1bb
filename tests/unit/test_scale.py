"""Issue 45 at reduced size: what keeps a campaign of 100,000 runs and 20 M telemetry rows
interactive, correct and bounded in memory. Each test counts work or memory, never time."""

from __future__ import annotations

import json
import math
import sqlite3
import tracemalloc

import numpy as np
import pandas as pd
import pytest

import labkit.stats.drift as drift
import labkit.store.export as store_mod
from labkit.backends.base import name_token, new_name
from labkit.design import Design
from labkit.report.level_analysis import level_design, observations, with_levels
from labkit.stats.compare import pettitt
from labkit.store import Store, now_iso
from labkit.workloads.base import Measurement

DESIGN = Design.from_dict(
    {
        "name": "scale",
        "factors": {"vcpus": [1, 2], "affinity": ["pinned", "floating"]},
        "replications": 4,
        "seed": 3,
    }
)


def fill(st: Store, runs, *, samples: int = 0, name=lambda r: f"labkit-c--{r.order:013d}", boot_group=None):
    rows = [(float(t), f"m{t % 20}", float(t)) for t in range(samples)]
    for r in runs:
        st.record_run(
            r,
            status="ok",
            started=now_iso(),
            duration_s=1.0,
            measurements=[Measurement("wall_time_s", 1.0 + r.levels["vcpus"] + 0.01 * r.order, "s")],
            metadata={
                "host": "h1",
                "run_seq": r.order + 1,
                "boot_group": boot_group(r) if boot_group else r.boot_group,
                "instances": [{"name": name(r), "index": 0, "boot": 1}],
            },
            samples=rows,
        )


# -- 1: no quadratic step in the drift check ----------------------------------------------------------
def _elements_tested(monkeypatch, n: int) -> int:
    """Values handed to the change-point test over one change_points call on a trend of ``n``."""
    seen = [0]
    real = drift._test

    def counting(x, **kw):
        seen[0] += len(x)
        return real(x, **kw)

    monkeypatch.setattr(drift, "_test", counting)
    x = np.arange(n) + np.random.default_rng(0).normal(size=n) * 50  # a trend: change points grow with n
    drift.change_points(x)
    return seen[0]


def test_change_points_work_grows_about_linearly_on_a_trend(monkeypatch):
    """Refinement re-tested every stretch on every pass, up to 10k + 10 passes with k ~ n/70
    change points: at 16,000 values it handed 4,854 x n values to the test (33 s); each stretch
    is now tested once. Work per value may grow like log n, not like n."""
    small, large = 4000, 16000
    per_small = _elements_tested(monkeypatch, small) / small
    per_large = _elements_tested(monkeypatch, large) / large
    assert per_large < 3 * per_small, (per_small, per_large)
    assert per_large < 200


def test_pettitt_memory_is_linear():
    """The sign matrix of 3,000 values was 72 MB (74.5 GiB at 100,000); O(n) now."""
    x = np.random.default_rng(1).normal(size=3000)
    x[1500:] += 1.0
    tracemalloc.start()
    try:
        pettitt(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak


# -- 2: instance ids unique per campaign, and keyed by boot -----------------------------------------------
def test_instance_names_carry_64_bits_and_100000_are_unique():
    token = name_token()
    assert set(token) <= set("abcdefghijklmnopqrstuvwxyz234567") and len(token) * 5 >= 64
    prefix = "labkit-" + "c" * 41 + "--"  # the longest campaign id a 63-character name holds
    names = [new_name(prefix) for _ in range(100_000)]
    assert len(set(names)) == 100_000 and max(map(len, names)) <= 63
    bits = len(names[0]) - len(prefix)
    # the chance of any repeat among 100,000 names of these bits (birthday bound): negligible
    assert 100_000**2 / 2 ** (5 * bits + 1) < 1e-9


def test_a_name_drawn_by_two_boots_never_joins_them(tmp_path):
    """Two boots whose instances drew the same name: before, tidy showed one instance running
    both runs and the level analysis treated them as sharing it (ConfigError at 100k runs)."""
    plan = DESIGN.plan()
    with Store(tmp_path / "s.sqlite") as st:
        st.set_meta(campaign_id="c", design=DESIGN.to_dict())
        fill(st, plan, name=lambda r: "labkit-c--same" if r.order < 2 else f"labkit-c--{r.order:013d}")
        tidy = st.tidy()
    first, second = (tidy.loc[tidy.run_id == plan[i].run_id, "instance"].item() for i in (0, 1))
    assert first != second and {first, second} == {
        f"labkit-c--same@{plan[0].boot_group}",
        f"labkit-c--same@{plan[1].boot_group}",
    }
    obs, _ = observations(with_levels(tidy), "wall_time_s", ["vcpus", "affinity"])
    assert level_design(obs, ["vcpus", "affinity"]).runs_per_instance == 1
    assert tidy.instance.nunique() == len(plan)


def test_the_runs_of_one_boot_still_share_their_instance(tmp_path):
    plan = DESIGN.plan()[:4]
    with Store(tmp_path / "s.sqlite") as st:
        fill(st, plan, name=lambda r: "labkit-c--shared", boot_group=lambda r: "c0000b001")
        tidy = st.tidy()
    assert set(tidy.instance) == {"labkit-c--shared"}


# -- 3: the store opens in O(1), counts by SQL, metadata parsed only where asked ------------------------------
def _traced(monkeypatch) -> list[str]:
    statements: list[str] = []
    real = sqlite3.connect

    def connect(*a, **kw):
        db = real(*a, **kw)
        db.set_trace_callback(statements.append)
        return db

    monkeypatch.setattr(sqlite3, "connect", connect)
    return statements


def test_a_read_only_open_reads_no_page_of_the_store(tmp_path, monkeypatch):
    with Store(tmp_path / "s.sqlite") as st:
        fill(st, DESIGN.plan())
    statements = _traced(monkeypatch)
    with Store(tmp_path / "s.sqlite", readonly=True) as st:
        st.meta()
    assert statements and not [s for s in statements if "check" in s.lower()], statements


def test_list_and_show_count_by_sql_without_parsing_runs(tmp_path, monkeypatch, capsys):
    from labkit.cli import main

    with Store.for_campaign(tmp_path, "c") as st:
        st.set_meta(campaign_id="c", design=DESIGN.to_dict(), workload={"name": "w"})
        fill(st, DESIGN.plan())
    capsys.readouterr()
    monkeypatch.setattr(Store, "runs", lambda self: pytest.fail("runs() parses every run's metadata"))
    monkeypatch.setattr(Store, "tidy", lambda self: pytest.fail("tidy() reads every row"))
    assert main(["list", "--data-dir", str(tmp_path)]) == 0
    assert main(["show", "c", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "runs       16: 16 ok" in out and " 16 " in out.splitlines()[1]


def test_tidy_parses_each_configuration_once_not_each_run(tmp_path, monkeypatch):
    with Store(tmp_path / "s.sqlite") as st:
        fill(st, DESIGN.plan())
        before = st.tidy()
    calls = [0]
    real = json.loads

    def loads(text, *a, **kw):
        calls[0] += 1
        return real(text, *a, **kw)

    monkeypatch.setattr(store_mod.json, "loads", loads)
    with Store(tmp_path / "s.sqlite", readonly=True) as st:
        tidy = st.tidy()
    pd.testing.assert_frame_equal(tidy, before)
    # the meta rows, one levels text per configuration (4), one instances list per run (16): never a
    # run's whole metadata; before: the levels and metadata of every run (32) and the meta rows
    assert calls[0] <= 4 + 4 + len(DESIGN.plan()), calls[0]


# -- 4: streaming export ------------------------------------------------------------------------------------
def test_export_is_bounded_in_memory_and_writes_samples_parquet(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "EXPORT_CHUNK", 5_000)
    plan = Design.from_dict(
        {"name": "big", "factors": {"vcpus": [1, 2]}, "replications": 100, "seed": 1}
    ).plan()
    with Store(tmp_path / "c" / "store.sqlite") as st:
        st.set_meta(campaign_id="c", design={"factors": {"vcpus": [1, 2]}})
        fill(st, plan, samples=2_000)  # 400,000 telemetry rows
    with Store(tmp_path / "c" / "store.sqlite", readonly=True) as st:
        n = st._db.execute("SELECT count(*) FROM samples").fetchone()[0]
        tracemalloc.start()
        try:
            st.export(tmp_path / "out", formats=("csv", "parquet"))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert n == 400_000
    # all the samples as a DataFrame of Python objects take > 60 MB; chunks of 5,000 rows a few MB
    assert peak < 25 * 2**20, peak / 2**20
    assert pd.read_parquet(tmp_path / "out" / "samples.parquet").shape == (400_000, 5)
    assert len(pd.read_csv(tmp_path / "out" / "samples.csv")) == 400_000
    assert len(pd.read_parquet(tmp_path / "out" / "results.parquet")) == len(plan)
    only_parquet = tmp_path / "pq"
    with Store(tmp_path / "c" / "store.sqlite", readonly=True) as st:
        st.export(only_parquet, formats=("parquet",))
    assert (only_parquet / "samples.parquet").is_file() and not (only_parquet / "samples.csv").exists()


# -- 1: resource errors on the command line -----------------------------------------------------------------
def test_memory_error_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    from labkit import cli

    def boom(args):
        raise MemoryError()

    monkeypatch.setattr(cli, "cmd_list", boom)
    parser = cli.parser
    monkeypatch.setattr(cli, "parser", lambda: _with_func(parser(), "list", boom))
    assert cli.main(["list", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "out of memory" in err and "Traceback" not in err


def _with_func(p, command, func):
    for action in p._subparsers._group_actions:
        if command in action.choices:
            action.choices[command].set_defaults(func=func)
    return p


def test_growth_numbers_of_the_birthday_bound_used_above():
    # 32 bits at 100,000 names: the 69 % of the issue; 65 bits: about 1.4e-10
    assert math.isclose(1 - math.exp(-1e10 / 2**33), 0.69, abs_tol=0.01)
    assert 1 - math.exp(-1e10 / 2**66) < 2e-10
