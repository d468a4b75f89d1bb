"""Docker backend (docker SDK): one container per instance, no network, hard limits.

Mapping of an :class:`~labkit.core.instance.InstanceSpec` (docs/design.md, "Instances")::

    pinned     cpuset_cpus = the host CPUs chosen by base.provision ("0,1")
    floating   nano_cpus   = vcpus * 1e9 (CFS quota, any host CPU)
    memory     mem_limit = memswap_limit = memory_mb (swap cannot dodge the limit)
    network    network_mode = "none"; on a run's private network: a Docker ``internal``
               bridge network (no route out, no NAT), a static address per container,
               ``extra_hosts`` for inst0, inst1, ... and host

The container's main process is ``sleep infinity``; each command is an exec run
as its own session (:mod:`.containers`) on a thread, so ``_wait`` can time out and
``_kill`` can SIGKILL the session from a second exec. OOM kills are read from the
container's own memory cgroup (``oom_kill`` of v1 ``memory.oom_control`` or v2
``memory.events``), seen from inside. Every container carries the label
``labkit=1`` and a name starting with ``labkit-``; ``cleanup(prefix)`` removes
every container (any state) whose name starts with ``prefix``.

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
from typing import Any

from ..core import network_factors as netmod
from ..core.instance import InstanceSpec
from ..core.mounts import parse_mounts
from ..errors import BackendError, BackendUnavailable
from . import base, docker_ssh
from .base import (
    NAME_PREFIX,
    Backend,
    Instance,
    RawResult,
    StatsUnavailable,
)
from .containers import CleanupByName, SessionExec, check_image, oom_kill_count, or_none
from .output import CappedOutput
from .private_network import Network

DEFAULT_IMAGE = "labkit/debian:12"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"
LABEL = "labkit"
#: the container's main process: it only keeps the container alive for exec
MAIN_COMMAND = ["sleep", "infinity"]
#: the container's memory cgroup as the container sees it (v1, then v2)
OOM_COUNTER = [
    "sh",
    "-c",
    ("cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"),
]

#: the host-side interface index of the container's eth0 (its veth peer)
IFLINK = ["cat", "/sys/class/net/eth0/iflink"]

START_HINT = (
    "start it with `dockerd > /var/log/labkit-dockerd.log 2>&1 &` (or "
    "`systemctl start docker`), or run `bash scripts/setup-containers.sh`"
)


def _sdk():
    try:
        import docker
    except ImportError as exc:
        raise BackendUnavailable(
            "the docker backend needs the docker SDK for Python, which is not installed; "
            "install it with: pip install docker"
        ) from exc
    return docker


def docker_stats(raw: dict) -> dict[str, float]:
    """:data:`~labkit.backends.base.STAT_KEYS` counters from one reading of the Docker stats API
    (``GET /containers/<id>/stats``); StatsUnavailable when it has no CPU counter (the
    container has stopped: the API then gives zeros without ``cpu_usage``)."""
    cpu = (raw or {}).get("cpu_stats") or {}
    usage = (cpu.get("cpu_usage") or {}).get("total_usage")
    if usage is None:
        raise StatsUnavailable("the Docker stats API gave no CPU usage (the container is not running)")
    out = {"cpu_s": usage / 1e9}
    throttling = cpu.get("throttling_data") or {}
    if "throttled_periods" in throttling:
        out["throttled_periods"] = float(throttling["throttled_periods"])
    if "throttled_time" in throttling:
        out["throttled_s"] = throttling["throttled_time"] / 1e9
    memory = ((raw or {}).get("memory_stats") or {}).get("usage")
    if memory is not None:
        out["memory_bytes"] = float(memory)
    return out


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


class DockerInstance(SessionExec, Instance):
    backend: DockerBackend

    def __init__(self, backend: DockerBackend, name, spec, index, cpus, container_id: str):
        super().__init__(backend, name, spec, index, cpus)
        self.id = container_id

    @property
    def container(self) -> Any:
        """The SDK's model of this container (made locally: no API call)."""
        return self.backend.client.containers.prepare_model({"Id": self.id})

    def _run(self, argv, env) -> RawResult:
        api = self.backend.exec_api
        try:
            exec_id = api.exec_create(self.id, argv, environment=env or None)["Id"]
            out, err = CappedOutput(), CappedOutput()  # fed as the stream comes, never whole
            for chunk_out, chunk_err in api.exec_start(exec_id, stream=True, demux=True):
                if chunk_out:
                    out.write(chunk_out)
                if chunk_err:
                    err.write(chunk_err)
            code = api.exec_inspect(exec_id)["ExitCode"]
        except _sdk().errors.APIError as exc:
            raise BackendError(f"docker exec in {self.name} failed: {exc}") from exc
        return RawResult.from_sinks(-1 if code is None else code, out, err)

    def _run_quick(self, argv) -> str:
        try:
            return _text(self.container.exec_run(argv).output)
        except _sdk().errors.NotFound:
            return ""  # the container is gone, and its processes with it
        except _sdk().errors.APIError as exc:
            raise BackendError(f"docker: {argv[:2]} in {self.name} failed: {exc}") from exc

    def _oom_kills(self) -> int | None:
        return oom_kill_count(self._run_quick(OOM_COUNTER))

    def stats(self) -> dict[str, float]:
        """The Docker stats API's counters (one reading, ``one-shot``: no second sample to wait
        for): ``cpu_s`` (``cpu_usage.total_usage``), ``throttled_periods``/``throttled_s``
        (``throttling_data``) and ``memory_bytes`` (``memory_stats.usage``)."""
        try:
            raw = self.container.stats(stream=False, one_shot=True)
        except _sdk().errors.APIError as exc:
            raise StatsUnavailable(f"docker stats of {self.name} failed: {exc}") from exc
        return docker_stats(raw)

    @property
    def remote_shell(self) -> bool:
        """Whether :meth:`host_command` goes through a remote shell (ssh), which parses its last word."""
        return self.backend.ssh is not None

    def host_command(self, argv: list[str]) -> list[str]:
        """An argv for this host that runs ``argv`` in the container with stdin attached (an
        MPI launch agent's command; the docker CLI must be on this host, or, for a daemon reached
        over SSH, on the daemon's host)."""
        exec_argv = ["exec", "-i", self.id, *argv]
        if self.backend.ssh is not None:
            return self.backend.ssh.ssh_argv(["docker", *exec_argv])
        return ["docker", "-H", self.backend.base_url, *exec_argv]

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        docker = _sdk()
        data = Path(local_path).read_bytes()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo(posixpath.basename(remote_path))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tf.addfile(info, io.BytesIO(data))
        directory = posixpath.dirname(remote_path) or "/"
        container = self.container
        try:
            try:
                container.put_archive(directory, buf.getvalue())
            except docker.errors.NotFound:
                self.exec(["mkdir", "-p", directory], timeout=30)
                container.put_archive(directory, buf.getvalue())
        except docker.errors.APIError as exc:
            raise BackendError(f"copying {local_path} to {self.name}:{remote_path} failed: {exc}") from exc

    def _destroy(self):
        self.backend.remove(self.id, self.name)


