"""The host fingerprint: what a result depends on besides the design.

Captured once per campaign and stored by hash, so every row can be traced to
the kernel, CPU, SMT state, governor, frequency, NUMA layout, vulnerability
mitigations, transparent huge pages, kernel same-page merging (KSM) and the
labkit version/commit it was measured with. :func:`fingerprint_table` and
:func:`fingerprint_diff` show them in notebooks, reports and ``labkit compare``.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from .paths import MARKER

if TYPE_CHECKING:
    import pandas as pd

SYS_CPU = Path("/sys/devices/system/cpu")
SYS_NODE = Path("/sys/devices/system/node")
SYS_MM = Path("/sys/kernel/mm")


def _read(path, default: str = "n/a") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo", "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


@functools.lru_cache(maxsize=1)
def _virt() -> str:
    """What ``systemd-detect-virt`` says (once per process: a campaign's every start would
    otherwise fork it, CPU the quiet-host guard's first look sees)."""
    try:
        out = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "none"
    except (OSError, subprocess.SubprocessError):
        flags = _read("/proc/cpuinfo", "")
        return "unknown-hypervisor" if " hypervisor" in flags else "unknown"


def _selected(text: str) -> str:
    """The bracketed choice of a sysfs switch such as ``always [madvise] never``."""
    if "[" in text and "]" in text:
        return text[text.index("[") + 1:text.index("]")]
    return text


def numa_layout(root: Path = SYS_NODE) -> str:
    """NUMA nodes and their CPUs, e.g. ``"node0:0-3 node1:4-7"`` ("n/a" without sysfs)."""
    nodes = sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:]))
    return " ".join(f"{n.name}:{_read(n / 'cpulist')}" for n in nodes) or "n/a"


def cpu_frequency_mhz(root: Path = SYS_CPU) -> dict:
    """cpu0's current, minimum and maximum frequency in MHz (cpufreq), or from /proc/cpuinfo."""
    out = {}
    for key, name in (("cur", "scaling_cur_freq"), ("min", "cpuinfo_min_freq"),
                      ("max", "cpuinfo_max_freq")):
        raw = _read(root / "cpu0" / "cpufreq" / name, "")
        if raw.isdigit():
            out[key] = int(raw) // 1000
    if "cur" not in out:
        for line in _read("/proc/cpuinfo", "").splitlines():
            if line.startswith("cpu MHz"):
                out["cur"] = round(float(line.split(":", 1)[1]))
                break
    return out


def mitigations(root: Path = SYS_CPU / "vulnerabilities") -> dict:
    """Vulnerability -> kernel status (e.g. ``"spectre_v2": "Mitigation: Retpolines"``)."""
    return {p.name: _read(p) for p in sorted(root.glob("*"))} if root.is_dir() else {}


def memory_features(root: Path = SYS_MM) -> dict:
    """Transparent huge pages (enabled, defrag) and KSM (run, pages_sharing)."""
    return {"thp_enabled": _selected(_read(root / "transparent_hugepage" / "enabled")),
            "thp_defrag": _selected(_read(root / "transparent_hugepage" / "defrag")),
            "ksm_run": _read(root / "ksm" / "run"),
            "ksm_pages_sharing": _read(root / "ksm" / "pages_sharing")}


#: the file in an installed labkit that names the commit its wheel was built from
BUILD_COMMIT_FILE = "_build_commit.txt"


@functools.lru_cache(maxsize=1)
def labkit_commit() -> str:
    """The git commit of the labkit checkout this package runs from (``+dirty`` when it has local
    changes); for an installed wheel, the commit it was built from (``labkit/_build_commit.txt``,
    written by scripts/labkit_build_backend.py) with `` (installed)``; else "n/a". Read once per
    process, when this process first asks: the code it imported then is the code it runs."""
    package = Path(__file__).resolve().parents[1]   # labkit/core/fingerprint.py -> labkit/
    here = package.parent                           # -> the checkout, when it is one
    if not ((here / ".git").exists() and (here / MARKER).is_file()):
        try:
            built = (package / BUILD_COMMIT_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return "n/a"
        return f"{built} (installed)" if built else "n/a"
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return "n/a"
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "n/a"


def host_fingerprint() -> dict:
    """Facts about the controller host: kernel, CPU, SMT, governor, frequency, NUMA, memory,
    mitigations, THP, KSM, virtualization, Python and labkit (version and commit)."""
    meminfo = _read("/proc/meminfo", "")
    mem_kb = next((int(line.split()[1]) for line in meminfo.splitlines()
                   if line.startswith("MemTotal")), 0)
    from .. import __version__
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "os": _read("/etc/os-release", "").split("PRETTY_NAME=")[-1].split("\n")[0].strip('"'),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count(),
        "smt": _read(SYS_CPU / "smt" / "active"),
        "governor": _read(SYS_CPU / "cpu0" / "cpufreq" / "scaling_governor"),
        "cpu_mhz": cpu_frequency_mhz(),
        "numa": numa_layout(),
        "memory_mb": mem_kb // 1024,
        **memory_features(),
        "mitigations": mitigations(),
        "virtualization": _virt(),
        "python": platform.python_version(),
        "labkit": __version__,
        "labkit_commit": labkit_commit(),
    }


#: what makes a host the same host for a resume; frequency, labkit's commit and the like are
#: recorded with every run (its fingerprint) but may change between two starts of one campaign
IDENTITY_KEYS = ("hostname", "os", "kernel", "cpu_model", "cpus", "memory_mb", "virtualization")


def host_identity(fp: dict) -> dict:
    """The stable part of a campaign fingerprint ``{"host": ..., "backend": ...}``."""
    host = fp.get("host") or {}
    return {**{k: host.get(k) for k in IDENTITY_KEYS}, "backend": (fp.get("backend") or {}).get("backend")}


def fingerprint_id(fp: dict) -> str:
    return hashlib.sha256(json.dumps(fp, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _flat(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, val in d.items():
        if isinstance(val, dict):
            out |= _flat(val, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = val
    return out


def fingerprint_table(fingerprints: dict) -> pd.DataFrame:
    """Stored fingerprints (``Store.fingerprints()``: id -> {host: ..., backend: ...}) as a
    DataFrame: one row per fact (``fact``, e.g. "host.kernel"), one column per fingerprint id.
    Facts a fingerprint lacks (older labkit) are "n/a"."""
    import pandas as pd
    cols = {fid: _flat(fp) for fid, fp in fingerprints.items()}
    facts = list(dict.fromkeys(k for c in cols.values() for k in c))
    return pd.DataFrame({"fact": facts, **{fid: [str(c.get(f, "n/a")) for f in facts]
                                            for fid, c in cols.items()}})


def fingerprint_diff(a: dict, b: dict) -> pd.DataFrame:
    """Facts that differ between two fingerprints (or two stores' sets, merged per side):
    DataFrame ``fact``, ``a``, ``b``. Volatile facts (current CPU MHz, KSM pages shared) are
    included: a reader decides whether a 4 % frequency change matters."""
    import pandas as pd
    fa, fb = _flat(a), _flat(b)
    rows = [{"fact": k, "a": str(fa.get(k, "n/a")), "b": str(fb.get(k, "n/a"))}
            for k in dict.fromkeys([*fa, *fb]) if str(fa.get(k, "n/a")) != str(fb.get(k, "n/a"))]
    return pd.DataFrame(rows, columns=["fact", "a", "b"])
