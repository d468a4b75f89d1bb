"""Docker backend (docker SDK): one container per instance, no network, hard limits.

Mapping of an :class:`~labkit.instance.InstanceSpec` (DESIGN.md, "Instances")::

    pinned     cpuset_cpus = the host CPUs chosen by base.provision ("0,1")
    floating   nano_cpus   = vcpus * 1e9 (CFS quota, any host CPU)
    memory     mem_limit = memswap_limit = memory_mb (swap cannot dodge the limit)
    network    network_mode = "none"

The container's main process is ``sleep infinity``; commands run with ``exec``
under ``timeout -s KILL`` (coreutils), which kills the whole process group when
the time is up. Every container carries the label ``labkit=1`` and a name
starting with ``labkit-``.

>>> from labkit.backends import get_backend
>>> be = get_backend("docker")                  # image labkit/debian:12 by default
>>> [inst] = be.provision(InstanceSpec(vcpus=2, affinity="pinned"))
"""
from __future__ import annotations

import io
import json
import os
import posixpath
import secrets
import tarfile
import time
from pathlib import Path

from ..errors import BackendError, BackendUnavailable, ConfigError
from ..instance import InstanceSpec
from .base import NAME_PREFIX, Backend, Instance, RawResult

DEFAULT_IMAGE = "labkit/debian:12"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"
LABEL = "labkit"
#: the container's main process: it only keeps the container alive for exec
MAIN_COMMAND = ["sleep", "infinity"]

START_HINT = ("start it with `dockerd > /var/log/labkit-dockerd.log 2>&1 &` (or "
              "`systemctl start docker`), or run `bash scripts/setup-containers.sh`")


def _sdk():
    try:
        import docker
    except ImportError as exc:
        raise BackendUnavailable(
            "the docker backend needs the docker SDK for Python, which is not installed; "
            "install it with: pip install docker") from exc
    return docker


def timeout_argv(argv: list[str], timeout: float | None) -> list[str]:
    """Wrap ``argv`` so that the instance itself kills it (and its process group) at ``timeout``."""
    if timeout is None:
        return argv
    if timeout <= 0:
        raise ConfigError(f"exec timeout must be > 0 seconds, got {timeout!r}")
    return ["timeout", "-s", "KILL", f"{float(timeout):.3f}", *argv]


def was_timed_out(exit_code: int, elapsed: float, timeout: float | None) -> bool:
    """``timeout -s KILL`` exits 137 (124 if the command ended on its own signal); an OOM kill
    also gives 137, so the elapsed time tells them apart."""
    return timeout is not None and exit_code in (124, 137) and elapsed >= timeout * 0.98


def check_cpus(cpus, host_cpus: int) -> None:
    """Pinned CPUs must exist on the host (a daemon may silently accept one that does not)."""
    bad = sorted({c for c in cpus or () if not 0 <= int(c) < host_cpus})
    if bad:
        raise ConfigError(f"pinned CPU(s) {bad} do not exist: the host has CPUs 0-{host_cpus - 1}")