class DockerBackend(CleanupByName, Backend):
    """Containers through the docker SDK.

    Options: ``image`` (default ``labkit/debian:12``), ``base_url`` (default
    ``$DOCKER_HOST`` or ``unix:///var/run/docker.sock``), ``api_timeout`` (s, 120),
    ``mounts`` (host directories as bind volumes, see :mod:`labkit.core.mounts`); for an
    ``ssh://user@host:port`` base URL ``ssh_key_filename``, ``ssh_known_hosts``,
    ``host_key_policy`` (recorded in the fingerprint) and ``connect_timeout`` (:mod:`.docker_ssh`).
    """

    name = "docker"
    OPTIONS = ("image", "base_url", "api_timeout", "mounts", *docker_ssh.OPTIONS)
    daemons = ("dockerd", "containerd", "containerd-shim", "docker-proxy")  # comm: 15 characters

    def __init__(self, **options):
        super().__init__(**options)
        self.image = options.get("image") or DEFAULT_IMAGE
        self.base_url = options.get("base_url") or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
        self.api_timeout = options.get("api_timeout", 120)
        self.mounts = parse_mounts(options.get("mounts"), "docker")
        self.ssh = docker_ssh.SshSettings.from_options(self.base_url, options)
        self._client = self._exec_api = self._info = None

    # -- connections -----------------------------------------------------------
    @property
    def client(self) -> Any:
        """The SDK's ``DockerClient`` (models: containers, images)."""
        if self._client is None:
            docker = _sdk()
            try:
                if self.ssh is None:
                    client = docker.DockerClient(base_url=self.base_url, timeout=self.api_timeout)
                else:
                    client = docker_ssh.client(self.base_url, self.ssh, timeout=self.api_timeout)
                client.ping()
            except BackendUnavailable:
                raise
            except Exception as exc:  # DockerException, requests' ConnectionError and friends
                raise BackendUnavailable(
                    f"cannot reach the Docker daemon at {self.base_url} ({type(exc).__name__}: "
                    f"{exc}); {START_HINT}"
                ) from exc
            self._client = client
        return self._client

    @property
    def api(self) -> Any:
        """The low-level ``APIClient`` of :attr:`client`."""
        return self.client.api

    @property
    def exec_api(self) -> Any:
        """A client without a read timeout: exec may legitimately run for hours (the
        deadline is ``Instance.exec``'s, which kills the command)."""
        if self._exec_api is None:
            if self.ssh is None:
                self._exec_api = _sdk().APIClient(
                    base_url=self.base_url, timeout=None, version=self.api.api_version
                )
            else:
                self._exec_api = docker_ssh.api_client(
                    self.base_url, self.ssh, timeout=None, version=self.api.api_version
                )
        return self._exec_api

    # -- hooks -----------------------------------------------------------------
    def check(self) -> None:
        errors = _sdk().errors
        check_image(
            lambda: self.client.images.get(self.image),
            f"docker image {self.image!r}",
            errors.ImageNotFound,
            errors.APIError,
            "build it with: labkit images build --only docker"
            if self.image.startswith("labkit/")
            else "pull or build it first",
        )

    def info(self) -> dict:
        if self._info is None:
            try:
                self._info = self.client.info()
            except _sdk().errors.APIError as exc:
                raise BackendError(f"docker info failed: {exc}") from exc
        return self._info

    def host_cpus(self) -> int:
        return int(self.info().get("NCPU") or os.cpu_count() or 1)

    def _create(
        self, spec: InstanceSpec, name: str, index: int, cpus, network: Network | None = None
    ) -> DockerInstance:
        docker = _sdk()
        base.check_name(name)
        base.check_cpus(cpus, self.host_cpus())
        limits: dict[str, str | int] = {
            "mem_limit": f"{spec.memory_mb}m",
            "memswap_limit": f"{spec.memory_mb}m",
        }
        meta: dict[str, object] = {
            "image": self.image,
            "memory_limit_mb": spec.memory_mb,
            "mounts": [m.as_dict() for m in self.mounts],
        }
        if cpus is not None:
            cpuset = ",".join(str(c) for c in sorted(set(cpus)))
            limits["cpuset_cpus"] = meta["cpuset"] = cpuset
        else:
            quota = min(spec.vcpus, self.host_cpus())
            limits["nano_cpus"] = int(quota * 1e9)
            meta["cpu_quota_cpus"] = quota
            if quota < spec.vcpus:
                meta["note"] = (
                    f"floating vcpus={spec.vcpus} capped at the host's {quota} CPUs "
                    "(docker refuses a quota above the host's CPU count)"
                )
        # proof of ownership: after a failure, only a container carrying it is removed
        token = secrets.token_hex(8)
        labels = {
            LABEL: "1",
            "labkit.spec": json.dumps(spec.as_dict()),
            "labkit.index": str(index),
            "labkit.token": token,
        }
        # no init=True: with docker-init a missing main command no longer fails the start; the
        # zombies of finished daemons (httpd, iperf3) vanish with the container at teardown
        if network is None:
            net = {"network_mode": "none", "network_disabled": True}
        else:
            net = {
                "network": network.name,
                "extra_hosts": network.names(),
                "networking_config": {
                    network.name: self.api.create_endpoint_config(ipv4_address=network.addresses[index])
                },
            }
        try:
            container = self.client.containers.create(
                self.image,
                command=list(MAIN_COMMAND),
                name=name,
                hostname=name,
                labels=labels,
                working_dir="/tmp/labkit",
                **net,
                **limits,
                volumes={
                    m.source: {"bind": m.target, "mode": "ro" if m.readonly else "rw"} for m in self.mounts
                },
            )
            container.start()
        except BaseException as exc:
            self._remove_if_ours(name, token)
            if isinstance(exc, docker.errors.ImageNotFound):
                raise BackendUnavailable(
                    f"docker image {self.image!r} is missing; "
                    "build it with: labkit images build --only docker"
                ) from exc
            if isinstance(exc, docker.errors.APIError):
                raise BackendError(f"creating container {name} ({limits}) failed: {exc}") from exc
            raise
        inst = DockerInstance(self, name, spec, index, cpus, container.id)
        inst.metadata.update(meta)
        if network is not None:
            try:
                self._confine(inst, container)
            except BaseException:
                inst.destroy()
                raise
        return inst

    def _confine(self, inst: DockerInstance, container) -> None:
        """Keep a private-network container on its network: no default route (Docker gives it
        one via the host), no DNS server (the names are in /etc/hosts); find the host end of its
        eth0's veth pair (where its link is shaped)."""
        container.reload()
        pid = int(container.attrs["State"]["Pid"])
        netmod.host_output(
            ["nsenter", "-t", str(pid), "-n", "ip", "route", "del", "default"],
            f"removing the default route of {inst.name}",
        )
        inst.exec(["sh", "-c", f"printf '{netmod.NO_DNS}' > /etc/resolv.conf"], timeout=30)
        try:
            inst.host_device = netmod.device_by_index(int(inst._run_quick(IFLINK).strip()))
        except ValueError as exc:
            raise BackendError(f"cannot read the veth peer of {inst.name}'s eth0: {exc}") from exc

    def _create_network(self, network: Network) -> None:
        """An ``internal`` bridge network (no NAT, no route out) on ``network.subnet``."""
        docker = _sdk()
        ipam = docker.types.IPAMConfig(
            pool_configs=[docker.types.IPAMPool(subnet=network.subnet, gateway=network.host_address)]
        )
        try:
            self.client.networks.create(
                network.name,
                driver="bridge",
                internal=True,
                ipam=ipam,
                labels={LABEL: "1"},
                options={
                    "com.docker.network.bridge.name": network.device,
                    "com.docker.network.bridge.enable_ip_masquerade": "false",
                },
            )
        except docker.errors.APIError as exc:
            raise BackendError(f"creating docker network {network.name} failed: {exc}") from exc

    def _remove_network(self, network: Network) -> None:
        self._remove_network_named(network.name)

    def _remove_network_named(self, name: str) -> None:
        docker = _sdk()
        try:
            self.client.networks.get(name).remove()
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            raise BackendError(f"removing docker network {name} failed: {exc}") from exc

    def networks(self, prefix: str) -> list[str]:
        """Names of the docker networks whose names start with ``prefix``."""
        base.check_prefix(prefix)
        try:
            found = self.api.networks(names=[prefix])
        except _sdk().errors.APIError as exc:
            raise BackendError(f"listing docker networks failed: {exc}") from exc
        return sorted(n["Name"] for n in found if n["Name"].startswith(prefix))

    def cleanup(self, prefix: str) -> list[str]:
        """Remove containers named ``prefix*`` (any state), then networks named so."""
        names = super().cleanup(prefix)
        nets = self.networks(prefix)
        for name in nets:
            self._remove_network_named(name)
        return names + nets

    def _remove_if_ours(self, ref: str, token: str) -> None:
        """Remove ``ref`` after a failed create/start only if it carries our token: a name
        clash must never remove someone else's container."""
        try:
            container = self.client.containers.get(ref)
            if container.labels.get("labkit.token") == token:
                container.remove(force=True, v=True)
        except Exception:  # already gone, or never made
            pass

    def remove(self, ref: str, name: str | None = None) -> None:
        """Force-remove container ``ref`` (id or name) and its volumes; quiet if it is gone."""
        docker = _sdk()
        try:
            self.api.remove_container(ref, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            # 409 Conflict: with force, only "removal of container ... is already in progress"
            if exc.status_code != 409:
                raise BackendError(f"removing container {name or ref} failed: {exc}") from exc

    def fingerprint(self) -> dict:
        info = self.info()
        version = self.client.version()
        return {
            "backend": self.name,
            "docker_version": version.get("Version"),
            "docker_api_version": version.get("ApiVersion"),
            "containerd_version": next(
                (c.get("Version") for c in version.get("Components", []) if c.get("Name") == "containerd"),
                None,
            ),
            "runc_version": (info.get("RuncCommit") or {}).get("ID"),
            "storage_driver": info.get("Driver"),
            "cgroup_version": info.get("CgroupVersion"),
            "cgroup_driver": info.get("CgroupDriver"),
            "kernel": info.get("KernelVersion"),
            "image": self.image,
            "image_id": or_none(lambda: self.client.images.get(self.image).id),
            **({"host_key_policy": self.ssh.host_key_policy} if self.ssh else {}),
        }

    # -- housekeeping ----------------------------------------------------------
    def created(self, names) -> dict[str, float]:
        """Each container's ``Created`` time, as the daemon reports it."""
        wanted = set(names)
        try:
            found = self.api.containers(all=True, filters={"name": NAME_PREFIX})
        except _sdk().errors.APIError as exc:
            raise BackendError(f"listing docker containers failed: {exc}") from exc
        return {
            n.lstrip("/"): float(c["Created"])
            for c in found
            for n in c.get("Names", [])
            if n.lstrip("/") in wanted and isinstance(c.get("Created"), (int, float))
        }

    def _names(self, prefix: str) -> list[str]:
        try:
            found = self.api.containers(all=True, filters={"name": base.check_prefix(prefix)})
        except _sdk().errors.APIError as exc:
            raise BackendError(f"listing docker containers failed: {exc}") from exc
        return [n.lstrip("/") for c in found for n in c.get("Names", [])]

    def close(self) -> None:
        for client in (self._client, self._exec_api):
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
        self._client = self._exec_api = None
