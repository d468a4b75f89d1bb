"""The labkit errors that replaced a TypeError/AttributeError on a None when the package was made
to type-check (issue 33): each input here used to crash with a Python error, not a labkit one."""

import json
import secrets
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from labkit.backends import get_backend, teardown
from labkit.backends.libvirt.xml import domain_facts, domain_xml, parse_pinning
from labkit.backends.private_network import Network, join_network
from labkit.backends.ssh import SshBackend
from labkit.core import registry
from labkit.core.files import atomic_write
from labkit.core.instance import InstanceSpec
from labkit.core.network_factors import parse_link
from labkit.design import Design
from labkit.errors import BackendError, ConfigError
from labkit.run.adaptive import next_round, worst_fixed_equivalent
from labkit.workloads import get_workload
from labkit.workloads.base import network_address
from labkit.workloads.mpi import mpirun_argv

PATHS = dict(
    disk="/pool/t.qcow2",
    kernel="/img/vmlinuz",
    initrd="/img/initrd.img",
    cmdline="root=/dev/vda",
    console_log="/pool/t.console.log",
)


def domain(spec: InstanceSpec, cpus=None) -> ET.Element:
    return ET.fromstring(domain_xml(name="labkit-t", spec=spec, cpus=cpus, domain_type="qemu", **PATHS))


def test_a_vcpupin_without_vcpu_is_a_backend_error():
    dom = domain(InstanceSpec(vcpus=2, affinity="pinned"), [0, 1])
    del dom.find("cputune/vcpupin").attrib["vcpu"]
    with pytest.raises(BackendError, match="vcpupin> has no vcpu"):
        parse_pinning(ET.tostring(dom, encoding="unicode"))


def test_an_empty_memory_element_is_a_backend_error():
    dom = domain(InstanceSpec(vcpus=1, memory_mb=256))
    dom.find("memory").text = None
    with pytest.raises(BackendError, match="<memory> has no value"):
        domain_facts(ET.tostring(dom, encoding="unicode"))
    dom.remove(dom.find("memory"))  # no <memory> at all: nothing to report, as before
    assert domain_facts(ET.tostring(dom, encoding="unicode"))["memory_mb"] is None


def test_adaptive_functions_refuse_a_design_with_fixed_replication():
    fixed = Design.from_dict({"factors": {"vcpus": [1, 2]}, "replications": 3, "seed": 1})
    runs = pd.DataFrame(
        {
            "run_id": ["c0000r001"],
            "run_order": [0],
            "config": [0],
            "replicate": [1],
            "status": ["ok"],
            "value": [1.0],
        }
    )
    for call in (lambda: next_round(fixed, runs, 1), lambda: worst_fixed_equivalent(fixed, runs)):
        with pytest.raises(ConfigError, match="fixed number of replications"):
            call()


def test_a_workload_that_never_spans_refuses_run_group():
    w = get_workload("nqueens")
    assert not w.spans(w.params)
    with pytest.raises(ConfigError, match="does not run across instances"):
        w.run_group([], w.params)


def test_network_address_of_an_instance_on_no_network_is_a_config_error():
    be = get_backend("local", enforce_limits=False)
    prefix = f"labkit-test-typed-{secrets.token_hex(3)}"
    insts = be.provision(InstanceSpec(), prefix=prefix)
    try:
        for peer in (False, True):
            with pytest.raises(ConfigError, match="no address on the run's private network"):
                network_address(insts[0], peer=peer)
    finally:
        assert teardown(insts) == []
        be.cleanup(prefix + "-")


def _network(be, name: str) -> Network:
    return Network(
        name=name,
        subnet="10.250.0.0/24",
        host_address="10.250.0.1",
        addresses=["10.250.0.2"],
        device="lktyped0",
        backend=be,
    )


def test_a_network_of_another_backend_is_refused_before_connecting():
    # the ssh backend's _create took no network: provision(network=...) was a TypeError; the ssh
    # backend has private networks now, and one made by another backend is refused before it
    # connects (nothing listens on port 1; get_backend would connect to check it)
    be = SshBackend(host="127.0.0.1", port=1, enforce_limits=False)
    other = SshBackend(host="127.0.0.1", port=1, enforce_limits=False)
    with pytest.raises(ConfigError, match="network labkit-typed-net belongs to another backend"):
        be.provision(InstanceSpec(affinity="floating"), network=_network(other, "labkit-typed-net"))
    assert be.conn is None


def test_joining_a_network_with_a_link_but_no_host_device_is_a_backend_error():
    be = get_backend("local", enforce_limits=False)
    prefix = f"labkit-test-typed-{secrets.token_hex(3)}"
    insts = be.provision(InstanceSpec(), prefix=prefix)
    try:
        assert insts[0].host_device is None
        with pytest.raises(BackendError, match="no host-side device on network labkit-typed-net"):
            join_network(insts[0], _network(be, "labkit-typed-net"), parse_link("1gbit/"))
        assert insts[0].network is None  # nothing recorded
    finally:
        assert teardown(insts) == []
        be.cleanup(prefix + "-")


def test_a_registry_entry_with_a_null_start_or_kind_reads_as_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RUN_DIR", str(tmp_path / "run"))
    with registry.register("typed-null", None) as reg:
        info = json.loads(reg.path.read_text())
        atomic_write(reg.path, json.dumps({**info, "started": None, "kind": None}), mode=0o644)
        [entry] = registry.entries()
        assert (entry.started, entry.kind) == ("?", "run")
        assert entry.describe().endswith("started ?")


def test_mpirun_over_instances_on_no_network_is_a_config_error():
    be = get_backend("local", enforce_limits=False)
    prefix = f"labkit-test-typed-{secrets.token_hex(3)}"
    insts = be.provision(InstanceSpec(), prefix=prefix)
    try:
        with pytest.raises(ConfigError, match="needs network: private"):
            mpirun_argv(insts, "/tmp/agent", 1, "/tmp/w", ["true"])
    finally:
        assert teardown(insts) == []
        be.cleanup(prefix + "-")
