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
| ``vcpus`` | the CPUs' worth the instance may use: its CFS quota (``cpu.max`` / ``cpu.cfs_quota_us``) when it has one, else its allowed CPUs (not verified when no cpu controller is visible inside and more CPUs are allowed: a quota on the host is unseen); in a VM ``nproc`` | equal to the level | the same command |
| ``memory_mb`` | the memory limit read inside: the cgroup's ``memory.max`` / ``memory.limit_in_bytes``; in a VM ``MemTotal`` of ``/proc/meminfo`` | the limit is the level (1 MiB or 1 % either way); a VM's ``MemTotal`` between 80 % and 100 % of it (the guest kernel keeps some) | the same command |
| ``ksm`` | the pages KSM merged during the run (``/proc/<pid>/ksm_merging_pages`` of the run's instances' processes, else the host's ``/sys/kernel/mm/ksm/pages_sharing``), its most over the run, polled every :attr:`TreatmentChecks.poll_s` s on this machine | ``on``: ksmd running and > 0 pages merged; ``off``: ksmd not running and none merged | a thread reading sysfs and /proc |
| ``noise`` / ``neighbours`` | each neighbour's CPU use (% of one CPU) over the run, from its own counters (:meth:`Instance.stats <labkit.backends.base.Instance.stats>`) | as many neighbours as the level, each using at least :data:`NOISE_MIN_CPU_PCT` of a CPU; ``none`` / 0: no neighbour | two readings per neighbour |
| ``count`` | the instances made for the run | equal to the level | the run's instance list |
| ``link`` | the qdiscs on the host-side device of each instance's link (``tc -j -s qdisc show dev``: kind, rate, burst, delay), read back after the run; the bytes the device sent into the instance (``/sys/class/net/<dev>/statistics/tx_bytes``) polled every :attr:`TreatmentChecks.poll_s` s: the peak rate over any :data:`LINK_WINDOW_S` s window, the mean and the bytes | a rate: a ``tbf`` at the level's rate (within :data:`LINK_QDISC_TOLERANCE`, tc rounds) on every device and no window above the rate by more than :data:`LINK_RATE_TOLERANCE` plus the tbf's burst; a delay: a ``netem`` with it (in a VM the delay is the guest's own and is not read); ``none``: no shaping qdisc | a thread reading sysfs, one ``tc`` per device |

In a VM (``libvirt`` and the cloud backends) the allowed CPUs are its own vCPUs: the host-side
pinning (``vcpupin``) is not read, so ``affinity`` is null there. The instance checks read
instance 0 of the run (one command per run: the others get their placement by the same rule).
KSM counters are this machine's: on a backend whose instances run elsewhere ``ksm`` is null.
So is ``link`` there (``ssh``, a remote Docker daemon or libvirt host, the clouds): the link is
shaped where the instances run. A link's host-side devices are those the backend shaped
(``Instance.host_device``, and the data NICs of bonded ones); the traffic read on them is what
flows *into* the instances, the direction ``tc`` shapes.

The checks run once the run's workload has ended, while its instances (and neighbours) still exist.
What each record says from what was read (parsing and the checks, pure) is
:mod:`labkit.run.treatment_records`; this module reads and watches.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core import network_factors as netmod
from ..errors import BackendError, ConfigError
from .hooks import RunContext, RunHook

# what each factor's record says from what was read (pure), re-exported where it was defined before
from .treatment_records import (  # noqa: F401
    LINK_QDISC_TOLERANCE,
    LINK_RATE_TOLERANCE,
    LINK_WINDOW_S,
    NOISE_MIN_CPU_PCT,
    SHAPING_QDISCS,
    UNLIMITED_V1,
    VM_MEMTOTAL_SHARE,
    bit_text,
    check_affinity,
    check_ksm,
    check_link,
    check_memory,
    check_neighbours,
    check_vcpus,
    entry,
    failed,
    kinds_of,
    link_traffic,
    parse_cpulist,
    parse_inside,
    parse_qdiscs,
    rate_windows,
)

#: the factors this module checks
KNOWN = ("affinity", "vcpus", "memory_mb", "ksm", "noise", "neighbours", "count", "link")
#: backends whose instances are virtual machines (the instance's own view is of its vCPUs)
VM_BACKENDS = frozenset({"libvirt", "cloud", "openstack", "cloudstack", "azure"})
KSM_ROOT = Path("/sys/kernel/mm/ksm")

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

SYS_NET = Path("/sys/class/net")


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
        self.seen: dict[str, Any] = {
            "merged": None,
            "pages_sharing_max": None,
            "run_values": [],
            "polls": 0,
            "attributed": False,
            "instance_merged": 0,
            "host_merged": 0,
        }
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
            if sharing > 0:  # only then is it worth finding whose pages they are
                found, pages = self._instance_pages()
                if found:
                    s["attributed"] = True
                    s["instance_merged"] = max(s["instance_merged"], pages)
        except Exception as exc:  # a check never fails a run
            s["error"] = f"{type(exc).__name__}: {exc}"[:300]

    def stop(self) -> dict:
        self.stop_event.set()
        if self.thread is not None:  # no reading after the workload: its processes are gone by then
            self.thread.join(5)
        s = self.seen
        if "error" not in s and s["pages_sharing_max"] is not None:
            # the run's own pages; with none of its processes found, only "nothing merged on the
            # host at all" can be told (any page merged then may be another process's)
            s["merged"] = s["instance_merged"] if s["attributed"] else (0 if s["host_merged"] == 0 else None)
        return s


