"""What each backend needs from the host, and what this machine has (``labkit doctor``, docs/install.md).

:data:`NEEDS` is the table of docs/install.md: per backend, the Python extra, and what the host must
give a user who is not root (groups, sockets, daemons, polkit, cgroup delegation, storage pools).
:func:`doctor` looks at this machine, as the user running it, without starting anything: a module
imported, a socket's existence, owner and whether this user may open it, group membership, a
cgroup v2 subtree delegated to this process. It never connects to a daemon (``labkit run`` does,
with the backend's own ``check()``).
"""

from __future__ import annotations

import grp
import importlib.util
import os
import pwd
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendUnavailable
from . import cgroups

__all__ = ["NEEDS", "Finding", "Need", "doctor", "socket_state"]


@dataclass(frozen=True)
class Need:
    """One backend's needs: ``extra`` (pip install 'labkit[extra]'; "" for the base), ``host`` (what
    a non-root user needs on the host) and ``fix`` (how to get it)."""

    backend: str
    extra: str
    host: str
    fix: str


NEEDS: tuple[Need, ...] = (
    Need(
        "local",
        "",
        "root, or a cgroup v2 subtree delegated to the user with cpuset, cpu, memory (pids); "
        "else unconfined (enforce_limits: false)",
        "systemd-run --user --scope -p Delegate=yes labkit run ... (cpuset: Delegate=cpu cpuset memory pids "
        "in /etc/systemd/system/user@.service.d/delegate.conf)",
    ),
    Need(
        "docker",
        "docker",
        "dockerd running; /var/run/docker.sock readable and writable by the user (group docker)",
        "usermod -aG docker USER, log in again",
    ),
    Need(
        "lxd",
        "lxd",
        "LXD running; its unix.socket owned by group lxd (a daemon started with "
        "`--group root` makes it root:root: the lxd group does not help)",
        "usermod -aG lxd USER; start LXD with --group lxd",
    ),
    Need(
        "libvirt",
        "libvirt",
        "qemu:///system: libvirtd, its socket, and polkit over the D-Bus system bus "
        "(group libvirt); qemu:///session: nothing shared (the user's own libvirtd and pool under "
        "~/.local/share/labkit/libvirt-pool; /dev/kvm for speed, else QEMU TCG; no mounts or private networks)",
        "usermod -aG libvirt USER; systemctl start dbus polkit libvirtd; or backend_options "
        "uri: qemu:///session",
    ),
    Need(
        "ssh",
        "ssh",
        "sshd on each host, a key the user can read, the host key in known_hosts",
        "ssh-copy-id; ssh-keyscan HOST >> ~/.ssh/known_hosts",
    ),
    Need(
        "notebooks",
        "notebooks",
        "papermill, JupyterLab, Voila (labkit dashboard)",
        "pip install 'labkit[notebooks]'",
    ),
)

#: sockets looked at, per backend (the first that exists is reported)
SOCKETS = {
    "docker": ["/var/run/docker.sock", "/run/docker.sock"],
    "lxd": ["/var/lib/lxd/unix.socket", "/var/snap/lxd/common/lxd/unix.socket"],
    "libvirt": ["/var/run/libvirt/libvirt-sock", "/run/libvirt/libvirt-sock"],
    "dbus": ["/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket"],
}
#: the module each backend's SDK provides
MODULES = {
    "docker": "docker",
    "lxd": "pylxd",
    "libvirt": "libvirt",
    "ssh": "fabric",
    "notebooks": "papermill",
}


@dataclass(frozen=True)
class Finding:
    """What this machine has for one backend: ``ok`` (usable as this user, as far as can be told
    without connecting) and ``here`` (what was found, in words)."""

    backend: str
    ok: bool
    here: str


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def socket_state(paths: list[str], access: Callable[[str, int], bool] = os.access) -> tuple[bool, str]:
    """(whether this user may open the first of ``paths`` that exists, and its owner/mode in words)."""
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        owner = f"{_user(st.st_uid)}:{_group(st.st_gid)} {stat.S_IMODE(st.st_mode):04o}"
        ok = access(p, os.R_OK | os.W_OK)
        return ok, f"{p} {owner}" + ("" if ok else f" (not writable by {_user(os.geteuid())})")
    return False, f"no socket ({', '.join(paths)})"


def _module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _local() -> Finding:
    parts = []
    ok = True
    try:
        drv = cgroups.detect_here()
        bad = [r for r in cgroups.writable_roots(drv) if not os.access(r, os.W_OK)]
        if bad:
            ok = False
            parts.append(
                f"cgroup v{drv.version} {bad[0]} not writable: limits only as root or in a "
                "delegated v2 subtree; unconfined with enforce_limits: false"
            )
        else:
            where = "delegated subtree " if getattr(drv, "leaf", None) else ""
            parts.append(
                f"cgroup v{drv.version} {where}{', '.join(cgroups.writable_roots(drv))[:120]}: limits enforced"
            )
    except (BackendUnavailable, OSError) as exc:
        ok = False
        parts.append(f"limits cannot be enforced: {str(exc)[:300]}")
    if not _module("psutil"):
        ok = False
        parts.append("psutil missing: no telemetry, no quiet-host guard")
    return Finding("local", ok, "; ".join(parts))


def _daemon(backend: str) -> Finding:
    have = _module(MODULES[backend])
    sock_ok, sock = socket_state(SOCKETS[backend])
    parts = [
        f"{MODULES[backend]} {'installed' if have else 'missing (pip install ' + repr(f'labkit[{backend}]') + ')'}",
        sock,
    ]
    if backend == "lxd" and not sock_ok and "root:root" in sock:
        parts.append("LXD runs with --group root: membership of lxd cannot help; restart it with --group lxd")
    ok = have and sock_ok
    if backend == "libvirt":
        bus_ok, bus = socket_state(SOCKETS["dbus"])
        parts.append(
            f"D-Bus system bus: {bus}"
            if bus_ok or "no socket" not in bus
            else "no D-Bus system bus: polkit cannot grant qemu:///system to a non-root user"
        )
        if os.geteuid() != 0 and not bus_ok:
            ok = False
        kvm = Path("/dev/kvm")
        parts.append(
            "/dev/kvm "
            + (
                "usable"
                if os.access(kvm, os.R_OK | os.W_OK)
                else "missing"
                if not kvm.exists()
                else "not usable (group kvm)"
            )
            + " (without it qemu:///session runs QEMU TCG: emulated, not KVM)"
        )
    return Finding(backend, ok, "; ".join(parts))


def doctor() -> list[Finding]:
    """This machine, as this user: one :class:`Finding` per row of :data:`NEEDS`."""
    out = [_local(), *(_daemon(b) for b in ("docker", "lxd", "libvirt"))]
    out.append(
        Finding(
            "ssh",
            _module("fabric"),
            "fabric " + ("installed" if _module("fabric") else "missing (pip install 'labkit[ssh]')"),
        )
    )
    nb = [m for m in ("papermill", "voila", "ipywidgets") if not _module(m)]
    out.append(
        Finding(
            "notebooks",
            not nb,
            "papermill, voila, ipywidgets installed"
            if not nb
            else f"{', '.join(nb)} missing (pip install 'labkit[notebooks]')",
        )
    )
    return out
