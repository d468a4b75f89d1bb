"""Noisy neighbours for real (study 003 §4.3): start, confirm, main run, stop — on local and docker."""

from __future__ import annotations

import json

import pytest

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.run.noise import neighbours
from labkit.workloads import get_workload

KINDS = ["cpu", "memory", "io", "network"]
SPEC = InstanceSpec(vcpus=1, memory_mb=256)


def _count(inst, tool: str) -> int:
    """Processes named ``tool`` that ``inst`` sees (pgrep inside it)."""
    out = inst.exec(["pgrep", "-c", tool], check=False, timeout=30).stdout.strip()
    return int(out) if out.isdigit() else 0


def _exercise(be, kind, alive_outside):
    """Neighbours run during the block and are gone after it; returns the group's rows."""
    main = be.provision(SPEC, prefix="labkit-test")[0]
    w = get_workload("sysbench", test="cpu", time_s=1)
    try:
        with neighbours(be, SPEC, kind, count=1, prefix="labkit-test-noise") as group:
            assert len(group) == 1 and len(group.instances) == 1
            nb, row = group.instances[0], group[0]
            assert row["kind"] == kind and row["tool_version"]
            tool = "iperf3" if kind == "network" else "stress-ng"
            # confirmed before the main run, and still running during it
            assert row["workers"] >= 2 and _count(nb, tool) >= 2
            rows = w.run(main, w.params_for({}, 1))
            assert rows[0].metric == "events_per_s" and rows[0].instance == 0
            assert _count(nb, tool) >= 2
        assert nb._destroyed
        assert not alive_outside(nb)
        return list(group)
    finally:
        teardown([main])


@pytest.mark.root
@pytest.mark.parametrize("kind", KINDS)
def test_local_neighbours(kind):
    be = get_backend("local")
    rows = _exercise(be, kind, lambda nb: nb.name in be.list_labkit(nb.name))  # cgroup gone = processes gone
    assert rows[0]["backend"] == "local" and json.dumps(rows)  # JSON-ready for run metadata


@pytest.mark.root
def test_local_none_and_failure_paths():
    be = get_backend("local")
    with neighbours(be, SPEC, "none") as group:
        assert group == []
    made = []
    with pytest.raises(RuntimeError):
        with neighbours(be, SPEC, "cpu", prefix="labkit-test-noise") as group:
            made = list(group.instances)
            raise RuntimeError("main run failed")
    assert made and made[0].name not in be.list_labkit(made[0].name)


@pytest.mark.root
def test_campaign_with_a_noise_factor(tmp_path):
    from labkit.run.campaign import Campaign
    from labkit.store import load_results

    design = {"factors": {"noise": ["none", "cpu"]}, "replications": 1, "seed": 3, "name": "noise"}
    Campaign(
        design,
        backend="local",
        workload="sysbench",
        workload_params={"test": "cpu", "time_s": 1},
        campaign_id="noise-test",
        data_dir=tmp_path,
        defaults=SPEC,
        progress=False,
    ).run()
    tidy = load_results(tmp_path, "noise-test")
    assert set(tidy.status) == {"ok"}, tidy.error.dropna().tolist()
    assert set(tidy.noise) == {"none", "cpu"}
    assert set(tidy.instance_index) == {0}  # only the main instance's result is stored
    runs = tidy.drop_duplicates("run_id")
    assert len(runs) == 2


@pytest.mark.docker
@pytest.mark.parametrize("kind", KINDS)
def test_docker_neighbours(kind):
    be = get_backend("docker")
    try:

        def alive(nb):
            return nb.name in be.list_labkit()

        _exercise(be, kind, alive)
    finally:
        be.close()
