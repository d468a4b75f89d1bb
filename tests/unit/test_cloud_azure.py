"""The Azure adapter on recorded HTTP exchanges (tests/unit/fixtures/clouds/az_*.json)."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("azure.mgmt.compute")
pytest.importorskip("responses")

from azure.core.credentials import AccessToken  # noqa: E402

from labkit.backends.clouds import base, get_provider  # noqa: E402
from labkit.errors import BackendError, BackendUnavailable, ConfigError  # noqa: E402

from .cloud_replay import replay  # noqa: E402

PREFIX = "labkit-c1--"
SUB = "00000000-1111-2222-3333-444444444444"
SUBNET = f"/subscriptions/{SUB}/resourceGroups/labkit-rg/providers/Microsoft.Network/virtualNetworks/labkit-vnet/subnets/default"


class Token:
    """A credential as azure-core expects one (``get_token``): no Entra ID request is made."""

    def get_token(self, *scopes, **kwargs):
        return AccessToken("recorded-token", int(time.time()) + 3600)


@pytest.fixture
def cloud(tmp_path, monkeypatch):
    key = tmp_path / "id"
    key.write_text("private\n")
    (tmp_path / "id.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0test labkit\n")
    monkeypatch.setattr(base.secrets, "token_hex", lambda n: "0a1b2c3d")
    dialled = []
    monkeypatch.setattr(
        base,
        "wait_ssh",
        lambda address, port, user, key, deadline, **kw: dialled.append((address, port, user)),
    )
    p = get_provider(
        "azure",
        credential=Token(),
        subscription_id=SUB,
        resource_group="labkit-rg",
        location="westeurope",
        subnet_id=SUBNET,
        key_filename=str(key),
        prices={"Standard_B1s": 0.0104},
        poll_interval=0,
    )
    p.dialled = dialled
    return p


def test_provision_puts_a_tagged_server_waits_and_delete_waits_for_404(cloud):
    with replay("az_provision") as mock:
        [server] = cloud.provision("Standard_B1s", "Debian:debian-12:12-gen2:latest", PREFIX)
        cloud.destroy([server])
        put = json.loads(mock.calls[0].request.body)
        auth = mock.calls[0].request.headers["Authorization"]
    assert (server.name, server.address, server.price_per_hour) == ("labkit-c1--0a1b2c3d", "10.0.0.4", 0.0104)
    assert cloud.dialled == [("10.0.0.4", 22, "root")]
    assert auth == "Bearer recorded-token"
    nic = put["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]["properties"]
    assert (
        nic["deleteOption"] == "Delete" and nic["ipConfigurations"][0]["properties"]["subnet"]["id"] == SUBNET
    )
    keys = put["properties"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"]
    assert keys == [
        {
            "path": "/home/labkit/.ssh/authorized_keys",
            "keyData": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0test",
        }
    ]


def test_cleanup_deletes_only_servers_tagged_with_the_prefix(cloud):
    with replay("az_cleanup"):
        assert cloud.cleanup(PREFIX) == ["labkit-c1--0a1b2c3d"]
        assert cloud.list_labkit(PREFIX) == []


def test_list_by_tag(cloud):
    with replay("az_cleanup") as mock:
        listed = cloud.list_labkit(PREFIX)
        mock.reset()
    assert [s.name for s in listed] == ["labkit-c1--0a1b2c3d"]


def test_quota_is_a_backend_error(cloud):
    with replay("az_error_quota"), pytest.raises(BackendError, match="409 OperationNotAllowed.*quota") as err:
        cloud.provision("Standard_B1s", "Debian:debian-12:12-gen2:latest", PREFIX)
    assert not isinstance(err.value, ConfigError)


def test_unavailable_size_is_a_config_error(cloud):
    with replay("az_error_sku"), pytest.raises(ConfigError, match="SkuNotAvailable"):
        cloud.provision("Standard_B1s", "Debian:debian-12:12-gen2:latest", PREFIX)


def test_missing_role_is_backend_unavailable(cloud):
    with replay("az_error_auth"), pytest.raises(BackendUnavailable, match="AuthorizationFailed.*AZURE_"):
        cloud.check()


def test_failed_provisioning_deletes_the_server(cloud):
    with replay("az_error_state"), pytest.raises(BackendError, match="OS Provisioning .* did not finish"):
        cloud.provision("Standard_B1s", "Debian:debian-12:12-gen2:latest", PREFIX)
    assert cloud.dialled == []


@pytest.mark.parametrize("image", ["debian-12", "Debian:debian-12::latest"])
def test_bad_image_reference_is_a_config_error(cloud, image):
    with pytest.raises(ConfigError, match="publisher:offer:sku:version"):
        cloud.body("labkit-c1--0a1b2c3d", "Standard_B1s", image, {"labkit-prefix": PREFIX})
