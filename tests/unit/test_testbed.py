"""Testbed files and platforms: validation (ConfigError naming file and key), options per host."""

import pytest

from labkit.errors import ConfigError
from labkit.run.platforms import Platform, options_for, parse_platforms, resolve
from labkit.run.testbed import Testbed

GOOD = """
name: rack-a
platforms:
  kvm: {backend: libvirt}
  native: {backend: ssh}
hosts:
  - {name: n1, address: 10.231.0.11, key: /k, platforms: [native, kvm, docker], labels: {rack: a}, price_per_hour: 0.5}
  - {name: n2, address: 10.231.0.12, port: 2222, user: lab}
assign: random
on_host_loss: fail-block
"""


def test_yaml_testbed(tmp_path):
    p = tmp_path / "tb.yaml"
    p.write_text(GOOD)
    tb = Testbed.load(p)
    n1, n2 = tb.hosts
    assert (n1.address, n1.port, n1.user, n1.labels, n1.price_per_hour) == (
        "10.231.0.11",
        22,
        "root",
        {"rack": "a"},
        0.5,
    )
    assert tb.offers(n1, "kvm") and not tb.offers(n2, "kvm") and tb.offers(n2, "ssh")  # remote default: ssh
    assert tb.assign == "random" and tb.on_host_loss == "fail-block"
    assert [h.name for h in tb.hosts_for("native")] == ["n1"]
    assert tb.describe()["hosts"][1]["port"] == 2222


@pytest.mark.parametrize(
    "text, match",
    [
        ("hosts: []", r"tb.yaml: 'hosts' must be a list"),
        ("hosts: [{name: a}]\nzone: x", r"tb.yaml: unknown key\(s\) 'zone'"),
        ("hosts: [{name: a, adress: x}]", r"tb.yaml: hosts\[0\]: unknown key\(s\) 'adress'"),
        ("hosts: [{name: a, port: 70000}]", r"tb.yaml: hosts.a.port"),
        ("hosts: [{name: a, address: '-oProxyCommand=x'}]", r"hosts.a.address"),
        ("hosts: [{name: a, platforms: [xen]}]", r"hosts.a.platforms: 'xen' is neither declared"),
        (
            "hosts: [{name: a, address: h, platforms: [local]}]",
            r"hosts.a.platforms: 'local' uses the local backend",
        ),
        ("hosts: [{name: a}, {name: a}]", r"duplicate host name"),
        ("hosts: [{name: a}]\nassign: spread", r"'assign' must be one of blocks, random"),
        ("hosts: [{name: a}]\non_host_loss: retry", r"'on_host_loss' must be one of move, fail-block"),
        (
            "platforms: {kvm: {uri: x}}\nhosts: [{name: a}]",
            r"platforms.kvm: must be a mapping with a 'backend'",
        ),
        (
            "platforms: {kvm: {backend: xen}}\nhosts: [{name: a}]",
            r"platforms.kvm.backend: 'xen' is not a backend",
        ),
        ("hosts: [{name: a, price_per_hour: -1}]", r"hosts.a.price_per_hour"),
        ("hosts: [{name: a}]\nconnect_timeout: .inf", r"'connect_timeout'"),
        # Slurm testbeds (tests/unit/test_slurm.py): the request's keys and allowed values
        (
            "slurm: {nodes: 2, gpus: 1}",
            r"tb.yaml: slurm: unknown key\(s\) 'gpus'; allowed: partition, nodes, exclusive",
        ),
        ("slurm: {nodes: 0}", r"tb.yaml: slurm.nodes: a whole number of nodes from 1 to 4096"),
        ("slurm: {nodes: '2'}", r"slurm.nodes"),
        ("slurm: {nodes: true}", r"slurm.nodes"),
        ("slurm: {exclusive: 'yes'}", r"slurm.exclusive: true .* or false"),
        ("slurm: {time: 2h}", r"slurm.time: a Slurm time limit"),
        ("slurm: {partition: 'a b'}", r"slurm.partition: a Slurm partition name"),
        ("slurm: {account: '-x'}", r"slurm.account"),
        ("slurm: {constraint: 'a b'}", r"slurm.constraint: a Slurm feature expression"),
        ("slurm: {wait: 0}", r"slurm.wait: seconds"),
        ("slurm: [2]", r"slurm: a mapping with keys partition, nodes"),
        ("slurm: {nodes: 1}\nhosts: [{name: a}]", r"give 'slurm' or 'hosts', not both"),
        (
            "slurm: {nodes: 1}\nplatforms: {d: {backend: docker}}",
            r"platforms.d.backend: on a Slurm testbed .* use backend slurm",
        ),
        ("hosts: []", r"'hosts' must be a list .*\(or a 'slurm' section"),
    ],
)
def test_bad_testbeds_name_file_and_key(tmp_path, text, match):
    p = tmp_path / "tb.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Testbed.load(p)