class DockerInstance(Instance):
    def __init__(self, backend: "DockerBackend", name, spec, index, cpus, container_id: str):
        super().__init__(backend, name, spec, index, cpus)
        self.id = container_id

    def _exec(self, argv, timeout, env) -> RawResult:
        be: DockerBackend = self.backend
        docker = _sdk()
        wrapped = timeout_argv(argv, timeout)
        t0 = time.monotonic()
        try:
            ex = be.exec_api.exec_create(self.id, wrapped, stdout=True, stderr=True,
                                         environment=env or None)
            out, err = be.exec_api.exec_start(ex["Id"], demux=True)
            code = be.exec_api.exec_inspect(ex["Id"])["ExitCode"]
        except docker.errors.APIError as exc:
            raise BackendError(f"docker exec in {self.name} failed: {exc}") from exc
        elapsed = time.monotonic() - t0
        if code is None:
            code = -1
        stdout = (out or b"").decode("utf-8", "replace")
        stderr = (err or b"").decode("utf-8", "replace")
        if code == 126 and "executable file not found" in stdout:  # report it as a shell would
            code, stdout, stderr = 127, "", stdout
        return RawResult(code, stdout, stderr, was_timed_out(code, elapsed, timeout))

    def put(self, local_path, remote_path, mode=0o755):
        docker = _sdk()
        data = Path(local_path).read_bytes()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo(posixpath.basename(remote_path))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tf.addfile(info, io.BytesIO(data))
        directory = posixpath.dirname(remote_path) or "/"
        api = self.backend.api
        try:
            try:
                api.put_archive(self.id, directory, buf.getvalue())
            except docker.errors.NotFound:
                self.exec(["mkdir", "-p", directory], timeout=30)
                api.put_archive(self.id, directory, buf.getvalue())
        except docker.errors.APIError as exc:
            raise BackendError(f"copying {local_path} to {self.name}:{remote_path} failed: {exc}") from exc

    def _destroy(self):
        docker = _sdk()
        try:
            self.backend.api.remove_container(self.id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" in str(exc):
                return
            raise BackendError(f"removing container {self.name} failed: {exc}") from exc


class DockerBackend(Backend):
    """Containers through the docker SDK.

    Options: ``image`` (default ``labkit/debian:12``), ``base_url`` (default
    ``$DOCKER_HOST`` or ``unix:///var/run/docker.sock``), ``api_timeout`` (s, 120).
    """

    name = "docker"

    def __init__(self, image: str | None = None, base_url: str | None = None,
                 api_timeout: float = 120, **options):
        unknown = sorted(options)
        if unknown:
            raise ConfigError(f"docker backend: unknown option(s) {', '.join(unknown)}; "
                              "allowed: image, base_url, api_timeout")
        super().__init__(image=image, base_url=base_url, api_timeout=api_timeout)
        self.image = image or DEFAULT_IMAGE
        self.base_url = base_url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
        self.api_timeout = api_timeout
        self._api = None
        self._exec_api = None
        self._info = None

    # -- connections -----------------------------------------------------------
    def _connect(self):
        docker = _sdk()
        try:
            api = docker.APIClient(base_url=self.base_url, timeout=self.api_timeout)
            api.ping()
        except docker.errors.DockerException as exc:
            raise BackendUnavailable(
                f"cannot reach the Docker daemon at {self.base_url} ({exc}); {START_HINT}") from exc
        except Exception as exc:  # requests' ConnectionError and friends
            raise BackendUnavailable(
                f"cannot reach the Docker daemon at {self.base_url} ({type(exc).__name__}: {exc}); "
                f"{START_HINT}") from exc
        return api

    @property
    def api(self):
        if self._api is None:
            self._api = self._connect()
        return self._api

    @property
    def exec_api(self):
        """A client without a read timeout: exec may legitimately run for hours; the
        command's own timeout is enforced inside the container."""
        if self._exec_api is None:
            docker = _sdk()
            self._exec_api = docker.APIClient(base_url=self.base_url, timeout=None,
                                              version=self.api.api_version)
        return self._exec_api

    # -- hooks -----------------------------------------------------------------
    def check(self) -> None:
        docker = _sdk()
        api = self.api
        try:
            api.inspect_image(self.image)
        except docker.errors.ImageNotFound as exc:
            hint = ("build it with: labkit images build --only docker"
                    if self.image.startswith("labkit/") else "pull or build it first")
            raise BackendUnavailable(f"docker image {self.image!r} is missing; {hint}") from exc
        except docker.errors.APIError as exc:
            raise BackendUnavailable(f"docker image {self.image!r} cannot be inspected: {exc}") from exc

    def info(self) -> dict:
        if self._info is None:
            self._info = self.api.info()
        return self._info

    def host_cpus(self) -> int:
        return int(self.info().get("NCPU") or os.cpu_count() or 1)

    def _create(self, spec: InstanceSpec, name: str, index: int, cpus) -> DockerInstance:
        docker = _sdk()
        if not name.startswith(NAME_PREFIX):
            raise ConfigError(f"instance name {name!r} must start with {NAME_PREFIX!r}")
        api = self.api
        check_cpus(cpus, self.host_cpus())
        limits = {"mem_limit": f"{spec.memory_mb}m", "memswap_limit": f"{spec.memory_mb}m"}
        meta = {"image": self.image, "memory_limit_mb": spec.memory_mb}
        if cpus is not None:
            cpuset = ",".join(str(c) for c in sorted(set(cpus)))
            limits["cpuset_cpus"] = cpuset
            meta["cpuset"] = cpuset
        else:
            quota = min(spec.vcpus, self.host_cpus())
            limits["nano_cpus"] = int(quota * 1e9)
            meta["cpu_quota_cpus"] = quota
            if quota < spec.vcpus:
                meta["note"] = (f"floating vcpus={spec.vcpus} capped at the host's {quota} CPUs "
                                "(docker refuses a quota above the host's CPU count)")
        # no init=True: with docker-init a missing main command no longer fails the start; the
        # zombies of finished daemons (httpd, iperf3) vanish with the container at teardown
        host_config = api.create_host_config(network_mode="none", **limits)
        # proof of ownership: after a failure, only a container carrying it is removed
        token = secrets.token_hex(8)
        labels = {LABEL: "1", "labkit.spec": json.dumps(spec.as_dict()),
                  "labkit.index": str(index), "labkit.token": token}
        cid = None
        try:
            cid = api.create_container(self.image, command=list(MAIN_COMMAND), name=name,
                                       hostname=name[:63], labels=labels, working_dir="/tmp/labkit",
                                       host_config=host_config, network_disabled=True)["Id"]
            api.start(cid)
        except docker.errors.ImageNotFound as exc:
            self._remove_if_ours(cid or name, token)
            raise BackendUnavailable(f"docker image {self.image!r} is missing; "
                                     "build it with: labkit images build --only docker") from exc
        except docker.errors.APIError as exc:
            self._remove_if_ours(cid or name, token)
            raise BackendError(f"creating container {name} ({limits}) failed: {exc}") from exc
        except BaseException:
            self._remove_if_ours(cid or name, token)
            raise
        inst = DockerInstance(self, name, spec, index, cpus, cid)
        inst.metadata.update(meta)
        return inst

    def _remove_if_ours(self, ref: str, token: str) -> None:
        """Remove ``ref`` after a failed create/start only if it carries our token: a name
        clash must never remove someone else's container."""
        try:
            labels = self.api.inspect_container(ref)["Config"].get("Labels") or {}
            if labels.get("labkit.token") == token:
                self.api.remove_container(ref, force=True, v=True)
        except Exception:  # already gone, or never made
            pass

    def fingerprint(self) -> dict:
        info = self.info()
        version = self.api.version()
        return {
            "backend": self.name,
            "docker_version": version.get("Version"),
            "docker_api_version": version.get("ApiVersion"),
            "containerd_version": next((c.get("Version") for c in version.get("Components", [])
                                        if c.get("Name") == "containerd"), None),
            "runc_version": (info.get("RuncCommit") or {}).get("ID"),
            "storage_driver": info.get("Driver"),
            "cgroup_version": info.get("CgroupVersion"),
            "cgroup_driver": info.get("CgroupDriver"),
            "kernel": info.get("KernelVersion"),
            "image": self.image,
            "image_id": self._image_id(),
        }

    def _image_id(self):
        try:
            return self.api.inspect_image(self.image)["Id"]
        except Exception:
            return None

    # -- housekeeping ----------------------------------------------------------
    def list_labkit(self) -> list[str]:
        """Names of every container whose name starts with ``labkit-`` (any state)."""
        out = []
        for c in self.api.containers(all=True, filters={"name": NAME_PREFIX}):
            for n in c.get("Names", []):
                if n.lstrip("/").startswith(NAME_PREFIX):
                    out.append(n.lstrip("/"))
        return out

    def close(self) -> None:
        for client in (self._api, self._exec_api):
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
        self._api = self._exec_api = None
