"""The host fingerprint: what a result depends on besides the design.

Captured once per campaign and stored by hash, so every row can be traced to
the kernel, CPU, SMT state, governor, frequency, NUMA layout, vulnerability
mitigations, transparent huge pages, kernel same-page merging (KSM) and the
labkit version/commit it was measured with. :func:`fingerprint_table` and
:func:`fingerprint_diff` show them in notebooks, reports and ``labkit compare``.

Code state you can rebuild: when the checkout labkit runs from has uncommitted changes
(``labkit_commit`` ends in ``+dirty``), :func:`code_diff` captures them (``git diff HEAD`` of the
tracked files, :class:`CodeDiff`, at most :data:`DIFF_CAP` bytes, truncation recorded) and the
fingerprint names the diff's SHA-256 (``labkit_diff_sha256``); a campaign stores the diff in its
store's meta (:mod:`labkit.store.codestate`), so ``git apply`` on the commit rebuilds the code.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BackendError, ConfigError
from .host_commands import run_host
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
    try:  # exit 1 with "none" on bare metal
        out = run_host(["systemd-detect-virt"], what="detecting virtualization", timeout=5, check=False)
        return out.stdout.strip() or "none"
    except BackendError:
        flags = _read("/proc/cpuinfo", "")
        return "unknown-hypervisor" if " hypervisor" in flags else "unknown"


def _selected(text: str) -> str:
    """The bracketed choice of a sysfs switch such as ``always [madvise] never``."""
    if "[" in text and "]" in text:
        return text[text.index("[") + 1 : text.index("]")]
    return text


def numa_layout(root: Path = SYS_NODE) -> str:
    """NUMA nodes and their CPUs, e.g. ``"node0:0-3 node1:4-7"`` ("n/a" without sysfs)."""
    nodes = sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:]))
    return " ".join(f"{n.name}:{_read(n / 'cpulist')}" for n in nodes) or "n/a"


def cpu_frequency_mhz(root: Path = SYS_CPU) -> dict:
    """cpu0's current, minimum and maximum frequency in MHz (cpufreq), or from /proc/cpuinfo."""
    out = {}
    for key, name in (("cur", "scaling_cur_freq"), ("min", "cpuinfo_min_freq"), ("max", "cpuinfo_max_freq")):
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
    return {
        "thp_enabled": _selected(_read(root / "transparent_hugepage" / "enabled")),
        "thp_defrag": _selected(_read(root / "transparent_hugepage" / "defrag")),
        "ksm_run": _read(root / "ksm" / "run"),
        "ksm_pages_sharing": _read(root / "ksm" / "pages_sharing"),
    }


#: the file in an installed labkit that names the commit its wheel was built from
BUILD_COMMIT_FILE = "_build_commit.txt"


#: bytes of a checkout's uncommitted diff kept at most (:func:`capture_diff`): the first 4 MiB, cut
#: at a line end, the whole diff's size and digest recorded
DIFF_CAP = 4 << 20
#: seconds ``git diff`` may take before the capture gives up (nothing is recorded then)
DIFF_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class CodeDiff:
    """A checkout's uncommitted changes to its tracked files (``git diff HEAD --binary``).

    ``commit`` the checkout's HEAD (12 hex digits), ``text`` the diff as kept (at most ``cap``
    bytes of it, cut at a line end; bytes that are not UTF-8 kept as surrogate escapes:
    :meth:`data` gives the bytes back), ``sha256`` the digest of the *whole* diff, ``size`` its
    bytes, ``lines`` its lines, ``truncated`` whether ``text`` is only its beginning."""

    commit: str
    text: str
    sha256: str
    size: int
    lines: int
    truncated: bool

    def data(self) -> bytes:
        """The kept diff as bytes, as git printed them (``git apply`` takes them)."""
        return self.text.encode("utf-8", "surrogateescape")

    def record(self) -> dict:
        """What a store keeps (:mod:`labkit.store.codestate`): every field, ``text`` as ``diff``."""
        return {
            "commit": self.commit,
            "sha256": self.sha256,
            "bytes": self.size,
            "lines": self.lines,
            "truncated": self.truncated,
            "kept_bytes": len(self.data()),
            "diff": self.text,
        }