def test_backend_names_are_platforms_and_unknown_names_are_refused():
    declared = parse_platforms({"kvm": {"backend": "libvirt", "uri": "qemu:///system"}})
    assert resolve("docker", declared) == Platform("docker", "docker", {})
    assert resolve("kvm", declared).options == {"uri": "qemu:///system"}
    with pytest.raises(ConfigError, match="neither declared .*kvm.* nor a backend"):
        resolve("xen", declared)


def test_options_on_a_remote_host(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # the libvirt URI's ssh program is written under ~/.cache
    tb = Testbed.from_dict(
        {
            "platforms": {"kvm": {"backend": "libvirt", "uri": "qemu+ssh://{user}@{address}:{port}/system"}},
            "hosts": [{"name": "n1", "address": "10.0.0.5", "port": 2200, "user": "lab", "key": "/k"}],
        }
    )
    h = tb.hosts[0]
    # every SSH path gets the host's host-key policy: strict unless the testbed or host says otherwise
    assert options_for(tb.platform("ssh"), h) == {
        "host": "10.0.0.5",
        "port": 2200,
        "user": "lab",
        "key_filename": "/k",
        "host_key_policy": "strict",
    }
    assert options_for(tb.platform("docker"), h) == {
        "base_url": "ssh://lab@10.0.0.5:2200",
        "ssh_key_filename": "/k",
        "host_key_policy": "strict",
    }
    # the platform's own SSH URI gets the host's policy too (the backend applies it to what it opens)
    assert options_for(tb.platform("kvm"), h) == {
        "uri": "qemu+ssh://lab@10.0.0.5:2200/system",
        "host_key_policy": "strict",
    }
    # generated: libvirt's ssh transport parameters (libvirt docs/uri.rst), the key URI-escaped; the
    # backend adds the command: ssh with the host-key policy's options (labkit.backends.libvirt.sshuri)
    spaced = Testbed.from_dict({"hosts": [{"name": "n2", "address": "10.0.0.6", "key": "/my keys/k"}]}).hosts[
        0
    ]
    opts = options_for(tb.platform("libvirt"), spaced)
    assert opts == {
        "uri": "qemu+ssh://root@10.0.0.6:22/system?keyfile=/my%20keys/k",
        "host_key_policy": "strict",
    }
    from labkit.backends.libvirt import LibvirtBackend

    uri = LibvirtBackend(**opts).ssh.open_uri
    assert uri.startswith("qemu+ssh://root@10.0.0.6:22/system?keyfile=/my%20keys/k&no_tty=1&command=")
    assert "StrictHostKeyChecking=yes" in open(uri.split("command=")[1].split("&")[0]).read()
    # a URI without SSH gets no policy
    local = parse_platforms({"kvm": {"backend": "libvirt", "uri": "qemu+tls://{address}/system"}})["kvm"]
    assert options_for(local, h) == {"uri": "qemu+tls://10.0.0.5/system"}
    with pytest.raises(ConfigError, match="runs on the controller only"):
        options_for(tb.platform("local"), h)
    # this machine: options as declared
    assert options_for(tb.platform("docker"), Testbed.local().hosts[0]) == {}
