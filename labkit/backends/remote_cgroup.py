"""cgroups on another machine, as shell text: what the ``ssh`` backend sends over SSH.

This module mirrors :mod:`labkit.backends.cgroups` (the local drivers) file for
file, but instead of writing the files it returns POSIX ``sh`` scripts that do
so on the remote host. Nothing here talks to the network: the scripts are pure
functions of their arguments, so they are unit-tested by running them with
``sh`` on a directory laid out like a cgroup hierarchy, next to the local
drivers writing the same layout.

* :data:`JOIN` is the wrapper that puts a command in an instance before it
  ``exec``\\s (the same fragment as ``local._JOIN``; a unit test keeps them equal).
* :data:`PROBE` prints the facts a backend needs (uid, kernel, CPUs, cgroup
  mounts and controllers, writability); :func:`parse_probe` reads them back and
  :func:`detect` picks v1 or v2 exactly as :func:`cgroups.detect` does.
* :class:`RemoteCgroupV1` / :class:`RemoteCgroupV2` write ``create``,
  ``remove``, ``pids`` and ``kill`` scripts for one instance.
* :func:`exec_script` is the remote command line of one ``exec``.
* :data:`CONTROL_SHELL`, :func:`control_command` and :func:`parse_control` frame
  the short control scripts (create, remove, kill, list) sent one after another to
  one long-lived remote shell, so that they cost a round trip, not a new SSH session.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ..errors import BackendError, BackendUnavailable, ConfigError
from .cgroups import PERIOD_US, format_cpulist, parse_cpulist

# The join wrapper, identical to local._JOIN: write our pid to every cgroup.procs, then exec.
JOIN = 'for f in $LABKIT_CGROUP_PROCS; do echo $$ > "$f" || exit 125; done; exec "$@"'
JOIN_ARGV0 = "labkit-join"
JOIN_FAILED = 125          # the wrapper's exit code when it could not join

# Every process an exec starts carries these in its environment, so a timeout or a
# teardown can find the whole tree even without a cgroup (daemons that setsid included).
INSTANCE_VAR = "LABKIT_INSTANCE"
EXEC_VAR = "LABKIT_EXEC"

REMOVE_TIMEOUT_S = 10.0
_NAME = re.compile(r"^labkit-[A-Za-z0-9_.-]+$")
_PREFIX = re.compile(r"^labkit-[A-Za-z0-9_.-]*$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Shell helpers shared by the scripts below.
_W = ('w() { printf \'%s\' "$2" > "$1" || { echo "cannot write \'$2\' to $1" >&2; exit 1; }; }\n')
_KILL_MARKED = (
    # kill_marked REGEX: SIGKILL every process whose environment has an entry matching REGEX
    "kill_marked() {\n"
    "  for _ in 1 2 3 4 5 6 7 8 9 10; do\n"
    "    p=$(grep -lazE \"$1\" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3)\n"
    "    [ -n \"$p\" ] || return 0\n"
    "    kill -KILL $p 2>/dev/null\n"
    "    sleep 0.05\n"
    "  done\n"
    "}\n")


def check_name(name: str) -> str:
    """An instance name safe to put in a path and a script (``labkit-`` + [A-Za-z0-9_.-])."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name:
        raise BackendError(f"instance name {name!r} must be 'labkit-' followed by letters, digits, _ . -")
    return name


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not _PREFIX.match(prefix) or ".." in prefix:
        raise BackendError(f"cleanup prefix must start with 'labkit-' (letters, digits, _ . -), got {prefix!r}")
    return prefix


def q(value) -> str:
    return shlex.quote(str(value))


