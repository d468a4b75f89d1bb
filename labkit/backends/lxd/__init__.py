"""LXD backend (pylxd): one system container per instance, no NIC, hard limits.

Mapping of an :class:`~labkit.core.instance.InstanceSpec` (docs/design.md, "Instances")::

    pinned     limits.cpu = "0,1"  (a set; one CPU is written "3-3": LXD reads "3" as a count)
    floating   limits.cpu.allowance = "<vcpus*100>ms/100ms", no limits.cpu: any host CPU,
               capped at vcpus CPUs' worth of time (a bare count "2" would make LXD pin
               the container to 2 CPUs of its choosing, which is not floating)
    memory     limits.memory = "<memory_mb>MiB", limits.memory.enforce = hard,
               limits.memory.swap = false
    network    no profile, no NIC: the only device is the root disk on the storage pool;
               on a run's private network: a host bridge without uplink, NAT, DHCP or DNS
               (``lk<8 hex>``, as on ``local``) and a bridged NIC ``eth0`` (host end
               ``lk<8 hex>h<i>``) given its address and /etc/hosts by exec

The container's init brings loopback up, then execs ``sleep infinity`` (the
image has no init system, and none is needed): no exec is spent on loopback.
Each command runs through pylxd's ``Instance.execute`` on a
thread, as its own session (:mod:`..containers`), so ``_wait`` can time out and
``_kill`` can SIGKILL the session from a second exec. An exec whose websockets
could not be connected (LXD starts the command only once they are) is sent again
(:func:`execute`). OOM kills are read on the
host from the container's memory cgroup (LXD's socket is local), since an
unprivileged container does not see it.

Names: LXD instance names are host names, so ``_`` is refused (a campaign id
with ``_`` cannot run on LXD: a ConfigError says so). Mapping ``_`` to ``-``
would let campaign ``a-b``'s cleanup remove campaign ``a_b``'s instances.

The root disk lives on the default profile's pool (the set-up makes a btrfs pool
on a loop file: instances are snapshots, not copies); its driver is in the
fingerprint. An unprivileged instance is copied from the image's pre-shifted base
(:mod:`.base`), so LXD does not shift its files' owners at start.

>>> be = get_backend("lxd")            # image alias labkit-debian-12 by default
"""
from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...core import network_factors as netmod
from ...core.instance import InstanceSpec
from ...core.mounts import parse_mounts
from ...core.waiting import retry, wait_until
from ...errors import BackendError, BackendUnavailable, ConfigError
from ..base import (
    Backend,
    Instance,
    RawResult,
    StatsUnavailable,
    check_cpus,
    check_name,
    check_prefix,
    log,
)
from ..containers import CleanupByName, SessionExec, check_image, oom_kill_count, or_none
from ..output import CappedOutput
from ..private_network import Network, remove_bridges
from . import base as lxd_base

DEFAULT_IMAGE = "labkit-debian-12"
#: the container's init: loopback up, then ``sleep infinity`` (no init system is needed).
#: LXC splits ``lxc.init.cmd`` on blanks and honours no quotes, so the script's blanks are ${IFS}.
INIT_SCRIPT = "ip link set lo up && exec sleep infinity"
INIT_CMD = "/bin/sh -c " + INIT_SCRIPT.replace(" ", "${IFS}")
#: /proc/<pid>/cmdline of the init once loopback is up (it has exec'd sleep)
INIT_READY = b"sleep\0infinity\0"
START_HINT = ("start it with `lxd --group root > /var/log/labkit-lxd.log 2>&1 &` then "
              "`lxd waitready` and, the first time, `lxd init --preseed` (a dir pool, no network); "
              "or `systemctl start lxd`; or run `bash scripts/setup-containers.sh`")
CGROUP_ROOT = "/sys/fs/cgroup"


