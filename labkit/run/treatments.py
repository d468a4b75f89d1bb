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
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core import network as netmod
from ..errors import BackendError, ConfigError
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

SYS_NET = Path("/sys/class/net")
#: the shortest span (s) over which a link's rate is measured: its peak is the most over any such window
LINK_WINDOW_S = 1.0
#: how far a measured rate may exceed the level's (besides the tbf's burst) and the link still be held
LINK_RATE_TOLERANCE = 0.10
#: how far the qdisc's rate (or delay) read back may differ from the level's: tc stores bytes/s and
#: a delay in clock ticks, so a rate such as 1gbit comes back rounded
LINK_QDISC_TOLERANCE = 0.01
#: qdiscs that shape a link (any other, e.g. noqueue or fq_codel, leaves its rate alone)
SHAPING_QDISCS = frozenset({"tbf", "netem", "htb", "hfsc", "cbq", "cake"})


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


def _tc_number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _tc_rate_bit(value: Any) -> float | None:
    """A tbf's rate in ``tc -j`` (bytes/s in iproute2 >= 5, a text such as ``50Mbit`` before) in bit/s."""
    n = _tc_number(value)
    if n is not None:
        return 8.0 * n
    if isinstance(value, str):
        try:
            return netmod.parse_rate("tc rate", value)
        except ConfigError:
            return None
    return None


def parse_qdiscs(text: str) -> list[dict]:
    """What ``tc -j [-s] qdisc show dev DEV`` printed, one dict per qdisc: ``kind``, ``handle``,
    ``parent`` (``root`` for the root one), ``rate_bit_per_s`` (a tbf's), ``burst_bytes`` (a tbf's),
    ``delay_s`` (a netem's) and ``bytes`` (sent, with ``-s``); None where the qdisc has no such value.
    ConfigError for text that is not that JSON."""
    try:
        data = json.loads(text or "[]")
    except ValueError as exc:
        raise ConfigError(f"not the JSON of tc -j qdisc show: {(text or '')[:80]!r}") from exc
    if not isinstance(data, list):
        raise ConfigError(f"not the JSON of tc -j qdisc show (a list of qdiscs): {(text or '')[:80]!r}")
    out = []
    for q in data:
        if not isinstance(q, dict) or not isinstance(q.get("kind"), str):
            continue
        opts: dict = q["options"] if isinstance(q.get("options"), dict) else {}
        delay = opts.get("delay")
        delay_s = _tc_number(delay.get("delay") if isinstance(delay, dict) else delay)
        burst, sent = _tc_number(opts.get("burst")), _tc_number(q.get("bytes"))
        out.append({"kind": q["kind"], "handle": q.get("handle"),
                    "parent": "root" if q.get("root") else q.get("parent"),
                    "rate_bit_per_s": _tc_rate_bit(opts.get("rate")) if q["kind"] == "tbf" else None,
                    "burst_bytes": None if burst is None or q["kind"] != "tbf" else int(burst),
                    "delay_s": delay_s if q["kind"] == "netem" else None,
                    "bytes": None if sent is None else int(sent)})
    return out


def rate_windows(samples: list[tuple[float, int]], window_s: float = LINK_WINDOW_S) -> list[tuple[float, int]]:
    """``(seconds, bytes)`` between each reading of a byte counter (``(t, bytes)`` pairs) and the
    first one at least ``window_s`` later; when no two readings are that far apart, the span from
    the first to the last reading as the one window (none with fewer than two readings). A
    counter that went back (its device made anew) counts 0 bytes."""
    pts = sorted(samples)
    out: list[tuple[float, int]] = []
    j = 0
    for i, (t, b) in enumerate(pts):
        j = max(j, i + 1)
        while j < len(pts) and pts[j][0] - t < window_s:
            j += 1
        if j == len(pts):
            break
        out.append((pts[j][0] - t, max(0, pts[j][1] - b)))
    if not out and len(pts) >= 2 and pts[-1][0] > pts[0][0]:
        out.append((pts[-1][0] - pts[0][0], max(0, pts[-1][1] - pts[0][1])))
    return out


