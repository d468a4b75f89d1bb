"""The holder of a ``local`` instance's namespaces, run as a script (see :mod:`.sandbox`).

``python -I -S nsholder.py labkit-holder NAME WORKDIR HOSTS NETNS [+DIR|-DIR ...]``, with the
directories to hide on stdin (one a line), as PID 1 of the instance's new PID and mount
namespaces (``unshare --mount-proc`` mounted its /proc). With ``mount(2)`` calls (one
process, no ``mount(8)`` per mount: an instance is made in milliseconds), it

1. binds HOSTS (unless empty) on /etc/hosts;
2. covers each hidden directory with an empty tmpfs and binds WORKDIR back at its path;
3. in the instance's own network namespace (NETNS = ``netns``) lets ports below 1024 be
   bound and ICMP echo sockets be opened without a capability;
4. makes every mount read-only except those at or under WORKDIR, /tmp, /var/tmp, /proc,
   /dev and each ``+DIR`` (bound on itself first where it is no mount point, with what is
   mounted below it); then each ``-DIR``, /proc/sys, /proc/sysrq-trigger, /proc/irq and
   /proc/bus read-only too;
5. prints ``ready`` and becomes ``sh`` reaping orphans forever, its argv still holding
   ``labkit-holder NAME`` (how ``cleanup`` finds a holder a killed controller left). A
   PID 1 ignores the signals it has no handler for, so the instance cannot stop it.

Needs only the standard library (``-S``: no site packages). On error: the reason on
stderr, exit status 1.
"""
import ctypes
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_RELATIME, MS_STRICTATIME = 1 << 21, 1 << 24
#: per-mount options of /proc/self/mountinfo -> flags a bind remount must repeat
FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
         "noatime": MS_NOATIME, "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME}
HIDDEN_OPTIONS = "mode=0755,size=16k"
READ_ONLY_PROC = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
REAPER = "trap '' HUP INT QUIT TERM USR1 USR2 PIPE; while :; do sleep infinity & wait; done"

_libc = ctypes.CDLL(None, use_errno=True)


def _b(value):
    return None if value is None else os.fsencode(value)


def mount(source, target, fstype=None, flags=0, data=None) -> None:
    if _libc.mount(_b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or ''} on {target}: {os.strerror(err)}")


def mounts() -> list[tuple[str, int]]:
    """(mount point, per-mount flags) of this mount namespace, in mount order."""
    out = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = _unescape(fields[4])
            out.append((point, sum(FLAGS.get(o, 0) for o in fields[5].split(","))))
    return out


def _unescape(field: str) -> str:
    r"""A mountinfo path: ``\040`` and other octal escapes decoded."""
    parts = field.split("\\")
    return parts[0] + "".join(chr(int(p[:3], 8)) + p[3:] for p in parts[1:])


def within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def read_only(point: str, flags: int) -> None:
    mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)


def setup(workdir: str, hosts: str, netns: str, marks: list[str], hidden: list[str]) -> None:
    keep = os.open(workdir, os.O_PATH | os.O_DIRECTORY)
    if hosts:
        mount(hosts, "/etc/hosts", flags=MS_BIND)
    for d in hidden:
        mount("labkit-hidden", d, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, HIDDEN_OPTIONS)
    os.makedirs(workdir, exist_ok=True)       # inside a hidden directory: made in its tmpfs
    mount(f"/proc/self/fd/{keep}", workdir, flags=MS_BIND)
    os.close(keep)
    if netns == "netns":
        for key, value in (("ip_unprivileged_port_start", "0"), ("ping_group_range", "0 2147483647")):
            with open(f"/proc/sys/net/ipv4/{key}", "w") as fh:
                fh.write(value)
    writable = [workdir, "/tmp", "/var/tmp", *(m[1:] for m in marks if m.startswith("+"))]
    points = {p for p, _ in mounts()}
    for p in writable:
        if os.path.isdir(p) and p not in points:
            mount(p, p, flags=MS_BIND | MS_REC)
    for point, flags in mounts():
        if any(within(point, p) for p in ("/proc", "/dev", *writable)):
            continue
        try:
            read_only(point, flags)
        except OSError:
            if os.path.lexists(point):
                raise   # else its mount point went meanwhile (a network namespace deleted)
    for d in hidden:       # the file system itself, so its copies under /tmp too
        mount(None, d, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, HIDDEN_OPTIONS)
    for p in [*(m[1:] for m in marks if m.startswith("-")), *READ_ONLY_PROC]:
        if os.path.lexists(p):
            mount(p, p, flags=MS_BIND)
            read_only(p, next(f for q, f in reversed(mounts()) if q == p))


def main() -> None:
    marker, name, workdir, hosts, netns, *marks = sys.argv[1:]
    try:
        setup(workdir, hosts, netns, marks, sys.stdin.read().splitlines())
    except OSError as exc:
        print(f"{marker} {name}: {exc}", file=sys.stderr)
        sys.exit(1)
    print("ready", flush=True)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.execv("/bin/sh", ["/bin/sh", "-c", REAPER, marker, name])


if __name__ == "__main__":
    main()
