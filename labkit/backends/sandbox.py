"""What a ``local`` instance's commands may see and do: namespaces, capabilities, environment.

Both halves below are one small static C program, ``lkns`` (``csrc/lkns.c``, compiled
once with the host's C compiler and cached: :func:`helper`), so that neither an
instance's life nor a command pays for starting an interpreter or a chain of tools.

An instance with isolation ``strict`` (the default) or ``relaxed`` has a *holder*: a
process started when the instance is made (:func:`start_holder`: ``lkns hold``), outside
the instance's cgroup, that owns the instance's own PID and mount namespaces (and sits in
its network namespace). It prepares the mount namespace once with ``mount(2)`` calls,
says ``ready`` on a pipe (no polling), then reaps orphans as the namespace's PID 1 until
the instance is destroyed (a PID 1 ignores the signals it has no handler for, so the
instance cannot stop it):

* ``/tmp`` and ``/var/tmp`` are the instance's own: two empty directories on the host's disk
  (:data:`TMP_ROOT`, :func:`make_tmproot`) bound there, removed with the instance;
* every directory in ``hidden`` (:func:`hidden_dirs` of: the host's daemon state and sockets,
  :data:`SYSTEM_HIDDEN`, which holds ``/run`` with the registry of running campaigns; the homes,
  :data:`HOMES` and the invoking users': what a home holds is seen only where it is mounted
  (an allow-list), or, for a home that holds a mount target, all but :data:`HOME_SECRETS`; the
  data dirs campaigns used on this host; the local work root holding the other instances' work
  dirs) is covered by an empty read-only tmpfs (one file system, bound at each: one mount per
  directory), and every such file by ``/dev/null`` (read-only); the instance's own work dir,
  and the ``mounts`` option's directories, are bound back at their paths;
* ``/dev`` holds only ``null``, ``zero``, ``full``, ``random``, ``urandom``, ``tty`` (the
  host's), a devpts of its own, a private ``/dev/shm`` and the ``fd`` links: no block device,
  no ``/dev/kvm``, no host terminal;
* every file system is read-only but for the work dir, ``/tmp``, ``/var/tmp``, ``/dev/shm``
  and the ``mounts`` option's read-write directories (its read-only ones are read-only
  wherever they are): ``/etc``, ``/usr``, the
  labkit checkout, ``/sys`` with the cgroup hierarchies, and also ``/proc/sys``,
  ``/proc/sysrq-trigger``, ``/proc/irq`` and ``/proc/bus``;
* ``/proc`` is the namespace's own: the instance sees only its processes;
* on a private network the instance's ``hosts`` file is bound on ``/etc/hosts``;
* in the instance's own network namespace, ports below 1024 may be bound and ICMP
  echo sockets opened without a capability (``net.ipv4.ip_unprivileged_port_start=0``,
  ``net.ipv4.ping_group_range``: both per network namespace).

Each command then starts through ``lkns enter`` (:func:`enter`), one exec: it joins the
instance's cgroup on the host side (the files of ``$LABKIT_CGROUP_PROCS``, as
:data:`cgroups.JOIN` does), enters those namespaces (and the holder's IPC namespace), forks (the
child is in the PID namespace), drops its supplementary groups, makes a user namespace of its
own in which it is uid and gid 0 but which maps ids 0-65535 to the host's
:data:`USERNS_BASE`... (:data:`USERNS_COUNT`): the workload is root inside and an unprivileged
id on the host, so no file, socket or process of the host's root passes an owner or group check
for it (the daemons' sockets, ``/etc/shadow``, block devices, root's files), and a capability it
keeps acts only on what its own user namespace owns. Then it sets ``no_new_privs``, clears the inheritable and ambient sets, empties the
bounding set (``strict``) or cuts it to :data:`RELAXED_CAPS` (``relaxed``: enough for a
service that switches to its own user, such as Apache httpd) and execs the command, in a
clean environment (:func:`environment`); it exits as the command did. Without
``CAP_SYS_ADMIN`` a command cannot leave these namespaces (``setns``), undo a mount, or
move itself to another cgroup (the hierarchies are read-only).

Everything else of the host's file system is seen as on the host (``/usr``, ``/etc``,
the ``mounts`` option's directories), read-only as said, and with the access of an unprivileged
user: a read-write mount must be writable by :data:`USERNS_BASE` (as for LXD's unprivileged
containers; :func:`check_writable`); isolation ``none`` turns all of this
off (commands run as before: in the network namespace only, as full root, with the
controller's environment).
"""