def _ere(text: str) -> str:
    """``text`` as a literal inside a POSIX extended regular expression."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def marker_regex(name: str) -> str:
    """ERE matching the environment entry every process of instance ``name`` carries (whole entry)."""
    return f"^{INSTANCE_VAR}={_ere(name)}$"


def prefix_marker_regex(prefix: str) -> str:
    """ERE matching the marker of every instance whose name starts with ``prefix``."""
    return f"^{INSTANCE_VAR}={_ere(prefix)}"


def exec_marker_regex(token: str) -> str:
    """ERE matching the marker of the processes of one exec."""
    return f"^{EXEC_VAR}={_ere(token)}$"


# -- facts about the remote host -------------------------------------------------------------

PROBE = r"""
echo "uid $(id -u)"
echo "user $(id -un)"
echo "kernel $(uname -r)"
echo "machine $(uname -m)"
echo "hostname $(uname -n)"
echo "cpu_model $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)"
echo "cpus_allowed $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo "online $(cat /sys/devices/system/cpu/online 2>/dev/null)"
for t in sh taskset grep timeout; do command -v "$t" >/dev/null 2>&1 && echo "tool $t"; done
while read -r dev path fs opts rest; do
  case "$fs" in
    cgroup|cgroup2)
      echo "mount $path $fs $opts"
      [ -w "$path" ] && echo "writable $path"
      [ -r "$path/cgroup.controllers" ] && echo "controllers $path $(cat "$path/cgroup.controllers")"
      for f in cpuset.cpus.effective cpuset.cpus cpuset.mems; do
        [ -r "$path/$f" ] && echo "file $path/$f $(cat "$path/$f")"
      done;;
  esac
done < /proc/self/mounts
echo "end"
"""


@dataclass
class HostFacts:
    """What :data:`PROBE` printed, parsed."""
    values: dict = field(default_factory=dict)
    mounts: list = field(default_factory=list)         # (path, fstype, set of options)
    writable: set = field(default_factory=set)
    controllers: dict = field(default_factory=dict)    # path -> set of controller names
    files: dict = field(default_factory=dict)          # path -> first line
    tools: set = field(default_factory=set)

    def get(self, key: str, default: str = "") -> str:
        return self.values.get(key, default)

    @property
    def uid(self) -> int | None:
        v = self.values.get("uid", "")
        return int(v) if v.isdigit() else None

    def cpus_allowed(self) -> list[int]:
        """CPUs a login process may use (its affinity), the fallback without cgroups."""
        for key in ("cpus_allowed", "online"):
            if self.values.get(key):
                return parse_cpulist(self.values[key])
        raise BackendError("remote host did not report its CPUs (Cpus_allowed_list, cpu/online)")


def parse_probe(text: str) -> HostFacts:
    """Read :data:`PROBE`'s output; raises BackendError if it was cut short."""
    facts = HostFacts()
    complete = False
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        rest = rest.strip()
        if key == "end":
            complete = True
        elif key == "mount":
            parts = rest.split()
            if len(parts) >= 3:
                facts.mounts.append((parts[0], parts[1], set(parts[2].split(","))))
        elif key == "writable":
            facts.writable.add(rest)
        elif key == "controllers":
            path, _, ctls = rest.partition(" ")
            facts.controllers[path] = set(ctls.split())
        elif key == "file":
            path, _, value = rest.partition(" ")
            facts.files[path] = value.strip()
        elif key == "tool":
            facts.tools.add(rest)
        elif key:
            facts.values[key] = rest
    if not complete:
        raise BackendError(f"remote probe output was cut short:\n{text[-2000:]}")
    return facts


def detect(facts: HostFacts):
    """The remote driver: v1 when cpuset/cpu/memory hierarchies are mounted, else v2 (as cgroups.detect)."""
    v1: dict[str, str] = {}
    for path, fstype, opts in facts.mounts:
        if fstype == "cgroup":
            for ctl in ("cpuset", "cpu", "cpuacct", "memory"):
                if ctl in opts and ctl not in v1:
                    v1[ctl] = path
    if {"cpuset", "cpu", "memory"} <= set(v1):
        return RemoteCgroupV1(v1)
    for path, fstype, _ in facts.mounts:
        if fstype == "cgroup2" and {"cpuset", "cpu", "memory"} <= facts.controllers.get(path, set()):
            return RemoteCgroupV2(path)
    raise BackendUnavailable(
        "no usable cgroup hierarchy on the remote host: need cgroup v1 cpuset+cpu+memory or "
        "cgroup v2 with those controllers (see its /proc/self/mounts); pass enforce_limits=False "
        "to run without limits (taskset still pins; recorded in the run metadata)")


# -- the drivers: scripts for one instance -----------------------------------------------------

