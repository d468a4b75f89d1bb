"""``labkit replicate``: a small campaign run on ``local`` is replicated on ``docker`` (the default
image, labkit/debian:12, as test_workloads_docker.py uses it) through the command line; the verdict
table has its columns and a verdict for every configuration, the replica ran the original's design,
and nothing is left behind."""

from __future__ import annotations

import secrets

import pytest

from labkit.backends import get_backend
from labkit.cli import main
from labkit.core.ids import campaign_prefix
from labkit.report.replication import REPRODUCTION, TABLE_COLUMNS, replication_report
from labkit.run.campaign import Campaign
from labkit.store import Store

pytestmark = [pytest.mark.docker, pytest.mark.root]

VERDICTS = {*REPRODUCTION.values(), "not measured", "not testable"}


def test_local_campaign_replicated_on_docker(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "registry"))  # other campaigns unseen
    token = secrets.token_hex(2)
    original, replica = f"rep-{token}", f"rep-{token}-docker"
    design = {"name": "replicate-test", "factors": {"vcpus": [1, 2]}, "replications": 4, "seed": 11}
    Campaign(
        design,
        backend="local",
        workload="command",
        workload_params={"argv": ["sleep", "0.05"]},
        campaign_id=original,
        data_dir=tmp_path,
        progress=False,
        run_timeout=300,
    ).run()

    be = get_backend("docker")
    try:
        assert (
            main(
                [
                    "replicate",
                    original,
                    "--backend",
                    "docker",
                    "--campaign-id",
                    replica,
                    "--data-dir",
                    str(tmp_path),
                    "--margin",
                    "0.1",
                    "--timeout",
                    "300",
                ]
            )
            == 0
        )
        assert be.list_labkit(campaign_prefix(replica)) == []  # every container removed
    finally:
        be.close()
    out = capsys.readouterr().out
    assert "verdict" in out and "ratio_low" in out and f"replica stored as {replica}" in out
    assert "backend.backend" in out  # the host facts that differ: local vs docker at least

    with Store.for_campaign(tmp_path, replica, readonly=True) as st:
        meta, runs = st.meta(), st.runs()
    assert meta["backend"] == "docker" and meta["design"]["factors"] == {"vcpus": [1, 2]}
    assert meta["workload"]["params"]["argv"] == ["sleep", "0.05"]
    assert meta["replica_of"]["campaign"] == original and meta["replica_of"]["backend"] == "local"
    assert len(runs) == 8 and set(runs.status) == {"ok"}, runs[["status", "error"]].to_dict("records")

    result = replication_report(tmp_path, original, replica, margin=0.1)
    t = result.table
    assert list(t.columns) == ["vcpus", *TABLE_COLUMNS]
    assert sorted(t.vcpus) == [1, 2] and set(t.n_original) == {4} and set(t.n_replica) == {4}
    assert set(t.verdict) <= VERDICTS and t.verdict.ne("").all()
    assert (t.ratio > 0).all() and (t.ratio_low <= t.ratio).all() and (t.ratio <= t.ratio_high).all()
    assert result.response == "wall_time_s" and result.margin == 0.1
    assert "the backends differ: local vs docker" in result.notes[-1]
    assert list(result.effects.term) == ["vcpus"] and result.effects.status.iloc[0]
    assert "differs" in set(result.hosts.kind)
    assert "configurations" in result.text() or "configuration" in result.text()
