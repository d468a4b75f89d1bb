"""Issue 28's small input findings: top-level design keys of any type, literal braces in command
templates (run for real on the local backend), secret names matched on word boundaries."""

from __future__ import annotations

import pytest

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.core.redact import REDACTED, redact
from labkit.design import Design
from labkit.errors import ConfigError
from labkit.workloads import get_workload
from labkit.workloads.template import fill


def test_a_design_file_with_non_string_top_level_keys_is_a_config_error(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("1: a\nzzz: 2\nfactors:\n  vcpus: [1, 2]\n")
    with pytest.raises(ConfigError, match=r"d.yaml: unknown key\(s\) 'zzz', 1; allowed: blocks"):
        Design.from_yaml(path)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) None, True"):
        Design.from_dict({None: 1, True: 2, "factors": {"vcpus": [1, 2]}})


def test_only_declared_names_are_filled_every_other_brace_is_literal():
    values = {"vcpus": 2, "threads": 4}
    assert fill("find . -exec cat {} \\; -n {threads}", values) == "find . -exec cat {} \\; -n 4"
    assert (
        fill("awk '{print $1}' ${HOME} {unknown} {vcpus}", values) == "awk '{print $1}' ${HOME} {unknown} 2"
    )
    # str.format's escapes, which templates written before this rule used, keep their meaning
    assert fill("{{threads}} {{}}", values) == "{threads} {}"
    assert fill("{}", {}) == "{}"


@pytest.mark.root
def test_a_command_with_braces_runs_for_real_on_the_local_backend():
    be = get_backend("local")
    (inst,) = be.provision(InstanceSpec(vcpus=1, memory_mb=64), prefix="labkit-test-braces-")
    try:
        w = get_workload(
            "command",
            argv=[
                "sh",
                "-c",
                "printf 'x y\\n' | awk '{print $2}' > out{vcpus}; "
                "find . -name 'out*' -exec cat {} \\; > copy{vcpus}",
            ],
        )
        w.run(inst, w.params_for({}, 1))
        assert inst.exec(["cat", "copy1"]).stdout == "y\n"
    finally:
        teardown([inst])


def test_secret_words_count_on_word_boundaries_only():
    facts = {
        "host": {
            "mitigations": {
                "spec_store_bypass": "Mitigation: SSB disabled",
                "compass": 1,
                "author": "x",
                "passthrough": True,
            }
        }
    }
    assert redact(facts) == facts
    secrets = {
        k: "s3cret"
        for k in (
            "password",
            "passwd",
            "passphrase",
            "ssh_pass",
            "db_password",
            "api_key",
            "apikey",
            "token",
            "auth_token",
            "secret",
            "private_key",
            "pkey",
            "key_data",
            "key",
            "sshPass",
            "x-auth-token",
            "Authorization",
            "aws_secret_access_key",
            "mysqlpassword",
            "auth",
            "oauth",
        )
    }
    assert set(redact(secrets).values()) == {REDACTED}
    assert redact({"key_filename": "/k", "known_hosts": "/h"}) == {"key_filename": "/k", "known_hosts": "/h"}