def link_traffic(samples: list[tuple[float, int]], window_s: float = LINK_WINDOW_S) -> dict:
    """The traffic a device's byte counter readings show: ``bytes`` (first to last reading),
    ``mean_bit_per_s`` over that span, ``peak_bit_per_s`` (the most over any :func:`rate_windows`
    window) and ``window_s`` (that window's length); the rates None with fewer than two readings."""
    pts = sorted(samples)
    wins = rate_windows(pts, window_s)
    span = pts[-1][0] - pts[0][0] if len(pts) >= 2 else 0.0
    total = max(0, pts[-1][1] - pts[0][1]) if len(pts) >= 2 else 0
    if not wins or span <= 0:
        return {"bytes": total, "mean_bit_per_s": None, "peak_bit_per_s": None, "window_s": None,
                "readings": len(pts)}
    dt, db = max(wins, key=lambda w: w[1] / w[0])
    return {"bytes": total, "mean_bit_per_s": round(8.0 * total / span, 1), "peak_bit_per_s": round(8.0 * db / dt, 1),
            "window_s": round(dt, 3), "readings": len(pts)}


def _close(got: float | None, want: float, tolerance: float = LINK_QDISC_TOLERANCE) -> bool:
    return got is not None and abs(got - want) <= tolerance * want


def bit_text(bit_per_s: float) -> str:
    """``50 Mbit/s``: a rate in bit/s in the largest unit that keeps it at least 1 (4 significant digits)."""
    for unit, size in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bit_per_s) >= size:
            return f"{bit_per_s / size:.4g} {unit}"
    return f"{bit_per_s:.4g} bit/s"


def _qdisc_text(q: dict) -> str:
    extra = (f" {bit_text(q['rate_bit_per_s'])}" if q.get("rate_bit_per_s") is not None else "") + \
            (f" {q['delay_s'] * 1e3:g} ms" if q.get("delay_s") is not None else "")
    return f"{q['kind']}{extra}"


