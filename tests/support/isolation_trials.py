"""Escape attempts from inside a ``local`` instance (issue 28, finding 6), each a real trial.

Used by tests/integration/test_local_isolation.py and reliability/security_isolation.py.
Every function runs its attack through ``inst.exec`` (as a workload would) and returns
what got through: 0 (or an empty list) when the isolation held.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
from pathlib import Path

from labkit.errors import BackendError

#: inside: try every network namespace file reachable (its /proc, the controller's pid) and
#: connect to the host's loopback listener from each one that can be entered
_REACH = r"""
port=$1; shift
for ns in /proc/[0-9]*/ns/net "$@"; do
  nsenter --net="$ns" -- python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2)" "$port" \
    2>/dev/null && echo "reached via $ns"
done
python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2)" "$port" 2>/dev/null \
  && echo "reached directly"
true
"""


class Listener:
    """A TCP listener on the host's 127.0.0.1 that counts the connections it accepts."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> int:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.accepted


def host_netns_reached(inst) -> int:
    """Connections that reached a listener on the host's 127.0.0.1 from inside ``inst``, by
    ``nsenter --net`` through every /proc/<pid>/ns/net it sees and the controller's pid."""
    listener = Listener()
    try:
        inst.exec(
            [
                "sh",
                "-c",
                _REACH,
                "reach",
                str(listener.port),
                f"/proc/{os.getpid()}/ns/net",
                "/proc/1/ns/net",
            ],
            check=False,
            timeout=120,
        )
    finally:
        reached = listener.close()
    return reached


def visible(inst, paths) -> list[str]:
    """Those of ``paths`` (files, none empty) whose content a command in ``inst`` can read (a
    hidden file reads as empty: /dev/null is bound on it)."""
    script = 'for f in "$@"; do [ -n "$(head -c 64 "$f" 2>/dev/null)" ] && echo "$f"; done; true'
    res = inst.exec(["sh", "-c", script, "visible", *map(str, paths)], check=False, timeout=60)
    return res.stdout.split()


def plant(directory: Path, name: str = "store.sqlite") -> Path:
    """A secret file in ``directory`` (made 0700 if missing)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    f = directory / name
    f.write_text(f"secret {secrets.token_hex(8)}\n")
    os.chmod(f, 0o600)
    return f


def controller_env_seen(inst) -> int:
    """How many of a fresh marker variable of this process (the controller) a command in
    ``inst`` finds: in its environment or any /proc/<pid>/environ it can read."""
    name = f"LABKIT_TEST_SECRET_{secrets.token_hex(4).upper()}"
    os.environ[name] = "controller-only"
    try:
        res = inst.exec(
            ["sh", "-c", "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; true"],
            check=False,
            timeout=60,
        )
    finally:
        del os.environ[name]
    return res.stdout.count(name)


def processes_with(marker: str) -> list[int]:
    """Pids of this host's processes with ``marker`` in their argv."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


#: a child that double-forks, setsid()s, writes its pid to every root cgroup.procs given
#: (to leave the instance's cgroup) and then sleeps with the marker ($1) in its argv
_ESCAPEE = r"""
import os, sys, time
marker, procs = sys.argv[1], sys.argv[2:]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for f in procs:
            try:
                with open(f, "w") as fh:
                    fh.write(str(os.getpid()))
            except OSError as exc:
                print(f"could not move to {f}: {exc}", flush=True)
        os.execvp("python3", ["python3", "-c", "import time; time.sleep(3600)", marker])
    os._exit(0)
time.sleep(3600)
"""


def survivors_after_timeout(inst, root_procs_files, timeout: float = 3.0) -> list[int]:
    """Run the escapee in ``inst`` with a ``timeout``; the pids of its processes left after the
    command timed out (none must be). An escapee that got out keeps the command's output open,
    so its exec ends with "survived SIGKILL" instead of a plain timeout."""
    marker = f"labkit-escapee-{secrets.token_hex(4)}"
    try:
        inst.exec(["python3", "-c", _ESCAPEE, marker, *root_procs_files], check=False, timeout=timeout)
    except BackendError:  # CommandTimeout, or the escapee holding its output
        pass
    return processes_with(marker)


