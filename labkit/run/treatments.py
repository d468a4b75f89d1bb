"""Manipulation checks: did each run's treatment take? (issue 41, item 4)

:class:`TreatmentChecks` is a :class:`~labkit.run.hooks.RunHook` the campaign enters around every
run (on by default; a design's ``treatment_checks: false`` turns it off). For each factor of the
run that it knows it records, in the run's metadata::

    treatments: {factor: {"level": ..., "verified": true | false | null, "observed": ..., "how": "..."}}
    treatment_failed: [factor, ...]     # "treatment not applied": the factors whose check failed

``verified`` is null, with the reason in ``how``, when the check could not be read or this
backend gives no way to read it: a check never fails a run. What each factor's check reads:

| factor | observed | verified when | how |
|---|---|---|---|
| ``affinity`` | the CPUs the instance's processes may run on, read inside it (``Cpus_allowed_list`` of ``/proc/self/status``) | pinned: exactly the CPUs the backend recorded for the instance (else as many as its vCPUs); floating: every CPU of the host | one shell command in instance 0 |
| ``vcpus`` | the CPUs' worth the instance may use: its CFS quota (``cpu.max`` / ``cpu.cfs_quota_us``) when it has one, else its allowed CPUs; in a VM ``nproc`` | equal to the level | the same command |
| ``memory_mb`` | the memory limit read inside: the cgroup's ``memory.max`` / ``memory.limit_in_bytes``; in a VM ``MemTotal`` of ``/proc/meminfo`` | the limit is the level (1 MiB or 1 % either way); a VM's ``MemTotal`` between 80 % and 100 % of it (the guest kernel keeps some) | the same command |
| ``ksm`` | the pages KSM merged during the run (``/proc/<pid>/ksm_merging_pages`` of the run's instances' processes, else the host's ``/sys/kernel/mm/ksm/pages_sharing``), its most over the run, polled every :attr:`TreatmentChecks.poll_s` s on this machine | ``on``: ksmd running and > 0 pages merged; ``off``: ksmd not running and none merged | a thread reading sysfs and /proc |
| ``noise`` / ``neighbours`` | each neighbour's CPU use (% of one CPU) over the run, from its own counters (:meth:`Instance.stats <labkit.backends.base.Instance.stats>`) | as many neighbours as the level, each using at least :data:`NOISE_MIN_CPU_PCT` of a CPU; ``none`` / 0: no neighbour | two readings per neighbour |
| ``count`` | the instances made for the run | equal to the level | the run's instance list |
| ``link`` | nothing: labkit configures the shaping (``tc``) but measures no rate on the link | never: null, "not verified" | |

In a VM (``libvirt`` and the cloud backends) the allowed CPUs are its own vCPUs: the host-side
pinning (``vcpupin``) is not read, so ``affinity`` is null there. The instance checks read
instance 0 of the run (one command per run: the others get their placement by the same rule).
KSM counters are this machine's: on a backend whose instances run elsewhere ``ksm`` is null.

The checks run once the run's workload has ended, while its instances (and neighbours) still exist.
"""
from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .hooks import RunContext, RunHook

#: the factors this module checks
KNOWN = ("affinity", "vcpus", "memory_mb", "ksm", "noise", "neighbours", "count", "link")
#: backends whose instances are virtual machines (the instance's own view is of its vCPUs)
VM_BACKENDS = frozenset({"libvirt", "cloud", "openstack", "cloudstack", "azure"})
KSM_ROOT = Path("/sys/kernel/mm/ksm")
#: least CPU use (% of one CPU) over a run that shows a neighbour of this kind was running its load
NOISE_MIN_CPU_PCT = {"cpu": 10.0, "memory": 10.0, "io": 1.0, "network": 1.0, "command": 1.0}
#: a VM's MemTotal as a share of its memory: the guest kernel keeps part of it
VM_MEMTOTAL_SHARE = (0.80, 1.0)