def check_link(level: Any, link: netmod.Link | None, devices: dict[str, dict], *, delay_here: bool = True,
               window_s: float = LINK_WINDOW_S, tolerance: float = LINK_RATE_TOLERANCE) -> dict:
    """The ``link`` record. ``link``: what the level means (:func:`labkit.core.network.parse_link`;
    None: unshaped); ``devices``: per host-side device of the run, ``qdiscs`` (:func:`parse_qdiscs`;
    None when not read, ``error`` saying why) and ``samples`` (``(t, tx_bytes)`` readings);
    ``delay_here``: whether a delay is a qdisc on these devices (not in a VM, whose guest delays
    its own egress). False when a device lacks the level's shaping (or, unshaped, has some) or
    its traffic beat the rate by more than ``tolerance`` plus the tbf's burst over a window;
    null when a device or its traffic could not be read; see the module docstring.

    ``observed``: the level's ``rate_bit_per_s`` and ``delay_s``; ``qdisc`` (the kinds found,
    joined by ``+``); ``qdisc_rate_bit_per_s`` (the lowest tbf rate on the devices, None when one
    has none); ``peak_bit_per_s`` (the most of any device over a window), ``mean_bit_per_s`` (the
    busiest device's, over its readings), ``bytes`` (all devices') and, per device, ``devices``."""
    rate = None if link is None else link.rate_bit
    delay = 0.0 if link is None else link.delay_s
    read = ("the qdiscs of the host-side device of each instance's link (tc -j -s qdisc show dev) and the "
            f"bytes it sent into the instance (/sys/class/net/<dev>/statistics/tx_bytes) polled on this machine, "
            f"peak over {window_s:g} s windows")
    observed: dict[str, Any] = {"rate_bit_per_s": rate, "delay_s": delay, "qdisc": None,
                                "qdisc_rate_bit_per_s": None, "peak_bit_per_s": None, "mean_bit_per_s": None,
                                "bytes": 0, "devices": {}}
    if not devices:
        if link is None:
            return entry(level, True, observed, "no instance of the run has a host-side link device (no private "
                                                "network): nothing is shaped, as the level asks")
        return entry(level, None, observed, "not read: no instance of the run has a host-side link device "
                                            "(none was made, or the backend did not record it)")
    problems: list[str] = []
    unread: list[str] = []
    kinds: list[str] = []
    qrates: list[float] = []
    for dev, d in devices.items():
        qdiscs, traffic = d.get("qdiscs"), link_traffic(d.get("samples") or [], window_s)
        rec: dict[str, Any] = {"qdiscs": None if qdiscs is None else [_qdisc_text(q) for q in qdiscs], **traffic}
        observed["devices"][dev] = rec
        observed["bytes"] += traffic["bytes"]
        if qdiscs is None:
            unread.append(f"{dev}: {d.get('error') or 'its qdiscs were not read'}")
            continue
        kinds += [k for k in kinds_of(qdiscs) if k not in kinds]
        shaping = [q for q in qdiscs if q["kind"] in SHAPING_QDISCS]
        burst = 0
        if link is None:
            if shaping:
                problems.append(f"{dev} has {', '.join(_qdisc_text(q) for q in shaping)} though the level is unshaped")
            continue
        if rate is not None:
            tbfs = [q for q in qdiscs if q["kind"] == "tbf"]
            held = [q for q in tbfs if _close(q["rate_bit_per_s"], rate)]
            qrates += [q["rate_bit_per_s"] if q["rate_bit_per_s"] is not None else math.nan for q in tbfs] or [math.nan]
            if held:
                burst = held[0]["burst_bytes"] or 0
            elif tbfs:
                problems.append(f"{dev}: {', '.join(_qdisc_text(q) for q in tbfs)}, not {bit_text(rate)}")
            else:
                problems.append(f"{dev}: no tbf qdisc (found {', '.join(kinds_of(qdiscs)) or 'none'})")
        if delay > 0 and delay_here:
            netems = [q for q in qdiscs if q["kind"] == "netem"]
            if not any(q["delay_s"] is not None and abs(q["delay_s"] - delay) <= max(1e-6, LINK_QDISC_TOLERANCE * delay)
                       for q in netems):
                found = ", ".join(_qdisc_text(q) for q in netems) or "no netem qdisc"
                problems.append(f"{dev}: {found}, not a {delay * 1e3:g} ms delay")
        if rate is not None:
            wins = rate_windows(d.get("samples") or [], window_s)
            if not wins:
                unread.append(f"{dev}: fewer than two readings of its byte counter")
            elif any(8.0 * (db - burst) > rate * (1 + tolerance) * dt for dt, db in wins):
                problems.append(f"{dev}: traffic at {bit_text(traffic['peak_bit_per_s'])} over {traffic['window_s']:g} s, "
                                f"above {bit_text(rate)} + {tolerance:.0%}"
                                + (f" and the tbf's {burst}-byte burst" if burst else ""))
    peaks = [r["peak_bit_per_s"] for r in observed["devices"].values() if r["peak_bit_per_s"] is not None]
    busiest = max(observed["devices"].values(), key=lambda r: r["bytes"])
    observed.update(qdisc="+".join(kinds) or None,
                    qdisc_rate_bit_per_s=min(qrates) if qrates and not any(map(math.isnan, qrates)) else None,
                    peak_bit_per_s=max(peaks) if peaks else None, mean_bit_per_s=busiest["mean_bit_per_s"])
    if link is None:
        how = f"{read}: no shaping qdisc ({', '.join(sorted(SHAPING_QDISCS))}) on any, as the level asks"
    else:
        parts = ([f"a tbf at {bit_text(rate)} (within {LINK_QDISC_TOLERANCE:.0%}) and no traffic above it by more "
                  f"than {tolerance:.0%} plus the tbf's burst"] if rate is not None else []) + \
                ([f"a netem delay of {delay * 1e3:g} ms"] if delay > 0 and delay_here else []) + \
                ([f"the {delay * 1e3:g} ms delay is netem inside the VM: not read"] if delay > 0 and not delay_here
                 else [])
        how = f"{read}: {'; '.join(parts)} on every device"
        if rate is None and not delay_here:   # nothing of the level is on this machine to read
            return entry(level, None, observed, f"not verified: {how}")
    if problems:
        return entry(level, False, observed, f"{how}; " + "; ".join(problems))
    if unread:
        return entry(level, None, observed, "not verified: " + "; ".join(unread) + f" ({how})")
    return entry(level, True, observed, how)