class _RemoteDriver:
    version = 0

    def dirs(self, name: str) -> list[str]:
        raise NotImplementedError

    def procs_files(self, name: str) -> list[str]:
        return [f"{d}/cgroup.procs" for d in self.dirs(name)]

    def pids_script(self, name: str) -> str:
        """Prints the pids in the instance's cgroup(s), one per line (nothing if gone)."""
        files = " ".join(q(f) for f in self.procs_files(check_name(name)))
        return f"cat {files} 2>/dev/null | sort -un; true\n"

    def exists_script(self, name: str) -> str:
        """Exit 0 if any of the instance's cgroup directories exists."""
        tests = " || ".join(f"[ -d {q(d)} ]" for d in self.dirs(check_name(name)))
        return f"{tests}\n"

    def kill_script(self, name: str) -> str:
        """SIGKILL every process in the instance's cgroup(s), once."""
        files = " ".join(q(f) for f in self.procs_files(check_name(name)))
        return f"for p in $(cat {files} 2>/dev/null); do kill -KILL $p 2>/dev/null; done; true\n"

    def remove_script(self, name: str, timeout: float = REMOVE_TIMEOUT_S) -> str:
        """Kill everything in the cgroup(s) and rmdir them, retrying until ``timeout`` (as _kill_and_rmdir)."""
        name = check_name(name)
        dirs = " ".join(q(d) for d in self.dirs(name))
        files = " ".join(q(f) for f in self.procs_files(name))
        return (
            f"{self._pre_remove(name)}"
            f"end=$(( $(date +%s) + {max(1, int(round(timeout)))} ))\n"
            f"while :; do\n"
            f"  for p in $(cat {files} 2>/dev/null); do kill -KILL $p 2>/dev/null; done\n"
            f"  left=\n"
            f"  for d in {dirs}; do\n"
            f"    [ -d \"$d\" ] || continue\n"
            f"    rmdir \"$d\" 2>/dev/null || left=\"$left $d\"\n"
            f"  done\n"
            f"  [ -z \"$left\" ] && break\n"
            f"  if [ \"$(date +%s)\" -gt \"$end\" ]; then\n"
            f"    echo \"could not remove cgroup {name}: processes $(cat {files} 2>/dev/null | tr '\\n' ' ')"
            f"survive in$left\" >&2\n"
            f"    exit 1\n"
            f"  fi\n"
            f"  sleep 0.02\n"
            f"done\n")

    def _pre_remove(self, name: str) -> str:
        return ""

    def cpu_time_script(self, name: str) -> str:
        raise NotImplementedError

    def glob_script(self, prefix: str) -> str:
        """Prints the names of this driver's cgroups whose names start with ``prefix``."""
        prefix = check_prefix(prefix)
        roots = " ".join(q(r) for r in self.root_dirs())
        return (f"for r in {roots}; do for d in \"$r\"/{q(prefix)}*; do "
                f"[ -d \"$d\" ] && basename \"$d\"; done; done | sort -u\n")

    def root_dirs(self) -> list[str]:
        raise NotImplementedError


class RemoteCgroupV1(_RemoteDriver):
    """Separate hierarchies per controller, like cgroups.CgroupV1."""

    version = 1

    def __init__(self, roots: dict[str, str]):
        self.roots = {k: str(v).rstrip("/") or "/" for k, v in roots.items()}

    def root_dirs(self) -> list[str]:
        return list(dict.fromkeys(self.roots.values()))

    def dirs(self, name: str) -> list[str]:
        return [f"{root}/{name}" for root in self.root_dirs()]

    def available_cpus(self, facts: HostFacts) -> list[int]:
        text = facts.files.get(f"{self.roots['cpuset']}/cpuset.cpus", "")
        if not text:
            raise BackendUnavailable(f"cannot read {self.roots['cpuset']}/cpuset.cpus on the remote host")
        return parse_cpulist(text)

    def check_writable(self, facts: HostFacts) -> None:
        for ctl, root in self.roots.items():
            if root not in facts.writable:
                raise BackendUnavailable(f"cgroup v1 {ctl} hierarchy {root} is not writable on the "
                                         "remote host (log in as root)")

    def create_script(self, name: str, cpus: list[int], quota_cpus: int | None, memory_mb: int) -> str:
        name = check_name(name)
        cs, cpu, mem = self.roots["cpuset"], self.roots["cpu"], self.roots["memory"]
        limit = memory_mb * 2**20
        quota = quota_cpus * PERIOD_US if quota_cpus else -1
        mkdirs = "".join(f"mkdir {q(d)} || exit 1\n" for d in self.dirs(name))
        memsw = q(f"{mem}/{name}/memory.memsw.limit_in_bytes")
        swappiness = q(f"{mem}/{name}/memory.swappiness")
        return (
            _W + mkdirs +
            f"w {q(f'{cs}/{name}/cpuset.mems')} \"$(cat {q(f'{cs}/cpuset.mems')})\"\n"
            f"w {q(f'{cs}/{name}/cpuset.cpus')} {q(format_cpulist(cpus))}\n"
            f"w {q(f'{cpu}/{name}/cpu.cfs_period_us')} {PERIOD_US}\n"
            f"w {q(f'{cpu}/{name}/cpu.cfs_quota_us')} {quota}\n"
            f"w {q(f'{mem}/{name}/memory.limit_in_bytes')} {limit}\n"
            f"if [ -e {memsw} ]; then w {memsw} {limit}; fi\n"
            # not settable on every kernel; the limit above is what matters
            f"if [ -e {swappiness} ]; then printf 0 > {swappiness} 2>/dev/null || true; fi\n")

    def cpu_time_script(self, name: str) -> str:
        root = self.roots.get("cpuacct") or self.roots["cpu"]
        return f"cat {q(f'{root}/{check_name(name)}/cpuacct.usage')}\n"

    @staticmethod
    def parse_cpu_time(text: str) -> float:
        return int(text.split()[0]) / 1e9


