"""MPI across SSH hosts without hosts: the launch agent's quoting for a remote shell, the ssh-hosts
backend's options, the ping-pong parser (its real output is checked by the fleet integration test)."""

from __future__ import annotations

import shlex
import subprocess
from types import SimpleNamespace

import pytest

from labkit.backends.ssh_hosts import SshHostsBackend
from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads import mpi, pingpong
from labkit.workloads.mpi import agent_script


def test_agent_hands_a_remote_shell_the_command_line_as_one_quoted_word():
    inst = SimpleNamespace(
        address="10.0.0.1", index=0, remote_shell=True, host_command=lambda argv: ["ssh", "h", *argv]
    )
    script = agent_script([inst], "/tmp/w")
    assert f"""exec ssh h sh -c {shlex.quote(mpi._INSIDE)} /tmp/w/ompi0 "$(q "$*")" ;;""" in script
    # OpenMPI writes the orted line for a remote shell: its quotes and ';' must survive the far side's
    # shell, which parses ssh's last word once more
    q = next(line for line in script.splitlines() if line.startswith("q() {"))
    line = 'orted -mca uri "1;tcp://10.0.0.1:1024" it\'s $HOME'
    quoted = subprocess.run(
        ["sh", "-c", q + '\nq "$*"', "sh", line], capture_output=True, text=True, timeout=30
    ).stdout
    back = subprocess.run(
        ["sh", "-c", f"printf %s {quoted}"], capture_output=True, text=True, timeout=30
    ).stdout
    assert back == line


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "option hosts: a list of 1-64 mappings"),
        ({"hosts": []}, "option hosts: a list of 1-64 mappings"),
        ({"hosts": [{"port": 22}]}, r"hosts\[0\]: a mapping with 'host'"),
        ({"hosts": [{"host": "h", "password": "x"}]}, r"hosts\[0\]: a mapping with 'host'"),
        ({"hosts": [{"host": "h"}], "link": "1gbit"}, "unknown option|link"),
    ],
)
def test_ssh_hosts_options_are_validated(options, message):
    with pytest.raises(ConfigError, match=message):
        SshHostsBackend(**options)


def test_ssh_hosts_network_is_one_instance_per_host_and_cannot_be_shaped():
    be = SshHostsBackend(hosts=[{"host": "10.0.0.11"}, {"host": "10.0.0.12"}])
    assert [m.host for m in be.members] == ["10.0.0.11", "10.0.0.12"] and be.member(3).host == "10.0.0.12"
    with pytest.raises(ConfigError, match="one instance per host: 1-2, not 3"):
        be.create_network("labkit-x--", 3)
    with pytest.raises(ConfigError, match="cannot be shaped"):
        be.create_network("labkit-x--", 2, link="1gbit")
    with pytest.raises(ConfigError, match="IPv4 addresses"):
        SshHostsBackend(hosts=[{"host": "node-a"}]).create_network("labkit-x--", 1)


def test_pingpong_parser():
    rows = pingpong.parse("noise\npingpong_latency_us 12.500\npingpong_bandwidth_mb_per_s 1.5e3\n")
    assert [(r.metric, r.value, r.unit, r.instance) for r in rows] == [
        ("pingpong_latency_us", 12.5, "us", 0),
        ("pingpong_bandwidth_mb_per_s", 1500.0, "MB/s", 0),
    ]
    with pytest.raises(BenchmarkError, match="lacks pingpong_bandwidth_mb_per_s"):
        pingpong.parse("pingpong_latency_us 3\n")