def kinds_of(qdiscs: list[dict]) -> list[str]:
    """The kinds of ``qdiscs`` (:func:`parse_qdiscs`), each once, in order."""
    return list(dict.fromkeys(q["kind"] for q in qdiscs))


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
    return parse_qdiscs(netmod.run_host(["tc", "-j", "-s", "qdisc", "show", "dev", device], timeout=10))


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
        except Exception as exc:   # a check never fails a run
            self.error = f"{type(exc).__name__}: {exc}"[:300]

    def stop(self) -> dict[str, list[tuple[float, int]]]:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(5)
            self.thread = None
            self.poll()   # the devices outlive the workload: the last bytes it sent
        return self.samples


# -- the hook ----------------------------------------------------------------------------------
def _cpu_s(inst: Any) -> float | None:
    try:
        value = inst.stats().get("cpu_s")
    except Exception:   # a backend SDK's own error too: a check never fails a run
        return None
    return float(value) if isinstance(value, (int, float)) else None


class TreatmentChecks(RunHook):
    """The manipulation checks of every run (module docstring). ``ksm_root``: the KSM directory
    read; ``sys_net``: the network devices' directory read; ``poll_s``: seconds between KSM and
    link readings; ``timeout_s``: the instance command's limit."""

    def __init__(self, *, ksm_root: Path | str = KSM_ROOT, sys_net: Path | str = SYS_NET, poll_s: float = 0.2,
                 timeout_s: float = 15.0):
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
        except BaseException:   # interrupted: the run is not stored
            for w in (watch, link):
                if isinstance(w, (KsmWatch, LinkWatch)):
                    w.stop()
            raise
        else:
            self._record(ctx, watch, neighbours, start, t0, link)

    def _record(self, ctx: RunContext, watch: Any, neighbours: list, start: list, t0: float,
                link: Any = None) -> None:
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
                out["link"] = self._link(ctx, link, vm)
            inside = [f for f in ("affinity", "vcpus", "memory_mb") if f in levels]
            if inside:
                out.update(self._inside(ctx, inside, vm))
        except Exception as exc:   # a bug here never fails a run: said in the record
            out["_error"] = entry(None, None, None, f"checks stopped: {type(exc).__name__}: {exc}"[:300])
        ctx.metadata["treatments"] = out
        ctx.metadata["treatment_failed"] = failed(out)

    def _link(self, ctx: RunContext, watch: Any, vm: bool) -> dict:
        """The ``link`` record: ``watch`` is the run's :class:`LinkWatch`, or why none could run."""
        level = ctx.run.levels["link"]
        if not isinstance(watch, LinkWatch):
            return entry(level, None, None, f"not read: {watch}: its links are shaped with tc there, not on this "
                                            "machine")
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
                devices[dev] = {"qdiscs": None, "error": f"tc read nothing: {exc}"[:300],
                                "samples": samples.get(dev, [])}
        rec = check_link(level, shaped, devices, delay_here=not vm)
        if watch.error and rec["verified"] is not False:
            rec = entry(level, None, rec["observed"], f"not verified: reading the byte counters failed: {watch.error}")
        return rec

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
