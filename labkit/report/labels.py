"""One naming of factors and responses (with units) and one palette for every figure and report.

``label("memory_mb")`` gives ``"memory (MB)"``; ``label("wall_time_s")`` gives
``"wall time (s)"``. Names not in the map are made readable from their suffix
(``_s``, ``_ms``, ``_mb``, ``_per_s`` ...), so a campaign made with
``labkit run`` gets units too. ``color(level)`` gives the same colour to the
same platform or level in every figure (the Okabe-Ito palette, readable by
colour-blind readers).
"""

from __future__ import annotations

import re

__all__ = ["LABELS", "PALETTE", "color", "colors", "emulation_note", "label", "platform_label", "term_label"]

# factor and response names used by the studies -> label with unit
LABELS = {
    "vcpus": "vCPUs",
    "memory_mb": "memory (MB)",
    "affinity": "CPU affinity",
    "count": "instances",
    "threads": "threads",
    "bs": "block size",
    "protocol": "protocol",
    "concurrency": "concurrency (ab -c)",
    "platform": "platform",
    "board": "N-queens board",
    "wall_time_s": "wall time (s)",
    "solutions": "solutions (count)",
    "events_per_s": "events/s",
    "copy_mb_per_s": "STREAM copy (MB/s)",
    "scale_mb_per_s": "STREAM scale (MB/s)",
    "add_mb_per_s": "STREAM add (MB/s)",
    "triad_mb_per_s": "STREAM triad (MB/s)",
    "randread_iops": "random read (IO/s)",
    "randwrite_iops": "random write (IO/s)",
    "tcp_mbit_per_s": "TCP throughput (Mbit/s)",
    "udp_mbit_per_s": "UDP throughput (Mbit/s)",
    "requests_per_s": "requests/s",
    "time_per_request_ms": "time per request (ms)",
    "duration_s": "run duration (s)",
    "hpl_gflops": "HPL (Gflop/s)",
    "pingpong_latency_us": "PingPong latency (µs)",
    "pingpong_bandwidth_gb_per_s": "PingPong bandwidth (GB/s)",
    "run_order": "run order",
}

# suffix -> unit, longest first, for names not in LABELS
_UNITS = [
    ("_mbit_per_s", "Mbit/s"),
    ("_gb_per_s", "GB/s"),
    ("_mb_per_s", "MB/s"),
    ("_gflops", "Gflop/s"),
    ("_per_s", "/s"),
    ("_iops", "IO/s"),
    ("_ms", "ms"),
    ("_us", "µs"),
    ("_s", "s"),
    ("_mb", "MB"),
    ("_gb", "GB"),
    ("_pct", "%"),
]

# Okabe & Ito (2008), "Color Universal Design": distinguishable by colour-blind readers
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
# fixed colours for names that recur across figures
_FIXED = {
    "local": PALETTE[0],
    "native": PALETTE[0],
    "docker": PALETTE[1],
    "lxd": PALETTE[2],
    "libvirt": PALETTE[3],
    "floating": PALETTE[0],
    "pinned": PALETTE[3],
}
_assigned: dict[str, str] = {}


def label(name) -> str:
    """A readable label with unit for a factor or response name (the name itself if unknown)."""
    name = str(name)
    if name in LABELS:
        return LABELS[name]
    for suffix, unit in _UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            stem = name[: -len(suffix)].replace("_", " ")
            return f"{stem} {unit}" if unit.startswith("/") else f"{stem} ({unit})"
    return name.replace("_", " ")


def term_label(term: str) -> str:
    """An effect term ``"vcpus:count"`` as ``"vCPUs × instances"`` (units dropped)."""
    return " × ".join(re.sub(r" \([^)]*\)$", "", label(p)) for p in str(term).split(":"))


def platform_label(platform: str, domain_types=None) -> str:
    """``"libvirt (TCG)"`` when a libvirt platform's domains ran emulated (type qemu), else the name."""
    kinds = set(domain_types or ())
    if kinds == {"qemu"}:
        return f"{platform} (TCG)"
    if "qemu" in kinds:
        return f"{platform} (KVM+TCG)"
    return str(platform)


def emulation_note(domain_types=None) -> str:
    """One sentence for a study's conclusions when libvirt guests ran under QEMU TCG (domain
    type ``qemu``: software emulation, no KVM), "" when none did: the platform effect then
    measures the emulator, not a hypervisor."""
    kinds = set(domain_types or ())
    if "qemu" not in kinds:
        return ""
    which = "The libvirt guests" if kinds == {"qemu"} else "Some libvirt guests"
    return (
        f"{which} ran under QEMU TCG (software emulation; this host offered no usable KVM), so "
        "the platform effect and the interactions with platform measure the emulator, not a "
        "hypervisor such as KVM or Xen: compare the ranking of the other factors within each "
        "platform with the paper, not the platforms' times."
    )


def color(level) -> str:
    """The colour of a level or platform, the same in every figure of the session."""
    key = str(level).split(" (")[0]
    if key in _FIXED:
        return _FIXED[key]
    if key not in _assigned:
        free = [c for c in PALETTE if c not in _assigned.values() and c not in _FIXED.values()]
        _assigned[key] = free[0] if free else PALETTE[len(_assigned) % len(PALETTE)]
    return _assigned[key]


def colors(levels) -> list[str]:
    """``[color(x) for x in levels]``, with distinct colours when fixed ones would collide."""
    out, used = [], set()
    for lv in levels:
        c = color(lv)
        if c in used:
            c = next((p for p in PALETTE if p not in used), c)
        used.add(c)
        out.append(c)
    return out
