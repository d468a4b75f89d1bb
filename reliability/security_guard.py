"""Issue 47, finding 6: can another user blind the quiet-host guard with a name?

``rows()`` returns (section, row, count, must-be) for reliability/run.py. A real campaign of 8
runs on ``docker`` (the backend whose daemons the guard counts as the campaign's work: dockerd,
containerd; telemetry every 0.25 s) runs twice: on the host as it is, then beside a busy loop run
as a second, non-root user (uid 4247, setpriv) that renames itself ``dockerd`` (prctl
PR_SET_NAME, as writing ``/proc/self/comm`` does). Before the fix the loop was counted as dockerd's
work: "other CPU" fell from 104 % to 4.6 % and suspect runs from 6/8 to 0/8. Counted: the runs
flagged suspect for the CPU of processes outside the campaign and the mean ``cpu_other_pct``, in
each case, and the mean ``daemon_cpu_pct`` (the loop's CPU lands there when it is taken for
dockerd); with the loop, the loop read as a daemon and the runs judged but NOT flagged must be 0
(a run of fresh containers may go unjudged, before and during: it is counted apart and said
"guard blind" by the analysis; on a
machine already busy the runs are flagged either way: the daemon CPU and "read as a daemon"
tell the fix apart).

Without docker on this machine the rows say so (nothing to measure: the local backend counts no
daemon). ``SECURITY_GUARD_NAME`` picks another name (e.g. ``containerd``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SECTION = "quiet-host guard vs a renamed busy loop (docker)"
UID = 4247
#: renames itself argv[1], says so, then burns a CPU until killed
LOOP = "import sys\nopen('/proc/self/comm', 'w').write(sys.argv[1])\nprint(flush=True)\nwhile True: pass\n"
OUTSIDE = "processes outside the campaign"


def _campaign(tmp: Path, tag: str) -> tuple[int, int, float, float, int]:
    """(runs, runs flagged for the CPU of processes outside the campaign, mean cpu_other_pct, mean
    daemon_cpu_pct, runs the guard could not judge: neither its look before the run nor the
    telemetry during it told the campaign's CPU apart, so the run is said "guard blind" by the
    analysis, never counted as quiet). Runs of 2 s: a Docker stats call takes up to half a second on a loaded host,
    and a run needs two readings of its containers for its CPU to be told apart."""
    from labkit.run.campaign import Campaign

    design = {"factors": {"vcpus": [1, 2]}, "replications": 4, "seed": 47}
    cid = f"sec-guard-{tag}-{secrets.token_hex(3)}"
    st = Campaign(
        design,
        backend="docker",
        workload="command",
        workload_params={"argv": ["sleep", "2"]},
        campaign_id=cid,
        data_dir=tmp / tag,
        progress=False,
        telemetry=0.25,
    ).run()
    from labkit.run.telemetry import measurement_notes

    runs = st.runs()
    flagged = int(sum(OUTSIDE in str(r or "") for r in runs.suspect_reason))
    blind = next((int(n.split()[2]) for n in measurement_notes(runs) if n.startswith("guard blind: ")), 0)
    samples = st.samples()
    host = samples[samples.instance.isna()]
    other, daemon = (host[host.metric == m].value for m in ("cpu_other_pct", "daemon_cpu_pct"))
    return (
        len(runs),
        flagged,
        float(other.mean()) if len(other) else float("nan"),
        float(daemon.mean()) if len(daemon) else float("nan"),
        blind,
    )


def _read_as_daemon(pid: int) -> int:
    """1 if a reader of the docker backend's daemons, as the campaign's sampler makes it, reads
    process ``pid`` as one of them, else 0."""
    from labkit.backends.docker import DockerBackend
    from labkit.run.readings import DaemonCpu

    d = DaemonCpu()
    d.add(DockerBackend.daemons)
    return int(any(k.split(":")[0] == str(pid) for k in d.read() or {}))


def rows() -> list[tuple[str, str, object, str]]:
    from labkit.backends.testing import available

    ok, why = available("docker")
    if not ok:
        return [(SECTION, f"not measured: docker unavailable ({why})", 0, "")]
    name = os.environ.get("SECURITY_GUARD_NAME", "dockerd")
    out: list[tuple[str, str, object, str]] = []
    with tempfile.TemporaryDirectory(prefix="labkit-sec-guard-") as tmp:
        n, flagged, other, daemon, _ = _campaign(Path(tmp), "quiet")
        out += [
            (SECTION, "host as it is: runs", n, ""),
            (SECTION, "host as it is: runs suspect for other processes' CPU", flagged, ""),
            (SECTION, "host as it is: mean other CPU, % of a CPU", round(other, 1), ""),
            (SECTION, "host as it is: mean daemon CPU, % of a CPU", round(daemon, 1), ""),
        ]
        loop = subprocess.Popen(
            [
                "setpriv",
                f"--reuid={UID}",
                f"--regid={UID}",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                LOOP,
                name,
            ],
            stdout=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
        )
        try:
            if loop.stdout is None or loop.stdout.readline() != b"\n":
                raise RuntimeError(f"the busy loop as uid {UID} did not start (exit {loop.poll()})")
            n, flagged, other, daemon, blind = _campaign(Path(tmp), "loop")
            named = _read_as_daemon(loop.pid)
        finally:
            loop.kill()
            loop.wait()
        out += [
            (SECTION, f"uid {UID} busy loop named {name}: runs", n, ""),
            (SECTION, f"uid {UID} busy loop named {name}: mean other CPU, % of a CPU", round(other, 1), ""),
            (SECTION, f"uid {UID} busy loop named {name}: mean daemon CPU, % of a CPU", round(daemon, 1), ""),
            (SECTION, f"uid {UID} busy loop named {name}: read as a daemon", named, "0"),
            (
                SECTION,
                f"uid {UID} busy loop named {name}: runs the guard could not judge (said as "
                "'guard blind', never as quiet)",
                blind,
                "",
            ),
            (
                SECTION,
                f"uid {UID} busy loop named {name}: runs judged and NOT suspect",
                n - blind - flagged,
                "0",
            ),
        ]
    return out


if __name__ == "__main__":
    for row in rows():
        print(row)
