"""A cgroup driver's operations (:class:`.cgroups.Op`) as one POSIX ``sh`` script (:func:`script`),
which the ``ssh`` and ``slurm`` backends send to the host (:mod:`.native`); the ``local`` backend
applies the same operations in Python (:func:`.cgroups.apply`)."""

from __future__ import annotations

import shlex

from ..errors import BackendError
from .cgroups import DRAIN_TIMEOUT_S, Op

_SH_HELPERS = r"""w() { printf '%s' "$2" > "$1" || { echo "cannot write '$2' to $1" >&2; exit 1; }; }
drain() { i=0; while [ -d "$1" ]; do p=$(cat "$1/cgroup.procs" 2>/dev/null)
  [ -n "$p" ] && kill -KILL $p 2>/dev/null
  if [ -z "$p" ]; then [ "$2" = rm ] || return 0; rmdir "$1" 2>/dev/null && return 0; fi
  i=$((i+1)); [ $i -gt $3 ] && { echo "cgroup $1: processes survive SIGKILL" >&2; exit 1; }
  sleep 0.02; done; }
"""


def script(ops: list[Op], timeout: float = DRAIN_TIMEOUT_S) -> str:
    """``ops`` as one POSIX sh script (exit 1 with a message on the first failure)."""
    q = shlex.quote
    steps = max(1, int(timeout / 0.02))
    lines = [_SH_HELPERS.rstrip("\n")]
    for op in ops:
        p = q(op.path)
        if op.kind == "mkdir":
            lines.append(f"mkdir {p} || exit 1")
        elif op.kind == "mkdir?":
            lines.append(f"[ -d {p} ] || mkdir {p} || exit 1")
        elif op.kind == "move":
            lines.append(
                f"for p in $(cat {p}/cgroup.procs); do echo $p > {q(op.value)}/cgroup.procs 2>/dev/null; done"
            )
        elif op.kind == "write":
            lines.append(f"w {p} {q(op.value)}")
        elif op.kind == "write?":
            lines.append(f"[ -e {p} ] && {{ printf '%s' {q(op.value)} > {p}; }} 2>/dev/null")
        elif op.kind == "copy":
            lines.append(f'w {p} "$(cat {q(op.value)})"')
        elif op.kind == "kill":
            lines.append(f'p=$(cat {p}/cgroup.procs 2>/dev/null); [ -n "$p" ] && kill -KILL $p 2>/dev/null')
        elif op.kind in ("drain", "rmdir"):
            lines.append(f"drain {p} {'rm' if op.kind == 'rmdir' else 'keep'} {steps}")
        else:
            raise BackendError(f"unknown cgroup operation {op.kind!r}")
    return "\n".join(lines) + "\ntrue\n"
