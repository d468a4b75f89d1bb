"""LXD backend (pylxd): one system container per instance, no NIC, hard limits.

Mapping of an :class:`~labkit.instance.InstanceSpec` (DESIGN.md, "Instances")::

    pinned     limits.cpu = "0,1"  (a set; one CPU is written "3-3": LXD reads "3" as a count)
    floating   limits.cpu.allowance = "<vcpus*100>ms/100ms", no limits.cpu: any host CPU,
               capped at vcpus CPUs' worth of time (a bare count "2" would make LXD pin
               the container to 2 CPUs of its choosing, which is not floating)
    memory     limits.memory = "<memory_mb>MiB", limits.memory.enforce = hard,
               limits.memory.swap = false
    network    no profile, no NIC: the only device is the root disk on the storage pool

The container's init is ``sleep infinity`` (the image has no init system, and
none is needed). Commands run through the exec API with ``record-output``
under ``timeout -s KILL`` (coreutils) so a timeout really kills them.

>>> be = get_backend("lxd")            # image alias labkit-debian-12 by default
"""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from urllib.parse import quote, urlparse

from ..errors import BackendError, BackendUnavailable, ConfigError
from ..instance import InstanceSpec
from .base import NAME_PREFIX, Backend, Instance, RawResult, log
from .docker import check_cpus, timeout_argv, was_timed_out

DEFAULT_IMAGE = "labkit-debian-12"
#: the container's init: the image has no init system, and none is needed
INIT_CMD = "/bin/sleep infinity"
START_HINT = ("start it with `lxd --group root > /var/log/labkit-lxd.log 2>&1 &` then "
              "`lxd waitready` and, the first time, `lxd init --preseed` (a dir pool, no network); "
              "or `systemctl start lxd`; or run `bash scripts/setup-containers.sh`")


def _sdk():
    try:
        import pylxd
    except ImportError as exc:
        raise BackendUnavailable(
            "the lxd backend needs pylxd, which is not installed; install it with: pip install pylxd"
        ) from exc
    return pylxd


def default_socket() -> str:
    if os.environ.get("LXD_DIR"):
        return os.path.join(os.environ["LXD_DIR"], "unix.socket")
    for path in ("/var/snap/lxd/common/lxd/unix.socket", "/var/lib/lxd/unix.socket"):
        if os.path.exists(path):
            return path
    return "/var/lib/lxd/unix.socket"


def cpu_set(cpus) -> str:
    """``limits.cpu`` for a pinned set; a single CPU as a range, since LXD reads "1" as a count."""
    unique = sorted(set(int(c) for c in cpus))
    if len(unique) == 1:
        return f"{unique[0]}-{unique[0]}"
    return ",".join(str(c) for c in unique)


def instance_config(spec: InstanceSpec, cpus, host_cpus: int) -> tuple[dict, dict]:
    """LXD config keys for ``spec`` and the metadata that records how it was realised."""
    config = {
        "limits.memory": f"{spec.memory_mb}MiB",
        "limits.memory.enforce": "hard",
        "limits.memory.swap": "false",
        "raw.lxc": f"lxc.init.cmd = {INIT_CMD}",
        "user.labkit": "1",
    }
    meta = {"memory_limit_mb": spec.memory_mb}
    if cpus is not None:
        config["limits.cpu"] = cpu_set(cpus)
        meta["limits.cpu"] = config["limits.cpu"]
    else:
        config["limits.cpu.allowance"] = f"{spec.vcpus * 100}ms/100ms"
        meta["limits.cpu.allowance"] = config["limits.cpu.allowance"]
        meta["cpu_quota_cpus"] = min(spec.vcpus, host_cpus)
    return config, meta


class LxdInstance(Instance):
    def _exec(self, argv, timeout, env) -> RawResult:
        be: LxdBackend = self.backend
        wrapped = timeout_argv(argv, timeout)
        body = {"command": wrapped, "environment": {str(k): str(v) for k, v in (env or {}).items()}, "wait-for-websocket": False,
                "interactive": False, "record-output": True}
        t0 = time.monotonic()
        op = be._call("post", f"instances/{self.name}/exec", json=body)
        try:
            meta = be._wait(op, what=f"exec in {self.name}")
        except BackendError as exc:
            if "command not found" in str(exc).lower():  # as a shell would report it
                return RawResult(127, "", f"{wrapped[0]}: command not found\n")
            raise
        elapsed = time.monotonic() - t0
        inner = meta.get("metadata") or {}
        code = inner.get("return", -1)
        output = inner.get("output") or {}
        stdout = be._read_log(output.get("1") or output.get(1))
        stderr = be._read_log(output.get("2") or output.get(2))
        return RawResult(int(code), stdout, stderr, was_timed_out(int(code), elapsed, timeout))

    def put(self, local_path, remote_path, mode=0o755):
        be: LxdBackend = self.backend
        directory = os.path.dirname(remote_path) or "/"
        data = Path(local_path).read_bytes()
        headers = {"X-LXD-type": "file", "X-LXD-mode": f"{mode:04o}", "X-LXD-uid": "0",
                   "X-LXD-gid": "0", "X-LXD-write": "overwrite"}
        path = f"instances/{self.name}/files"
        try:
            be._call("post", path, params={"path": remote_path}, data=data, headers=headers)
        except (BackendError, _sdk().exceptions.NotFound):  # the directory does not exist yet
            self.exec(["mkdir", "-p", directory], timeout=30)
            be._call("post", path, params={"path": remote_path}, data=data, headers=headers)

    def _destroy(self):
        self.backend.remove(self.name)


