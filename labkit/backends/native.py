"""The native-host model that the ``ssh`` and ``slurm`` backends share: the host is the instance.

An instance is a cgroup on the host (v1 or v2, detected from its ``/proc/self/mounts``; made by
the one cgroup driver, :mod:`labkit.backends.cgroups`, whose file operations go as one shell
script) plus a private work directory under the backend's work root. Pinned → cpuset = the
chosen CPUs; floating → every CPU with a CPU quota of ``vcpus``; memory → cgroup memory limit.
A command runs in its own session (``setsid``), writes its session id to a pid file and joins the
cgroup before it ``exec``\\s (:data:`cgroups.JOIN`); a kill ends its session and, with a cgroup,
every process left in the instance. Without usable cgroups (not root) a backend refuses, unless
``enforce_limits=False``: then commands run unconfined, pinned ones through ``taskset``.

This module writes the scripts and reads what they print; it runs nothing. Each backend brings
its channel to the host: the ``ssh`` backend an SSH connection, the ``slurm`` backend job steps
on an allocated node.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable
from typing import TypeVar

from ..core.instance import InstanceSpec
from ..errors import BackendError, BackendUnavailable
from . import cgroup_counters, cgroup_script, cgroups
from .base import StatsUnavailable, check_name, check_prefix, parse_proc_stat

q = shlex.quote
T = TypeVar("T")

# What a backend needs to know about the host, one fact per line.
PROBE = r"""
echo "uid $(id -u)"
echo "home $HOME"
echo "kernel $(uname -r)"
echo "machine $(uname -m)"
echo "hostname $(uname -n)"
echo "cpu_model $(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)"
echo "cpus_allowed $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo "governor $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo n/a)"
echo "smt $(cat /sys/devices/system/cpu/smt/active 2>/dev/null || echo n/a)"
for t in setsid taskset ip nsenter unshare tc; do command -v "$t" >/dev/null 2>&1 && echo "tool $t"; done
grep -E '^[^ ]+ [^ ]+ cgroup2? ' /proc/self/mounts | sed 's/^/mount /'
for p in $(awk '$3 == "cgroup2" {print $2}' /proc/self/mounts); do
  echo "controllers $p $(cat "$p/cgroup.controllers" 2>/dev/null)"; done
for p in $(awk '$3 ~ /^cgroup2?$/ {print $2}' /proc/self/mounts); do [ -w "$p" ] && echo "writable $p"; done
for f in $(awk '$3 ~ /^cgroup2?$/ {print $2}' /proc/self/mounts); do
  for g in cpuset.cpus.effective cpuset.cpus; do [ -r "$f/$g" ] && echo "file $f/$g $(cat "$f/$g")"; done; done
