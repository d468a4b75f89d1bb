"""The Slurm command-line tools as labkit calls them: bounded in time, with a clean environment,
their output parsed and their failures translated.

Used by the ``slurm`` backend (job steps on one node) and by Slurm testbeds
(:mod:`labkit.run.slurm_testbed`: allocations). A missing tool is :class:`BackendUnavailable` with how to
get it; a command that fails is :class:`BackendError` naming it with the tail of its stderr.
The tools read the cluster from their usual places (``/etc/slurm/slurm.conf``, ``SLURM_CONF``);
every other ``SLURM_*``/``SALLOC_*``/``SBATCH_*``/``SRUN_*`` variable of the controller's environment
is dropped, so a controller started inside an allocation does not pass its own job's settings on.
"""

from __future__ import annotations

import os
import re
import subprocess

from ..core.host_commands import run_host
from ..errors import BackendError, BackendUnavailable, ConfigError

TOOLS_HINT = (
    "install the Slurm client tools (Debian: apt-get install slurm-client) or load the "
    "cluster's slurm module; for a test cluster on this machine run scripts/setup-slurm.sh"
)
#: Slurm's node state flags that mean the node cannot run a step (a DRAIN node still runs its jobs)
NODE_FAILED = (
    "DOWN",
    "FAIL",
    "FAILING",
    "NOT_RESPONDING",
    "POWERED_DOWN",
    "POWERING_DOWN",
    "POWER_DOWN",
    "REBOOT_ISSUED",
    "FUTURE",
)
#: job states in which the job holds no nodes any more (or never will)
JOB_ENDED = (
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
    "REVOKED",
    "SPECIAL_EXIT",
)
_JOB_ID = re.compile(r"[0-9]{1,12}")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")
_ENV_DROPPED = ("SLURM_", "SALLOC_", "SBATCH_", "SRUN_")


def check_job_id(job_id, where: str = "slurm") -> str:
    """A Slurm job id as text (digits); ConfigError otherwise."""
    text = str(job_id) if isinstance(job_id, int) and not isinstance(job_id, bool) else job_id
    if not isinstance(text, str) or not _JOB_ID.fullmatch(text):
        raise ConfigError(f"{where}: job_id must be a Slurm job id (digits), got {str(job_id)[:40]!r}")
    return text


def check_node(node, where: str = "slurm") -> str:
    """A node name safe on a command line and in a path; ConfigError otherwise."""
    if not isinstance(node, str) or not _NODE.fullmatch(node):
        raise ConfigError(
            f"{where}: node must be a Slurm node name (letters, digits, '.', '_', '-'), "
            f"got {str(node)[:80]!r}"
        )
    return node


def environment() -> dict[str, str]:
    """The controller's environment for a Slurm tool: without the variables of an enclosing job."""
    return {k: v for k, v in os.environ.items() if k == "SLURM_CONF" or not k.startswith(_ENV_DROPPED)}


def run(
    argv: list[str], *, timeout: float, what: str, check: bool = True, stdin=None
) -> subprocess.CompletedProcess:
    """Run a Slurm tool (text output; :func:`~labkit.core.host_commands.run_host` in
    :func:`environment`, from ``/``); BackendUnavailable if it is missing, BackendError if it runs
    past ``timeout`` s or (``check``) exits non-zero."""
    return run_host(
        argv,
        what=what,
        timeout=timeout,
        check=check,
        stdin=stdin,
        cwd="/",
        env=environment(),
        missing=BackendUnavailable,
        hint=TOOLS_HINT,
    )


def parse_record(line: str) -> dict[str, str]:
    """One ``scontrol show -o`` record (``Key=Value Key2=Value two ...``) as a dict; a value runs
    to the next ``Key=``, so values with spaces (``OS=Linux 6.1 ...``) stay whole."""
    keys = list(_KEY.finditer(line))
    out = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        out[m.group(1)] = line[m.end() : end].strip()
    return out


def show_job(job_id: str, timeout: float) -> dict[str, str] | None:
    """``scontrol show job -o`` of ``job_id``; None when Slurm no longer knows the job."""
    res = run(
        ["scontrol", "show", "job", "-o", check_job_id(job_id)],
        timeout=timeout,
        what=f"reading Slurm job {job_id}",
        check=False,
    )
    if res.returncode != 0:
        if "Invalid job id" in res.stderr:
            return None
        raise BackendError(
            f"reading Slurm job {job_id}: scontrol exited {res.returncode}: {res.stderr.strip()[-1000:]}"
        )
    line = res.stdout.strip().splitlines()
    return parse_record(line[0]) if line else None