class RemoteCgroupV2(_RemoteDriver):
    """The unified hierarchy, like cgroups.CgroupV2."""

    version = 2

    def __init__(self, root: str):
        self.root = str(root).rstrip("/") or "/"

    def root_dirs(self) -> list[str]:
        return [self.root]

    def dirs(self, name: str) -> list[str]:
        return [f"{self.root}/{name}"]

    def available_cpus(self, facts: HostFacts) -> list[int]:
        for f in ("cpuset.cpus.effective", "cpuset.cpus"):
            text = facts.files.get(f"{self.root}/{f}", "")
            if text:
                return parse_cpulist(text)
        return facts.cpus_allowed()

    def check_writable(self, facts: HostFacts) -> None:
        if self.root not in facts.writable:
            raise BackendUnavailable(f"cgroup v2 directory {self.root} is not writable on the remote host "
                                     "(log in as root or delegate a cgroup to this user)")
        missing = {"cpuset", "cpu", "memory"} - facts.controllers.get(self.root, set())
        if missing:
            raise BackendUnavailable(f"cgroup v2 at {self.root} on the remote host lacks controllers: "
                                     f"{', '.join(sorted(missing))}")

    def create_script(self, name: str, cpus: list[int], quota_cpus: int | None, memory_mb: int) -> str:
        name = check_name(name)
        root, d = self.root, f"{self.root}/{name}"
        quota = f"{quota_cpus * PERIOD_US} {PERIOD_US}" if quota_cpus else f"max {PERIOD_US}"
        swap = q(f"{d}/memory.swap.max")
        return (
            _W +
            f"en=\" $(cat {q(f'{root}/cgroup.subtree_control')}) \"\n"
            f"for c in cpuset cpu memory; do\n"
            f"  case \"$en\" in *\" $c \"*) ;; *) w {q(f'{root}/cgroup.subtree_control')} \"+$c\";; esac\n"
            f"done\n"
            f"mkdir {q(d)} || exit 1\n"
            f"w {q(f'{d}/cpuset.cpus')} {q(format_cpulist(cpus))}\n"
            f"w {q(f'{d}/cpu.max')} {q(quota)}\n"
            f"w {q(f'{d}/memory.max')} {memory_mb * 2**20}\n"
            f"if [ -e {swap} ]; then w {swap} 0; fi\n")

    def _pre_remove(self, name: str) -> str:
        kill = q(f"{self.root}/{name}/cgroup.kill")
        return f"if [ -e {kill} ]; then echo 1 > {kill} 2>/dev/null || true; fi\n"

    def cpu_time_script(self, name: str) -> str:
        return f"cat {q(f'{self.root}/{check_name(name)}/cpu.stat')}\n"

    @staticmethod
    def parse_cpu_time(text: str) -> float:
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise BackendError("no usage_usec in cpu.stat")


# -- commands ---------------------------------------------------------------------------------

