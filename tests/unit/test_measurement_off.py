"""Measurement never off by accident (issue 44): a campaign whose telemetry and guard cannot run
(psutil missing) says so at its start, and the analysis and report never say "0 of N runs flagged
suspect" (or "none flagged") for runs that were never measured; the local backend's unconfined mode
(``enforce_limits: false``, in any spelling) is said at the start and beside the runs."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from labkit.backends.local import LocalBackend, flag_option
from labkit.errors import ConfigError
from labkit.report import analyze_results
from labkit.report.measurement import sections
from labkit.run import telemetry
from tests.unit.test_report_levels import META, split_campaign

NOT_SAMPLED = {
    "collected": True,
    "interval_s": 0.5,
    "samples": 0,
    "sampler_cpu_s": 0.0,
    "host": f"not sampled: {telemetry.PSUTIL_MISSING}",
    "instance_cpu": "cgroups",
}


def unmeasured_runs(t: pd.DataFrame, **extra) -> pd.DataFrame:
    return pd.DataFrame(
        {"run_id": t.run_id, "metadata": [{"telemetry": dict(NOT_SAMPLED), **extra} for _ in t.run_id]}
    )


def test_runs_never_measured_are_not_called_unflagged_in_the_report_or_the_conclusions():
    t = split_campaign()
    a = analyze_results(t, meta=META, runs=unmeasured_runs(t))
    shown = [x for x in dict(sections(a))["Telemetry per run"] if isinstance(x, str)]
    assert "telemetry off: psutil missing: suspect runs unknown." in shown
    assert not any("flagged suspect" in x for x in shown)
    text = str(a.conclusions)
    assert "telemetry off: psutil missing: suspect runs unknown" in text
    assert "none of the 36 runs is flagged" not in text


def test_measured_runs_are_still_counted():
    t = split_campaign()
    runs = pd.DataFrame(
        {
            "run_id": t.run_id,
            "metadata": [{"telemetry": {**NOT_SAMPLED, "host": "sampled", "samples": 4}} for _ in t.run_id],
        }
    )
    a = analyze_results(t, meta=META, runs=runs)
    shown = [x for x in dict(sections(a))["Telemetry per run"] if isinstance(x, str)]
    assert "0 of 36 runs flagged suspect." in shown
    assert "none of the 36 runs is flagged" in str(a.conclusions)
    assert telemetry.measurement_notes(runs) == []


def test_measurement_notes_name_what_was_not_measured_and_not_enforced():
    t = split_campaign()
    notes = telemetry.measurement_notes(unmeasured_runs(t, instances=[{"limits_enforced": False}]))
    assert notes[0] == "telemetry off: psutil missing: suspect runs unknown"
    assert notes[1].startswith("unconfined: 36 of 36 runs ran without enforced limits")


def test_a_campaign_without_psutil_says_so_at_its_start(monkeypatch):
    monkeypatch.setattr(telemetry, "psutil_missing", lambda: True)
    (line,) = telemetry.start_warnings(None)
    assert line.startswith("telemetry off: psutil missing") and "suspect" in line
    monkeypatch.setattr(telemetry, "psutil_missing", lambda: False)
    assert telemetry.start_warnings(None) == []


@pytest.mark.parametrize("text", ["False", "false", "FALSE", "no", "No", "0", "off", 0, False])
def test_enforce_limits_false_is_accepted_in_any_spelling(text):
    assert flag_option("enforce_limits", text) is False
    be = LocalBackend(enforce_limits=text)
    try:
        assert be.enforce is False and be.options["enforce_limits"] is False
    finally:
        be.close()


@pytest.mark.parametrize("text", ["True", "yes", "1", 1, True])
def test_enforce_limits_true_in_any_spelling(text):
    assert flag_option("enforce_limits", text) is True


@pytest.mark.parametrize("bad", ["maybe", "", 2, None, 0.5])
def test_enforce_limits_refuses_other_values_naming_the_spellings(bad):
    with pytest.raises(ConfigError, match="true or false"):
        LocalBackend(enforce_limits=bad)


def test_the_unconfined_mode_is_announced_at_the_start(monkeypatch):
    monkeypatch.setattr(telemetry, "psutil_missing", lambda: False)
    be = LocalBackend(enforce_limits="false")
    try:
        be.driver = None  # as for a user without cgroups: nothing enforces the limits
        (line,) = telemetry.start_warnings(be)
        assert line.startswith("unconfined: the local backend runs with enforce_limits=false")
    finally:
        be.close()


def test_campaign_start_logs_the_warnings(tmp_path, monkeypatch, caplog):
    """The CLI's output: the campaign's logger at WARNING, before any run."""
    from labkit.design import Design
    from labkit.run.campaign import Campaign

    monkeypatch.setattr(telemetry, "psutil_missing", lambda: True)
    design = Design.from_dict({"name": "t", "factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 1})
    camp = Campaign(
        design,
        "local",
        "command",
        workload_params={"argv": ["true"]},
        data_dir=tmp_path,
        campaign_id="measure-off",
        backend_options={"enforce_limits": "false"},
        progress=False,
    )
    with caplog.at_level(logging.WARNING):
        camp.run()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("measure-off: telemetry off: psutil missing" in m for m in said)


def test_runs_the_guard_could_not_judge_are_said_not_counted_as_quiet(tmp_path):
    """A run whose quiet check was not measured (fresh instances: the campaign's CPU not told apart)
    and whose telemetry has no reading of other processes' CPU is neither flagged nor quiet: said,
    in the analysis' notes and by ``labkit show``'s SQL reading alike (the reliability row of
    issue 47 found 3-5 of 8 docker runs beside a busy loop so)."""
    from labkit.store import Store

    t = split_campaign()
    blind = {
        "telemetry": {**NOT_SAMPLED, "host": "sampled", "samples": 4},
        "quiet_check": {"measured": False, "source": "sampler", "reason": "not told apart"},
    }
    judged = {
        "telemetry": {**NOT_SAMPLED, "host": "sampled", "samples": 4, "cpu_other_mean_pct": 2.0},
        "quiet_check": {"measured": False, "source": "sampler", "reason": "not told apart"},
    }
    mds = [blind if i % 3 == 0 else judged for i in range(len(t.run_id))]
    k = sum(1 for i in range(len(t.run_id)) if i % 3 == 0)
    notes = telemetry.measurement_notes(pd.DataFrame({"run_id": t.run_id, "metadata": mds}))
    assert notes == [notes[0]] and notes[0].startswith(
        f"guard blind: {k} of {len(t.run_id)} runs could not be judged"
    )
    a = analyze_results(t, meta=META, runs=pd.DataFrame({"run_id": t.run_id, "metadata": mds}))
    assert f"guard blind: {k} of {len(t.run_id)} runs" in str(a.conclusions)
    # the store's SQL reading (labkit show) finds the same count
    from labkit.design import Design

    design = Design.from_dict({"name": "blind", "factors": {"vcpus": [1, 2]}, "replications": len(mds)})
    with Store.for_campaign(tmp_path, "blind") as st:
        for run, md in zip(design.plan()[: len(mds)], mds):
            st.record_run(run, status="ok", started="2026-11-29T00:00:00+00:00", duration_s=1.0, metadata=md)
        shown = telemetry.measurement_notes(st.measurement_metadata())
    assert shown == notes
