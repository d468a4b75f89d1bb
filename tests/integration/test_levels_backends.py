"""Issue 32 (c) and (d): ``runs_per_instance`` on every backend, and each backend's own per-instance
counters in the samples table.

One small campaign per backend (2 configurations x 2 replicates, 2 runs per boot: 4 runs on 2
boots), each run burning a CPU for about a second in its instance with telemetry every 0.25 s:
fewer boots (distinct instances) than runs, each instance's runs back to back, and rows of the
instance's own counters keyed by its id, from the Docker stats API, LXD's instance state, libvirt's
domain stats (and the guest's /proc/stat through its agent), the remote cgroup over SSH, the node's
cgroup through one long-lived job step on a Slurm allocation, and the local cgroup (the local
backend: tests/integration/test_levels_local.py).
"""

from __future__ import annotations

import secrets

import pytest

from labkit.core.ids import campaign_prefix
from labkit.core.waiting import wait_until
from labkit.run.campaign import Campaign
from tests.integration.test_fleet import TESTBED, _leftovers, fleet_hosts  # noqa: F401 (a fixture)

BURN = ["sh", "-c", "timeout 1 sh -c 'while :; do :; done'; true"]


def burn(seconds: int) -> list[str]:
    return ["sh", "-c", f"timeout {seconds} sh -c 'while :; do :; done'; true"]


def reuse(tmp_path, backend: str, monkeypatch, testbed=None, argv=None):
    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "registry"))  # other campaigns unseen
    design = {
        "name": f"reuse-{backend}",
        "factors": {"affinity": ["floating", "pinned"]},
        "replications": 2,
        "seed": 9,
        "runs_per_instance": 2,
    }
    return Campaign(
        design,
        backend=backend,
        workload="command",
        workload_params={"argv": argv or BURN},
        campaign_id=f"reuse-{backend}-{secrets.token_hex(2)}",
        data_dir=tmp_path,
        telemetry=0.25,
        progress=False,
        run_timeout=900,
        testbed=testbed,
    ).run()


def check(st, metrics: set[str], stats: str) -> None:
    runs, tidy, samples = st.runs(), st.tidy(), st.samples()
    assert len(runs) == 4 and set(runs.status) == {"ok"}, runs[["status", "error"]].to_dict("records")
    rows = tidy[tidy.metric.notna()]
    assert rows.instance.nunique() == 2 < len(runs)  # fewer boots than runs
    assert set(rows.groupby("instance").run_id.nunique()) == {2} and set(rows.boot) == {1}
    for _, group in runs.groupby(runs.metadata.map(lambda m: m["instances"][0]["name"])):
        assert group.affinity.nunique() == 1
        assert sorted(group.run_seq) == [min(group.run_seq), min(group.run_seq) + 1]  # back to back
    assert sorted(runs.run_seq) == [1, 2, 3, 4]
    mine = samples[samples.instance.notna()]
    assert set(mine.instance) == set(rows.instance)
    for name, got in mine.groupby("instance"):
        assert metrics <= set(got.metric), f"{name}: missing {sorted(metrics - set(got.metric))}"
        assert got[got.metric == "instance_cpu_pct"].value.max() > 0  # its counter moved while it burned
    for md in runs.metadata:
        assert md["telemetry"]["instance_stats"] == stats
        assert "instance_cpu_max_pct" in md["telemetry"]


@pytest.mark.docker
def test_docker_reuses_instances_and_samples_the_stats_api(tmp_path, monkeypatch):
    # the containers' stats are read by the campaign's sampler thread only, never at a run's start or
    # end, and one Docker stats call takes up to ~0.8 s on a loaded host: runs long enough for two
    check(
        reuse(tmp_path, "docker", monkeypatch, argv=burn(3)),
        {"instance_cpu_pct", "instance_memory_mb", "instance_throttled_periods", "instance_throttled_s"},
        "docker stats",
    )


@pytest.mark.lxd
def test_lxd_reuses_instances_and_samples_the_instance_state(tmp_path, monkeypatch):
    check(reuse(tmp_path, "lxd", monkeypatch), {"instance_cpu_pct", "instance_memory_mb"}, "lxd stats")