#: one shell command (POSIX sh, busybox too) printing what the instance checks read inside it
INSIDE = r"""while IFS= read -r l; do case $l in Cpus_allowed_list:*) echo "$l"; break;; esac; done < /proc/self/status
echo "nproc: $(nproc 2>/dev/null)"
while IFS= read -r l; do case $l in MemTotal:*) echo "$l"; break;; esac; done < /proc/meminfo
while IFS=: read -r id ctl path; do
  case ",$ctl," in
    *,memory,*) for f in "/sys/fs/cgroup/memory$path/memory.limit_in_bytes" /sys/fs/cgroup/memory/memory.limit_in_bytes; do
        if [ -r "$f" ]; then read -r v < "$f"; echo "memory_limit_v1: $v"; break; fi; done ;;
    *,cpu,*) for d in "/sys/fs/cgroup/cpu$path" "/sys/fs/cgroup/cpu,cpuacct$path" /sys/fs/cgroup/cpu /sys/fs/cgroup/cpu,cpuacct; do
        if [ -r "$d/cpu.cfs_quota_us" ]; then read -r q < "$d/cpu.cfs_quota_us"; read -r p < "$d/cpu.cfs_period_us"
          echo "cpu_quota_v1: $q $p"; break; fi; done ;;
    ,,) for d in "/sys/fs/cgroup$path" "/sys/fs/cgroup/unified$path"; do
        if [ -r "$d/memory.max" ]; then read -r v < "$d/memory.max"; echo "memory_max_v2: $v"; fi
        if [ -r "$d/cpu.max" ]; then read -r v < "$d/cpu.max"; echo "cpu_max_v2: $v"; fi
      done ;;
  esac
done < /proc/self/cgroup
true"""

#: a cgroup v1 memory limit at or above this is "no limit" (the kernel's PAGE_COUNTER_MAX, rounded)
UNLIMITED_V1 = 2**62