class LxdBackend(Backend):
    """System containers through LXD's API (pylxd's client on the unix socket).

    Options: ``image`` (alias, default ``labkit-debian-12``), ``socket`` (default
    ``$LXD_DIR/unix.socket`` or ``/var/lib/lxd/unix.socket``), ``pool`` (storage pool
    for the root disk; default: the default profile's, else the first pool),
    ``privileged`` (default False).
    """

    name = "lxd"

    def __init__(self, image: str | None = None, socket: str | None = None,
                 pool: str | None = None, privileged: bool = False, **options):
        if options:
            raise ConfigError(f"lxd backend: unknown option(s) {', '.join(sorted(options))}; "
                              "allowed: image, socket, pool, privileged")
        super().__init__(image=image, socket=socket, pool=pool, privileged=privileged)
        self.image = image or DEFAULT_IMAGE
        self.socket = socket or default_socket()
        self.pool = pool
        self.privileged = bool(privileged)
        self._client = None
        self._host_cpus = None

    # -- connection and raw API --------------------------------------------------
    @property
    def client(self):
        if self._client is None:
            pylxd = _sdk()
            if not os.path.exists(self.socket):
                raise BackendUnavailable(f"LXD is not running: no socket at {self.socket}; {START_HINT}")
            try:
                self._client = pylxd.Client(endpoint=self.socket)
            except Exception as exc:
                raise BackendUnavailable(
                    f"cannot reach LXD at {self.socket} ({type(exc).__name__}: {exc}); {START_HINT}"
                ) from exc
        return self._client

    def _node(self, path: str):
        node = self.client.api
        for part in path.strip("/").split("/"):
            node = node[part]
        return node

    def _call(self, method: str, path: str, **kw):
        """One API request; returns the parsed JSON (or the response for raw reads)."""
        pylxd = _sdk()
        raw = kw.pop("raw", False)
        try:
            resp = getattr(self._node(path), method)(**kw)
        except pylxd.exceptions.NotFound:
            raise
        except pylxd.exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD {method.upper()} /1.0/{path} failed: {exc}") from exc
        except Exception as exc:
            raise BackendError(f"LXD {method.upper()} /1.0/{path} failed "
                               f"({type(exc).__name__}: {exc})") from exc
        if raw:
            return resp
        try:
            return resp.json()
        except ValueError:
            return {}

    def _wait(self, response: dict, what: str) -> dict:
        """Wait for the async operation of ``response``; return its final state."""
        op = response.get("operation")
        if not op:
            return response.get("metadata") or {}
        op_id = urlparse(op).path.rstrip("/").rsplit("/", 1)[-1]
        state = self._call("get", f"operations/{op_id}/wait").get("metadata") or {}
        if state.get("status_code", 200) >= 400 or state.get("status") == "Failure":
            raise BackendError(f"LXD {what} failed: {state.get('err') or state}")
        return state

    def _read_log(self, url: str | None) -> str:
        if not url:
            return ""
        path = urlparse(url).path
        if path.startswith("/1.0/"):
            path = path[len("/1.0/"):]
        resp = self._call("get", path, raw=True, is_api=False)
        return resp.content.decode("utf-8", "replace")

    # -- hooks -------------------------------------------------------------------
    def check(self) -> None:
        pylxd = _sdk()
        client = self.client
        try:
            client.api.images.aliases[self.image].get()
        except pylxd.exceptions.NotFound as exc:
            hint = ("build it with: labkit images build --only lxd"
                    if self.image.startswith("labkit-") else "import it first (lxc image import)")
            raise BackendUnavailable(f"LXD image alias {self.image!r} is missing; {hint}") from exc
        self._pool()

    def _pool(self) -> str:
        if self.pool:
            return self.pool
        try:
            dev = self._call("get", "profiles/default")["metadata"]["devices"].get("root") or {}
            if dev.get("pool"):
                self.pool = dev["pool"]
                return self.pool
        except (BackendError, KeyError, TypeError):
            pass
        pools = self._call("get", "storage-pools").get("metadata") or []
        if not pools:
            raise BackendUnavailable("LXD has no storage pool; create one with `lxd init --preseed` "
                                     "(a dir pool) or run `bash scripts/setup-containers.sh`")
        self.pool = pools[0].rstrip("/").rsplit("/", 1)[-1]
        return self.pool

    def host_cpus(self) -> int:
        if self._host_cpus is None:
            res = self._call("get", "resources").get("metadata") or {}
            self._host_cpus = int((res.get("cpu") or {}).get("total") or os.cpu_count() or 1)
        return self._host_cpus

    def _create(self, spec: InstanceSpec, name: str, index: int, cpus) -> LxdInstance:
        if not name.startswith(NAME_PREFIX):
            raise ConfigError(f"instance name {name!r} must start with {NAME_PREFIX!r}")
        check_cpus(cpus, self.host_cpus())
        config, meta = instance_config(spec, cpus, self.host_cpus())
        # proof of ownership: after a failure, only an instance carrying it is removed
        token = secrets.token_hex(8)
        config["user.labkit.token"] = token
        if self.privileged:
            config["security.privileged"] = "true"
        body = {"name": name, "type": "container",
                "source": {"type": "image", "alias": self.image},
                "profiles": [],
                "devices": {"root": {"type": "disk", "path": "/", "pool": self._pool()}},
                "config": config, "ephemeral": False}
        pylxd = _sdk()
        try:
            op = self._call("post", "instances", json=body)
        except (pylxd.exceptions.NotFound, BackendError) as exc:
            # refused before anything was made (e.g. the name exists: someone else's, left alone)
            if "not found" in str(exc).lower() and "image" in str(exc).lower():
                raise BackendUnavailable(f"LXD image alias {self.image!r} is missing; build it "
                                         "with: labkit images build --only lxd") from exc
            raise
        try:
            self._wait(op, what=f"creating {name}")
            self._wait(self._call("put", f"instances/{name}/state",
                                  json={"action": "start", "timeout": 60}),
                       what=f"starting {name}")
        except BaseException:
            self._remove_if_ours(name, token)
            raise
        inst = LxdInstance(self, name, spec, index, cpus)
        inst.metadata.update(meta, image=self.image, config=config)
        try:
            # no NIC, but loopback must be up for servers and clients inside (apache + ab, iperf3)
            inst.exec(["ip", "link", "set", "lo", "up"], timeout=30)
        except BaseException:
            self._remove_if_ours(name, token)
            raise
        return inst

    def _remove_if_ours(self, name: str, token: str) -> None:
        """Remove ``name`` after a failed create/start, unless it is someone else's
        (LXD reports a name clash only once the create operation runs)."""
        try:
            cfg = (self._call("get", f"instances/{name}").get("metadata") or {}).get("config") or {}
            if cfg.get("user.labkit.token") == token:
                self.remove(name)
        except Exception as exc:  # gone already, or LXD unreachable: nothing more to do here
            if "not found" not in str(exc).lower():
                log.error("could not remove %s after a failed start: %s", name, exc)

    def remove(self, name: str, *, patience_s: float = 30.0) -> None:
        """Force-stop and delete instance ``name``; quiet if it is already gone.

        LXD refuses to delete an instance while another operation (a failed start
        winding down, say) holds it: that is retried for up to ``patience_s``.
        """
        pylxd = _sdk()
        deadline = time.monotonic() + patience_s
        while True:
            try:
                state = self._call("get", f"instances/{name}/state").get("metadata") or {}
                if state.get("status_code") != 102:  # 102 = Stopped
                    self._wait(self._call("put", f"instances/{name}/state",
                                          json={"action": "stop", "force": True, "timeout": 30}),
                               what=f"stopping {name}")
                self._wait(self._call("delete", f"instances/{name}"), what=f"deleting {name}")
                return
            except pylxd.exceptions.NotFound:
                return
            except BackendError as exc:
                if "busy" not in str(exc).lower() or time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def fingerprint(self) -> dict:
        env = self.client.host_info.get("environment", {})
        return {
            "backend": self.name,
            "lxd_version": env.get("server_version"),
            "lxc_version": (env.get("driver_version") or "").split("|")[0].strip() or None,
            "storage_driver": env.get("storage"),
            "storage_driver_version": env.get("storage_version"),
            "cgroup_version": _cgroup_version(),
            "kernel": env.get("kernel_version"),
            "image": self.image,
            "image_fingerprint": self._image_fingerprint(),
        }

    def _image_fingerprint(self):
        try:
            return self._call("get", f"images/aliases/{quote(self.image)}")["metadata"]["target"]
        except Exception:
            return None

    # -- housekeeping ------------------------------------------------------------
    def list_labkit(self) -> list[str]:
        """Names of every instance whose name starts with ``labkit-``."""
        urls = self._call("get", "instances").get("metadata") or []
        names = [u.rstrip("/").rsplit("/", 1)[-1] for u in urls]
        return [n for n in names if n.startswith(NAME_PREFIX)]

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.api.session.close()
            except Exception:
                pass
        self._client = None


def _cgroup_version() -> int:
    return 2 if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else 1
