"""Each factor's treatment record from what was read during a run (pure: parsing and checks, no
reading). :class:`labkit.run.treatments.TreatmentChecks` reads and calls these; its module
documents what each factor's check reads and when it is verified."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..core import network_factors as netmod
from ..errors import ConfigError

#: least CPU use (% of one CPU) over a run that shows a neighbour of this kind was running its load
NOISE_MIN_CPU_PCT = {"cpu": 10.0, "memory": 10.0, "io": 1.0, "network": 1.0, "command": 1.0}
#: a VM's MemTotal as a share of its memory: the guest kernel keeps part of it
VM_MEMTOTAL_SHARE = (0.80, 1.0)
#: a cgroup v1 memory limit at or above this is "no limit" (the kernel's PAGE_COUNTER_MAX, rounded)
UNLIMITED_V1 = 2**62

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


def check_affinity(
    level: str, seen: dict, *, expected: list[int] | None, vcpus: int, host_cpus: int | None, vm: bool
) -> dict:
    """The ``affinity`` record from :func:`parse_inside`'s ``seen`` (see the module docstring)."""
    how = "Cpus_allowed_list of /proc/self/status read inside instance 0"
    if vm:
        return entry(
            level,
            None,
            seen.get("cpus_allowed"),
            "not verified: inside a VM the allowed CPUs are its own vCPUs; the host-side pinning "
            "(vcpupin) is not read",
        )
    cpus = seen.get("cpus_allowed")
    if cpus is None:
        return entry(level, None, None, f"not read: {how} gave no Cpus_allowed_list")
    if level == "pinned":
        if expected:
            return entry(
                level,
                sorted(cpus) == sorted(expected),
                cpus,
                f"{how}, against the CPUs the backend pinned it to {sorted(expected)}",
            )
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
        return entry(
            level,
            abs(quota - level) < 0.01,
            quota,
            "CFS quota / period of the instance's cgroup read inside it (cpu.max or cpu.cfs_quota_us)",
        )
    cpus = seen.get("cpus_allowed")
    if cpus is None:
        return entry(
            level, None, None, "not read: neither a CPU quota nor Cpus_allowed_list inside the instance"
        )
    if "cpu_quota" not in seen and len(cpus) > level:
        # no cpu controller inside (LXD on a cgroup v1 host mounts none): a quota set on the host
        # cannot be read here, and more CPUs allowed than the level does not show it missing
        return entry(
            level,
            None,
            len(cpus),
            f"not verified: no CPU controller visible inside the instance, so a CPU quota set on the host "
            f"cannot be read there; it may run on {len(cpus)} CPUs (Cpus_allowed_list)",
        )
    return entry(
        level,
        len(cpus) == level,
        len(cpus),
        "no CPU quota inside the instance: the number of CPUs it may run on (Cpus_allowed_list)",
    )


def check_memory(level: int, seen: dict, *, vm: bool) -> dict:
    """The ``memory_mb`` record: the limit read inside the instance, in MiB."""
    if vm:
        total = seen.get("memtotal_mb")
        if total is None:
            return entry(level, None, None, "not read: MemTotal of /proc/meminfo inside the VM")
        lo, hi = VM_MEMTOTAL_SHARE
        return entry(
            level,
            lo * level <= total <= hi * level,
            total,
            f"MemTotal of /proc/meminfo inside the VM, {lo:.0%}-{hi:.0%} of the level (the guest kernel "
            "keeps some)",
        )
    if "memory_limit_mb" not in seen:
        return entry(
            level, None, None, "not read: no memory.max or memory.limit_in_bytes visible inside the instance"
        )
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
        how = (
            "pages of the run's instances' processes merged (/proc/<pid>/ksm_merging_pages), the most over "
            "the run, polled on this machine"
        )
    elif seen.get("pages_sharing_max") == 0:
        how = (
            "the host's merged pages (/sys/kernel/mm/ksm/pages_sharing), polled on this machine during the run: "
            "none at any reading, so none of the run's"
        )
    else:
        how = (
            "the host's merged pages (/sys/kernel/mm/ksm/pages_sharing), the most over the run, polled on this "
            "machine (no process of the run's instances was found while pages were merged)"
        )
    if merged is None:
        return entry(
            level,
            None,
            observed,
            f"not verified: pages were merged on this host ({seen.get('pages_sharing_max')} at most) but "
            "none could be attributed to the run's instances' processes",
        )
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
    return entry(
        level,
        all(u >= floor for u in used if u is not None),
        observed,
        f"{how}: each at least {floor:g} % of a CPU",
    )


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
        out.append(
            {
                "kind": q["kind"],
                "handle": q.get("handle"),
                "parent": "root" if q.get("root") else q.get("parent"),
                "rate_bit_per_s": _tc_rate_bit(opts.get("rate")) if q["kind"] == "tbf" else None,
                "burst_bytes": None if burst is None or q["kind"] != "tbf" else int(burst),
                "delay_s": delay_s if q["kind"] == "netem" else None,
                "bytes": None if sent is None else int(sent),
            }
        )
    return out


def rate_windows(
    samples: list[tuple[float, int]], window_s: float = LINK_WINDOW_S
) -> list[tuple[float, int]]:
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
        return {
            "bytes": total,
            "mean_bit_per_s": None,
            "peak_bit_per_s": None,
            "window_s": None,
            "readings": len(pts),
        }
    dt, db = max(wins, key=lambda w: w[1] / w[0])
    return {
        "bytes": total,
        "mean_bit_per_s": round(8.0 * total / span, 1),
        "peak_bit_per_s": round(8.0 * db / dt, 1),
        "window_s": round(dt, 3),
        "readings": len(pts),
    }


