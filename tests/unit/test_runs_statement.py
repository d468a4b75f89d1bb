"""The runs statement every seed notebook shows before its claims (labkit.studies.verdicts):
runs per configuration against the 5-run minimum, and how many configurations' means reach the
replication target (95 % CI within +-5 % of the mean), with the widest interval obtained.

Reference: R 4.2 (Debian 12's r-base, Rscript), ``t.test(x)$conf.int``:
c(10, 11, 12, 13, 14): 10.03675684 .. 13.96324316, a half-width of 1.963243 around 12: +-16.36 %;
c(100, 101, 102, 101, 100, 102): 100.0613562 .. 101.9386438, 0.9386438 around 101: +-0.929 %;
c(10, 11, 12): 8.515862288 .. 13.484137712, +-22.58 %; c(100, 101): 94.14689763 .. 106.85310237, +-6.32 %.
"""

import contextlib
import sqlite3

from labkit.design import Design
from labkit.store import Store
from labkit.studies.verdicts import runs_statement
from labkit.workloads import Measurement

WIDE = [10.0, 11.0, 12.0, 13.0, 14.0]
NARROW = [100.0, 101.0, 102.0, 101.0, 100.0, 102.0]


def _campaign(data, cid, per_config, *, status_of=lambda cfg, rep: "ok"):
    """A stored campaign of one factor with two levels; ``per_config[c]``: its runs' values."""
    design = Design.from_dict(
        {"factors": {"vcpus": [1, 2]}, "replications": max(map(len, per_config)), "seed": 1}
    )
    (data / cid).mkdir(parents=True)
    with Store(data / cid / "store.sqlite") as st:
        st.set_meta(
            campaign_id=cid,
            design=design.to_dict(),
            workload={"name": "command", "params": {}, "response": "rate"},
        )
        for run in design.plan():
            values = per_config[run.config]
            if run.replicate > len(values):
                continue
            st.record_run(
                run,
                status=status_of(run.config, run.replicate),
                started="2026-01-01T00:00:00",
                duration_s=1.0,
                measurements=[
                    # two instances: the run's value is their mean
                    Measurement("rate", values[run.replicate - 1] - 1, "1/s", instance=0),
                    Measurement("rate", values[run.replicate - 1] + 1, "1/s", instance=1),
                    Measurement("other", 1e9, "1/s", instance=0),
                ],
            )


def test_enough_runs_and_the_target_reached_in_one_configuration_of_two(tmp_path):
    _campaign(tmp_path, "c", [WIDE, NARROW])
    s = runs_statement(tmp_path, ["c"])
    assert s.startswith("Runs per configuration: 5 to 6 (at least 5).")
    assert "for 1 of 2 configurations" in s
    assert "widest ±16.4 %" in s


def test_too_few_runs_say_so_and_why(tmp_path):
    _campaign(tmp_path, "c", [WIDE[:3], NARROW[:2]])
    s = runs_statement(tmp_path, ["c"])
    assert s.startswith("Runs per configuration: 2 to 3, fewer than 5:")
    # why: 2 + 3 runs missing, at the stored median duration_s of 1 s a run
    assert "not re-run with the others" in s
    assert "the 5 runs still missing would take about 5 s at their median of 1 s a run" in s
    # R (module docstring): +-22.58 % and +-6.32 %
    assert "No configuration's mean is within ±5 % at 95 %" in s and "widest ±22.6 %" in s


def test_the_target_everywhere_and_failed_runs_left_out(tmp_path):
    # the failed runs' values would widen the first configuration's interval if they counted
    _campaign(
        tmp_path, "c", [NARROW + [500.0], NARROW], status_of=lambda cfg, rep: "failed" if rep == 7 else "ok"
    )
    s = runs_statement(tmp_path, ["c"])
    assert s.startswith("Runs per configuration: 6 (at least 5).")
    assert "Every configuration's mean is within ±5 % at 95 % (the target; widest ±0.929 %)." in s


def test_no_campaign_stored(tmp_path):
    assert runs_statement(tmp_path, ["missing"]) == "No successful run is stored for these campaigns."


def test_the_time_the_missing_runs_would_take_is_the_median_run_times_the_runs_missing(tmp_path):
    _campaign(tmp_path, "c", [WIDE[:2], NARROW[:4]])
    with contextlib.closing(sqlite3.connect(tmp_path / "c" / "store.sqlite")) as db, db:
        ids = [r for (r,) in db.execute("SELECT run_id FROM runs ORDER BY run_id")]
        for i, run_id in enumerate(ids):  # runs of 100, 200, 300, 400, 500 and 600 s
            db.execute("UPDATE runs SET duration_s = ? WHERE run_id = ?", (100.0 * (i + 1), run_id))
    s = runs_statement(tmp_path, ["c"])
    # missing: 3 + 1 = 4 runs; median of 100..600 s = 350 s = 5.8 min; 4 x 350 s = 1400 s = 23 min
    assert "the 4 runs still missing would take about 23 min at their median of 5.8 min a run" in s