# -- parsing (pure) ----------------------------------------------------------------------------
def parse_cpulist(text: str) -> list[int]:
    """``0-2,5`` -> ``[0, 1, 2, 5]``; ConfigError for text that is not a CPU list."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ConfigError(f"not a CPU list: {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        out.update(range(lo, hi + 1))
    return sorted(out)


def parse_inside(text: str) -> dict:
    """What :data:`INSIDE` printed, as ``cpus_allowed`` (list), ``nproc``, ``memtotal_mb``,
    ``memory_limit_mb`` (None: unlimited), ``cpu_quota`` (CPUs' worth; None: no quota); a key is
    absent when the instance did not show it. Lines of other shapes are ignored."""
    out: dict[str, Any] = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        try:
            if key == "Cpus_allowed_list":
                out["cpus_allowed"] = parse_cpulist(value)
            elif key == "nproc" and value.isdigit():
                out["nproc"] = int(value)
            elif key == "MemTotal":
                out["memtotal_mb"] = round(int(value.split()[0]) / 1024, 1)
            elif key == "memory_limit_v1" and "memory_limit_mb" not in out:
                b = int(value)
                out["memory_limit_mb"] = None if b >= UNLIMITED_V1 else round(b / 2**20, 1)
            elif key == "memory_max_v2" and value and "memory_limit_mb" not in out:
                out["memory_limit_mb"] = None if value == "max" else round(int(value) / 2**20, 1)
            elif key == "cpu_quota_v1" and "cpu_quota" not in out:
                q, p = (int(v) for v in value.split())
                out["cpu_quota"] = None if q < 0 else round(q / p, 3)
            elif key == "cpu_max_v2" and "cpu_quota" not in out:
                q_text, p_text = value.split()
                out["cpu_quota"] = None if q_text == "max" else round(int(q_text) / int(p_text), 3)
        except (ValueError, ZeroDivisionError, ConfigError):
            continue
    return out


def entry(level: Any, verified: bool | None, observed: Any, how: str) -> dict:
    """One factor's record in ``treatments``."""
    return {"level": level, "verified": verified, "observed": observed, "how": how}


def check_affinity(level: str, seen: dict, *, expected: list[int] | None, vcpus: int, host_cpus: int | None,
                   vm: bool) -> dict:
    """The ``affinity`` record from :func:`parse_inside`'s ``seen`` (see the module docstring)."""
    how = "Cpus_allowed_list of /proc/self/status read inside instance 0"
    if vm:
        return entry(level, None, seen.get("cpus_allowed"),
                     "not verified: inside a VM the allowed CPUs are its own vCPUs; the host-side pinning "
                     "(vcpupin) is not read")
    cpus = seen.get("cpus_allowed")
    if cpus is None:
        return entry(level, None, None, f"not read: {how} gave no Cpus_allowed_list")
    if level == "pinned":
        if expected:
            return entry(level, sorted(cpus) == sorted(expected), cpus,
                         f"{how}, against the CPUs the backend pinned it to {sorted(expected)}")
        return entry(level, len(cpus) == vcpus, cpus, f"{how}: pinned to as many CPUs as vCPUs ({vcpus})")
    if host_cpus is None:
        return entry(level, None, cpus, f"not verified: the host's CPU count is unknown ({how})")
    return entry(level, len(cpus) == host_cpus, cpus, f"{how}: floating may run on all {host_cpus} host CPUs")


def check_vcpus(level: int, seen: dict, *, vm: bool) -> dict:
    """The ``vcpus`` record: the CPUs' worth the instance may use, read inside it."""
    if vm:
        n = seen.get("nproc")
        if n is None:
            return entry(level, None, None, "not read: nproc inside the VM gave nothing")
        return entry(level, n == level, n, "nproc inside the VM (its vCPUs)")
    quota = seen.get("cpu_quota")
    if quota is not None:
        return entry(level, abs(quota - level) < 0.01, quota,
                     "CFS quota / period of the instance's cgroup read inside it (cpu.max or cpu.cfs_quota_us)")
    cpus = seen.get("cpus_allowed")
    if cpus is None:
        return entry(level, None, None, "not read: neither a CPU quota nor Cpus_allowed_list inside the instance")
    return entry(level, len(cpus) == level, len(cpus),
                 "no CPU quota inside the instance: the number of CPUs it may run on (Cpus_allowed_list)")


def check_memory(level: int, seen: dict, *, vm: bool) -> dict:
    """The ``memory_mb`` record: the limit read inside the instance, in MiB."""
    if vm:
        total = seen.get("memtotal_mb")
        if total is None:
            return entry(level, None, None, "not read: MemTotal of /proc/meminfo inside the VM")
        lo, hi = VM_MEMTOTAL_SHARE
        return entry(level, lo * level <= total <= hi * level, total,
                     f"MemTotal of /proc/meminfo inside the VM, {lo:.0%}-{hi:.0%} of the level (the guest kernel "
                     "keeps some)")
    if "memory_limit_mb" not in seen:
        return entry(level, None, None, "not read: no memory.max or memory.limit_in_bytes visible inside the instance")
    limit = seen["memory_limit_mb"]
    how = "the memory limit of the instance's cgroup read inside it (memory.max or memory.limit_in_bytes)"
    if limit is None:
        return entry(level, False, "unlimited", how)
    return entry(level, abs(limit - level) <= max(1.0, 0.01 * level), limit, how)


def check_ksm(level: str, seen: dict) -> dict:
    """The ``ksm`` record from :meth:`KsmWatch.stop`'s ``seen``."""
    if seen.get("error"):
        return entry(level, None, None, f"not read: {seen['error']}")
    merged = seen.get("merged")
    running = seen.get("run_values", [])
    observed = {k: seen.get(k) for k in ("merged", "pages_sharing_max", "run_values", "polls", "attributed")}
    if seen.get("attributed"):
        how = ("pages of the run's instances' processes merged (/proc/<pid>/ksm_merging_pages), the most over "
               "the run, polled on this machine")
    elif seen.get("pages_sharing_max") == 0:
        how = ("the host's merged pages (/sys/kernel/mm/ksm/pages_sharing), polled on this machine during the run: "
               "none at any reading, so none of the run's")
    else:
        how = ("the host's merged pages (/sys/kernel/mm/ksm/pages_sharing), the most over the run, polled on this "
               "machine (no process of the run's instances was found while pages were merged)")
    if merged is None:
        return entry(level, None, observed,
                     f"not verified: pages were merged on this host ({seen.get('pages_sharing_max')} at most) but "
                     "none could be attributed to the run's instances' processes")
    if level == "on":
        ok = merged > 0 and 1 in running
        return entry(level, ok, observed, how + ("" if 1 in running else "; ksmd was not running (run != 1)"))
    if level == "off":
        return entry(level, merged == 0 and 1 not in running, observed, how)
    return entry(level, None, observed, f"not verified: level {level!r} is neither on nor off")


def check_neighbours(factor: str, level: Any, used: list[float | None], kind: str | None) -> dict:
    """The ``noise`` / ``neighbours`` record from each neighbour's CPU use over the run (% of one CPU)."""
    want = 0 if level in ("none", 0, None) else (level if factor == "neighbours" else 1)
    how = "each neighbour's CPU time over the run from its own counters (Instance.stats cpu_s)"
    if want == 0:
        return entry(level, len(used) == 0, {"neighbours": len(used)}, "no neighbour was started for the run")
    floor = NOISE_MIN_CPU_PCT.get(kind or "", 1.0)
    observed = {"neighbours": len(used), "cpu_pct": used, "min_cpu_pct": floor}
    if len(used) != want:
        return entry(level, False, observed, f"{how}: {len(used)} neighbour(s) ran, {want} asked for")
    if any(u is None for u in used):
        return entry(level, None, observed, f"not read: a neighbour's CPU counters were unavailable ({how})")
    return entry(level, all(u >= floor for u in used if u is not None), observed,
                 f"{how}: each at least {floor:g} % of a CPU")


def failed(treatments: dict) -> list[str]:
    """The factors whose check failed (``verified`` false): the run's "treatment not applied"."""
    return sorted(f for f, rec in treatments.items() if rec.get("verified") is False)


# -- KSM, polled during the run ----------------------------------------------------------------
def _read_int(path: Path | str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _tokens(instances: list) -> list[str]:
    """What names an instance's processes in their /proc/<pid>/cgroup: its name (systemd escapes
    ``-`` as ``\\x2d`` in a libvirt scope's) and a container's id."""
    out: list[str] = []
    for inst in instances:
        name = getattr(inst, "name", None)
        if isinstance(name, str) and name:
            out += [name, name.replace("-", "\\x2d")]
        ident = getattr(inst, "id", None)
        if isinstance(ident, str) and len(ident) >= 12:
            out.append(ident)
    return out


class KsmWatch:
    """Polls this machine's KSM during a run: ``run`` and ``pages_sharing`` every ``poll_s`` s and,
    while any page is merged, the merged pages of the processes of the run's instances (those whose
    ``/proc/<pid>/cgroup`` names one). :meth:`stop` returns the most seen."""

    def __init__(self, ctx: RunContext, root: Path = KSM_ROOT, poll_s: float = 0.2, proc: str = "/proc"):
        self.ctx, self.root, self.poll_s, self.proc = ctx, Path(root), poll_s, proc
        self.stop_event = threading.Event()
        self.seen: dict[str, Any] = {"merged": None, "pages_sharing_max": None, "run_values": [], "polls": 0,
                                     "attributed": False, "instance_merged": 0, "host_merged": 0}
        self.thread: threading.Thread | None = None

    def start(self) -> KsmWatch:
        if not (self.root / "pages_sharing").exists():
            self.seen["error"] = f"this kernel has no KSM ({self.root / 'pages_sharing'} is missing)"
            return self
        self.poll()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="labkit-ksm-check")
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop_event.wait(self.poll_s):
            self.poll()

    def _instance_pages(self) -> tuple[bool, int]:
        """(whether a process of the run's instances was found, their merged pages)."""
        tokens = _tokens(list(self.ctx.instances))
        if not tokens:
            return False, 0
        found, pages = False, 0
        try:
            pids = [p for p in os.listdir(self.proc) if p.isdigit()]
        except OSError:
            return False, 0
        for pid in pids:
            try:
                with open(f"{self.proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
                    cg = f.read()
            except OSError:
                continue
            if not any(t in cg for t in tokens):
                continue
            n = _read_int(f"{self.proc}/{pid}/ksm_merging_pages")
            if n is not None:
                found, pages = True, pages + n
        return found, pages

    def poll(self) -> None:
        s = self.seen
        try:
            run, sharing = _read_int(self.root / "run"), _read_int(self.root / "pages_sharing")
            s["polls"] += 1
            if run is not None and run not in s["run_values"]:
                s["run_values"].append(run)
            if sharing is None:
                return
            s["pages_sharing_max"] = max(sharing, s["pages_sharing_max"] or 0)
            s["host_merged"] = max(s["host_merged"], sharing)
            if sharing > 0:   # only then is it worth finding whose pages they are
                found, pages = self._instance_pages()
                if found:
                    s["attributed"] = True
                    s["instance_merged"] = max(s["instance_merged"], pages)
        except Exception as exc:   # a check never fails a run
            s["error"] = f"{type(exc).__name__}: {exc}"[:300]

    def stop(self) -> dict:
        self.stop_event.set()
        if self.thread is not None:   # no reading after the workload: its processes are gone by then
            self.thread.join(5)
        s = self.seen
        if "error" not in s and s["pages_sharing_max"] is not None:
            # the run's own pages; with none of its processes found, only "nothing merged on the
            # host at all" can be told (any page merged then may be another process's)
            s["merged"] = s["instance_merged"] if s["attributed"] else (0 if s["host_merged"] == 0 else None)
        return s


# -- the hook ----------------------------------------------------------------------------------
def _cpu_s(inst: Any) -> float | None:
    try:
        value = inst.stats().get("cpu_s")
    except Exception:   # a backend SDK's own error too: a check never fails a run
        return None
    return float(value) if isinstance(value, (int, float)) else None


class TreatmentChecks(RunHook):
    """The manipulation checks of every run (module docstring). ``ksm_root``: the KSM directory
    read; ``poll_s``: seconds between KSM readings; ``timeout_s``: the instance command's limit."""

    def __init__(self, *, ksm_root: Path | str = KSM_ROOT, poll_s: float = 0.2, timeout_s: float = 15.0):
        if isinstance(poll_s, bool) or not isinstance(poll_s, (int, float)) or not 0.01 <= poll_s <= 10:
            raise ConfigError(f"TreatmentChecks: poll_s must be 0.01 to 10 seconds, got {poll_s!r}")
        self.ksm_root, self.poll_s, self.timeout_s = Path(ksm_root), float(poll_s), timeout_s

    def around_run(self, ctx: RunContext) -> contextlib.AbstractContextManager:
        if not any(f in KNOWN for f in ctx.run.levels):
            return contextlib.nullcontext([])
        return self._checked(ctx)

    @contextlib.contextmanager
    def _checked(self, ctx: RunContext) -> Iterator[list]:
        levels = ctx.run.levels
        watch = None
        if "ksm" in levels:
            from .readings import remote_reason
            why = remote_reason(ctx.backend)
            watch = KsmWatch(ctx, self.ksm_root, self.poll_s) if why is None else why
            if isinstance(watch, KsmWatch):
                watch.start()
        t0 = time.monotonic()
        neighbours = list(ctx.neighbours)
        start = [_cpu_s(n) for n in neighbours]
        try:
            yield []
        except Exception:
            self._record(ctx, watch, neighbours, start, t0)
            raise
        except BaseException:   # interrupted: the run is not stored
            if isinstance(watch, KsmWatch):
                watch.stop()
            raise
        else:
            self._record(ctx, watch, neighbours, start, t0)

    def _record(self, ctx: RunContext, watch: Any, neighbours: list, start: list, t0: float) -> None:
        levels, spec = ctx.run.levels, ctx.spec
        out: dict[str, dict] = {}
        try:
            vm = getattr(ctx.backend, "name", "") in VM_BACKENDS
            if isinstance(watch, KsmWatch):
                out["ksm"] = check_ksm(levels["ksm"], watch.stop())
            elif "ksm" in levels:
                out["ksm"] = entry(levels["ksm"], None, None, f"not read: {watch}: KSM counters are this machine's")
            if any(f in levels for f in ("noise", "neighbours")):
                dt = max(time.monotonic() - t0, 1e-9)
                used = [None if a is None or b is None else round(max(0.0, 100.0 * (b - a) / dt), 1)
                        for a, b in zip(start, (_cpu_s(n) for n in neighbours))]
                kind = (ctx.metadata.get("noise") if isinstance(ctx.metadata.get("noise"), str) else None)
                for factor in ("noise", "neighbours"):
                    if factor in levels:
                        out[factor] = check_neighbours(factor, levels[factor], used, kind or levels.get("noise"))
            if "count" in levels:
                n = len(ctx.instances)
                out["count"] = entry(levels["count"], n == spec.count, n, "instances made for the run")
            if "link" in levels:
                out["link"] = entry(levels["link"], None, None,
                                    "not verified: labkit shapes the link with tc but measures no rate on it")
            inside = [f for f in ("affinity", "vcpus", "memory_mb") if f in levels]
            if inside:
                out.update(self._inside(ctx, inside, vm))
        except Exception as exc:   # a bug here never fails a run: said in the record
            out["_error"] = entry(None, None, None, f"checks stopped: {type(exc).__name__}: {exc}"[:300])
        ctx.metadata["treatments"] = out
        ctx.metadata["treatment_failed"] = failed(out)

    def _inside(self, ctx: RunContext, factors: list[str], vm: bool) -> dict:
        levels, spec = ctx.run.levels, ctx.spec
        if not ctx.instances:
            return {f: entry(levels[f], None, None, "not read: the run has no instance (provisioning failed)")
                    for f in factors}
        inst = ctx.instances[0]
        try:
            res = inst.exec(["sh", "-c", INSIDE], check=False, timeout=self.timeout_s, logged=False)
            seen = parse_inside(res.stdout)
        except Exception as exc:
            why = f"not read: the command in {getattr(inst, 'name', 'instance 0')} failed: {exc}".splitlines()[0][:300]
            return {f: entry(levels[f], None, None, why) for f in factors}
        out = {}
        if "affinity" in factors:
            expected = getattr(inst, "host_cpu_ids", None) or getattr(inst, "cpus", None)
            try:
                host_cpus = ctx.backend.host_cpus() if spec.affinity != "pinned" else None
            except Exception:
                host_cpus = None
            out["affinity"] = check_affinity(spec.affinity, seen, expected=expected, vcpus=spec.vcpus,
                                             host_cpus=host_cpus, vm=vm)
        if "vcpus" in factors:
            out["vcpus"] = check_vcpus(spec.vcpus, seen, vm=vm)
        if "memory_mb" in factors:
            out["memory_mb"] = check_memory(spec.memory_mb, seen, vm=vm)
        for f in factors:   # the level as the design names it
            out[f]["level"] = levels[f]
        return out