def exec_script(argv: list[str], *, name: str, token: str, workdir: str,
                procs_files: list[str] | None = None, taskset_cpus: list[int] | None = None,
                env: dict | None = None) -> str:
    """The remote command line that runs ``argv`` in instance ``name``.

    It ``cd``\\s to the work directory, exports ``env`` and the instance/exec
    markers, then starts the :data:`JOIN` wrapper (which joins ``procs_files``
    and ``exec``\\s, through ``taskset`` when ``taskset_cpus`` is given) as a
    child, so that a command killed by a signal exits ``128 + signal`` as in a
    local shell. The login shell only sees ``exec /bin/sh -c '<script>'``.
    """
    if not argv:
        raise BackendError("exec: empty command")
    lines = [f"cd {q(workdir)} 2>/dev/null || cd /",
             f"export {INSTANCE_VAR}={q(check_name(name))} {EXEC_VAR}={q(token)}"]
    if procs_files:
        lines.append(f"export LABKIT_CGROUP_PROCS={q(' '.join(procs_files))}")
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not _ENV_KEY.match(key):
            raise ConfigError(f"exec env: {key!r} is not a valid environment variable name")
        lines.append(f"export {key}={q(value)}")
    inner = ["/bin/sh", "-c", JOIN, JOIN_ARGV0]
    if taskset_cpus:
        inner += ["taskset", "-c", format_cpulist(taskset_cpus)]
    inner += [str(a) for a in argv]
    lines.append(shlex.join(inner) + " </dev/null")   # as local: no stdin, never a hang on read
    lines.append("exit $?")
    return "exec /bin/sh -c " + q("\n".join(lines))


def kill_exec_script(token: str, driver: _RemoteDriver | None, name: str) -> str:
    """SIGKILL one exec's process tree (by its marker) and, with a cgroup, all the instance's processes."""
    script = _KILL_MARKED + f"kill_marked {q(exec_marker_regex(token))}\n"
    if driver is not None:
        script += driver.kill_script(name)
    return script + "true\n"


def destroy_script(name: str, driver: _RemoteDriver | None, workdir: str,
                   timeout: float = REMOVE_TIMEOUT_S) -> str:
    """Kill the instance's processes, remove its cgroup(s) and its work directory."""
    name = check_name(name)
    script = _KILL_MARKED + f"kill_marked {q(marker_regex(name))}\n"
    if driver is not None:
        script += "( " + driver.remove_script(name, timeout) + ")\nrc=$?\n"
    else:
        script += "rc=0\n"
    return script + f"rm -rf {q(workdir)}\nexit $rc\n"


def cleanup_script(prefix: str, names: list[str], driver: _RemoteDriver | None, workroot: str) -> str:
    """Kill processes of instances named ``prefix*``, remove the cgroups ``names`` and the work dirs.

    ``names`` come from running ``driver.glob_script(prefix)`` first; each must start with ``prefix``.
    """
    prefix = check_prefix(prefix)
    script = _KILL_MARKED + f"kill_marked {q(prefix_marker_regex(prefix))}\nrc=0\n"
    for name in names:
        if not check_name(name).startswith(prefix):
            raise BackendError(f"cleanup: {name!r} does not start with {prefix!r}")
        if driver is not None:
            script += "( " + driver.remove_script(name) + ") || rc=1\n"
    return script + f"rm -rf {q(workroot)}/{q(prefix)}*\nexit $rc\n"


# -- the control shell: one remote sh reading scripts on stdin ----------------------------------

CONTROL_SHELL = "exec /bin/sh"
_BEGIN, _END = "__labkit_begin_", "__labkit_end_"


def control_command(script: str, token: str) -> str:
    """What to write to the control shell to run ``script`` in a child ``sh`` (stdout+stderr merged).

    The child keeps the control shell safe from ``exit`` and syntax errors; the
    markers carrying ``token`` delimit its output and give its exit status.
    """
    if not re.fullmatch(r"[0-9a-f]+", token):
        raise BackendError(f"control token must be hex, got {token!r}")
    return (f"printf '%s\\n' {_BEGIN}{token}\n"
            f"/bin/sh -c {q(script)} </dev/null 2>&1\n"
            f"printf '\\n{_END}{token} %d\\n' \"$?\"\n")


def parse_control(data: bytes, token: str) -> tuple[int, str] | None:
    """``(exit status, output)`` once the control shell's answer for ``token`` is complete, else None."""
    begin, end = f"{_BEGIN}{token}\n".encode(), f"\n{_END}{token} ".encode()
    i = data.find(begin)
    if i < 0:
        return None
    j = data.find(end, i + len(begin))
    if j < 0:
        return None
    k = data.find(b"\n", j + len(end))
    if k < 0:
        return None
    return int(data[j + len(end):k]), data[i + len(begin):j].decode("utf-8", "replace")
