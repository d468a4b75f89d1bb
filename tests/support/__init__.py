"""Test programs that print other suites' report formats, built on this host for the tests.

* ``npb_like.c``: a small MPI (or OpenMP) kernel with a verification that prints NPB 3.4's
  ``print_results`` report (see its header); installed like an NPB build, ``bin/zs.<class>.x``.
* ``parsec_like.c``: a small pthreads kernel that prints PARSEC's hooks lines (ROI time) and
  its thread count like swaptions.

They live in the tests, not in the library: a program that prints "Benchmark Completed" in
NPB's format must never be mistaken for NPB in a user's study.
"""

from __future__ import annotations

from pathlib import Path

from labkit.core.cbuild import compile_c

SUPPORT = Path(__file__).parent


def build_npb_like(root: Path, klass: str = "S", *, omp: bool = False) -> Path:
    """``root`` laid out like an NPB build: ``root/bin/zs.<klass>.x`` from npb_like.c, with
    ``mpicc`` (the MPI report) or, when ``omp``, with the C compiler and OpenMP (the OpenMP
    report; linked statically, as images carry no libgomp). Returns ``root``."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    flags = ("-O2", f"-DCLASS='{klass}'") + (("-fopenmp", "-static", "-DNPB_LIKE_OMP") if omp else ())
    compile_c(SUPPORT / "npb_like.c", root / "bin" / f"zs.{klass}.x", flags=flags, mpi=not omp)
    return root


def build_parsec_like(root: Path) -> Path:
    """``root/bin/parsec_like`` built from parsec_like.c (pthreads); returns the binary's path."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    return compile_c(
        SUPPORT / "parsec_like.c", root / "bin" / "parsec_like", flags=("-O2", "-pthread", "-static")
    )