def capture_diff(checkout: str | Path, *, cap: int = DIFF_CAP) -> CodeDiff | None:
    """The uncommitted changes of the tracked files of the git checkout at ``checkout`` against its
    HEAD (staged and not; untracked files are not code labkit runs), or None when the tree is clean,
    ``checkout`` is not a git checkout (or has no commit), or git fails or takes longer than
    :data:`DIFF_TIMEOUT_S`. The whole diff is read once, in pieces (memory stays bounded by
    ``cap``): its digest and size are of all of it, its text the first ``cap`` bytes cut at the
    last line end (``truncated`` then)."""
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ConfigError(f"capture_diff: cap must be a whole number of bytes >= 1, got {cap!r}")
    git = ["git", "-C", str(checkout), "-c", "core.quotepath=off"]
    try:
        head = run_host(
            [*git, "rev-parse", "--short=12", "HEAD"],
            what="reading the checkout's commit",
            timeout=10,
            check=False,
        )
    except BackendError:
        return None
    if head.returncode != 0 or not head.stdout.strip():
        return None
    try:
        proc = subprocess.Popen(
            [*git, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--no-textconv"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    digest, kept, size, lines = hashlib.sha256(), bytearray(), 0, 0
    deadline = time.monotonic() + DIFF_TIMEOUT_S
    with proc:
        while proc.stdout is not None and (chunk := proc.stdout.read(1 << 16)):
            digest.update(chunk)
            size += len(chunk)
            lines += chunk.count(b"\n")
            if len(kept) <= cap:
                kept += chunk[: cap + 1 - len(kept)]
            if time.monotonic() > deadline:
                proc.kill()
                return None
        if proc.wait() != 0 or size == 0:
            return None
    if size and not bytes(kept).endswith(b"\n"):
        lines += 1  # a last line without a line end is a line
    truncated = size > cap
    if truncated:
        cut = bytes(kept[:cap])
        kept = bytearray(cut[: cut.rfind(b"\n") + 1] if b"\n" in cut else cut)
    return CodeDiff(
        head.stdout.strip(),
        bytes(kept).decode("utf-8", "surrogateescape"),
        digest.hexdigest(),
        size,
        lines,
        truncated,
    )


def _own_checkout() -> Path | None:
    """The labkit checkout this package runs from (a git work tree holding the checkout marker),
    or None for an installed labkit."""
    here = Path(__file__).resolve().parents[2]  # labkit/core/fingerprint.py -> the checkout
    return here if (here / ".git").exists() and (here / MARKER).is_file() else None


@functools.lru_cache(maxsize=1)
def code_diff() -> CodeDiff | None:
    """The uncommitted changes of the checkout this package runs from (:func:`capture_diff`), None
    when it is clean or not a checkout. Read once per process, as :func:`labkit_commit` is."""
    here = _own_checkout()
    return capture_diff(here) if here is not None else None


@functools.lru_cache(maxsize=1)
def labkit_commit() -> str:
    """The git commit of the labkit checkout this package runs from (``+dirty`` when it has local
    changes); for an installed wheel, the commit it was built from (``labkit/_build_commit.txt``,
    written by scripts/labkit_build_backend.py) with `` (installed)``; else "n/a". Read once per
    process, when this process first asks: the code it imported then is the code it runs."""
    package = Path(__file__).resolve().parents[1]  # labkit/core/fingerprint.py -> labkit/
    here = package.parent  # -> the checkout, when it is one
    if not ((here / ".git").exists() and (here / MARKER).is_file()):
        try:
            built = (package / BUILD_COMMIT_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            return "n/a"
        return f"{built} (installed)" if built else "n/a"
    try:
        head = run_host(
            ["git", "-C", here, "rev-parse", "--short=12", "HEAD"], what="reading labkit's commit", timeout=5
        )
        dirty = run_host(
            ["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
            what="reading whether labkit's checkout has changes",
            timeout=10,
            check=False,
        )
    except BackendError:
        return "n/a"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def host_fingerprint() -> dict:
    """Facts about the controller host: kernel, CPU, SMT, governor, frequency, NUMA, memory,
    mitigations, THP, KSM, virtualization, Python and labkit (version and commit)."""
    meminfo = _read("/proc/meminfo", "")
    mem_kb = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal")), 0)
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
        **_diff_fact(),
    }


def _diff_fact() -> dict:
    """``labkit_diff_sha256``: the digest of the uncommitted diff a ``+dirty`` commit ran with
    (:func:`code_diff`); nothing for a clean checkout or an installed labkit."""
    if not labkit_commit().endswith("+dirty"):
        return {}
    diff = code_diff()
    return {"labkit_diff_sha256": diff.sha256 if diff is not None else "n/a"}


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
    return pd.DataFrame(
        {"fact": facts, **{fid: [str(c.get(f, "n/a")) for f in facts] for fid, c in cols.items()}}
    )


def fingerprint_diff(a: dict, b: dict) -> pd.DataFrame:
    """Facts that differ between two fingerprints (or two stores' sets, merged per side):
    DataFrame ``fact``, ``a``, ``b``. Volatile facts (current CPU MHz, KSM pages shared) are
    included: a reader decides whether a 4 % frequency change matters."""
    import pandas as pd

    fa, fb = _flat(a), _flat(b)
    rows = [
        {"fact": k, "a": str(fa.get(k, "n/a")), "b": str(fb.get(k, "n/a"))}
        for k in dict.fromkeys([*fa, *fb])
        if str(fa.get(k, "n/a")) != str(fb.get(k, "n/a"))
    ]
    return pd.DataFrame(rows, columns=["fact", "a", "b"])
