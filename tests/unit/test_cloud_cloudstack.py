"""The CloudStack adapter on recorded HTTP exchanges (tests/unit/fixtures/clouds/cs_*.json)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest

pytest.importorskip("cs")
pytest.importorskip("responses")

from labkit.backends.clouds import base, get_provider  # noqa: E402
from labkit.errors import BackendError, BackendUnavailable, ConfigError  # noqa: E402

from .cloud_replay import replay  # noqa: E402

PREFIX = "labkit-c1--"


@pytest.fixture
def cloud(tmp_path, monkeypatch):
    """A provider on the recorded endpoint; names are fixed, SSH readiness is recorded, not dialled."""
    key = tmp_path / "id"
    (tmp_path / "id.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0test labkit\n")
    key.write_text("private\n")
    monkeypatch.setattr(base.secrets, "token_hex", lambda n: "0a1b2c3d")
    dialled = []
    monkeypatch.setattr(
        base,
        "wait_ssh",
        lambda address, port, user, key, deadline, **kw: dialled.append((address, port, user, key)),
    )
    p = get_provider(
        "cloudstack",
        endpoint="https://cloud.example.org/client/api",
        key="k",
        secret="s",
        key_filename=str(key),
        prices={"Small Instance": 0.031},
        poll_interval=0,
    )
    p.dialled = dialled
    return p


def test_provision_waits_for_running_then_ssh_and_destroy_expunges(cloud):
    with replay("cs_provision") as mock:
        [server] = cloud.provision("Small Instance", "Debian 12", PREFIX)
        cloud.destroy([server])
        reg = mock.calls[4].request.url
    assert server.name == "labkit-c1--0a1b2c3d"
    assert server.id == "6f1e0a62-53a1-4c8e-9b5e-2d5c6a1f0e11"
    assert server.address == "10.1.1.23" and server.price_per_hour == 0.031
    assert server.provisioning_s >= 0
    assert cloud.dialled == [("10.1.1.23", 22, "root", cloud.key_filename)]
    assert server.host()["labels"]["flavor"] == "Small Instance"
    # the public key registered is the .pub file's, the request signed with the secret
    query = dict(parse_qsl(urlsplit(reg).query))
    assert query["publickey"] == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0test" and query["signature"]


def test_cleanup_deletes_only_servers_tagged_with_the_prefix(cloud):
    with replay("cs_cleanup"):
        removed = cloud.cleanup(PREFIX)
        assert [s.name for s in cloud.list_labkit(PREFIX)] == []
    assert removed == ["labkit-c1--0a1b2c3d"]


def test_list_by_tag_ignores_other_campaigns_and_untagged(cloud):
    with replay("cs_cleanup") as mock:
        listed = cloud.list_labkit(PREFIX)
        mock.reset()  # the rest of the recording (the deletion) is not requested here
    assert [(s.name, s.tags["labkit-prefix"]) for s in listed] == [("labkit-c1--0a1b2c3d", PREFIX)]


def test_parameter_error_is_a_config_error(cloud):
    with replay("cs_error_param"), pytest.raises(ConfigError, match="431.*template is not ready"):
        cloud.provision("Small Instance", "Debian 12", PREFIX)


def test_bad_credentials_are_backend_unavailable(cloud):
    with replay("cs_error_auth"), pytest.raises(BackendUnavailable, match="401.*CLOUDSTACK_KEY"):
        cloud.check()


def test_failed_async_job_deletes_the_server_and_raises(cloud):
    with replay("cs_error_job"), pytest.raises(BackendError, match="535.*user_vm"):
        cloud.provision("Small Instance", "Debian 12", PREFIX)


def test_server_in_error_state_is_deleted(cloud):
    with replay("cs_error_state"), pytest.raises(BackendError, match="labkit-c1--0a1b2c3d.*failed"):
        cloud.provision("Small Instance", "Debian 12", PREFIX)
    assert cloud.dialled == []


def test_unreachable_endpoint_is_backend_unavailable(cloud):
    import requests
    import responses

    with responses.RequestsMock() as mock:
        mock.add("GET", "https://cloud.example.org/client/api", body=requests.ConnectionError("refused"))
        with pytest.raises(BackendUnavailable, match="cannot reach"):
            cloud.check()