def socket_hint(socket: str) -> str:
    """Why this user cannot reach LXD's ``socket`` and the fix: a socket it may not open is a
    matter of groups (``--group root`` makes it root:root, and no group membership helps), not
    of a daemon to start (issue 44); else :data:`START_HINT`."""
    if os.path.exists(socket) and not os.access(socket, os.R_OK | os.W_OK):
        st = os.stat(socket)
        owner = f"uid {st.st_uid}, gid {st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o}"
        if st.st_gid == 0:
            return (f"LXD is running but its socket is root's ({owner}): it was started with `--group root`, "
                    "so membership of the lxd group cannot help; restart it with `--group lxd` (or "
                    "`systemctl start lxd`, whose socket is lxd's) and add this user to the lxd group "
                    "(`usermod -aG lxd USER`, then log in again)")
        return (f"LXD is running but this user may not open its socket ({owner}): add the user to "
                "that group (`usermod -aG GROUP USER`, then log in again)")
    return START_HINT


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


def lxd_prefix(prefix: str) -> str:
    """``prefix`` if LXD can hold names starting with it; ConfigError for ``_`` (see the module doc)."""
    check_prefix(prefix)
    if "_" in prefix:
        raise ConfigError(f"LXD instance names cannot contain '_' (they are host names): {prefix!r}; "
                          "use a campaign id without '_' to run on lxd")
    return prefix


def cpu_set(cpus: Iterable[int]) -> str:
    """``limits.cpu`` for a pinned set; a single CPU as a range, since LXD reads "1" as a count."""
    unique = sorted(set(int(c) for c in cpus))
    if len(unique) == 1:
        return f"{unique[0]}-{unique[0]}"
    return ",".join(str(c) for c in unique)


def instance_config(spec: InstanceSpec, cpus: list[int] | None, host_cpus: int) -> tuple[dict, dict]:
    """LXD config keys for ``spec`` and the metadata that records how it was realised."""
    config: dict[str, str] = {
        "limits.memory": f"{spec.memory_mb}MiB",
        "limits.memory.enforce": "hard",
        "limits.memory.swap": "false",
        "raw.lxc": f"lxc.init.cmd = {INIT_CMD}",
        "user.labkit": "1",
    }
    meta: dict[str, object] = {"memory_limit_mb": spec.memory_mb}
    if cpus is not None:
        config["limits.cpu"] = cpu_set(cpus)
        meta["limits.cpu"] = config["limits.cpu"]
    else:
        config["limits.cpu.allowance"] = f"{spec.vcpus * 100}ms/100ms"
        meta["limits.cpu.allowance"] = config["limits.cpu.allowance"]
        meta["cpu_quota_cpus"] = min(spec.vcpus, host_cpus)
    return config, meta


def memory_cgroup_file(proc_cgroup: str, name: str) -> str | None:
    """The host path of the OOM counter of container ``name``, from its init's /proc/<pid>/cgroup.

    cgroup v1: ``<root>/memory/<path>/memory.oom_control``; v2: ``<root>/<path>/memory.events``.
    The path is cut at ``lxc.payload.<name>``: processes of exec land there too.
    """
    v1: str | None = None
    v2: str | None = None
    for line in proc_cgroup.splitlines():
        _, controllers, group = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = group
        elif controllers == "":
            v2 = group
    path = v1 if v1 is not None else v2
    if path is None:
        return None
    payload = f"lxc.payload.{name}"
    if payload in path:
        path = path[:path.index(payload) + len(payload)]
    if v1 is not None:
        return f"{CGROUP_ROOT}/memory{path}/memory.oom_control"
    return f"{CGROUP_ROOT}{path}/memory.events"


#: how often an exec whose websockets could not be connected is tried in all
EXEC_ATTEMPTS = 3


def lxd_stats(status: str | None, cpu: dict | None, memory: dict | None) -> dict[str, float]:
    """:data:`~labkit.backends.base.STAT_KEYS` counters from LXD's instance state; StatsUnavailable
    for an instance that is not running (LXD then reports zeros)."""
    if status != "Running" or not isinstance(cpu, dict) or "usage" not in cpu:
        raise StatsUnavailable(f"LXD reports no counters for an instance in state {status!r}")
    out = {"cpu_s": cpu["usage"] / 1e9}
    if isinstance(memory, dict) and memory.get("usage") is not None:
        out["memory_bytes"] = float(memory["usage"])
    return out


