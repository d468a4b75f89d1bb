"""The docker backend's SSH options (labkit.backends.docker_ssh): validation and the ssh command line
(no daemon needed: the backend's constructor does not connect)."""

from __future__ import annotations

import shlex

import pytest

from labkit.backends.docker import DockerBackend
from labkit.backends.docker_ssh import SshSettings
from labkit.core.redact import redact
from labkit.errors import ConfigError
from labkit.run.platforms import options_for
from labkit.run.testbed import Testbed


@pytest.fixture
def key(tmp_path):
    path = tmp_path / "id_test"
    path.write_text("not read by these tests\n")
    return str(path)


def test_ssh_settings_from_options(key, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    be = DockerBackend(
        base_url="ssh://lab@10.0.0.5:2200", ssh_key_filename=key, ssh_known_hosts=str(kh), connect_timeout=3
    )
    assert be.ssh == SshSettings("lab", "10.0.0.5", 2200, key, str(kh), "strict", 3.0)
    assert be.ssh.connect_kwargs() == {
        "timeout": 3.0,
        "banner_timeout": 3.0,
        "auth_timeout": 3.0,
        "key_filename": [key],
        "look_for_keys": False,
        "allow_agent": False,
    }
    # no port: ssh's 22; an empty key (a "{key}" template on a host without one) is no key
    assert DockerBackend(base_url="ssh://h", ssh_key_filename="").ssh == SshSettings(None, "h", 22)
    assert DockerBackend().ssh is None


@pytest.mark.parametrize(
    "options, message",
    [
        ({"ssh_verify_host": False}, "apply to an ssh:// base_url only"),
        ({"host_key_policy": "insecure"}, "apply to an ssh:// base_url only"),
        ({"base_url": "ssh://h", "ssh_verify_host": "no"}, "ssh_verify_host: true or false"),
        (
            {"base_url": "ssh://h", "host_key_policy": "no"},
            "host_key_policy must be one of strict, accept-new, insecure",
        ),
        (
            {"base_url": "ssh://h", "host_key_policy": "strict", "ssh_verify_host": True},
            "give host_key_policy only",
        ),
        ({"base_url": "ssh://h", "connect_timeout": 0}, r"connect_timeout: seconds in \(0, 600\]"),
        (
            {"base_url": "ssh://h", "ssh_key_filename": "/nonexistent/key"},
            "ssh_key_filename: /nonexistent/key is not a file",
        ),
        ({"base_url": "ssh://h", "ssh_known_hosts": 5}, "ssh_known_hosts: the path of a known_hosts file"),
        ({"base_url": "ssh://h", "ssh_known_hosts": "/nonexistent/dir/kh"}, "not a file .nor a new file"),
        ({"base_url": "ssh://u:pw@h"}, "no password, path or query"),
        ({"base_url": "ssh://h:99999"}, "base_url 'ssh://h:99999'"),
        ({"base_url": "ssh://h", "ssh_key": "/k"}, "unknown option|ssh_key"),
    ],
)
def test_bad_ssh_options_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        DockerBackend(**options)


def test_ssh_argv_quotes_the_remote_command(key):
    s = SshSettings("root", "10.0.0.5", 2200, key, None, "accept-new", 4.5)
    argv = s.ssh_argv(["docker", "exec", "-i", "c1", "sh", "-c", "echo $HOME; rm -rf x"])
    assert argv[:5] == ["ssh", "-T", "-p", "2200", "-o"]
    assert ["-i", key] == argv[argv.index("-i") : argv.index("-i") + 2]
    assert "ConnectTimeout=5" in argv and "StrictHostKeyChecking=accept-new" in argv
    assert argv[-3:-1] == ["--", "10.0.0.5"]
    # the remote shell gets back exactly the argv
    assert shlex.split(argv[-1]) == ["docker", "exec", "-i", "c1", "sh", "-c", "echo $HOME; rm -rf x"]
    assert "StrictHostKeyChecking=yes" in SshSettings(None, "h", 22).ssh_argv(["true"])


def test_a_testbed_docker_platform_over_ssh(key, tmp_path):
    kh = tmp_path / "kh"
    kh.write_text("")
    tb = Testbed.from_dict(
        {
            "platforms": {
                "docker": {
                    "backend": "docker",
                    "base_url": "ssh://{user}@{address}:{port}",
                    "ssh_known_hosts": str(kh),
                }
            },
            "hosts": [
                {"name": "n1", "address": "10.0.0.5", "port": 2200, "key": key, "platforms": ["docker"]}
            ],
        }
    )
    opts = options_for(tb.platform("docker"), tb.hosts[0])
    # a known_hosts file given: host keys are verified against it; the host's key is used
    assert opts == {
        "base_url": "ssh://root@10.0.0.5:2200",
        "ssh_known_hosts": str(kh),
        "ssh_key_filename": key,
        "host_key_policy": "strict",
    }
    assert DockerBackend(**opts).ssh.host_key_policy == "strict"
    # key file names are paths, not secrets (labkit.core.redact): kept so that `labkit clean` can reconnect
    assert redact(opts) == opts
