"""A local instance's start cost against the number of data dirs recorded on the host (issue 47).

Every local instance covers the data dirs it must not see with one mount each; they were every
data dir ever recorded on the host, so 5,000 lines planted in one user's record made a root
campaign of 20 runs take 528 s instead of 8.7 s. This makes a throwaway non-root user
(``labkit-bench``, removed at the end unless it existed before), gives it 5,000 data dirs of its
own, and records 1, 100 or 5,000 of them in its ``~/.local/state/labkit/data-dirs.list`` (the
newest last, as labkit writes it), in turn. Each round, for each count (the order alternating
per round), the record is rewritten (so the instance's hidden list is made again, as after any
campaign starts) and one instance is made and destroyed on the ``local`` backend (isolation
``strict``) and timed.

Printed: per count, the paths an instance hides and the median start cost (make + destroy);
then the ratios of the medians (100 vs 1, 5,000 vs 1) and the 2.5-97.5 % range of the per-round
ratios. A ratio near 1 means the cost does not depend on the records. Needs root. No assertion
on time: the machine is shared and noisy; this prints, you judge.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from labkit.backends import get_backend, teardown  # noqa: E402
from labkit.backends.local import LocalBackend  # noqa: E402
from labkit.core.instance import InstanceSpec  # noqa: E402
from tests.support.other_users import User, real_user, remove_user, run_as  # noqa: E402

COUNTS = (1, 100, 5000)
NAME = "labkit-bench"


def _record(user: User) -> Path:
    return user.home / ".local" / "state" / "labkit" / "data-dirs.list"


def _write_record(user: User, dirs: list[str]) -> None:
    """The user's record listing ``dirs`` (replaced atomically, the user's file, 0600)."""
    record = _record(user)
    tmp = record.with_name(record.name + ".bench")
    tmp.write_text("".join(d + "\n" for d in dirs))
    os.chown(tmp, user.uid, user.gid)
    os.chmod(tmp, 0o600)
    os.replace(tmp, record)


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=200, method="inclusive")[max(0, round(q * 200) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=10, help="instances made per count")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_hidden: needs root (it makes a user and local instances)")
    if args.rounds < 2:
        sys.exit(f"bench_hidden: --rounds must be 2 or more, not {args.rounds}")
    existed = _exists(NAME)
    user = real_user(NAME)
    try:
        run_as(
            user,
            [
                "python3",
                "-c",
                "import os, sys\nfor i in range(int(sys.argv[2])): "
                "os.makedirs(f'{sys.argv[1]}/d{i:05}', mode=0o700, exist_ok=True)\n"
                "os.makedirs(sys.argv[3], mode=0o700, exist_ok=True)",
                str(user.home / "data"),
                str(max(COUNTS)),
                str(_record(user).parent),
            ],
            timeout=600,
        )
        dirs = [str(user.home / "data" / f"d{i:05}") for i in range(max(COUNTS))]
        measure(user, dirs, args.rounds)
    finally:
        if existed:
            _record(user).unlink(missing_ok=True)
        else:
            remove_user(user)


def _exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def measure(user: User, dirs: list[str], rounds: int) -> None:
    """Time make + destroy of one instance per count and round (see the module docstring)."""
    backend = get_backend("local", isolation="strict")
    if not isinstance(backend, LocalBackend):
        raise SystemExit(f"bench_hidden: the local backend is a {type(backend).__name__}, not a LocalBackend")
    spec = InstanceSpec(vcpus=1, memory_mb=128)
    times: dict[int, list[float]] = {n: [] for n in COUNTS}
    hidden: dict[int, int] = {}
    try:
        for i in range(rounds):
            for n in COUNTS if i % 2 == 0 else COUNTS[::-1]:
                _write_record(user, dirs[:n])
                t = time.perf_counter()
                made = backend.provision(spec, prefix="labkit-bench-hidden--")
                teardown(made)
                times[n].append(time.perf_counter() - t)
                hidden[n] = len(backend.hidden_dirs())
    finally:
        backend.close()
    print(
        f"local instance start cost (make + destroy, isolation strict) by data dirs recorded by user "
        f"{user.name} (uid {user.uid}); {rounds} interleaved rounds"
    )
    for n in COUNTS:
        print(
            f"  {n:5d} recorded   paths hidden per instance {hidden[n]:5d}   median "
            f"{statistics.median(times[n]) * 1000:9.1f} ms"
        )
    base = times[COUNTS[0]]
    for n in COUNTS[1:]:
        ratios = [a / b for a, b in zip(times[n], base)]
        print(
            f"  {n:5d} vs {COUNTS[0]}: ratio of medians {statistics.median(times[n]) / statistics.median(base):.3f}"
            f"   per-round ratio 2.5-97.5 % {_quantile(ratios, 0.025):.3f}-{_quantile(ratios, 0.975):.3f}"
        )
    print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