def forks_allowed(inst, limit: int = 400) -> int:
    """How many sleeping children a fork loop in ``inst`` could start (it stops at ``limit``
    or at the first failed fork); the children are killed afterwards."""
    script = (
        "import os, sys, time\nn = 0\n"
        "try:\n    while n < int(sys.argv[1]):\n        if os.fork() == 0:\n"
        "            time.sleep(120); os._exit(0)\n        n += 1\n"
        "except OSError:\n    pass\nprint(n, flush=True)\nos.killpg(0, 9)\n"
    )
    res = inst.exec(["setsid", "python3", "-c", script, str(limit)], check=False, timeout=120)
    return int(res.stdout.split()[0])


def status_fields(inst) -> dict:
    """CapEff, CapBnd, CapPrm, CapAmb, NoNewPrivs of a command in ``inst`` (/proc/self/status)."""
    out = inst.exec(["cat", "/proc/self/status"], timeout=30).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {
        k: fields[k].strip() for k in ("CapEff", "CapBnd", "CapPrm", "CapAmb", "NoNewPrivs") if k in fields
    }


def pids_seen(inst) -> list[int]:
    """The process ids a command in ``inst`` sees in its /proc."""
    res = inst.exec(["sh", "-c", "ls /proc | grep -E '^[0-9]+$'"], timeout=30)
    return [int(p) for p in res.stdout.split()]


#: the host daemons' sockets (issue 47, finding 1): Docker, containerd, LXD (Debian's and the
#: snap's), libvirt (read-write and read-only), MariaDB, munge (what Slurm trusts)
DAEMON_SOCKETS = (
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/var/lib/lxd/unix.socket",
    "/var/snap/lxd/common/lxd/unix.socket",
    "/run/libvirt/libvirt-sock",
    "/run/libvirt/libvirt-sock-ro",
    "/run/mysqld/mysqld.sock",
    "/run/munge/munge.socket.2",
)

#: connect to each Unix socket named, and to every socket file found below / (but /proc and /sys),
#: and print "connected PATH" for each that accepts: a socket that accepts answers its daemon
_SOCKETS = r"""
import os, socket, stat, sys
paths = list(sys.argv[1:])
for top, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in ("/proc", "/sys")]
    for f in files:
        p = os.path.join(top, f)
        try:
            if stat.S_ISSOCK(os.lstat(p).st_mode):
                paths.append(p)
        except OSError:
            pass
for p in dict.fromkeys(paths):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(p)
        print("connected", p, flush=True)
    except OSError:
        pass
    finally:
        s.close()
"""


def sockets_reached(inst=None, paths=DAEMON_SOCKETS) -> list[str]:
    """The Unix sockets a command in ``inst`` (None: this process, on the host, the probe's
    control) could connect to: ``paths`` and every socket file it finds below ``/``."""
    import subprocess
    import sys

    if inst is None:
        res = subprocess.run(
            [sys.executable, "-c", _SOCKETS, *paths], capture_output=True, text=True, timeout=300
        )
        out = res.stdout
    else:
        out = inst.exec(["python3", "-c", _SOCKETS, *paths], check=False, timeout=300).stdout
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("connected ")]


def readable(inst, paths) -> list[str]:
    """Those of ``paths`` (files or devices) a command in ``inst`` can open and read a byte of."""
    script = 'for f in "$@"; do head -c 1 "$f" >/dev/null 2>&1 && echo "$f"; done; true'
    return inst.exec(
        ["sh", "-c", script, "readable", *map(str, paths)], check=False, timeout=60
    ).stdout.split()


def host_uids_of_instance(inst, deadline_s: float = 30.0) -> set[int]:
    """The host uids of a ``sleep`` started in ``inst`` (found among its cgroup's members, read on
    the host; ``lkns enter``, which waits for it there, is host root and not the command)."""
    import time

    marker = f"{secrets.randbelow(10**6) + 10**6}"
    proc = inst.spawn(["sleep", marker])
    try:
        procs = Path(inst.backend.driver.dirs(inst.name)[0], "cgroup.procs")
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            uids = set()
            for pid in procs.read_text().split():
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                if argv[:2] == [b"sleep", marker.encode()]:
                    uids.add(int(next(ln for ln in status.splitlines() if ln.startswith("Uid:")).split()[1]))
            if uids:
                return uids
            time.sleep(0.05)
        raise AssertionError(f"sleep {marker} never showed in {procs}")
    finally:
        proc.stop()
