"""The ``local`` backend: an instance is a cgroup on this machine (the embedded default).

* pinned   → cpuset = the chosen host CPUs (one per vCPU; wraps around when overcommitted)
* floating → cpuset = every CPU, CPU quota = vcpus CPUs' worth of time
* memory   → cgroup memory limit (and no swap)
* network  → its own network namespace with only loopback up (``network="none"``,
  the default); ``network="host"`` shares the host's network. On a run's private
  network (``provision(..., network=...)``) the namespace also holds ``eth0``, one
  end of a veth pair whose host end (``lk<8 hex>h<i>``) is a port of the run's
  bridge (``lk<8 hex>``, its ``ifalias`` the network's name, which is how
  ``cleanup(prefix)`` finds it); the instance's own ``hosts`` file is bind-mounted on
  ``/etc/hosts`` in its mount namespace.

Processes join the cgroup before they exec (:data:`cgroups.JOIN`), and run in
their own session, in the instance's work directory: a private (0700,
root-owned) directory under a work root that labkit creates and verifies
(``/run/labkit/instances`` as root; it refuses a work root owned by someone
else or writable by others). A timeout kills the command's process group and
then every process left in the instance's cgroup (``cgroup.kill`` on v2; frozen, killed
and thawed on v1), and waits until it is empty.

Isolation (option ``isolation``, :mod:`labkit.backends.sandbox`): ``strict`` (the
default) runs every command in the instance's own PID and mount namespaces (and its
network namespace unless ``network="host"``), with no capabilities and
``no_new_privs``, in a clean environment, with the controller's data dirs, the
registry of running campaigns (``/run/labkit``), the other instances' work dirs and
the directories of the ``hide`` option covered by an empty read-only tmpfs, every file system
read-only but the work dir, ``/tmp``, ``/var/tmp``, ``/dev`` and read-write ``mounts``
(so ``/etc``, ``/sys``, the cgroup hierarchies, ``/proc/sys`` too), and at most ``pids_max`` tasks (default 4096, the cgroup pids
controller; recorded as None where the host has none). ``relaxed`` is the same with
:data:`sandbox.RELAXED_CAPS` kept (for a workload that must switch users or own files
of other users); ``none``: the namespaces of before only, full root, the
controller's environment. ``network="host"`` shares the host's network namespace:
reduced isolation, recorded as such. The isolation is recorded in each instance's
metadata (``isolation``) and in :meth:`LocalBackend.fingerprint`. Isolation costs no
measurable time: one static helper (``lkns``, :mod:`~labkit.backends.sandbox`) holds an
instance's namespaces, making its network namespace too (no ``ip`` exec) unless a private
network is attached first, and starts each command with one exec; a command's end is
seen on its pidfd (:mod:`~labkit.backends.child`), and a network namespace is deleted
without an ``ip`` exec.

Without root or a usable cgroup the backend refuses with a clear error, unless
``enforce_limits=False``: then commands run unconfined (pinned instances still
get ``taskset``; no network namespace without root) and ``limits_enforced:
False`` is recorded in each run's metadata (and isolation ``none`` without root).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

from ..core import network_factors as netmod
from ..core.host_commands import run_host
from ..core.instance import InstanceSpec
from ..core.mounts import parse_mounts, same_path_mounts
from ..errors import BackendError, BackendUnavailable, ConfigError
from . import cgroups, child, sandbox
from .base import Backend, Instance, RawResult, check_name, check_prefix
from .cgroup_counters import CgroupCounters
from .local_hidden import data_dirs, hidden_signature
from .local_workroot import default_workroot, private_dir
from .private_network import Network, remove_bridges

#: run argv with the instance's hosts file ($0) on /etc/hosts (in a private mount namespace)
_HOSTS = 'mount --bind "$0" /etc/hosts && exec "$@"'

#: what an isolated instance runs to write a file it is given on stdin ($1: path, $2: octal mode)
_PUT = 'umask 077 && mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod -- "$2" "$1"'
PUT_TIMEOUT_S = 300
#: the longest an ``ip`` command making a namespace or connecting an instance may take
IP_TIMEOUT_S = 30

NETWORKS = ("none", "host")
DEFAULT_PIDS_MAX = 4096


class _Done:
    """A command that could not even start (its result is known at once)."""

    def __init__(self, raw: RawResult):
        self.raw = raw


class LocalInstance(CgroupCounters, Instance):
    backend: LocalBackend

    def __init__(self, backend: LocalBackend, name, spec, index, cpus, host_cpus: list[int] | None):
        super().__init__(backend, name, spec, index, cpus)
        self.host_cpu_ids = host_cpus  # real CPU ids when pinned
        self._dir = Path(backend.workroot) / name
        self.netns = name if backend.isolate else None
        self.hosts_file: str | None = None  # set on a private network
        self._holder: subprocess.Popen | None = (
            None  # the process holding its PID and mount namespaces (sandbox)
        )
        self.hidden: list[str] = []  # the host directories covered inside it (LocalBackend.hidden_dirs)
        self.metadata.update(
            host_cpu_ids=host_cpus,
            limits_enforced=backend.driver is not None,
            cgroup_version=backend.driver.version if backend.driver else None,
            network="none" if self.netns else "host",
            isolation=backend.isolation_record(),
        )

    def _sandbox(self, new_netns: bool = False) -> None:
        """Start the holder of its namespaces (isolation strict/relaxed): after the network
        is attached, since it binds the hosts file; ``new_netns``: it makes the network
        namespace too (none was made: no private network)."""
        be: LocalBackend = self.backend
        own = os.path.realpath(self._dir)
        os.makedirs(self._dir / sandbox.TMP_NAME, mode=0o700, exist_ok=True)  # its $TMPDIR
        for d in (
            self._dir,
            self._dir / sandbox.TMP_NAME,
        ):  # the instance's root (uid 0 of its user namespace)
            os.chown(d, sandbox.USERNS_BASE, sandbox.USERNS_BASE)
        hidden = [d for d in be.hidden_dirs() if d != own]
        tmproot = sandbox.make_tmproot(be.tmproot(), self.name)
        self._holder = sandbox.start_holder(
            sandbox.holder_argv(
                self.name, str(self._dir), self.hosts_file, self.netns, be.mounts, new_netns, tmproot
            ),
            hidden,
        )
        self.hidden = hidden
        # stored as a count and a digest: the paths name other campaigns' and users' data dirs
        self.metadata["isolation"] = {
            **self.metadata["isolation"],
            "hidden": len(hidden),
            "hidden_sha256": hashlib.sha256("\n".join(hidden).encode()).hexdigest()[:16],
        }

    @property
    def workdir(self) -> str:
        return str(self._dir)

    def _wrap(self, argv: list[str]) -> tuple[list[str], dict]:
        be: LocalBackend = self.backend
        extra = {"LABKIT_CGROUP_PROCS": " ".join(be.driver.procs_files(self.name))} if be.driver else {}
        if self._holder is not None:  # one exec: joins the cgroup on the host, then enters the namespaces
            argv = [*sandbox.enter(self._holder, str(self._dir), be.isolation, self.netns is not None), *argv]
            if be.driver is not None:
                return argv, extra
            prefix = []
        else:  # nsenter, not `ip netns exec`: that remounts /sys and would hide the cgroup files
            prefix = ["nsenter", f"--net=/run/netns/{self.netns}", "--"] if self.netns else []
        if self.hosts_file and self._holder is None:
            prefix += ["unshare", "--mount", "--propagation", "private", "sh", "-c", _HOSTS, self.hosts_file]
        if be.driver is not None:
            return [*prefix, "/bin/sh", "-c", cgroups.JOIN, "labkit-join", *argv], extra
        if self.host_cpu_ids:
            return [*prefix, "taskset", "-c", cgroups.format_cpulist(self.host_cpu_ids), *argv], {}
        return [*prefix, *argv], {}

    def host_command(self, argv: list[str]) -> list[str]:
        """An argv for this host that runs ``argv`` in the instance (namespaces, hosts file,
        cgroup, capabilities, environment), attached to the caller's stdin/stdout: an MPI
        launch agent's command."""
        wrapped, extra = self._wrap(argv)
        if self._holder is None:
            return ["env", *(f"{k}={v}" for k, v in extra.items()), *wrapped]
        env = sandbox.environment(str(self._dir), None, extra)
        return ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *wrapped]

    def _environ(self, env: dict | None, extra: dict) -> dict:
        """A command's environment: clean when isolated (:func:`sandbox.environment`)."""
        if self._holder is None:
            return {**os.environ, **(env or {}), **extra}
        return sandbox.environment(str(self._dir), env, extra)

    # -- exec hooks --------------------------------------------------------
    def _start(self, argv, env):
        wrapped, extra = self._wrap(argv)
        try:  # output drained into capped sinks as it comes (labkit.backends.child)
            return child.start(wrapped, cwd=self._dir, env=self._environ(env, extra))
        except FileNotFoundError as exc:
            return _Done(RawResult(127, "", f"{exc}\n"))

    def _wait(self, handle, timeout):
        if isinstance(handle, _Done):
            return handle.raw
        raw = child.wait(handle, timeout)
        if raw is not None and raw.exit_code == cgroups.JOIN_FAILED and "cgroup.procs" in raw.stderr:
            raise BackendError(f"could not join cgroup {self.name}: {raw.stderr.strip()}")
        return raw

    def _kill(self, handle) -> None:
        if isinstance(handle, _Done):
            return
        try:
            os.killpg(handle.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        be: LocalBackend = self.backend
        if be.driver is not None:  # whatever left the session (daemons) is still in the cgroup
            cgroups.apply(be.driver.kill(self.name))

    def _read(self, path: str) -> str:
        return cgroups.read_local(path)

    def put(self, local_path: str | os.PathLike, remote_path: str, mode: int = 0o755) -> None:
        """Copy ``local_path`` to ``remote_path`` (relative: in the work dir) as the instance sees
        it. Isolated, the instance writes it itself (:data:`_PUT`, through ``lkns enter``): into
        its own ``/tmp`` too, as its own user, and a link it planted leads nowhere outside."""
        dest = Path(remote_path)
        if not dest.is_absolute():
            dest = self._dir / dest
        if self._holder is None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(local_path, dest)
            os.chmod(dest, mode)
            return
        argv, extra = self._wrap(["/bin/sh", "-c", _PUT, "labkit-put", str(dest), f"{mode:o}"])
        with open(local_path, "rb") as fh:
            run_host(
                argv,
                what=f"copying {local_path} to {dest} in local instance {self.name}",
                timeout=PUT_TIMEOUT_S,
                stdin=fh,
                cwd=self._dir,
                env=self._environ(None, extra),
                text=False,
            )

    def _destroy(self) -> None:
        self.backend._remove(self.name, self._holder)


#: the words a yes/no option may be written as (any case), from YAML or ``--backend-option KEY=VALUE``
FLAG_WORDS = {
    "true": True,
    "yes": True,
    "on": True,
    "1": True,
    "false": False,
    "no": False,
    "off": False,
    "0": False,
}


def flag_option(name: str, value) -> bool:
    """``value`` of yes/no option ``name`` as a bool: True/False, 1/0 or one of :data:`FLAG_WORDS` in any
    case ("False", "no", "0"); ConfigError naming the accepted spellings otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in FLAG_WORDS:
        return FLAG_WORDS[value.strip().lower()]
    raise ConfigError(
        f"local backend: {name} must be true or false (also yes/no, 1/0, any case), got {value!r}"
    )


class LocalBackend(Backend):
    """Instances as cgroups on this machine.

    Options: ``enforce_limits`` (default True: refuse when cgroups can't be
    used), ``workroot`` (where instance work directories go; created 0700 and
    verified, see :func:`.local_workroot.private_dir`), ``network`` ("none": own network
    namespace with loopback only, the default; "host": the host's network), ``mounts``
    (host directories, see :mod:`labkit.core.mounts`: instances share the host's file system, so
    each is seen at its own path; a different target is refused; read-only enforced when
    isolated),
    ``isolation`` ("strict", the default; "relaxed"; "none": see the module docstring),
    ``pids_max`` (tasks per instance, default 4096; None: no cap), ``hide`` (more host
    directories covered in every instance, besides the controller's data dirs,
    ``/run/labkit`` and the work root).
    """

    name = "local"
    OPTIONS = ("enforce_limits", "workroot", "network", "mounts", "isolation", "pids_max", "hide")

    def __init__(
        self,
        enforce_limits: bool = True,
        workroot: str | None = None,
        network: str = "none",
        mounts=None,
        isolation: str = "strict",
        pids_max: int | None = DEFAULT_PIDS_MAX,
        hide=None,
        **unknown,
    ):
        super().__init__(**unknown)  # an unknown option is refused with the list of valid ones
        enforce_limits = flag_option("enforce_limits", enforce_limits)
        self.options = {
            "enforce_limits": enforce_limits,
            "workroot": workroot,
            "network": network,
            "isolation": isolation,
            "pids_max": pids_max,
        }
        self.mounts = same_path_mounts(parse_mounts(mounts, "local"))
        if self.mounts:
            self.options["mounts"] = [m.as_dict() for m in self.mounts]
        if network not in NETWORKS:
            raise ConfigError(f"local backend: network={network!r}; use one of {', '.join(NETWORKS)}")
        if pids_max is not None and (
            isinstance(pids_max, bool) or not isinstance(pids_max, int) or pids_max < 1
        ):
            raise ConfigError(f"local backend: pids_max must be a positive integer or None, got {pids_max!r}")
        self.hide = sandbox.check_hide(hide)
        self.hidden_cache: tuple[tuple, list[str]] | None = None  # (signature, list): hidden_dirs()
        if self.hide:
            self.options["hide"] = self.hide
        # isolation needs root; without it (enforce_limits=False) commands run as before, recorded
        self.isolation = sandbox.check_mode(isolation) if os.geteuid() == 0 else "none"
        if self.isolation != "none":
            sandbox.check_writable(self.mounts)
        self.pids_max = pids_max
        self.enforce = enforce_limits
        self.workroot = private_dir(workroot or default_workroot())
        self.driver: cgroups.Driver | None = None
        self._why_not = ""
        try:
            driver = cgroups.detect_here()
            bad = [r for r in cgroups.writable_roots(driver) if not os.access(r, os.W_OK)]
            if bad:
                raise BackendUnavailable(
                    f"cgroup v{driver.version} hierarchy {bad[0]} is not writable (run as root)"
                )
            self.driver = driver
        except (BackendUnavailable, OSError) as exc:
            self._why_not = str(exc)
        self.isolate = network == "none" and os.geteuid() == 0 and shutil.which("ip") is not None

    def check(self) -> None:
        sandbox.require(self.isolation)
        if self.driver is None and self.enforce:
            raise BackendUnavailable(
                f"local backend cannot enforce instance limits: {self._why_not}. "
                "Run as root or in a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes "
                "labkit run ...), or pass enforce_limits=False to run unconfined (CLI: `--backend-option "
                "enforce_limits=false`, YAML: `enforce_limits: false`; recorded as limits_enforced=False in "
                "every run's metadata)."
            )

    def _cpu_ids(self) -> list[int]:
        if self.driver is not None:
            return cgroups.parse_cpulist(cgroups.read_local(self.driver.cpus_file()))
        return sorted(os.sched_getaffinity(0))

    def host_cpus(self) -> int:
        return len(self._cpu_ids())

    def _create(self, spec: InstanceSpec, name, index, cpus, network: Network | None = None) -> LocalInstance:
        check_name(name)
        if network is not None and not self.isolate:
            raise ConfigError(
                "local backend: a private network needs root, iproute2 and network='none' "
                "(each instance in its own network namespace)"
            )
        real, ops = cgroups.create_ops(
            self.driver, name, self._cpu_ids(), cpus, spec.vcpus, spec.memory_mb, self.pids_max
        )
        try:
            os.mkdir(Path(self.workroot) / name, 0o700)
        except FileExistsError as exc:
            raise BackendError(f"local instance {name} exists already") from exc
        try:
            cgroups.apply(ops)
            # isolated and no private network to attach first: the holder makes the network
            # namespace itself with its loopback up (no exec of `ip`); else `ip` does
            by_holder = self.isolation != "none" and network is None
            if self.isolate and not by_holder:
                what = f"making the network namespace of local instance {name}"
                run_host(["ip", "netns", "add", name], what=what, timeout=IP_TIMEOUT_S)
                run_host(["ip", "-n", name, "link", "set", "lo", "up"], what=what, timeout=IP_TIMEOUT_S)
            inst = LocalInstance(self, name, spec, index, cpus, real)
            if network is not None:
                self._attach(inst, network, index)
            if self.isolation != "none":
                inst._sandbox(new_netns=by_holder and self.isolate)
            return inst
        except BaseException:
            self._remove(name)
            raise

    def _attach(self, inst: LocalInstance, network: Network, index: int) -> None:
        """Connect ``inst`` to ``network``: a veth pair, ``eth0`` inside at its address, the
        host end on the bridge; its hosts file. The host end dies with the namespace."""
        host_end = f"{network.device}h{index}"
        inside = f"{network.device}c{index}"
        for argv in (
            ["link", "add", host_end, "type", "veth", "peer", "name", inside, "netns", inst.name],
            ["-n", inst.name, "link", "set", inside, "name", "eth0"],
            [
                "-n",
                inst.name,
                "addr",
                "add",
                f"{network.addresses[index]}/{network.prefixlen}",
                "dev",
                "eth0",
            ],
            ["-n", inst.name, "link", "set", "eth0", "up"],
            ["link", "set", host_end, "master", network.device, "up"],
        ):
            run_host(
                ["ip", *argv], what=f"connecting {inst.name} to network {network.name}", timeout=IP_TIMEOUT_S
            )
        hosts = Path(inst.workdir) / "hosts"
        hosts.write_text(network.hosts_text())
        os.chmod(hosts, 0o644)
        inst.hosts_file, inst.host_device = str(hosts), host_end

    def _create_network(self, network: Network) -> None:
        """A bridge ``network.device`` (ifalias = the network's name) with the host's address."""
        if not self.isolate:
            raise ConfigError("local backend: a private network needs root, iproute2 and network='none'")
        network.conntrack_exempt = netmod.create_bridge(
            network.device, network.name, f"{network.host_address}/{network.prefixlen}"
        )

    def _remove_network(self, network: Network) -> None:
        netmod.delete_bridge(network.device, network.name)

    def _remove(self, name: str, holder=None) -> None:
        """Kill the instance's processes, remove its cgroup, namespaces (``holder``: the
        process holding them, if ours) and work dir (each tried)."""
        errors = []
        if self.driver is not None:
            try:
                cgroups.apply(self.driver.remove(name))
            except BackendError as exc:
                errors.append(exc)
        sandbox.stop_holder(holder, name)
        if os.path.lexists(f"/run/netns/{name}"):
            try:
                _delete_netns(name)
            except BackendError as exc:
                errors.append(exc)
        shutil.rmtree(Path(self.workroot) / name, ignore_errors=True)
        if self.isolation != "none":
            shutil.rmtree(Path(self.tmproot()) / name, ignore_errors=True)
        if errors:
            raise errors[0]

    def tmproot(self) -> str:
        """Where isolated instances' own /tmp and /var/tmp live (:data:`sandbox.TMP_ROOT`, made
        0700 and verified as the work root is)."""
        return private_dir(sandbox.TMP_ROOT)

    def _places(self) -> list[Path]:
        """Where an instance leaves a trace named after it: work dir, network namespace, its own
        /tmp, cgroups."""
        places = [Path(self.workroot), Path("/run/netns")]
        if self.isolation != "none":
            places.append(Path(sandbox.TMP_ROOT))
        if self.driver is not None:
            places += [Path(r) for r in cgroups.writable_roots(self.driver)]
        return places

    def list_labkit(self, prefix: str = "labkit-") -> list[str]:
        """Instances (cgroups, network namespaces, work dirs, their own /tmp) whose names start
        with ``prefix``."""
        check_prefix(prefix)
        places = self._places()
        return sorted(
            {
                p.name
                for place in places
                if place.is_dir()
                for p in place.glob(prefix + "*")
                if p.name.startswith(prefix)
            }
        )

    def created(self, names) -> dict[str, float]:
        """The earliest modification time of each instance's work dir, network namespace file
        and cgroup directories (each made when the instance was; files written later in the work
        dir only make it younger)."""
        places = self._places()
        out = {}
        for name in names:
            times = []
            for place in places:
                try:
                    times.append(os.lstat(place / check_name(name)).st_mtime)
                except (OSError, ConfigError):
                    continue
            if times:
                out[name] = min(times)
        return out

    def cleanup(self, prefix: str) -> list[str]:
        """Remove everything left by instances named ``prefix*`` (a killed campaign's)."""
        names = self.list_labkit(prefix)
        for name in names:
            self._remove(name)
        return names + (remove_bridges(prefix) if self.isolate else [])

    def fingerprint(self) -> dict:
        return {
            "backend": self.name,
            "cgroup_version": self.driver.version if self.driver else None,
            "limits_enforced": self.driver is not None,
            "network_isolated": self.isolate,
            "isolation": self.isolation_record(),
        }

    def isolation_record(self) -> dict:
        """What confines an instance's commands (metadata and fingerprint): ``mode``,
        ``capabilities`` (kept; None: all, as root), ``user``, ``no_new_privs``, ``namespaces``,
        ``pids_max`` (None: no cap), ``env`` (the environment policy)."""
        isolated = self.isolation != "none"
        user, caps = sandbox.unconfined_identity()
        return {
            "mode": self.isolation,
            "capabilities": sandbox.capabilities(self.isolation) if isolated else caps,
            "no_new_privs": isolated,
            "namespaces": (["pid", "mount", "ipc", "user"] if isolated else [])
            + (["net"] if self.isolate else []),
            "user": (
                f"uid 0 of its own user namespace = host uid {sandbox.USERNS_BASE} "
                f"(ids 0-{sandbox.USERNS_COUNT - 1})"
                if isolated
                else user
            ),
            "private": ["/tmp", "/var/tmp", "/dev (null zero full random urandom tty pts shm)"]
            if isolated
            else [],
            "pids_max": self.pids_max if self.driver is not None and self.driver.has_pids else None,
            "env": (
                "clean: " + " ".join(sandbox.ENV_KEPT) + ", HOME=work dir, the workload's"
                if isolated
                else "the controller's"
            ),
        }

    def hidden_dirs(self) -> list[str]:
        """Host directories (and files) covered in every instance (:func:`sandbox.hidden_dirs`):
        the registry of running campaigns (``/run/labkit``), the data dirs of running campaigns
        and the newest :data:`.local_hidden.HIDDEN_RECORDED` recorded ones (:func:`.local_hidden.data_dirs`: a bounded set,
        however many data dirs were ever recorded), the default data dir, the work root, the
        secrets of the invoking users' homes (:func:`sandbox.home_secrets`), the ``hide`` option's."""
        key = hidden_signature()
        if self.hidden_cache is None or self.hidden_cache[0] != key:
            candidates = ["/run/labkit", self.workroot, *self.hide, *data_dirs(), *sandbox.system_hidden()]
            self.hidden_cache = (key, sandbox.hidden_dirs(candidates, [m.target for m in self.mounts]))
        # the list is made again only when a record it comes from changed; one removed since is left out
        return [p for p in self.hidden_cache[1] if os.path.lexists(p)]


def _delete_netns(name: str) -> None:
    """What ``ip netns delete NAME`` does, without starting ``ip``: detach the mount that
    keeps the namespace (``umount2``, 2 = ``MNT_DETACH``; none there is no error) and remove its file."""
    path = f"/run/netns/{name}"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(path), 2) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        raise BackendError(f"could not unmount network namespace {path}: {os.strerror(ctypes.get_errno())}")
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise BackendError(f"could not remove network namespace {path}: {exc}") from exc
