"""Removing a container while something else holds it: docker's 409 is told by its status code,
LXD's busy instance (which gives no code) by its text, retried through labkit.core.waiting."""

from __future__ import annotations

import pytest

from labkit.errors import BackendError


def _response(status: int, body: dict):
    requests = pytest.importorskip("requests")
    r = requests.Response()
    r.status_code, r.reason, r.url = status, "", "http+docker://localhost/containers/x"
    r._content = __import__("json").dumps(body).encode()
    return r


class _Api:
    def __init__(self, exc):
        self.exc = exc

    def remove_container(self, ref, force, v):
        raise self.exc


def test_docker_remove_is_quiet_on_a_conflict_whatever_its_text():
    """A second remover gets 409 Conflict ("removal of container ... is already in progress"):
    the container is going away, so that is no error; it is told by the status, not the words."""
    docker = pytest.importorskip("docker")
    from labkit.backends.docker import DockerBackend

    be = DockerBackend()
    be._client = type(
        "Client",
        (),
        {
            "api": _Api(
                docker.errors.APIError(
                    "Entfernen des Containers x läuft bereits", response=_response(409, {"message": "x"})
                )
            )
        },
    )()
    be.remove("x")  # quiet
    be._client.api = _Api(
        docker.errors.APIError(
            "already in progress", response=_response(500, {"message": "already in progress"})
        )
    )
    with pytest.raises(BackendError, match="removing container x failed"):
        be.remove("x")


def test_lxd_remove_waits_while_the_instance_is_busy(monkeypatch):
    pylxd = pytest.importorskip("pylxd")
    from labkit.backends.lxd import LxdBackend

    monkeypatch.setattr("labkit.core.waiting.time.sleep", lambda s: None)
    busy = pylxd.exceptions.LXDAPIException(
        _response(200, {"metadata": {"err": 'Instance is busy running a "start" operation'}})
    )
    other = pylxd.exceptions.LXDAPIException(_response(500, {"error": "Failed deleting instance"}))
    calls = []

    class Model:
        status = "Running"

        def __init__(self, fails, exc):
            self.fails, self.exc = fails, exc

        def stop(self, force, wait):
            calls.append("stop")
            if len([c for c in calls if c == "stop"]) <= self.fails:
                raise self.exc

        def delete(self, wait):
            calls.append("delete")

    def backend(model):
        be = LxdBackend()
        be._client = type("Client", (), {"instances": type("I", (), {"get": lambda self, n: model})()})()
        return be

    backend(Model(2, busy)).remove("labkit-t--0a")
    assert calls == ["stop", "stop", "stop", "delete"]
    calls.clear()
    with pytest.raises(BackendError, match="removing labkit-t--0a failed: Failed deleting"):
        backend(Model(1, other)).remove("labkit-t--0a")
    assert calls == ["stop"]  # not busy: not tried again
    calls.clear()
    with pytest.raises(BackendError, match="busy running"):
        backend(Model(99, busy)).remove("labkit-t--0a", patience_s=0)
    assert calls == ["stop"]