# -- a link, polled during the run -------------------------------------------------------------
def link_devices(instances: list) -> list[str]:
    """The host-side devices the backend shaped for ``instances``: each one's ``host_device`` and
    the data NICs of bonded ones (``metadata["network"]["data_devices"]``), each once."""
    out: list[str] = []
    for inst in instances:
        net = (getattr(inst, "metadata", None) or {}).get("network") or {}
        for dev in [getattr(inst, "host_device", None), *(net.get("data_devices") or [])]:
            if isinstance(dev, str) and dev and dev not in out:
                out.append(dev)
    return out


def read_qdiscs(device: str) -> list[dict]:
    """The qdiscs on ``device`` of this machine (:func:`parse_qdiscs` of ``tc -j -s qdisc show``);
    BackendError when tc fails (no such device), ConfigError when it prints no JSON."""
    return parse_qdiscs(netmod.host_output(["tc", "-j", "-s", "qdisc", "show", "dev", device], timeout=10))


class LinkWatch:
    """Polls, every ``poll_s`` s, the bytes each host-side link device of the run's instances
    (:func:`link_devices`, found as they are made) has sent: ``tx_bytes`` under ``sys_net``.
    :meth:`stop` takes a last reading and returns ``{device: [(t, bytes), ...]}``."""

    def __init__(self, ctx: RunContext, sys_net: Path = SYS_NET, poll_s: float = 0.2):
        self.ctx, self.sys_net, self.poll_s = ctx, Path(sys_net), poll_s
        self.stop_event = threading.Event()
        self.samples: dict[str, list[tuple[float, int]]] = {}
        self.error: str | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> LinkWatch:
        self.poll()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="labkit-link-check")
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop_event.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        try:
            for dev in link_devices(list(self.ctx.instances)):
                n = _read_int(self.sys_net / dev / "statistics" / "tx_bytes")
                if n is not None:
                    self.samples.setdefault(dev, []).append((time.monotonic(), n))
        except Exception as exc:  # a check never fails a run
            self.error = f"{type(exc).__name__}: {exc}"[:300]

    def stop(self) -> dict[str, list[tuple[float, int]]]:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(5)
            self.thread = None
            self.poll()  # the devices outlive the workload: the last bytes it sent
        return self.samples


# -- the hook ----------------------------------------------------------------------------------
def _cpu_s(inst: Any) -> float | None:
    try:
        value = inst.stats().get("cpu_s")
    except Exception:  # a backend SDK's own error too: a check never fails a run
        return None
    return float(value) if isinstance(value, (int, float)) else None


