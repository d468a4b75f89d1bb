"""An MPI ping-pong between ranks 0 and 1 (seed 003's latency and bandwidth): the ``pingpong``
workload, and a program for the ``mpi`` workload.

:data:`SOURCE` is a small C program in the style of the OSU micro-benchmarks' ``osu_latency`` and
the Intel MPI Benchmarks' PingPong (blocking ``MPI_Send``/``MPI_Recv`` between ranks 0 and 1,
warm-up rounds first). Without an argument it measures the one-way latency of an 8-byte message
(half the mean round trip of ``ITERS`` round trips) and the bandwidth of 1 MiB messages (the bytes
of ``BW_ITERS`` round trips, both ways, over their time). With one argument, a message size in
bytes (1 to :data:`MAX_MESSAGE_BYTES`, 4 MiB: seed 003 swept 1 B to 4 MB, section 4.2.1), both
figures are of messages of that size, timed over ``max(20, min(2000, 64 MiB / size))`` round
trips. Rank 0 prints ``pingpong_latency_us <x>`` and ``pingpong_bandwidth_mb_per_s <x>`` (MB =
10^6 bytes; bandwidth = size / one-way time, as IMB computes it).

* :class:`PingPong` (``pingpong``): the program across the run's instances, one rank in each of
  the first two (``ranks`` 2), compiled with ``mpicc`` on this host and copied into each instance
  (which needs ``openmpi-bin`` of the same version); parameters ``message_bytes`` (None: the
  8-byte latency and 1 MiB bandwidth; else 1 to 4194304) and ``timeout_s``. A message size is a
  factor like any parameter (``factors: {message_bytes: [1, 1024, 1048576]}``); the levels of seed
  003 are in ``data/reference/sweeps.csv`` (:func:`labkit.studies.sweeps.paper_sweep`).
* With the ``mpi`` workload (the binary must be at the same path on every host or instance)::

    get_workload("mpi", program="/opt/lab/labkit-pingpong 4096", ranks=2,
                 parser="labkit.workloads.pingpong:parse")
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import tempfile

from ..core.cbuild import CACHE, compile_c
from ..errors import BenchmarkError, tail
from .base import Measurement
from .mpi import MpiBase, launch, new_wdir, remove_launch_dir
from .params import TIMEOUT, Int

SOURCE = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#define ITERS 2000
#define BW_ITERS 50
#define BW_SIZE (1 << 20)
#define MAX_SIZE (1 << 22)
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
    if (argc > 1) {                                  /* one message size, in bytes */
        char *end;
        long msg = strtol(argv[1], &end, 10);
        if (*end || msg < 1 || msg > MAX_SIZE) {
            if (rank == 0) fprintf(stderr, "pingpong: message size %s: use 1 to %d bytes\n", argv[1], MAX_SIZE);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        long n = (64L << 20) / msg;
        n = n > ITERS ? ITERS : (n < 20 ? 20 : n);
        char *mbuf = calloc(msg, 1);
        if (!mbuf) MPI_Abort(MPI_COMM_WORLD, 3);
        rounds(rank, mbuf, (int)msg, n / 10 + 1);        /* warm-up */
        double t = rounds(rank, mbuf, (int)msg, (int)n);
        if (rank == 0) {
            printf("pingpong_message_bytes %ld\n", msg);
            printf("pingpong_latency_us %.3f\n", t / n / 2 * 1e6);
            printf("pingpong_bandwidth_mb_per_s %.3f\n", (double)msg / (t / n / 2) / 1e6);
        }
        free(mbuf);
        MPI_Finalize();
        return 0;
    }
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

#: the largest message size (bytes): seed 003's 4 MB (2^22)
MAX_MESSAGE_BYTES = 1 << 22
METRICS = {"pingpong_latency_us": "us", "pingpong_bandwidth_mb_per_s": "MB/s"}
MESSAGE_BYTES = Int(1, MAX_MESSAGE_BYTES, none=True)
_SIZE = re.compile(r"^pingpong_message_bytes ([0-9]+)$", re.M)
_LINE = re.compile(r"^(pingpong_latency_us|pingpong_bandwidth_mb_per_s) ([0-9.]+(?:e[+-]?[0-9]+)?)$", re.M)


def message_size(value: object, where: str = "workload 'pingpong': parameter 'message_bytes'") -> int:
    """``value`` as a message size in bytes (1 to :data:`MAX_MESSAGE_BYTES`); ConfigError naming
    ``where`` and the allowed range otherwise."""
    return int(Int(1, MAX_MESSAGE_BYTES).check(where, value))


def program(binary: str, message_bytes: int | None = None) -> list[str]:
    """The argv of one ping-pong: ``binary`` and, when given, the checked message size as its
    one argument (a decimal integer, never a shell word: the argv goes to mpirun as a list)."""
    return [binary] if message_bytes is None else [binary, str(message_size(message_bytes))]


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


def cached_binary() -> str:
    """:data:`SOURCE` compiled with ``mpicc`` once per source text, in labkit's binary cache
    (private to this user, 0700); returns its path."""
    key = hashlib.sha256(SOURCE.encode()).hexdigest()[:16]
    out = CACHE / f"pingpong-{key}" / "labkit-pingpong"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            built = build(tmp)
            os.replace(built, out)
    return str(out)


class PingPong(MpiBase):
    """The ping-pong of :data:`SOURCE` between the run's first two instances; see the module
    docstring. Metrics: ``pingpong_latency_us`` (the response), ``pingpong_bandwidth_mb_per_s``,
    ``wall_time_s`` (mpirun's)."""

    name = "pingpong"
    response = "pingpong_latency_us"
    timed_metrics = ("wall_time_s",)
    length_param = None
    defaults = {"message_bytes": None, "timeout_s": 600}
    schema = {"message_bytes": MESSAGE_BYTES, "timeout_s": TIMEOUT}

    def run_group(self, instances, params: dict) -> list[Measurement]:
        params = {**self.params, **params}
        size = params.get("message_bytes")
        binary = cached_binary()
        wdir = new_wdir()
        argv = program(f"{wdir}/labkit-pingpong", None if size is None else message_size(size))
        try:
            res, _, took = launch(
                instances,
                argv,
                ranks=2,
                timeout=params["timeout_s"],
                binaries={"labkit-pingpong": binary},
                wdir=wdir,
            )
        finally:
            remove_launch_dir(instances, wdir)
        rows = parse(res.stdout)
        if size is not None:
            m = _SIZE.search(res.stdout)
            if not m or int(m.group(1)) != size:
                raise BenchmarkError(
                    f"ping-pong output is not for {size}-byte messages", shlex.join(argv), tail(res.stdout)
                )
        return rows + [Measurement("wall_time_s", took, "s", 0)]