def instance_busy(exc: BaseException) -> bool:
    """Whether LXD refused an operation on an instance because another one holds it ("Instance
    is busy running a "start" operation", a failed start winding down). LXD reports that only
    in the text of a failed operation (the operation's status code is the generic 400
    "Failure", the HTTP status 200), so this is the one place where the text decides."""
    pylxd = _sdk()
    return isinstance(exc, pylxd.exceptions.LXDAPIException) and not isinstance(
        exc, pylxd.exceptions.NotFound) and "busy" in str(exc).lower()


def in_websocket_connect(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while an exec's websockets were being connected (ws4py's
    client ``connect``): LXD starts the command only once all of them are, so it never ran."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "connect" and str(frame.f_globals.get("__name__", "")).startswith("ws4py"):
            return True
        tb = tb.tb_next
    return False


def execute(model: Any, argv: list[str], env: dict, out: CappedOutput | None = None,
            err: CappedOutput | None = None) -> Any:
    """pylxd's ``Instance.execute`` (its output fed to ``out`` and ``err`` as it comes, as bytes,
    when they are given: pylxd then keeps none of it), tried again (up to :data:`EXEC_ATTEMPTS` in all) when
    connecting its websockets fails (a BrokenPipeError or a refused handshake when LXD is
    slow to answer on a loaded host: LXD gives the client 5 s to connect them): the command had
    not started, so it cannot run twice. Any other error, or the last attempt's, propagates; a
    socket or ws4py error as BackendError."""
    def once() -> Any:
        if out is None or err is None:
            return model.execute(argv, environment=env)
        return model.execute(argv, environment=env, decode=False,
                             stdout_handler=out.write, stderr_handler=err.write)

    try:
        return retry(once, transient=in_websocket_connect, what=f"LXD exec in {model.name} (connecting "
                     "its websockets)", attempts=EXEC_ATTEMPTS, interval=0.2)
    except Exception as exc:
        if isinstance(exc, OSError) or type(exc).__module__.startswith("ws4py"):
            raise BackendError(f"LXD exec of {argv[:1]} in {model.name} failed: "
                               f"{type(exc).__name__}: {exc}") from exc
        raise


class LxdInstance(SessionExec, Instance):
    def __init__(self, backend: LxdBackend, name, spec, index, cpus, model):
        super().__init__(backend, name, spec, index, cpus)
        self.model = model  # pylxd's Instance

    def _run(self, argv, env) -> RawResult:
        try:
            out, err = CappedOutput(), CappedOutput()
            res = execute(self.model, argv, env or {}, out, err)
        except _sdk().exceptions.LXDAPIException as exc:
            if "command not found" not in str(exc).lower():
                raise BackendError(f"LXD exec in {self.name} failed: {exc}") from exc
            # LXD fails an exec that exits 127 (a shell's "command not found") and drops its output
            return RawResult(127, "", "command not found (exit status 127; LXD drops the output)\n")
        return RawResult.from_sinks(int(res.exit_code), out, err)

    def _run_quick(self, argv) -> str:
        try:
            return execute(self.model, argv, {}).stdout
        except _sdk().exceptions.NotFound:
            return ""  # the instance is gone, and its processes with it
        except _sdk().exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: {argv[:2]} in {self.name} failed: {exc}") from exc

    def _oom_kills(self) -> int | None:
        pid = self.model.state().pid
        path = memory_cgroup_file(Path(f"/proc/{pid}/cgroup").read_text(), self.name)
        return None if path is None else oom_kill_count(Path(path).read_text())

    def stats(self) -> dict[str, float]:
        """LXD's instance state (``GET /1.0/instances/<name>/state``): ``cpu_s`` (``cpu.usage``)
        and ``memory_bytes`` (``memory.usage``); StatsUnavailable when the instance is not
        running or the daemon does not answer."""
        try:
            state = self.model.state()
        except _sdk().exceptions.LXDAPIException as exc:
            raise StatsUnavailable(f"LXD state of {self.name} failed: {exc}") from exc
        return lxd_stats(getattr(state, "status", None), getattr(state, "cpu", None),
                         getattr(state, "memory", None))

    def host_command(self, argv: list[str]) -> list[str]:
        """An argv for this host that runs ``argv`` in the container (an MPI launch agent's
        command; the lxc CLI must be on this host)."""
        return ["lxc", "exec", self.name, "--", *argv]

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        api_error = _sdk().exceptions.LXDAPIException
        data = Path(local_path).read_bytes()
        try:
            self.model.files.put(remote_path, data, mode=mode, uid=0, gid=0)
            return
        except api_error:  # most likely its directory does not exist yet
            self.exec(["mkdir", "-p", os.path.dirname(remote_path) or "/"], timeout=30)
        try:
            self.model.files.put(remote_path, data, mode=mode, uid=0, gid=0)
        except api_error as exc:
            raise BackendError(f"copying {local_path} to {self.name}:{remote_path} failed: {exc}") from exc

    def _destroy(self):
        self.backend.remove(self.name)


