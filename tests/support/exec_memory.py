"""A command's output measured from a child Python process: what an exec kept and counted, and how
much the controller's peak memory (VmHWM) grew across it (issue 28's output caps). Used by
tests/unit/test_output.py, tests/integration/test_output_caps.py and
reliability/security_output.py."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PY = sys.executable

MEASURE = textwrap.dedent("""
    import json, sys
    from labkit.backends import get_backend, teardown
    from labkit.core.instance import InstanceSpec

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    be = get_backend(sys.argv[1], **json.loads(sys.argv[2]))
    (inst,) = be.provision(InstanceSpec(vcpus=1, memory_mb=256), prefix=sys.argv[3])
    try:
        inst.exec("echo warm-up", timeout=600)
        before = hwm()
        res = inst.exec(sys.argv[4], timeout=900, check=False)
        print(json.dumps({"growth": hwm() - before, "exit": res.exit_code, "out_bytes": res.stdout_bytes,
                          "err_bytes": res.stderr_bytes, "truncated": res.truncated,
                          "out_len": len(res.stdout), "err_len": len(res.stderr),
                          "head": res.stdout[:10], "tail": res.stdout[-10:], "err_tail": res.stderr[-10:]}))
    finally:
        teardown([inst])
        be.close()
""")

#: 200 MiB of "a" on stdout as one line without a newline, then "END" on stdout and 3 MiB of "e" on stderr
BIG = "head -c 200M /dev/zero | tr '\\0' a; printf END; head -c 3M /dev/zero | tr '\\0' e >&2"


def exec_in_child(backend: str, prefix: str, command: str = BIG, options: dict | None = None) -> dict:
    """Run ``command`` in a fresh instance of ``backend`` from a child Python process; what the
    child saw, with the growth of its peak memory (VmHWM) across the exec."""
    res = subprocess.run([PY, "-c", MEASURE, backend, json.dumps(options or {}), prefix, command],
                         capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def check_big(seen: dict) -> None:
    """200 MiB printed: exact totals, head and tail kept, the controller grew by < 100 MB."""
    assert seen["exit"] == 0
    assert seen["out_bytes"] == 200 * 2**20 + 3 and seen["err_bytes"] == 3 * 2**20
    assert seen["truncated"] and seen["head"] == "a" * 10 and seen["tail"] == "a" * 7 + "END"
    assert seen["out_len"] < 3 * 2**20 and seen["err_len"] < 3 * 2**20 and seen["err_tail"] == "e" * 10
    assert seen["growth"] < 100 * 2**20, f"controller memory grew by {seen['growth'] >> 20} MiB"