@pytest.mark.libvirt
def test_libvirt_reuses_vms_and_samples_domain_stats_and_guest_steal(tmp_path, monkeypatch):
    check(
        reuse(tmp_path, "libvirt", monkeypatch),
        {"instance_cpu_pct", "instance_vcpu_pct", "instance_memory_mb", "instance_steal_pct"},
        "libvirt stats",
    )


@pytest.mark.ssh
def test_ssh_reuses_instances_and_samples_the_remote_cgroup(tmp_path, monkeypatch):
    st = reuse(tmp_path, "ssh", monkeypatch)
    check(
        st,
        {"instance_cpu_pct", "instance_memory_mb", "instance_throttled_periods", "instance_steal_pct"},
        "ssh stats",
    )
    for md in st.runs().metadata:  # the host here is another machine: not sampled, said so
        assert md["telemetry"]["host"].startswith("not sampled")


@pytest.mark.slurm
def test_slurm_reuses_instances_and_samples_the_node_cgroup_through_one_step(tmp_path, monkeypatch):
    """On one node of a real Slurm allocation: the instance counters come from the node's cgroup
    through one file-reader step, not a step per reading (sacct lists it once)."""
    from labkit.backends import slurm_cli

    st = reuse(
        tmp_path, "slurm", monkeypatch, testbed={"slurm": {"partition": "labkit", "nodes": 1, "time": "10"}}
    )
    check(
        st,
        {"instance_cpu_pct", "instance_memory_mb", "instance_throttled_periods", "instance_steal_pct"},
        "slurm stats",
    )
    (job,) = st.meta()["slurm_jobs"]

    def readers():
        return [r for r in slurm_cli.sacct_steps(job["job_id"], 30.0) if r.get("JobName") == "labkit-files"]

    steps = wait_until(readers, timeout=60, interval=1, what="the accounting of the file reader step")
    assert len(steps) == 1, steps  # 4 runs of ~1 s sampled every 0.25 s: one step read them all


@pytest.mark.fleet
def test_a_fleet_keeps_each_boot_on_one_host_and_numbers_runs_per_host(fleet_hosts, tmp_path, monkeypatch):
    """runs_per_instance on a testbed of two SSH hosts: boot b goes to host b (round robin), each
    instance's runs stay on its host, run_seq counts each host's runs in execution order."""
    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "registry"))
    testbed = {**TESTBED, "hosts": TESTBED["hosts"][:2]}
    design = {
        "name": "reuse-fleet",
        "factors": {"affinity": ["floating", "pinned"]},
        "replications": 4,
        "seed": 9,
        "runs_per_instance": 2,
    }
    cid = f"reuse-fleet-{secrets.token_hex(2)}"
    st = Campaign(
        design,
        workload="command",
        workload_params={"argv": ["sleep", "0.3"]},
        campaign_id=cid,
        data_dir=tmp_path,
        testbed=testbed,
        telemetry=0.2,
        progress=False,
        run_timeout=300,
    ).run()
    runs, tidy = st.runs(), st.tidy()
    assert len(runs) == 8 and set(runs.status) == {"ok"}, runs[["status", "error"]].to_dict("records")
    rows = tidy[tidy.metric.notna()]
    assert rows.instance.nunique() == 4 and set(rows.groupby("instance").host.nunique()) == {1}
    assert set(rows.groupby("instance").run_id.nunique()) == {2}
    for _host, group in runs.groupby("host"):
        assert sorted(group.run_seq) == list(range(1, len(group) + 1))
        assert list(group.sort_values("started").run_seq) == sorted(group.run_seq)
    boots = runs.metadata.map(lambda m: m["boot_group"])
    assert set(runs.groupby(boots).host.nunique()) == {1}
    assert set(runs.host) == {"ns1", "ns2"}
    assert not any(_leftovers(campaign_prefix(cid)).values())
    samples = st.samples()
    assert set(samples[samples.instance.notna()].instance) == set(rows.instance)