class LxdBackend(CleanupByName, Backend):
    """System containers through pylxd's models on LXD's unix socket.

    Options: ``image`` (alias, default ``labkit-debian-12``), ``socket`` (default
    ``$LXD_DIR/unix.socket`` or ``/var/lib/lxd/unix.socket``), ``pool`` (storage pool
    for the root disk; default: the default profile's, else the first pool),
    ``privileged`` (default False), ``mounts`` (host directories as ``disk`` devices, see
    :mod:`labkit.core.mounts`).
    """

    name = "lxd"
    OPTIONS = ("image", "socket", "pool", "privileged", "mounts")
    daemons = ("lxd",)   # the daemon and its forks (lxc monitors, forkstart); comm is "lxd"

    def __init__(self, **options):
        super().__init__(**options)
        self.image = options.get("image") or DEFAULT_IMAGE
        self.socket = options.get("socket") or default_socket()
        self.pool = options.get("pool")
        self.privileged = bool(options.get("privileged", False))
        self.mounts = parse_mounts(options.get("mounts"), "lxd")
        self._client = self._host_cpus = None

    @property
    def client(self) -> Any:
        """pylxd's ``Client`` on the unix socket (models: instances, images, storage_pools)."""
        if self._client is None:
            pylxd = _sdk()
            if not os.path.exists(self.socket):
                raise BackendUnavailable(f"LXD is not running: no socket at {self.socket}; {START_HINT}")
            try:
                self._client = pylxd.Client(endpoint=self.socket)
            except Exception as exc:
                raise BackendUnavailable(
                    f"cannot reach LXD at {self.socket} ({type(exc).__name__}: {exc}); {socket_hint(self.socket)}"
                ) from exc
        return self._client

    # -- hooks -------------------------------------------------------------------
    def check(self) -> None:
        ours, errors = self.image.startswith("labkit-"), _sdk().exceptions
        hint = "build it with: labkit images build --only lxd" if ours else "import it first (lxc image import)"
        check_image(lambda: self.client.images.get_by_alias(self.image), f"LXD image alias {self.image!r}",
                    errors.NotFound, errors.LXDAPIException, hint)
        self._pool()

    def _pool(self) -> str:
        """The storage pool for root disks: the option, else the default profile's, else the first."""
        if self.pool:
            return self.pool
        pylxd = _sdk()
        try:
            root = self.client.profiles.get("default").devices.get("root") or {}
            pools = [p.name for p in self.client.storage_pools.all()]
        except pylxd.exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: reading the storage pools failed: {exc}") from exc
        if root.get("pool") in pools:
            self.pool = root["pool"]
        elif pools:
            self.pool = pools[0]
        else:
            raise BackendUnavailable("LXD has no storage pool; run `bash scripts/setup-containers.sh` "
                                     "(a btrfs pool, a dir pool as fallback)")
        return self.pool

    def host_cpus(self) -> int:
        if self._host_cpus is None:
            try:
                res = self.client.resources
            except _sdk().exceptions.LXDAPIException as exc:
                raise BackendError(f"LXD: reading the host's resources failed: {exc}") from exc
            self._host_cpus = int((res.get("cpu") or {}).get("total") or os.cpu_count() or 1)
        return self._host_cpus

    def _create(self, spec: InstanceSpec, name: str, index: int, cpus,
                network: Network | None = None) -> LxdInstance:
        pylxd = _sdk()
        lxd_prefix(check_name(name))
        check_cpus(cpus, self.host_cpus())
        config, meta = instance_config(spec, cpus, self.host_cpus())
        # proof of ownership: after a failure, only an instance carrying it is removed
        token = secrets.token_hex(8)
        config["user.labkit.token"] = token
        if self.privileged:
            config["security.privileged"] = "true"
        pool = self._pool()
        # unprivileged: a copy of the image's pre-shifted base starts without LXD's id shift
        base = None if self.privileged else lxd_base.base_for(
            self.client, pylxd.exceptions, self.image, pool, {"raw.lxc": config["raw.lxc"]},
            self.remove)
        source = ({"type": "copy", "source": base, "instance_only": True} if base
                  else {"type": "image", "alias": self.image})
        devices: dict[str, dict[str, str]] = {"root": {"type": "disk", "path": "/", "pool": pool}}
        body: dict[str, object] = {"name": name, "type": "container", "source": source,
                                   "profiles": [], "devices": devices, "config": config, "ephemeral": False}
        for i, m in enumerate(self.mounts):
            devices[f"labkit-mount{i}"] = {"type": "disk", "source": m.source, "path": m.target,
                                           "readonly": str(m.readonly).lower()}
        meta["mounts"] = [m.as_dict() for m in self.mounts]
        if network is not None:
            host_end = f"{network.device}h{index}"
            devices["eth0"] = {"type": "nic", "nictype": "bridged", "parent": network.device,
                               "name": "eth0", "host_name": host_end}
        try:
            model = self.client.instances.create(body, wait=True)
            model.start(wait=True)
            inst = LxdInstance(self, name, spec, index, cpus, model)
            # no NIC, but loopback must be up for servers and clients inside (apache + ab, iperf3)
            _wait_init(model, name)
            if network is not None:
                address = f"{network.addresses[index]}/{network.prefixlen}"
                inst.exec(["sh", "-c", f"ip addr add {address} dev eth0 && ip link set eth0 up && "
                           f"printf '{netmod.NO_DNS}' > /etc/resolv.conf"], timeout=30)
                inst.model.files.put("/etc/hosts", network.hosts_text().encode(), mode=0o644)
                inst.host_device = host_end
        except BaseException as exc:
            self._remove_if_ours(name, token)
            if isinstance(exc, pylxd.exceptions.LXDAPIException):
                if "image" in str(exc).lower() and "not found" in str(exc).lower():
                    raise BackendUnavailable(f"LXD image alias {self.image!r} is missing; build it "
                                             "with: labkit images build --only lxd") from exc
                raise BackendError(f"LXD: creating {name} failed: {exc}") from exc
            raise
        inst.metadata.update(meta, image=self.image, config=config, pool=pool, base=base)
        return inst

    def _create_network(self, network: Network) -> None:
        """A host bridge without uplink (see :func:`labkit.core.network_factors.create_bridge`), not an LXD
        managed network: that would need dnsmasq even with DHCP and DNS off."""
        network.conntrack_exempt = netmod.create_bridge(network.device, network.name,
                                                        f"{network.host_address}/{network.prefixlen}")

    def _remove_network(self, network: Network) -> None:
        netmod.delete_bridge(network.device, network.name)

    def cleanup(self, prefix: str) -> list[str]:
        """Remove instances named ``prefix*`` (any state), then networks named so."""
        return super().cleanup(prefix) + remove_bridges(prefix)

    def _remove_if_ours(self, name: str, token: str) -> None:
        """Remove ``name`` after a failed create/start, unless it is someone else's
        (LXD reports a name clash only once the create operation runs)."""
        try:
            if self.client.instances.get(name).config.get("user.labkit.token") == token:
                self.remove(name)
        except Exception as exc:  # gone already, or LXD unreachable: nothing more to do here
            if not isinstance(exc, _sdk().exceptions.NotFound):
                log.error("could not remove %s after a failed start: %s", name, exc)

    def remove(self, name: str, *, patience_s: float = 30.0) -> None:
        """Force-stop and delete instance ``name``; quiet if it is already gone.

        LXD refuses to delete an instance while another operation (a failed start
        winding down, say) holds it: that is retried for up to ``patience_s``.
        """
        pylxd = _sdk()

        def stop_and_delete() -> None:
            model = self.client.instances.get(name)
            if model.status != "Stopped":
                model.stop(force=True, wait=True)
            model.delete(wait=True)

        try:
            retry(stop_and_delete, transient=instance_busy, what=f"LXD: removing {name}",
                  timeout=patience_s, interval=0.3, backoff=1)
        except pylxd.exceptions.NotFound:
            return
        except pylxd.exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: removing {name} failed: {exc}") from exc

    def fingerprint(self) -> dict:
        env = self.client.host_info.get("environment", {})
        pool = self._pool()
        return {
            "backend": self.name,
            "lxd_version": env.get("server_version"),
            "lxc_version": (env.get("driver_version") or "").split("|")[0].strip() or None,
            "storage_pool": pool,
            "storage_driver": or_none(lambda: self.client.storage_pools.get(pool).driver),
            "storage_drivers_available": env.get("storage"),
            "cgroup_version": _cgroup_version(),
            "kernel": env.get("kernel_version"),
            "image": self.image,
            "image_fingerprint": or_none(lambda: self.client.images.get_by_alias(self.image).fingerprint)}

    # -- housekeeping ------------------------------------------------------------
    def created(self, names) -> dict[str, float]:
        """Each instance's ``created_at``, as LXD reports it."""
        from datetime import datetime
        wanted, out = set(names), {}
        try:
            found = self.client.instances.all()
        except _sdk().exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: listing instances failed: {exc}") from exc
        for m in found:
            stamp = str(getattr(m, "created_at", "") or "")
            if m.name not in wanted or not stamp:
                continue
            # "2026-11-27T05:00:00.123456789Z": at most microseconds for fromisoformat
            stamp = re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00")
            try:
                out[m.name] = datetime.fromisoformat(stamp).timestamp()
            except ValueError:
                continue
        return out

    def _names(self, prefix: str) -> list[str]:
        lxd_prefix(prefix)
        try:
            return [m.name for m in self.client.instances.all()]
        except _sdk().exceptions.LXDAPIException as exc:
            raise BackendError(f"LXD: listing instances failed: {exc}") from exc

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.api.session.close()
            except Exception:
                pass
        self._client = None


