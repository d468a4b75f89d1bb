"""Telemetry for real on the local backend: psutil, /proc and the instances' cgroups (v1 or v2).

A tiny campaign with telemetry every 0.2 s and a workload that burns a CPU for about a second in
its instance: every run, the one that fails included, keeps its samples and a summary in its
metadata; with telemetry off nothing is sampled.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest

from labkit.run.campaign import Campaign
from labkit.run.telemetry import covariates

# burns one CPU for ~1 s inside the instance; the run with 2 vCPUs then fails on purpose
BURN = ["sh", "-c", "timeout 1 sh -c 'while :; do :; done'; test {vcpus} = 1"]
DESIGN = {"name": "tele", "factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 5}
HOST = {
    "cpu_pct",
    "cpu0_pct",
    "steal_pct",
    "iowait_pct",
    "host_cpu_used_pct",
    "load1",
    "mem_used_pct",
    "mem_available_mb",
    "disk_read_Bps",
    "disk_write_Bps",
    "net_rx_Bps",
    "net_tx_Bps",
    "controller_cpu_pct",
}
CGROUP = {"campaign_cpu_pct", "cpu_other_pct", "throttled_periods"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the local backend's cgroups need root")


def _campaign(tmp_path, telemetry):
    return Campaign(
        DESIGN,
        backend="local",
        workload="command",
        workload_params={"argv": BURN},
        campaign_id=f"tele-{'on' if telemetry else 'off'}",
        data_dir=tmp_path,
        progress=False,
        telemetry=telemetry,
        run_timeout=120,
    )


def test_every_run_keeps_its_samples_and_summary(tmp_path):
    st = _campaign(tmp_path, 0.2).run()
    runs = st.runs().set_index("vcpus")
    assert runs.loc[1, "status"] == "ok" and runs.loc[2, "status"] == "failed"
    samples = st.samples()
    for vcpus in (1, 2):  # the failed run too
        run = runs.loc[vcpus]
        mine = samples[samples.run_id == run.run_id]
        metrics = set(mine.metric)
        assert HOST | CGROUP <= metrics, f"missing {sorted(HOST | CGROUP - metrics)}"
        assert "daemon_cpu_pct" not in metrics  # the local backend has no daemon
        if os.path.exists("/proc/pressure/cpu"):
            assert {"psi_cpu_some_pct", "psi_memory_some_pct", "psi_io_some_pct"} <= metrics
        times = sorted(set(mine.t))
        assert len(times) >= 2 and times[0] > 0
        # the instance's own cgroup burned CPU: seen as the campaign's, not as other processes'
        assert mine[mine.metric == "campaign_cpu_pct"].value.max() > 0
        assert (mine[mine.metric.str.endswith("_pct")].value >= 0).all()
        summary = run.metadata["telemetry"]
        assert (
            summary["collected"] is True
            and summary["interval_s"] == 0.2
            and summary["instance_cpu"] == "cgroups"
        )
        assert summary["samples"] == len(times) + 1  # the reading at the start gives no row
        for key in (
            "cpu_other_max_pct",
            "steal_max_pct",
            "iowait_mean_pct",
            "campaign_cpu_max_pct",
            "throttled_periods",
            "load1_max",
            "sampler_cpu_s",
            "sampler_cpu_pct",
        ):
            assert key in summary, key
        assert summary["cpu_other_max_pct"] == pytest.approx(
            mine[mine.metric == "cpu_other_pct"].value.max(), abs=1e-3
        )
        assert summary["sampler_cpu_s"] >= 0
    cov = covariates(st.runs())
    assert len(cov) == 2 and cov.set_index("run_id").loc[runs.loc[1, "run_id"], "samples"] >= 3
    exported = pd.read_csv(tmp_path / "tele-on" / "samples.csv")
    assert len(exported) == len(samples)


def test_telemetry_off_samples_nothing(tmp_path):
    st = _campaign(tmp_path, "off").run()
    assert len(st.runs()) == 2
    assert st.samples().empty
    assert all("telemetry" not in md for md in st.runs().metadata)


@pytest.mark.docker
def test_docker_on_this_machine_samples_the_host_and_the_containers_stats(tmp_path):
    d = {"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 5}
    # the containers' stats are read by the campaign's sampler thread only (never at a run's start or
    # end), and one Docker stats call takes up to half a second on a loaded host: a run long enough
    # for two of them
    st = Campaign(
        d,
        backend="docker",
        workload="command",
        workload_params={"argv": ["sleep", "2"]},
        campaign_id="tele-docker",
        data_dir=tmp_path,
        progress=False,
        telemetry=0.2,
    ).run()
    runs = st.runs()
    assert set(runs.status) == {"ok"}, runs[["status", "error"]]
    for run in runs.itertuples():
        summary = run.metadata["telemetry"]
        assert summary["collected"] is True and summary["instance_cpu"] == "not read (backend docker)"
        assert summary["instance_stats"] == "docker stats"
        samples = st.samples(run.run_id)
        host = set(samples[samples.instance.isna()].metric)
        # no campaign cgroups here (throttled_periods is theirs); the containers' own counters instead
        assert HOST <= host and "throttled_periods" not in host
        # dockerd and containerd making and removing the campaign's containers: the campaign's work
        assert "daemon_cpu_pct" in host
        assert "instance_cpu_pct" in set(samples[samples.instance.notna()].metric)


@pytest.mark.ssh
def test_a_remote_host_is_not_sampled_and_its_runs_say_so(tmp_path):
    d = {"factors": {"vcpus": [1, 2]}, "replications": 1, "seed": 5}
    st = Campaign(
        d,
        backend="ssh",
        workload="command",
        workload_params={"argv": ["true"]},
        campaign_id="tele-ssh",
        data_dir=tmp_path,
        progress=False,
        telemetry=0.2,
        run_timeout=120,
    ).run()
    runs = st.runs()
    assert set(runs.status) == {"ok"}, runs[["status", "error"]]
    samples = st.samples()
    assert samples.instance.notna().all()  # only the instances' own counters: this machine is not theirs
    for md in runs.metadata:
        assert md["telemetry"]["collected"] is True
        assert "'ssh' runs its instances on another machine" in md["telemetry"]["host"]


@pytest.mark.docker
def test_the_real_docker_daemon_is_still_recognised_by_its_program_and_pid_file():
    """Issue 47, finding 6: daemons are identified by program, owner and pid file, not by name;
    the real dockerd (the pid its pid file holds) must still be read as the docker backend's
    daemon, both through its program in the system's directories and through its pid file alone."""
    from labkit.backends.docker import DockerBackend
    from labkit.run.readings import DaemonCpu

    pidfile = next(p for p in ("/run/docker.pid", "/var/run/docker.pid") if os.path.exists(p))
    with open(pidfile) as fh:
        pid = fh.read().strip()
    for d in (DaemonCpu(pidfiles=()), DaemonCpu(dirs=(), pidfiles=[pidfile])):
        d.add(DockerBackend.daemons)
        assert pid in {k.split(":")[0] for k in d.read()}, (d.dirs, d.pidfiles)