def _close(got: float | None, want: float, tolerance: float = LINK_QDISC_TOLERANCE) -> bool:
    return got is not None and abs(got - want) <= tolerance * want


def bit_text(bit_per_s: float) -> str:
    """``50 Mbit/s``: a rate in bit/s in the largest unit that keeps it at least 1 (4 significant digits)."""
    for unit, size in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bit_per_s) >= size:
            return f"{bit_per_s / size:.4g} {unit}"
    return f"{bit_per_s:.4g} bit/s"


def _qdisc_text(q: dict) -> str:
    extra = (f" {bit_text(q['rate_bit_per_s'])}" if q.get("rate_bit_per_s") is not None else "") + (
        f" {q['delay_s'] * 1e3:g} ms" if q.get("delay_s") is not None else ""
    )
    return f"{q['kind']}{extra}"


def check_link(
    level: Any,
    link: netmod.Link | None,
    devices: dict[str, dict],
    *,
    delay_here: bool = True,
    window_s: float = LINK_WINDOW_S,
    tolerance: float = LINK_RATE_TOLERANCE,
) -> dict:
    """The ``link`` record. ``link``: what the level means (:func:`labkit.core.network_factors.parse_link`;
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
    read = (
        "the qdiscs of the host-side device of each instance's link (tc -j -s qdisc show dev) and the "
        f"bytes it sent into the instance (/sys/class/net/<dev>/statistics/tx_bytes) polled on this machine, "
        f"peak over {window_s:g} s windows"
    )
    observed: dict[str, Any] = {
        "rate_bit_per_s": rate,
        "delay_s": delay,
        "qdisc": None,
        "qdisc_rate_bit_per_s": None,
        "peak_bit_per_s": None,
        "mean_bit_per_s": None,
        "bytes": 0,
        "devices": {},
    }
    if not devices:
        if link is None:
            return entry(
                level,
                True,
                observed,
                "no instance of the run has a host-side link device (no private "
                "network): nothing is shaped, as the level asks",
            )
        return entry(
            level,
            None,
            observed,
            "not read: no instance of the run has a host-side link device "
            "(none was made, or the backend did not record it)",
        )
    problems: list[str] = []
    unread: list[str] = []
    kinds: list[str] = []
    qrates: list[float] = []
    for dev, d in devices.items():
        qdiscs, traffic = d.get("qdiscs"), link_traffic(d.get("samples") or [], window_s)
        rec: dict[str, Any] = {
            "qdiscs": None if qdiscs is None else [_qdisc_text(q) for q in qdiscs],
            **traffic,
        }
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
                problems.append(
                    f"{dev} has {', '.join(_qdisc_text(q) for q in shaping)} though the level is unshaped"
                )
            continue
        if rate is not None:
            tbfs = [q for q in qdiscs if q["kind"] == "tbf"]
            held = [q for q in tbfs if _close(q["rate_bit_per_s"], rate)]
            qrates += [
                q["rate_bit_per_s"] if q["rate_bit_per_s"] is not None else math.nan for q in tbfs
            ] or [math.nan]
            if held:
                burst = held[0]["burst_bytes"] or 0
            elif tbfs:
                problems.append(f"{dev}: {', '.join(_qdisc_text(q) for q in tbfs)}, not {bit_text(rate)}")
            else:
                problems.append(f"{dev}: no tbf qdisc (found {', '.join(kinds_of(qdiscs)) or 'none'})")
        if delay > 0 and delay_here:
            netems = [q for q in qdiscs if q["kind"] == "netem"]
            if not any(
                q["delay_s"] is not None
                and abs(q["delay_s"] - delay) <= max(1e-6, LINK_QDISC_TOLERANCE * delay)
                for q in netems
            ):
                found = ", ".join(_qdisc_text(q) for q in netems) or "no netem qdisc"
                problems.append(f"{dev}: {found}, not a {delay * 1e3:g} ms delay")
        if rate is not None:
            wins = rate_windows(d.get("samples") or [], window_s)
            if not wins:
                unread.append(f"{dev}: fewer than two readings of its byte counter")
            elif any(8.0 * (db - burst) > rate * (1 + tolerance) * dt for dt, db in wins):
                problems.append(
                    f"{dev}: traffic at {bit_text(traffic['peak_bit_per_s'])} over {traffic['window_s']:g} s, "
                    f"above {bit_text(rate)} + {tolerance:.0%}"
                    + (f" and the tbf's {burst}-byte burst" if burst else "")
                )
    peaks = [r["peak_bit_per_s"] for r in observed["devices"].values() if r["peak_bit_per_s"] is not None]
    busiest = max(observed["devices"].values(), key=lambda r: r["bytes"])
    observed.update(
        qdisc="+".join(kinds) or None,
        qdisc_rate_bit_per_s=min(qrates) if qrates and not any(map(math.isnan, qrates)) else None,
        peak_bit_per_s=max(peaks) if peaks else None,
        mean_bit_per_s=busiest["mean_bit_per_s"],
    )
    if link is None:
        how = f"{read}: no shaping qdisc ({', '.join(sorted(SHAPING_QDISCS))}) on any, as the level asks"
    else:
        parts = (
            (
                [
                    f"a tbf at {bit_text(rate)} (within {LINK_QDISC_TOLERANCE:.0%}) and no traffic above it by more "
                    f"than {tolerance:.0%} plus the tbf's burst"
                ]
                if rate is not None
                else []
            )
            + ([f"a netem delay of {delay * 1e3:g} ms"] if delay > 0 and delay_here else [])
            + (
                [f"the {delay * 1e3:g} ms delay is netem inside the VM: not read"]
                if delay > 0 and not delay_here
                else []
            )
        )
        how = f"{read}: {'; '.join(parts)} on every device"
        if rate is None and not delay_here:  # nothing of the level is on this machine to read
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
