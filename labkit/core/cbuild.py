"""Compile labkit's own small C kernels on the controller, once, and cache them.

Binaries are linked statically so the same file runs on the host, in a
container and in a VM. The cache key is the source text plus the flags, so an
edited source is rebuilt and an unchanged one never is.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from ..errors import BenchmarkError
from .host_commands import run_host

CACHE = Path(os.environ.get("LABKIT_CACHE", Path.home() / ".cache" / "labkit")) / "bin"
#: the longest one compilation may take
COMPILE_TIMEOUT_S = 300


def compiler() -> str:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise BenchmarkError(
        "no C compiler found (tried $CC, cc, gcc, clang); install one with: apt-get install gcc"
    )


def compile_c(
    source: str | Path, binary: str | Path, *, flags: Sequence[str] = ("-O2",), mpi: bool = False
) -> Path:
    """Compile the C file ``source`` into ``binary`` (linked with -lm) with the C compiler, or
    with ``mpicc`` when ``mpi``; returns ``binary``'s Path. BenchmarkError names a missing
    compiler (and its Debian package) or shows the compiler's output tail."""
    if mpi and shutil.which("mpicc") is None:
        raise BenchmarkError("mpicc is not installed on this host (apt-get install libopenmpi-dev)")
    cmd = ["mpicc" if mpi else compiler(), *flags, "-o", binary, source, "-lm"]
    run_host(cmd, what=f"compiling {Path(source).name}", timeout=COMPILE_TIMEOUT_S, error=BenchmarkError)
    return Path(binary)


def build(
    source: str,
    *,
    flags: tuple[str, ...] = ("-O2", "-pthread"),
    static: bool = True,
    package: str = "labkit.workloads",
) -> Path:
    """Path of the compiled binary for ``csrc/<source>`` of ``package`` (labkit's kernels by
    default; ``labkit.backends`` for the local backend's helper), building it if needed."""
    src = resources.files(package).joinpath("csrc", source)
    text = src.read_bytes()
    all_flags = list(flags) + (["-static"] if static else [])
    key = hashlib.sha256(text + " ".join(all_flags).encode()).hexdigest()[:16]
    out = CACHE / key / Path(source).stem
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_src = out.parent / source
    tmp_src.write_bytes(text)
    tmp_out = out.with_suffix(".tmp")
    compile_c(tmp_src, tmp_out, flags=tuple(all_flags))
    os.replace(tmp_out, out)  # atomic: a concurrent build never sees half a binary
    return out