true
"""


def work_root_script(root: str) -> str:
    """Shell lines that set ``wr`` to ``root`` (a shell word, ``$HOME`` expanded on the host), make it
    a private directory of the login user (0700, refusing a link or another owner's) and print
    ``workroot <path>``: run in the probe's round trip."""
    return (
        f"wr={root}\n"
        'mkdir -p "$wr" && chmod 700 "$wr" && [ -O "$wr" ] && [ ! -L "$wr" ] || {\n'
        '  echo "work root $wr is not a private directory of this user" >&2; exit 1; }\n'
        'echo "workroot $wr"\n'
    )


#: the ``ssh`` backend's work root: ``~/.cache/labkit/instances`` of the login user
WORK_ROOT = work_root_script('"$HOME/.cache/labkit/instances"')
#: prints ``netdev <name>`` for each network device of the host named like a run network's bridge
#: (``lk`` + 8 hex digits: :attr:`.networks.Network.device`), from ``/proc/net/dev`` with shell builtins
#: only (no exec: it rides in the listing of the connection probe, which every campaign pays); only when
#: there is one does the ``ssh`` backend's ``cleanup`` ask ``ip`` whose they are (:mod:`.ssh_network`)
NETDEVS = (
    'while read -r l; do case "${l%%:*}" in lk'
    + "[0-9a-f]" * 8
    + ') echo "netdev ${l%%:*}";; esac; done < /proc/net/dev\n'
)


def listing_script(prefix: str, roots: list[str] | None = None) -> str:
    """Shell lines printing ``listed @work <name>`` for each directory ``$wr/<prefix>*`` (the work
    root, set by :func:`work_root_script`), ``listed <root> <name>`` for each ``<root>/<prefix>*`` of
    the cgroup ``roots`` (default: every cgroup mount, for the probe, before the driver is known) and
    ``netdev <name>`` for each device named like a run network's bridge (:data:`NETDEVS`)."""
    check_prefix(prefix)
    where = (
        " ".join(q(r) for r in roots)
        if roots is not None
        else "$(awk '$3 ~ /^cgroup2?$/ {print $2}' /proc/self/mounts)"
    )
    return (
        f'for d in "$wr"/{prefix}*; do [ -d "$d" ] && echo "listed @work ${{d##*/}}"; done\n'
        f'for p in {where}; do for d in "$p"/{prefix}*; do\n'
        f'  [ -d "$d" ] && echo "listed $p ${{d##*/}}"; done; done\n' + NETDEVS
    )


class HostFacts:
    """What :data:`PROBE` printed: ``values`` (key -> text), the mount table, controllers,
    writable mount points and cpuset files, ``listed`` (place, name) and ``netdevs`` (devices named
    like a network's bridge) of :func:`listing_script` (``probe=False``: that listing alone)."""

    def __init__(self, text: str, probe: bool = True):
        self.listed: list[tuple[str, str]] = []
        self.netdevs: list[str] = []
        self.values: dict[str, str] = {}
        self.tools: set[str] = set()
        self.mounts: list[str] = []
        self.controllers: dict[str, str] = {}
        self.writable: set[str] = set()
        self.files: dict[str, str] = {}
        for line in text.splitlines():
            key, _, rest = line.partition(" ")
            if key == "tool":
                self.tools.add(rest.strip())
            elif key == "mount":
                self.mounts.append(rest)
            elif key == "controllers":
                path, _, ctl = rest.partition(" ")
                self.controllers[path] = ctl
            elif key == "writable":
                self.writable.add(rest.strip())
            elif key == "file":
                path, _, value = rest.partition(" ")
                self.files[path] = value.strip()
            elif key == "listed":
                place, _, name = rest.rpartition(" ")
                self.listed.append((place, name.strip()))
            elif key == "netdev":
                self.netdevs.append(rest.strip())
            elif key:
                self.values[key] = rest.strip()
        if probe and ("uid" not in self.values or "home" not in self.values):
            raise BackendError(f"the remote probe printed no uid/home:\n{text[-1000:]}")

    def get(self, key: str, default: str = "") -> str:
        return self.values.get(key, default)

    def cpus_allowed(self) -> list[int]:
        return cgroups.parse_cpulist(self.get("cpus_allowed") or "0")


def detect_driver(facts: HostFacts, target: str) -> tuple[cgroups.Driver | None, str]:
    """The host's cgroup driver and "" when its hierarchies are writable; (None, why not) otherwise."""
    try:
        driver = cgroups.detect("\n".join(facts.mounts), facts.controllers.get)
        bad = [r for r in cgroups.writable_roots(driver) if r not in facts.writable]
        if bad:
            raise BackendUnavailable(
                f"cgroup v{driver.version} hierarchy {bad[0]} on {target} is not writable (log in as root)"
            )
        return driver, ""
    except BackendUnavailable as exc:
        return None, str(exc)


def check_host(
    backend: str, facts: HostFacts, driver: cgroups.Driver | None, why_not: str, enforce: bool, target: str
) -> None:
    """BackendUnavailable unless instances can be made on the host as asked (``enforce``: limits)."""
    if driver is None and enforce:
        raise BackendUnavailable(
            f"{backend} backend cannot enforce instance limits on {target}: {why_not}. "
            "Log in as root, or pass enforce_limits=False to run unconfined "
            "(recorded as limits_enforced=False in every run's metadata)."
        )
    if "setsid" not in facts.tools:
        raise BackendUnavailable(f"{target} has no setsid; install it with: apt-get install util-linux")


def cpu_ids(facts: HostFacts, driver: cgroups.Driver | None) -> list[int]:
    """The host CPUs instances may use: the cgroup root's cpuset, else the probe's allowed CPUs."""
    if driver is not None:
        text = facts.files.get(driver.cpus_file())
        if text:
            return cgroups.parse_cpulist(text)
    return facts.cpus_allowed()


def create_script(
    facts: HostFacts,
    driver: cgroups.Driver | None,
    workroot: str,
    spec: InstanceSpec,
    name: str,
    cpus: list[int] | None,
    target: str,
) -> tuple[list[int] | None, str]:
    """(the host CPU ids instance ``name`` is pinned to or None, the script that makes its work dir
    and cgroup); BackendUnavailable when an unconfined pinned instance has no ``taskset``."""
    check_name(name)
    real, ops = cgroups.create_ops(driver, name, cpu_ids(facts, driver), cpus, spec.vcpus, spec.memory_mb)
    if driver is None and real is not None and "taskset" not in facts.tools:
        raise BackendUnavailable(
            f"{target} has no taskset to pin an unconfined instance; "
            "install it with: apt-get install util-linux"
        )
    script = f"mkdir -m 700 {q(posixpath.join(workroot, name))} || exit 1\n"
    return real, script + (cgroup_script.script(ops) if ops else "")


def create(
    name: str, run: Callable[[], object], remove: Callable[[list[str]], None], make: Callable[[], T]
) -> T:
    """Instance ``name``: ``run()`` its create script (:func:`create_script`), then ``make()`` the
    object; on any failure ``remove([name])`` what the script made (quietly) and re-raise."""
    try:
        run()
        return make()
    except BaseException:
        try:
            remove([name])
        except Exception:
            pass
        raise


def remove_script(
    driver: cgroups.Driver | None, workroot: str, names: list[str], also: Callable[[str], str] | None = None
) -> str:
    """Kill the instances' processes, remove their cgroups, what ``also(name)`` removes (shell lines:
    the ``ssh`` backend's network namespaces) and, last, their work dirs ("" for no names)."""
    script = ""
    for name in names:
        check_name(name)
        if driver is not None:
            script += cgroup_script.script(driver.remove(name))
        if also is not None:
            script += also(name)
        script += f"rm -rf {q(posixpath.join(workroot, name))}\n"
    return script


def list_script(driver: cgroups.Driver | None, workroot: str, prefix: str) -> str:
    """The listing of the instances named ``prefix*`` (work dirs and cgroups) on the host."""
    roots = cgroups.writable_roots(driver) if driver else []
    return f"wr={q(workroot)}\n" + listing_script(prefix, roots) + "true\n"


def listed_names(driver: cgroups.Driver | None, listed: list[tuple[str, str]], prefix: str) -> list[str]:
    """The instance names in a listing (:class:`HostFacts` ``listed``) that start with ``prefix``."""
    roots = cgroups.writable_roots(driver) if driver else []
    return sorted({n for p, n in listed if (p == "@work" or p in roots) and n.startswith(prefix)})


def command_line(
    driver: cgroups.Driver | None,
    name: str,
    workdir: str,
    argv: list[str],
    pidfile: str,
    env: dict | None,
    host_cpu_ids: list[int] | None,
    enter: list[str] | None = None,
) -> str:
    """The ``sh`` script of one exec in instance ``name``: in its work dir, in its own session
    (its id in ``pidfile``), in its cgroup (``driver``; None: unconfined, on its CPUs), through the
    ``enter`` argv prefix when there is one (the ``ssh`` backend's network namespace); exits with the
    command's status (128+n for a signal, as a local shell would)."""
    lines = [f"cd {q(workdir)} || exit 1"]
    for key, value in (env or {}).items():
        lines.append(f"export {key}={q(value)}")
    inner = 'echo $$ > "$0" || exit 1; ' + cgroups.JOIN
    if driver is not None:
        lines.append(f"export LABKIT_CGROUP_PROCS={q(' '.join(driver.procs_files(name)))}")
    else:
        inner = 'echo $$ > "$0" || exit 1; exec "$@"'
    words = ["setsid", "/bin/sh", "-c", inner, pidfile]
    if driver is None and host_cpu_ids:
        words += ["taskset", "-c", cgroups.format_cpulist(host_cpu_ids)]
    lines.append(shlex.join(words + (enter or []) + argv) + " </dev/null &")
    lines.append(f"wait $!; rc=$?; rm -f {q(pidfile)}; exit $rc")
    return "\n".join(lines)


def kill_script(driver: cgroups.Driver | None, name: str, pidfile: str) -> str:
    """Kill the session of the command whose pid file is ``pidfile`` (waiting up to 2 s for it to be
    written) and, with a cgroup (``driver``; None: unconfined), every process left in instance ``name``."""
    pf = q(pidfile)
    script = (
        f"i=0; while [ ! -s {pf} ] && [ $i -lt 100 ]; do sleep 0.02; i=$((i+1)); done\n"
        f"[ -s {pf} ] && kill -KILL -$(cat {pf}) 2>/dev/null\n"
    )  # dash: no `--`
    if driver is not None:
        script += cgroup_script.script(driver.kill(name))
    return script + "true\n"


def instance_facts(driver: cgroups.Driver | None, host_cpu_ids: list[int] | None) -> dict:
    """What an instance's metadata records of its confinement."""
    return {
        "host_cpu_ids": host_cpu_ids,
        "limits_enforced": driver is not None,
        "cgroup_version": driver.version if driver else None,
    }


def host_fingerprint(facts: HostFacts, driver: cgroups.Driver | None) -> dict:
    """The host's part of a backend fingerprint: kernel, CPU model and count, governor, SMT, cgroups."""
    return {
        "hostname": facts.get("hostname"),
        "kernel": facts.get("kernel"),
        "machine": facts.get("machine"),
        "cpu_model": facts.get("cpu_model"),
        "cpus": len(cpu_ids(facts, driver)),
        "cgroup_version": driver.version if driver else None,
        "limits_enforced": driver is not None,
        "governor": facts.get("governor") or None,
        "smt": facts.get("smt") or None,
    }


# -- an instance's counters (Instance.stats) ------------------------------------------------------
#: how :func:`read_files_script` marks where each file's text starts, and a file it could not read
MARK, MISSING = "@@labkit-file ", "@@labkit-missing"
#: how :data:`FILE_READER` ends its answer to one request
END = "@@labkit-end"
#: a long-lived reader of files (the ``slurm`` backend's one step per node for the counters): for
#: each line ``key path [key path ...]`` on its stdin, prints each file as :func:`read_files_script`
#: does, then :data:`END`; words are split with globbing off, so keys and paths hold no white space
FILE_READER = (
    f"set -f\nwhile IFS= read -r line; do set -- $line\n"
    f'  while [ $# -ge 2 ]; do echo {q(MARK)}"$1"; cat "$2" 2>/dev/null || echo {MISSING}; shift 2; done\n'
    f"  echo {END}\ndone\n"
)


def read_files_script(paths: dict[str, str]) -> str:
    """Shell lines printing each file of ``paths`` (key -> path) after a line :data:`MARK` + key, or
    :data:`MISSING` for one that cannot be read: :func:`split_marked` reads the output."""
    return (
        "".join(
            f"echo {q(MARK + key)}; cat {q(path)} 2>/dev/null || echo {MISSING}\n"
            for key, path in paths.items()
        )
        + "true\n"
    )


def split_marked(text: str, keys: list[str]) -> dict[str, str | None]:
    """The text of each file in the output of :func:`read_files_script` (or of one answer of
    :data:`FILE_READER`), by key; None for a file it could not read or did not print."""
    out: dict[str, str | None] = {k: None for k in keys}
    current: str | None = None
    chunks: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith(MARK) and line[len(MARK) :] in out:
            current = line[len(MARK) :]
            chunks[current] = []
        elif line == MISSING and current is not None:
            chunks.pop(current, None)
            current = None
        elif current is not None:
            chunks[current].append(line)
    out.update({k: "\n".join(v) + "\n" for k, v in chunks.items()})
    return out


def stat_paths(driver: cgroups.Driver | None, name: str) -> dict[str, str]:
    """The files instance ``name``'s counters are read from: its cgroup's (:func:`cgroup_counters.stat_paths`;
    none without a ``driver``: unconfined) and the host's ``/proc/stat`` (``proc_stat``)."""
    paths = {"proc_stat": "/proc/stat"}
    if driver is not None:
        paths.update(cgroup_counters.stat_paths(driver, name))
    return paths


def instance_stats(
    driver: cgroups.Driver | None, texts: dict[str, str | None], what: str
) -> dict[str, float]:
    """:meth:`Instance.stats <labkit.backends.base.Instance.stats>` of a native instance from the texts of
    its :func:`stat_paths`: its cgroup's counters (:func:`cgroup_counters.parse_stats`) and the host's steal
    time (``steal_s``, ``cpu_total_s``: the instance runs natively there, so a cloud server's steal
    is the instance's); only the steal counters without a ``driver``. StatsUnavailable naming
    ``what`` when the cgroup's counters cannot be read (the instance is gone)."""
    out = cgroup_counters.parse_stats(driver, texts) if driver is not None else {}
    out.update(parse_proc_stat(texts.get("proc_stat") or ""))
    if driver is not None and "cpu_s" not in out:
        raise StatsUnavailable(f"{what}: its cgroup's counters cannot be read (is it gone?)")
    return out