class TreatmentChecks(RunHook):
    """The manipulation checks of every run (module docstring). ``ksm_root``: the KSM directory
    read; ``sys_net``: the network devices' directory read; ``poll_s``: seconds between KSM and
    link readings; ``timeout_s``: the instance command's limit."""

    def __init__(
        self,
        *,
        ksm_root: Path | str = KSM_ROOT,
        sys_net: Path | str = SYS_NET,
        poll_s: float = 0.2,
        timeout_s: float = 15.0,
    ):
        if isinstance(poll_s, bool) or not isinstance(poll_s, (int, float)) or not 0.01 <= poll_s <= 10:
            raise ConfigError(f"TreatmentChecks: poll_s must be 0.01 to 10 seconds, got {poll_s!r}")
        self.ksm_root, self.poll_s, self.timeout_s = Path(ksm_root), float(poll_s), timeout_s
        self.sys_net = Path(sys_net)

    def around_run(self, ctx: RunContext) -> contextlib.AbstractContextManager:
        if not any(f in KNOWN for f in ctx.run.levels):
            return contextlib.nullcontext([])
        return self._checked(ctx)

    @contextlib.contextmanager
    def _checked(self, ctx: RunContext) -> Iterator[list]:
        levels = ctx.run.levels
        watch: Any = None
        link: Any = None
        if "ksm" in levels or "link" in levels:
            from .readings import remote_reason

            why = remote_reason(ctx.backend)
            if "ksm" in levels:
                watch = KsmWatch(ctx, self.ksm_root, self.poll_s).start() if why is None else why
            if "link" in levels:
                link = LinkWatch(ctx, self.sys_net, self.poll_s).start() if why is None else why
        t0 = time.monotonic()
        neighbours = list(ctx.neighbours)
        start = [_cpu_s(n) for n in neighbours]
        try:
            yield []
        except Exception:
            self._record(ctx, watch, neighbours, start, t0, link)
            raise
        except BaseException:  # interrupted: the run is not stored
            for w in (watch, link):
                if isinstance(w, (KsmWatch, LinkWatch)):
                    w.stop()
            raise
        else:
            self._record(ctx, watch, neighbours, start, t0, link)

    def _record(
        self, ctx: RunContext, watch: Any, neighbours: list, start: list, t0: float, link: Any = None
    ) -> None:
        levels, spec = ctx.run.levels, ctx.spec
        out: dict[str, dict] = {}
        try:
            vm = getattr(ctx.backend, "name", "") in VM_BACKENDS
            if isinstance(watch, KsmWatch):
                out["ksm"] = check_ksm(levels["ksm"], watch.stop())
            elif "ksm" in levels:
                out["ksm"] = entry(
                    levels["ksm"], None, None, f"not read: {watch}: KSM counters are this machine's"
                )
            if any(f in levels for f in ("noise", "neighbours")):
                dt = max(time.monotonic() - t0, 1e-9)
                used = [
                    None if a is None or b is None else round(max(0.0, 100.0 * (b - a) / dt), 1)
                    for a, b in zip(start, (_cpu_s(n) for n in neighbours))
                ]
                kind = ctx.metadata.get("noise") if isinstance(ctx.metadata.get("noise"), str) else None
                for factor in ("noise", "neighbours"):
                    if factor in levels:
                        out[factor] = check_neighbours(
                            factor, levels[factor], used, kind or levels.get("noise")
                        )
            if "count" in levels:
                n = len(ctx.instances)
                out["count"] = entry(levels["count"], n == spec.count, n, "instances made for the run")
            if "link" in levels:
                out["link"] = self._link(ctx, link, vm)
            inside = [f for f in ("affinity", "vcpus", "memory_mb") if f in levels]
            if inside:
                out.update(self._inside(ctx, inside, vm))
        except Exception as exc:  # a bug here never fails a run: said in the record
            out["_error"] = entry(None, None, None, f"checks stopped: {type(exc).__name__}: {exc}"[:300])
        ctx.metadata["treatments"] = out
        ctx.metadata["treatment_failed"] = failed(out)

    def _link(self, ctx: RunContext, watch: Any, vm: bool) -> dict:
        """The ``link`` record: ``watch`` is the run's :class:`LinkWatch`, or why none could run."""
        level = ctx.run.levels["link"]
        if not isinstance(watch, LinkWatch):
            return entry(
                level,
                None,
                None,
                f"not read: {watch}: its links are shaped with tc there, not on this machine",
            )
        samples = watch.stop()
        try:
            shaped = netmod.parse_link(level, "factor 'link' level")
        except ConfigError as exc:
            return entry(level, None, None, f"not verified: {exc}")
        devices: dict[str, dict] = {}
        for dev in link_devices(list(ctx.instances)):
            try:
                devices[dev] = {"qdiscs": read_qdiscs(dev), "samples": samples.get(dev, [])}
            except (BackendError, ConfigError) as exc:
                devices[dev] = {
                    "qdiscs": None,
                    "error": f"tc read nothing: {exc}"[:300],
                    "samples": samples.get(dev, []),
                }
        rec = check_link(level, shaped, devices, delay_here=not vm)
        if watch.error and rec["verified"] is not False:
            rec = entry(
                level, None, rec["observed"], f"not verified: reading the byte counters failed: {watch.error}"
            )
        return rec

    def _inside(self, ctx: RunContext, factors: list[str], vm: bool) -> dict:
        levels, spec = ctx.run.levels, ctx.spec
        if not ctx.instances:
            return {
                f: entry(levels[f], None, None, "not read: the run has no instance (provisioning failed)")
                for f in factors
            }
        inst = ctx.instances[0]
        try:
            res = inst.exec(["sh", "-c", INSIDE], check=False, timeout=self.timeout_s, logged=False)
            seen = parse_inside(res.stdout)
        except Exception as exc:
            why = (
                f"not read: the command in {getattr(inst, 'name', 'instance 0')} failed: {exc}".splitlines()[
                    0
                ][:300]
            )
            return {f: entry(levels[f], None, None, why) for f in factors}
        out = {}
        if "affinity" in factors:
            expected = getattr(inst, "host_cpu_ids", None) or getattr(inst, "cpus", None)
            try:
                host_cpus = ctx.backend.host_cpus() if spec.affinity != "pinned" else None
            except Exception:
                host_cpus = None
            out["affinity"] = check_affinity(
                spec.affinity, seen, expected=expected, vcpus=spec.vcpus, host_cpus=host_cpus, vm=vm
            )
        if "vcpus" in factors:
            out["vcpus"] = check_vcpus(spec.vcpus, seen, vm=vm)
        if "memory_mb" in factors:
            out["memory_mb"] = check_memory(spec.memory_mb, seen, vm=vm)
        for f in factors:  # the level as the design names it
            out[f]["level"] = levels[f]
        return out
