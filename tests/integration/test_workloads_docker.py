"""Every workload of issue 6 run for real in docker containers (marker ``docker``), and iperf3
between two containers on an internal Docker network that the test creates and removes."""

from __future__ import annotations

import secrets

import pytest

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.workloads import get_workload
from labkit.workloads.iperf3 import pair

from .conftest import PREFIX
from .test_workloads_local import CASES, VERSION_KEYS, check_rows

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def docker_be():
    be = get_backend("docker")
    before = set(be.list_labkit(PREFIX))
    try:
        yield be
        assert set(be.list_labkit(PREFIX)) - before == set(), "containers left behind"
    finally:
        be.close()


@pytest.fixture(scope="module")
def container(docker_be):
    insts = docker_be.provision(InstanceSpec(vcpus=2, memory_mb=512), prefix=PREFIX)
    try:
        yield insts[0]
    finally:
        assert not teardown(insts)


@pytest.mark.parametrize("case,name,params,expected", CASES, ids=[c[0] for c in CASES])
def test_workload_runs_in_a_container(container, case, name, params, expected):
    w = get_workload(name, **params)
    w.prepare(container)
    rows = w.run(container, w.params_for({}, container.spec.vcpus))
    check_rows(rows, expected)
    version = w.version(container)
    assert set(version) >= VERSION_KEYS[name] and all(version.values()), version
    # nothing of the workload keeps running. Exited daemons (iperf3 -D, httpd) stay as
    # zombies: the container's pid 1 is ``sleep``, which reaps nobody, so skip state Z.
    ps = [line.split() for line in container.exec(["ps", "-eo", "stat=,comm="]).stdout.splitlines()]
    live = {comm for stat, comm in ps if not stat.startswith("Z")}
    assert not {"apache2", "iperf3", "fio", "sysbench"} & live, ps


def test_iperf3_between_two_containers_on_an_internal_network(docker_be):
    """The test makes an ``internal`` bridge network (no route out) and two containers on it.

    The backend's own instances have no network (network_mode none) by design, so the two
    containers are created here from the same image, wrapped as labkit DockerInstances,
    and removed with the network in ``finally``.
    """
    from labkit.backends.docker import DockerInstance

    api = docker_be.api
    tag = secrets.token_hex(4)
    netname = f"{PREFIX}-{tag}"
    net = api.create_network(netname, driver="bridge", internal=True, labels={"labkit": "1"})["Id"]
    insts = []
    try:
        assert api.inspect_network(net)["Internal"] is True
        spec = InstanceSpec(vcpus=1, memory_mb=256)
        for i in range(2):
            name = f"{PREFIX}-{tag}-{i}"
            hc = api.create_host_config(network_mode=netname, mem_limit="256m", nano_cpus=10**9)
            cid = api.create_container(
                docker_be.image,
                command=["sleep", "infinity"],
                name=name,
                labels={"labkit": "1"},
                host_config=hc,
            )["Id"]
            insts.append(DockerInstance(docker_be, name, spec, i, None, cid))
            api.start(cid)
        ip = api.inspect_container(insts[0].id)["NetworkSettings"]["Networks"][netname]["IPAddress"]
        rows = pair(insts[0], insts[1], ip, protocol="both", duration_s=1)
        check_rows(
            rows, {"tcp_mbit_per_s": "Mbit/s", "udp_mbit_per_s": "Mbit/s", "udp_lost_percent": "%"}, index=1
        )
    finally:
        teardown(insts)
        api.remove_network(net)
    assert not api.networks(names=[netname])