from __future__ import annotations

import functools
import os
import pwd
import select
import signal
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..core.files import is_within
from ..core.mounts import Mount
from ..errors import BackendError, BackendUnavailable, BenchmarkError, ConfigError

MODES = ("strict", "relaxed", "none")
#: capabilities kept in the bounding set with isolation ``relaxed`` (Docker's default set
#: without mknod, setpcap, setfcap, sys_chroot and audit_write)
RELAXED_CAPS = (
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "net_bind_service",
    "net_raw",
)
#: capability numbers (linux/capability.h) of the names above, as ``lkns enter`` takes them
CAP_NUMBERS = {
    "chown": 0,
    "dac_override": 1,
    "fowner": 3,
    "fsetid": 4,
    "kill": 5,
    "setgid": 6,
    "setuid": 7,
    "net_bind_service": 10,
    "net_raw": 13,
}
#: the only variables of the controller's environment a command sees (plus HOME = its work
#: dir and what the workload passes to ``exec(env=...)``)
ENV_KEPT = ("PATH", "LANG", "LC_ALL", "TMPDIR")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: what the holder is called on its command line (with the instance's name after it)
MARKER = "labkit-holder"
#: directories an instance needs: a hidden directory may be none of them nor hold one
NEEDED = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/tmp", "/var/tmp", "/dev", "/proc", "/sys")
#: the first host uid (and gid) of an instance's user namespace: its uid 0 is this id on the host.
#: Above the ranges that /etc/subuid gives LXD (1,000,000 + 10^9) and Docker, below 2^31 (ICMP
#: echo sockets take gids up to 2^31 - 1: ``ping_group_range``); no user of the host has it
USERNS_BASE = 2_100_000_000
#: ids mapped: 0-65535 inside, so that a service may switch to its own user (relaxed: Apache's www-data)
USERNS_COUNT = 65536
#: the host's daemon state and sockets (Docker, containerd, LXD, libvirt, MariaDB, munge and
#: Slurm, labkit's own records): covered in every instance; ``/run`` holds every daemon's socket
#: and the registry of running campaigns (``/var/run`` is a link to it on Debian)
SYSTEM_HIDDEN = (
    "/run",
    "/var/run",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/var/lib/lxd",
    "/var/snap/lxd",
    "/var/lib/libvirt",
    "/var/lib/mysql",
    "/var/lib/munge",
    "/etc/munge",
    "/var/lib/slurm",
    "/var/spool/slurmctld",
    "/var/spool/slurmd",
    "/var/lib/labkit",
    "/var/lib/postgresql",
    "/var/lib/nova",
    "/var/lib/glance",
    "/var/lib/keystone",
)
#: the home directories covered whole (with every invoking user's home: :func:`invoking_homes`)
HOMES = ("/root", "/home")
READY_TIMEOUT_S = 30.0
#: the C source of ``lkns`` (in this package's ``csrc``)
SOURCE = "lkns.c"
#: what, in a home directory, holds keys, tokens, passwords or cloud credentials (SSH, GnuPG,
#: ~/.config with OpenStack's clouds.yaml and gcloud, AWS, Azure, OCI, CloudStack, Docker and
#: Kubernetes logins, labkit's own cloud known_hosts, keyrings, netrc and the like, shell and
#: client histories): covered in every instance (:func:`home_secrets`)
HOME_SECRETS = (
    ".ssh",
    ".config",
    ".aws",
    ".azure",
    ".oci",
    ".cloudmonkey",
    ".gnupg",
    ".docker",
    ".kube",
    ".password-store",
    ".terraform.d",
    ".cache/labkit",
    ".local/share/keyrings",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    ".my.cnf",
    ".boto",
    ".s3cfg",
    ".cloudstack.ini",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".lesshst",
    ".viminfo",
)


def check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise ConfigError(f"local backend: isolation={mode!r}; use one of {', '.join(MODES)}")
    return mode


def check_hide(value: Any) -> list[str]:
    """The ``hide`` option: a list of absolute directory paths (or one, or None)."""
    items = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(
        isinstance(p, str) and os.path.isabs(p) for p in items
    ):
        raise ConfigError(f"local backend: hide={value!r} must be a list of absolute directory paths")
    return [os.path.normpath(p) for p in items]


@functools.cache
def helper() -> str:
    """The path of ``lkns``, built by :func:`labkit.core.cbuild.build` (static, cached by
    source text) the first time; BackendUnavailable without a C compiler, or if the binary or
    its directory could be changed by another user (it runs as root)."""
    from ..core import cbuild

    try:
        path = cbuild.build(SOURCE, package=__package__, flags=("-O2",))
    except BenchmarkError as exc:
        raise BackendUnavailable(
            f"local backend: isolation needs its helper {SOURCE} compiled: {exc}; "
            "install a C compiler (apt-get install gcc) or pass isolation='none'"
        ) from exc
    for p in (path, path.parent):
        st = os.stat(p)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022 or (p == path and not stat.S_ISREG(st.st_mode)):
            raise BackendUnavailable(
                f"local backend: {p} (isolation helper) is not a file or directory "
                "only this user can change; remove it so that it is built again"
            )
    return str(path)


def capabilities(mode: str) -> list[str]:
    """The capabilities a command keeps with isolation ``mode``."""
    return list(RELAXED_CAPS) if mode == "relaxed" else []


def unconfined_identity() -> tuple[str, list[str] | None]:
    """Who an unconfined command (isolation ``none``) runs as: this process's user, and the
    capabilities it keeps (None: all, as root; an unprivileged user's commands keep none)."""
    uid = os.geteuid()
    if uid == 0:
        return "root", None
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = "no passwd entry"
    return f"uid {uid} ({name}), the controller's user", []


#: the instance's own temporary directory, under its work dir (``$TMPDIR``)
TMP_NAME = ".tmp"


def environment(workdir: str, env: dict | None, extra: dict | None = None) -> dict:
    """A command's environment: :data:`ENV_KEPT` from this process's, ``HOME`` = ``workdir``,
    ``TMPDIR`` = the instance's own ``workdir/.tmp`` (:data:`TMP_NAME`): instances have PID
    namespaces of their own, so two of them run processes with the same pids, and tools that
    name files in a shared /tmp after their pid and the host name (Open MPI's session
    directory: ``ompi.<host>.<uid>/pid.<pid>``) would collide; then ``env`` (the workload's)
    and ``extra`` (the backend's own, e.g. the cgroup to join)."""
    base = {k: os.environ[k] for k in ENV_KEPT if k in os.environ}
    base.setdefault("PATH", DEFAULT_PATH)
    return {
        **base,
        "HOME": workdir,
        "TMPDIR": os.path.join(workdir, TMP_NAME),
        **(env or {}),
        **(extra or {}),
    }


def invoking_homes() -> list[str]:
    """The homes whose secrets instances must not see: ``$HOME``, this user's (the password
    database's), root's, and the ``sudo`` caller's (``SUDO_UID``)."""
    import pwd

    homes = [os.environ.get("HOME")]
    for uid in {
        os.geteuid(),
        0,
        *([int(os.environ["SUDO_UID"])] if os.environ.get("SUDO_UID", "").isdigit() else []),
    }:
        try:
            homes.append(pwd.getpwuid(uid).pw_dir)
        except KeyError:
            continue
    return [h for h in dict.fromkeys(homes) if h and os.path.isabs(h) and os.path.realpath(h) != "/"]


def home_secrets(homes: Iterable[str] | None = None) -> list[str]:
    """The :data:`HOME_SECRETS` that exist in ``homes`` (default :func:`invoking_homes`)."""
    return [
        os.path.join(h, name)
        for h in (invoking_homes() if homes is None else homes)
        for name in HOME_SECRETS
        if os.path.lexists(os.path.join(h, name))
    ]


def system_hidden() -> list[str]:
    """What every instance covers besides data dirs, work root and the ``hide`` option: the
    daemons' state and sockets (:data:`SYSTEM_HIDDEN`), the homes (:data:`HOMES`, the invoking
    users': an allow-list, nothing of them seen but what is mounted) and, for a home that holds
    a mount target and so stays, its secrets (:func:`home_secrets`)."""
    return [*SYSTEM_HIDDEN, *HOMES, *invoking_homes(), *home_secrets()]


def userns_map() -> str:
    """``BASE:COUNT``, the user namespace ``lkns enter`` gives a command."""
    return f"{USERNS_BASE}:{USERNS_COUNT}"


def check_writable(mounts: Iterable[Mount]) -> None:
    """ConfigError for a read-write mount that the instance's uid (:data:`USERNS_BASE` on the
    host) could not write: neither its own, nor writable by others, nor with an ACL (its
    entries are then the kernel's to judge)."""
    for m in mounts:
        if m.readonly:
            continue
        st = os.stat(m.source)
        try:
            acl = bool(os.getxattr(m.source, "system.posix_acl_access"))
        except OSError:
            acl = False
        if st.st_uid != USERNS_BASE and not st.st_mode & 0o002 and not acl:
            raise ConfigError(
                f"local option mounts: {m.source} is read-write, but an isolated instance's commands "
                f"run as host uid {USERNS_BASE} (root of their own user namespace) and could not write "
                f"it (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}); let that uid write "
                f"it (setfacl -m u:{USERNS_BASE}:rwx,d:u:{USERNS_BASE}:rwx {m.source}, or chmod o+w), "
                "as for LXD's unprivileged containers, or pass isolation='none'"
            )


def hidden_dirs(candidates: Iterable[str | None], needed: Iterable[str] = ()) -> list[str]:
    """The existing directories (and regular files) among ``candidates`` to cover, outermost
    only: none that is ``/``, that holds a directory of :data:`NEEDED` or ``needed`` (mount
    targets), or that lies inside another one hidden."""
    keep = []
    must_see = [*NEEDED, *needed]
    for c in candidates:
        if not c:
            continue
        p = os.path.realpath(c)
        if p == "/" or not (os.path.isdir(p) or os.path.isfile(p)) or any(is_within(n, p) for n in must_see):
            continue
        keep.append(p)
    keep = sorted(set(keep))
    return [p for p in keep if not any(q != p and is_within(p, q) for q in keep)]


def holder_argv(
    name: str,
    workdir: str,
    hosts_file: str | None,
    netns: str | None,
    mounts: Iterable[Mount] = (),
    new_netns: bool = False,
    tmproot: str | None = None,
) -> list[str]:
    """The holder's argv: ``lkns hold``, making PID, mount and IPC namespaces (in network namespace
    ``netns``, a name under /run/netns, unless None; with ``new_netns`` it makes that one too,
    as ``ip netns add`` would, with its loopback up: one exec fewer); ``mounts``
    (:class:`~labkit.core.mounts.Mount`): their targets writable or read-only as they ask;
    ``tmproot``: a directory holding ``tmp`` and ``var-tmp`` (:func:`make_tmproot`), the
    instance's own /tmp and /var/tmp (None: a tmpfs each, counted in its memory)."""
    ns = ("+" if new_netns else "") + netns if netns else ""
    return [
        helper(),
        "hold",
        MARKER,
        name,
        workdir,
        hosts_file or "",
        ns,
        tmproot or "",
        *(("-" if m.readonly else "+") + m.target for m in mounts),
    ]


#: where the instances' own /tmp and /var/tmp live on the host (root's, in no directory another
#: user may write; on disk, as the host's /var/tmp is: a database or a file benchmark in /tmp is
#: not held in the instance's memory); hidden in every instance (/var/lib/labkit)
TMP_ROOT = "/var/lib/labkit/instances"


def make_tmproot(parent: str, name: str) -> str:
    """``parent/name`` (0700, this user's) holding ``tmp`` and ``var-tmp`` (1777): an
    instance's own /tmp and /var/tmp; its path."""
    root = os.path.join(parent, name)
    os.mkdir(root, 0o700)
    for sub in ("tmp", "var-tmp"):
        os.mkdir(os.path.join(root, sub))
        os.chmod(os.path.join(root, sub), 0o1777)
    return root


def start_holder(argv: list[str], hidden: list[str]) -> subprocess.Popen:
    """Start a holder (:func:`holder_argv`) that covers the directories ``hidden`` and wait
    until its mounts are made; BackendError with its message if it fails."""
    if any("\n" in d for d in hidden):
        raise ConfigError(f"local backend: a directory to hide has a newline in its name: {hidden!r}")
    proc = subprocess.Popen(
        argv,
        env={"PATH": DEFAULT_PATH},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    if proc.stdin is None or proc.stdout is None or proc.stderr is None:  # PIPE above makes all three
        _kill_group(proc)
        raise BackendError(f"could not talk to the instance's namespace holder ({' '.join(argv[:3])} ...)")
    try:
        proc.stdin.write("".join(f"{d}\n" for d in hidden).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass  # it failed at once: its stderr says why (below)
    ready, _, _ = select.select([proc.stdout], [], [], READY_TIMEOUT_S)
    line = proc.stdout.readline() if ready else b""
    proc.stdout.close()
    if line.strip() != b"ready":
        _kill_group(proc)
        err = proc.stderr.read().decode(errors="replace").strip() or f"no answer in {READY_TIMEOUT_S:.0f} s"
        proc.stderr.close()
        raise BackendError(f"could not set up the instance's namespaces ({' '.join(argv[:3])} ...): {err}")
    proc.stderr.close()
    return proc


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def enter(holder: subprocess.Popen, workdir: str, mode: str, net: bool) -> list[str]:
    """The argv prefix that runs a command in ``holder``'s namespaces, in ``workdir``, as uid 0
    of a user namespace of its own (the host's :data:`USERNS_BASE`), with the capabilities of
    ``mode`` and ``no_new_privs``, after joining the cgroup of
    ``$LABKIT_CGROUP_PROCS`` (when set). BackendError if the holder is gone
    (its pid cannot be reused meanwhile: it is our child, reaped only here or in
    :func:`stop_holder`)."""
    if holder.poll() is not None:
        raise BackendError(
            f"the instance's namespace holder (pid {holder.pid}) exited "
            f"(status {holder.returncode}): the instance is gone"
        )
    caps = ",".join(str(CAP_NUMBERS[c]) for c in capabilities(mode))
    return [helper(), "enter", str(holder.pid), workdir, "1" if net else "0", caps, userns_map(), "--"]


def stop_holder(holder: subprocess.Popen | None, name: str) -> None:
    """Kill instance ``name``'s holder (and so every process left in its PID namespace),
    whether ``holder`` is ours or was left by a killed controller (found by its argv)."""
    if holder is not None:
        _kill_group(holder)
        return
    for pid in holders(name):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def holders(name: str) -> list[int]:
    """Pids of processes whose argv holds :data:`MARKER` followed by ``name``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for i, a in enumerate(args[:-1]):
            if a == MARKER.encode() and args[i + 1] == name.encode():
                out.append(int(entry.name))
                break
    return out


def require(mode: str) -> None:
    """BackendUnavailable naming what is missing when ``mode`` cannot be had here."""
    if mode == "none":
        return
    if os.geteuid() != 0:
        raise BackendUnavailable(
            f"local backend: isolation={mode!r} needs root (namespaces); run as root or pass isolation='none'"
        )
    helper()
