"""An MPI ping-pong between ranks 0 and 1 (seed 003's latency and bandwidth), for the ``mpi`` workload.

:data:`SOURCE` is a small C program in the style of the OSU micro-benchmarks' ``osu_latency`` and
``osu_bw`` (blocking ``MPI_Send``/``MPI_Recv`` between ranks 0 and 1, warm-up rounds first): the
one-way latency of an 8-byte message (half the mean round trip of ``ITERS`` round trips) and the
bandwidth of 1 MiB messages (the bytes of ``BW_ITERS`` round trips, both ways, over their time).
Rank 0 prints ``pingpong_latency_us <x>`` and ``pingpong_bandwidth_mb_per_s <x>`` (MB = 10^6 bytes).

:func:`build` compiles it with ``mpicc``; run it with ``mpi`` and ``parser:
labkit.workloads.pingpong:parse`` (the binary must be at the same path on every host or
instance)::

    get_workload("mpi", program="/opt/lab/labkit-pingpong", ranks=2, parser="labkit.workloads.pingpong:parse")
"""
from __future__ import annotations

import os
import re

from ..core.cbuild import compile_c
from ..errors import BenchmarkError, tail
from .base import Measurement

SOURCE = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#define ITERS 2000
#define BW_ITERS 50
#define BW_SIZE (1 << 20)
static double rounds(int rank, char *buf, int size, int n) {
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Send(buf, size, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, size, MPI_CHAR, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, size, MPI_CHAR, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
        }
    }
    return MPI_Wtime() - t;
}
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) { if (rank == 0) fprintf(stderr, "pingpong needs 2 ranks\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
    char *buf = calloc(BW_SIZE, 1);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 3);
    rounds(rank, buf, 8, 100);                      /* warm-up */
    double lat = rounds(rank, buf, 8, ITERS);
    rounds(rank, buf, BW_SIZE, 5);                  /* warm-up */
    double bw = rounds(rank, buf, BW_SIZE, BW_ITERS);
    if (rank == 0) {
        printf("pingpong_latency_us %.3f\n", lat / ITERS / 2 * 1e6);
        printf("pingpong_bandwidth_mb_per_s %.3f\n", 2.0 * BW_ITERS * BW_SIZE / bw / 1e6);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
"""

METRICS = {"pingpong_latency_us": "us", "pingpong_bandwidth_mb_per_s": "MB/s"}
_LINE = re.compile(r"^(pingpong_latency_us|pingpong_bandwidth_mb_per_s) ([0-9.]+(?:e[+-]?[0-9]+)?)$", re.M)


def build(directory: str) -> str:
    """Compile :data:`SOURCE` with ``mpicc`` into ``directory``; returns the binary's path."""
    src, binary = os.path.join(directory, "pingpong.c"), os.path.join(directory, "labkit-pingpong")
    with open(src, "w") as f:
        f.write(SOURCE)
    return str(compile_c(src, binary, mpi=True))


def parse(text: str) -> list[Measurement]:
    """The two figures rank 0 printed, as rows for instance 0 (BenchmarkError if one is missing)."""
    found = dict(_LINE.findall(text or ""))
    missing = [m for m in METRICS if m not in found]
    if missing:
        raise BenchmarkError(f"ping-pong output lacks {', '.join(missing)}", None, tail(text))
    return [Measurement(m, float(found[m]), unit, 0) for m, unit in METRICS.items()]
