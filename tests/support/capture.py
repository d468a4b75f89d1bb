"""Capture the unit-test fixtures of the NPB and PARSEC parsers from the programs of this folder.

    python -m tests.support.capture        # as root, on a host with mpicc (scripts/setup-tools.sh)

Builds npb_like.c (MPI and OpenMP) and parsec_like.c, runs them in two ``local`` instances on a
private network (the MPI build as 2 ranks, one per instance, through labkit's mpirun launch;
the others in one instance with 2 threads) and writes their standard output, unedited, to
tests/unit/fixtures/npb/ and tests/unit/fixtures/parsec/.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.workloads.mpi import launch, remove_launch_dir

from . import build_npb_like, build_parsec_like

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures"


def capture() -> list[Path]:
    """Write the fixtures; returns their paths."""
    with tempfile.TemporaryDirectory(prefix="labkit-capture-npb-") as tmp:
        return _capture(Path(tmp))


def _capture(root: Path) -> list[Path]:
    npb = build_npb_like(root / "npb") / "bin" / "zs.S.x"
    omp = build_npb_like(root / "npb-omp", omp=True) / "bin" / "zs.S.x"
    parsec = build_parsec_like(root / "parsec")
    be = get_backend("local")
    pfx = f"labkit-capture-npb{secrets.token_hex(2)}--"
    net = be.create_network(pfx, 2)
    insts = []
    out = {}
    try:
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=128, count=2), prefix=pfx, network=net)
        for name, argv in (
            ("zs_S_mpi_2ranks.txt", [str(npb)]),
            ("zs_S_mpi_2ranks_unsuccessful.txt", [str(npb), "-f"]),
        ):
            res, wdir, _ = launch(insts, argv, ranks=2, timeout=300)
            remove_launch_dir(insts, wdir)
            out[FIXTURES / "npb" / name] = res.stdout
        out[FIXTURES / "npb" / "zs_S_omp_2threads.txt"] = (
            insts[0].exec([str(omp)], env={"OMP_NUM_THREADS": "2"}, timeout=300).stdout
        )
        out[FIXTURES / "parsec" / "parsec_like_2threads.txt"] = (
            insts[0].exec([str(parsec), "-ns", "16", "-nt", "2"], timeout=300).stdout
        )
    finally:
        teardown(insts)
        net.remove()
        be.close()
    for path, text in out.items():
        path.write_text(text)
    return list(out)


if __name__ == "__main__":
    for p in capture():
        print(p)