def show_nodes(names: list[str], timeout: float) -> dict[str, dict[str, str]]:
    """``scontrol show node -o`` of ``names`` (node name -> record); a node Slurm does not know is absent."""
    if not names:
        return {}
    res = run(
        ["scontrol", "show", "node", "-o", ",".join(check_node(n) for n in names)],
        timeout=timeout,
        what="reading Slurm nodes",
        check=False,
    )
    out = {}
    for line in res.stdout.splitlines():
        rec = parse_record(line)
        if rec.get("NodeName"):
            out[rec["NodeName"]] = rec
    if res.returncode != 0 and not out:
        raise BackendError(
            f"reading Slurm nodes {', '.join(names)}: scontrol exited {res.returncode}: "
            f"{res.stderr.strip()[-1000:]}"
        )
    return out


def hostnames(nodelist: str, timeout: float) -> list[str]:
    """A Slurm node list (``n[1-3],gpu7``) expanded by ``scontrol show hostnames``."""
    if not nodelist or nodelist == "(null)":
        return []
    res = run(
        ["scontrol", "show", "hostnames", nodelist], timeout=timeout, what=f"expanding node list {nodelist!r}"
    )
    return [check_node(n.strip(), "scontrol show hostnames") for n in res.stdout.split() if n.strip()]


def node_failure(state: str) -> str | None:
    """The first failure flag in a node ``State`` (``ALLOCATED+NOT_RESPONDING`` -> NOT_RESPONDING), or None."""
    flags = re.split(r"[+*]", state.upper()) if state else []
    for flag in flags:
        if flag in NODE_FAILED:
            return flag
    if state.endswith("*"):  # sinfo's short form of NOT_RESPONDING
        return "NOT_RESPONDING"
    return None


#: the step accounting labkit keeps (sacct fields), in this order
SACCT_FIELDS = (
    "JobID",
    "JobName",
    "State",
    "ExitCode",
    "NodeList",
    "Start",
    "End",
    "Elapsed",
    "ElapsedRaw",
    "TotalCPU",
    "UserCPU",
    "SystemCPU",
    "MaxRSS",
    "MaxVMSize",
    "AveCPUFreq",
    "ConsumedEnergyRaw",
)


def sacct_steps(job_id: str, timeout: float) -> list[dict[str, str]]:
    """The accounting Slurm keeps for every step of ``job_id`` (one dict of :data:`SACCT_FIELDS` per
    step, the job's own line left out). BackendUnavailable when the cluster keeps no accounting."""
    res = run(
        ["sacct", "-j", check_job_id(job_id), "-n", "-P", "--noconvert", "-o", ",".join(SACCT_FIELDS)],
        timeout=timeout,
        what=f"reading the accounting of Slurm job {job_id}",
        check=False,
    )
    if res.returncode != 0:
        text = (res.stderr or res.stdout).strip()
        if "disabled" in text.lower() or "accounting storage" in text.lower() or "slurmdbd" in text.lower():
            raise BackendUnavailable(f"the cluster keeps no job accounting ({text[-300:]})")
        raise BackendError(f"sacct -j {job_id} exited {res.returncode}: {text[-1000:]}")
    out = []
    for line in res.stdout.splitlines():
        values = line.split("|")
        if len(values) != len(SACCT_FIELDS) or "." not in values[0]:
            continue
        out.append(dict(zip(SACCT_FIELDS, values)))
    return out


def cancel(job_ids: list[str], *, timeout: float = 30.0, signal: str | None = None) -> None:
    """``scancel`` the jobs (or steps ``J.S``) in ``job_ids``; quiet for those that have ended."""
    ids = [j for j in job_ids if j]
    for j in ids:
        head, _, step = j.partition(".")
        check_job_id(head)
        if step:
            check_job_id(step, "slurm step")
    if not ids:
        return
    argv = ["scancel", "--quiet"] + ([f"--signal={signal}"] if signal else []) + ids
    res = run(argv, timeout=timeout, what=f"cancelling Slurm job(s) {', '.join(ids)}", check=False)
    if (
        res.returncode != 0
        and "Invalid job id" not in res.stderr
        and "already completing" not in res.stderr
        and "Job/step already" not in res.stderr
    ):
        raise BackendError(f"scancel {' '.join(ids)} exited {res.returncode}: {res.stderr.strip()[-1000:]}")


def version(timeout: float = 30.0) -> str:
    """The Slurm version of the client tools (``slurm 22.05.8``)."""
    return run(["srun", "--version"], timeout=timeout, what="reading the Slurm version").stdout.strip()
