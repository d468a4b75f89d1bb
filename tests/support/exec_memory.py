"""A command's output measured from a child Python process: what an exec kept and counted, and how
much the controller's peak memory (VmHWM) grew across it (issue 28's output caps). Used by
tests/unit/test_output.py, tests/integration/test_output_caps.py and
reliability/security_output.py; :func:`campaign_in_child` does the same for a whole campaign, its
controller's resident size sampled with psutil."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

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
    res = subprocess.run(
        [PY, "-c", MEASURE, backend, json.dumps(options or {}), prefix, command],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def check_big(seen: dict) -> None:
    """200 MiB printed: exact totals, head and tail kept, the controller grew by < 100 MB."""
    assert seen["exit"] == 0
    assert seen["out_bytes"] == 200 * 2**20 + 3 and seen["err_bytes"] == 3 * 2**20
    assert seen["truncated"] and seen["head"] == "a" * 10 and seen["tail"] == "a" * 7 + "END"
    assert seen["out_len"] < 3 * 2**20 and seen["err_len"] < 3 * 2**20 and seen["err_tail"] == "e" * 10
    assert seen["growth"] < 100 * 2**20, f"controller memory grew by {seen['growth'] >> 20} MiB"


#: a campaign run in this child: a warm-up campaign first (imports, the store, first runs paid
#: for), then "READY"; after a line on stdin, a campaign of two runs whose vcpus=1 run prints as
#: argv[3] says, then the facts of that run as JSON
CAMPAIGN = textwrap.dedent("""
    import json, sys
    from labkit.run.campaign import Campaign

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

    data, token, command = sys.argv[1], sys.argv[2], sys.argv[3]
    def campaign(cid, argv, seed):
        return Campaign({"factors": {"vcpus": [1, 2]}, "seed": seed}, workload="command",
                        workload_params={"argv": argv}, campaign_id=cid, data_dir=data, progress=False).run()
    campaign(f"t-warm-{token}", ["sh", "-c", "echo warm; head -c 3M /dev/zero | tr '\\\\0' w"], 1)
    print("READY", flush=True)
    sys.stdin.readline()
    before = hwm()
    st = campaign(f"t-big-{token}", ["sh", "-c", "if [ {vcpus} = 1 ]; then " + command + "; else echo small; fi"], 2)
    big = st.runs().set_index("vcpus").loc[1]
    print(json.dumps({"hwm_growth": hwm() - before, "run_id": big.run_id, "status": big.status,
                      "cid": f"t-big-{token}"}), flush=True)
""")


def campaign_in_child(data_dir: str, token: str, command: str = BIG, sample_s: float = 0.005) -> dict:
    """Run a campaign whose one run prints as ``command`` (the ``command`` workload, local backend) in a child
    Python process, after a warm-up campaign; what it says, with ``rss_growth``: the largest
    resident size psutil saw of the child during that campaign (sampled every ``sample_s``) minus
    its resident size just before."""
    import psutil

    proc = subprocess.Popen(
        [PY, "-c", CAMPAIGN, data_dir, token, command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line == "READY", line + proc.stderr.read()[-3000:]
        child = psutil.Process(proc.pid)
        base = peak = child.memory_info().rss
        proc.stdin.write("go\n")
        proc.stdin.flush()
        while proc.poll() is None:
            try:
                peak = max(peak, child.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            time.sleep(sample_s)
        out, err = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    return {**json.loads(out.strip().splitlines()[-1]), "rss_growth": peak - base}
