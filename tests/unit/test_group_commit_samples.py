"""Group commit's telemetry (issue 45): the samples of every run a batch stores are written with one
statement, those of a run not stored (claim lost, stored already) not at all, and a row the table
could not hold (NaN) refused when the run is queued, so that the batch's one statement cannot fail."""

from __future__ import annotations

import math
import sqlite3

import pytest

from labkit.design import Design
from labkit.errors import StoreError
from labkit.store import Store
from labkit.store.group import GroupCommit
from labkit.store.samples import INSERT_SAMPLES
from labkit.workloads import Measurement


def _plan(n: int):
    design = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": (n + 1) // 2, "seed": 3})
    return design.plan()[:n]


def _samples(order: int) -> list[tuple]:
    """A run's own telemetry: 30 host rows and 2 rows of an instance, values naming the run."""
    rows: list[tuple] = [
        (float(t), f"m{j}", float(1000 * order + 10 * t + j)) for t in range(10) for j in range(3)
    ]
    return rows + [
        (0.5, "instance_cpu_pct", float(order), f"i{order}"),
        (1.5, "instance_cpu_pct", 2.0 * order, f"i{order}"),
    ]


def _result(run, **kw):
    return (
        dict(
            status="ok",
            started="2026-01-01T00:00:00+00:00",
            duration_s=1.0,
            measurements=[Measurement("wall_time_s", 1.0 + run.order, "s")],
            metadata={"host": "h"},
            samples=_samples(run.order),
        )
        | kw
    )


class CountingConnection:
    """The store's connection, counting the statements that write telemetry."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.sample_statements = 0

    def executemany(self, sql, rows):
        if sql == INSERT_SAMPLES:
            self.sample_statements += 1
        return self.db.executemany(sql, rows)

    def __getattr__(self, name):
        return getattr(self.db, name)


def _stored_rows(st: Store, run_id: str) -> list[tuple]:
    return sorted(
        (t, m, v, i if isinstance(i, str) else None)  # (pandas shows a host row's None as NaN)
        for _, t, m, v, i in st.samples(run_id).itertuples(index=False)
    )


def _expected(order: int) -> list[tuple]:
    return sorted((*r, None) if len(r) == 3 else r for r in _samples(order))


def test_a_batch_writes_the_telemetry_of_the_runs_it_stores_with_one_statement(tmp_path):
    st = Store.for_campaign(tmp_path, "g")
    runs = _plan(6)
    dup = runs[2]
    st.record_run(dup, **_result(dup))  # stored already: fails alone in the batch
    counting = CountingConnection(st._db)
    st._db = counting  # type: ignore[assignment]
    gc = GroupCommit(st, max_runs=64, max_wait_s=60)
    for r in runs:
        gc.add(r, **_result(r))
    with pytest.raises(StoreError, match=f"run {dup.run_id} could not be stored"):
        gc.flush()
    assert counting.sample_statements == 1 and gc.transactions == 1
    for r in runs:
        assert _stored_rows(st, r.run_id) == _expected(r.order), r.run_id  # its own rows, whole, once
    assert len(st.samples()) == 6 * len(_samples(0))


def test_with_an_owner_a_run_whose_claim_is_lost_leaves_no_telemetry(tmp_path):
    st = Store.for_campaign(tmp_path, "g")
    a, b = _plan(2)
    assert st.claim([a.run_id], "h", "me", 60) == a.run_id
    assert st.claim([b.run_id], "h", "other", 60) == b.run_id
    with GroupCommit(st, max_runs=64, max_wait_s=60, owner="me") as gc:
        gc.add(a, **_result(a))
        gc.add(b, **_result(b))
    assert st.completed() == {a.run_id}
    assert _stored_rows(st, a.run_id) == _expected(a.order) and st.sample_count(b.run_id) == 0


@pytest.mark.parametrize(
    "row",
    [
        (0.0, "cpu_pct", math.nan),
        (math.nan, "cpu_pct", 1.0),
        (0.0, "cpu_pct", float("nan"), "i1"),
        ("nan", "cpu_pct", 1.0),
    ],
)
def test_a_nan_time_or_value_is_refused_when_the_run_is_queued(tmp_path, row):
    st = Store.for_campaign(tmp_path, "g")
    a, b = _plan(2)
    gc = GroupCommit(st, max_runs=64, max_wait_s=60)
    with pytest.raises(StoreError, match=r"sample row 1 .*not NaN"):
        gc.add(a, **_result(a, samples=[(0.0, "cpu_pct", 1.0), row]))
    assert gc.pending() == 0
    gc.add(b, **_result(b))  # the next run's batch is not harmed
    assert gc.flush() == [b.run_id] and st.completed() == {b.run_id}
    with pytest.raises(StoreError, match="sample row 0"):
        st.record_samples(b.run_id, [row])
    assert st.sample_count(b.run_id) == len(_samples(b.order))


def test_a_telemetry_statement_refused_writes_none_of_the_batch_and_reports_none_done(tmp_path):
    """Should the table refuse a row all the same (here a trigger standing in for a constraint), the
    batch's transaction rolls back whole: no run stored, none reported done, every claim kept."""
    st = Store.for_campaign(tmp_path, "g")
    a, b = _plan(2)
    for r in (a, b):
        assert st.claim([r.run_id], "h", "me", 60) == r.run_id
    st._db.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON samples WHEN NEW.metric = 'refused' "
        "BEGIN SELECT RAISE(ABORT, 'refused row'); END"
    )
    done: list[str] = []
    gc = GroupCommit(st, max_runs=64, max_wait_s=60, owner="me", on_done=done.append)
    gc.add(a, **_result(a))
    gc.add(b, **_result(b, samples=[(0.0, "refused", 1.0)]))
    with pytest.raises(StoreError, match=r"telemetry rows refused .*refused row.*2 run\(s\) not stored"):
        gc.flush()
    assert done == [] and st.completed() == set() and len(st.samples()) == 0
    assert sorted(cl["run_id"] for cl in st.claims()) == sorted([a.run_id, b.run_id])
