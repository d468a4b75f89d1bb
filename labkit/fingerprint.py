"""The host fingerprint: what a result depends on besides the design.

Captured once per campaign and stored by hash, so every row can be traced to
the kernel, CPU, SMT state, governor and backend versions it was measured on.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path


def _read(path: str, default: str = "n/a") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo", "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _virt() -> str:
    try:
        out = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "none"
    except (OSError, subprocess.SubprocessError):
        flags = _read("/proc/cpuinfo", "")
        return "unknown-hypervisor" if " hypervisor" in flags else "unknown"


def host_fingerprint() -> dict:
    """Facts about the controller host (kernel, CPU, SMT, governor, memory, virtualization)."""
    meminfo = _read("/proc/meminfo", "")
    mem_kb = next((int(l.split()[1]) for l in meminfo.splitlines() if l.startswith("MemTotal")), 0)
    from . import __version__
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "os": _read("/etc/os-release", "").split("PRETTY_NAME=")[-1].split("\n")[0].strip('"'),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "smt": _read("/sys/devices/system/cpu/smt/active"),
        "governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "memory_mb": mem_kb // 1024,
        "virtualization": _virt(),
        "python": platform.python_version(),
        "labkit": __version__,
    }


def fingerprint_id(fp: dict) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]