def _payload_pids(name: str) -> list[int] | None:
    """The pids in container ``name``'s payload cgroup and its children on this host
    (``lxc.payload.<name>`` at the root of the memory hierarchy on cgroup v1, of the unified one
    on v2, where the init may sit in a child such as ``init.scope``), or None when there is no
    such group here (LXD elsewhere or laid out otherwise)."""
    for top in (f"{CGROUP_ROOT}/memory/lxc.payload.{name}", f"{CGROUP_ROOT}/lxc.payload.{name}"):
        if not os.path.isdir(top):
            continue
        pids = []
        for d, _, _ in os.walk(top):
            try:
                pids += [int(p) for p in Path(d, "cgroup.procs").read_text().split()]
            except OSError:
                continue   # a child group removed meanwhile
        return pids
    return None


def _wait_init(model, name: str, patience_s: float = 30.0) -> None:
    """Wait until the container's init has brought loopback up (it then runs ``sleep``),
    seen on the host from its /proc/<pid>/cmdline; BackendError after ``patience_s``.

    The init is found in the container's payload cgroup (nothing else runs there yet); only
    where that group is not on this host is its pid asked of LXD, whose state call also
    computes the instance's disk and network usage."""
    found = _payload_pids(name)
    by_group = found is not None
    pids: list[int] = found if found is not None else [model.state().pid]
    looks = 0

    def ready() -> bool:
        nonlocal pids, looks
        looks += 1
        if looks > 1 and by_group:
            pids = _payload_pids(name) or []
        for pid in pids:
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == INIT_READY:
                    return True
            except OSError:
                continue   # a short-lived process of the init (ip) that has ended
        return False

    wait_until(ready, timeout=patience_s, interval=0.005, what=f"the init of {name} to bring loopback up (LXD)",
               detail=lambda: f"processes left in it: {pids or 'none'}")


def _cgroup_version() -> int:
    return 2 if os.path.exists(f"{CGROUP_ROOT}/cgroup.controllers") else 1
