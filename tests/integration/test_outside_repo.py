"""labkit in a researcher's own environment (issue 44): the built wheel in a fresh venv, used from a
folder outside the repository by a non-root user (``labkit-other``, made by the test set-up):
``labkit run`` on the local backend unconfined (``--backend-option enforce_limits=false``, as the
error tells a user without cgroups to write it), the store checked, the unconfined mode said at the
start and by ``labkit show``; then ``labkit notebooks copy`` and notebook 01 in view mode (papermill)
over a committed campaign copied into that folder, and in run mode on the local backend unconfined
(``-y 'backend_options: {enforce_limits: false}'``, as docs/install.md has it; nothing left behind);
``labkit run`` on docker as a member of the ``docker`` group; ``labkit run`` on libvirt
``qemu:///session`` (the user's own daemon, QEMU TCG, the VM image the libvirt tests use: the default
one of the image cache) with root's 0700 ``/run/labkit/virtiofs`` in place, then ``labkit clean``;
and ``labkit dashboard`` over the study's data dir, its first page fetched over HTTP, then stopped
with SIGTERM (Voila and its kernel gone). Nothing of the checkout is on the user's path. The wheel
and venv are built once per test process (tests/support/wheel.py)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support import wheel
from tests.support.dashboard import Dashboard, free_port
from tests.support.other_users import real_user

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="makes a user: needs root")]

ROOT = Path(__file__).resolve().parents[2]
#: this file's own venv of the wheel: the extras its tests add (docker, libvirt, notebooks) must not
#: reach the base install that test_wheel.py checks module by module
USER_VENV = "user-venv"
DESIGN = "name: tiny\nfactors:\n  vcpus: [1, 2]\nreplications: 1\nseed: 7\n"


@pytest.fixture(scope="module")
def study():
    """A folder of ``labkit-other``'s outside the repository, and that user."""
    user = real_user()
    d = Path(tempfile.mkdtemp(prefix="labkit-study-"))
    d.chmod(0o755)
    folder = d / "study"
    folder.mkdir()
    os.chown(folder, user.uid, user.gid)
    try:
        yield user, folder
    finally:
        shutil.rmtree(d, ignore_errors=True)


def user_argv(user, venv: Path, *argv: str, home: Path | None = None) -> tuple[list[str], dict]:
    """The argv and environment of ``venv/bin/<argv[0]> argv[1:]`` as ``user``: its uid, gid and
    groups, its HOME (or ``home``), no PYTHONPATH, no LABKIT_ROOT, no XDG_RUNTIME_DIR (labkit's
    runtime dir is then ``~/.cache/labkit``)."""
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": str(home or user.home), "LANG": "C.UTF-8"}
    return [
        "setpriv",
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        "--init-groups",
        str(venv / "bin" / argv[0]),
        *argv[1:],
    ], env


def as_user(
    user,
    venv: Path,
    folder: Path,
    *argv: str,
    timeout: float = 300,
    check: bool = True,
    home: Path | None = None,
) -> subprocess.CompletedProcess:
    """``venv/bin/<argv[0]> argv[1:]`` as ``user`` in ``folder`` (:func:`user_argv`, HOME ``home``
    when given); with ``check``, asserted to exit 0."""
    cmd, env = user_argv(user, venv, *argv, home=home)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=folder, timeout=timeout)
    if check:
        assert res.returncode == 0, (
            f"{' '.join(argv)} as {user.name}: {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        )
    return res


def own(user, *paths: Path) -> None:
    """Give ``paths`` (and everything below them) to ``user``."""
    for top in paths:
        for p in [top, *(top.rglob("*") if top.is_dir() else ())]:
            os.chown(p, user.uid, user.gid)


def write_design(user, folder: Path) -> None:
    design = folder / "tiny.yaml"
    design.write_text(DESIGN)
    own(user, design)


def test_labkit_run_unconfined_as_a_user_outside_the_repository(study):
    user, folder = study
    venv = wheel.venv(name=USER_VENV)
    design = folder / "tiny.yaml"
    design.write_text(DESIGN)
    os.chown(design, user.uid, user.gid)
    run = as_user(
        user,
        venv,
        folder,
        "labkit",
        "run",
        "tiny.yaml",
        "--backend",
        "local",
        "--workload",
        "command",
        "--param",
        'argv=["sleep", "0"]',
        "--backend-option",
        "enforce_limits=False",
        "--campaign-id",
        "tiny-unconfined",
        "--telemetry",
        "off",
    )
    said = run.stdout + run.stderr
    assert "unconfined: the local backend runs with enforce_limits=false" in said
    store = folder / "data" / "tiny-unconfined" / "store.sqlite"  # ./data: no checkout needed
    assert store.is_file() and store.stat().st_uid == user.uid
    check = as_user(user, venv, folder, "labkit", "check", "tiny-unconfined")
    assert check.returncode == 0
    show = as_user(user, venv, folder, "labkit", "show", "tiny-unconfined").stdout
    assert "runs       2: 2 ok" in show
    assert "unconfined: 2 of 2 runs ran without enforced limits" in show
    # the installed labkit recorded the commit its wheel was built from
    fp = as_user(
        user,
        venv,
        folder,
        "python",
        "-c",
        "from labkit.store import Store\n"
        "st = Store.for_campaign('data', 'tiny-unconfined', readonly=True)\n"
        "print([fp.get('host', fp).get('labkit_commit') for fp in st.fingerprints().values()])",
    ).stdout
    assert "(installed)" in fp and "n/a" not in fp


def test_notebook_01_in_view_mode_from_the_copied_notebooks(study):
    user, folder = study
    venv = wheel.venv(("notebooks",), name=USER_VENV)
    as_user(user, venv, folder, "labkit", "notebooks", "copy", "nbs")
    assert (folder / "nbs" / "01_affinity_factorial.ipynb").is_file()
    data = folder / "data"
    data.mkdir(exist_ok=True)
    shutil.copytree(
        ROOT / "data" / "affinity-local", data / "affinity-local", ignore=shutil.ignore_patterns("output")
    )
    for p in [data, *data.rglob("*")]:
        os.chown(p, user.uid, user.gid)
    kernel = as_user(
        user, venv, folder, "python", "-m", "ipykernel", "install", "--user", "--name", "python3"
    )
    assert kernel.returncode == 0
    run = as_user(
        user,
        venv,
        folder,
        "papermill",
        "nbs/01_affinity_factorial.ipynb",
        "out.ipynb",
        "-p",
        "mode",
        "view",
        "-p",
        "data_dir",
        "data",
        "-p",
        "interactive",
        "False",
        "-p",
        "figures_dir",
        "figs",
        timeout=600,
    )
    assert run.returncode == 0
    text = (folder / "out.ipynb").read_text()
    assert "mode view, campaign 'affinity-local'" in text
    # the paper's Table 3, read from the reference data that ships with the package (no checkout)
    # (its 134.78 s shown to 4 significant digits, as the notebook shows every number)
    assert "Table 3, paper (Xen, N-queens)" in text and "best_affinity" in text and "134.8" in text
    assert any((folder / "figs").glob("*.png"))


#: notebook 01 in run mode, the smallest campaign its analysis takes: the 2^4 design (1 and 2 vCPUs, 64
#: and 128 MB, floating and pinned, 1 and 2 instances) once (unreplicated: Lenth's margins, no
#: p-values; its conclusions say "Not resolved at this n"), N-queens on an 8 x 8 board
NB01_CAMPAIGN = "nb01-unconfined"
NB01_REPLICATIONS = 1
NB01_RUNS = 2**4 * NB01_REPLICATIONS


def user_processes_under(user, top: Path) -> list:
    """``user``'s processes working under ``top`` or with their HOME there (what a test that ran as
    the user with a HOME under ``top`` left running)."""
    import psutil

    out = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.uids().real == user.uid and any(
                Path(w) == top or top in Path(w).parents for w in (p.cwd(), p.environ().get("HOME", "/"))
            ):
                out.append(p)
    return out


def cgroups_named(prefix: str) -> list[str]:
    """Every cgroup (v1 hierarchies and v2) whose name starts with ``prefix``."""
    return [
        os.path.join(top, d)
        for top, dirs, _ in os.walk("/sys/fs/cgroup")
        for d in dirs
        if d.startswith(prefix)
    ]


def test_notebook_01_in_run_mode_unconfined_as_a_user(study):
    """Notebook 01 as it ships (``labkit notebooks copy``) run by papermill in run mode as the user on
    the local backend, unconfined as docs/install.md tells a user without a delegated cgroup v2 subtree
    (``-y 'backend_options: {enforce_limits: false}'``; a cgroup v1 host delegates nothing), on the
    smallest campaign its analysis takes. What the user checks: papermill exits 0, the store is in the
    study folder, the user's and private, every run is ok, the conclusions are there with no traceback,
    and the runs' metadata and the conclusions say that the limits were not enforced. HOME is a folder
    of the test's (the compiled solver, labkit's runtime dir, Jupyter's and matplotlib's files go
    there), so nothing is left outside the temporary folder: no file, no process, no cgroup."""
    user, folder = study
    venv = wheel.venv(("notebooks",), name=USER_VENV)
    home = folder.parent / "home-nb01"
    home.mkdir(mode=0o700)
    os.chown(home, user.uid, user.gid)
    try:
        as_user(user, venv, folder, "labkit", "notebooks", "copy", "nbs-run", home=home)
        assert (folder / "nbs-run" / "01_affinity_factorial.ipynb").is_file()
        as_user(
            user,
            venv,
            folder,
            "papermill",
            "nbs-run/01_affinity_factorial.ipynb",
            "run.ipynb",
            "-p",
            "mode",
            "run",
            "-p",
            "data_dir",
            "data",
            "-p",
            "interactive",
            "False",
            "-y",
            "backend_options: {enforce_limits: false}",
            "-p",
            "campaign_id",
            NB01_CAMPAIGN,
            "-p",
            "replications",
            str(NB01_REPLICATIONS),
            "-p",
            "board_size",
            "8",
            "-p",
            "seed",
            "5",
            "-y",
            "{vcpus_levels: [1, 2], memory_levels: [64, 128], count_levels: [1, 2]}",
            home=home,
            timeout=1800,
        )
        # the store: in the study folder, the user's, nothing in it readable by others
        campaign = folder / "data" / NB01_CAMPAIGN
        assert (campaign / "store.sqlite").is_file()
        for p in [campaign, *campaign.rglob("*")]:
            st = p.lstat()
            assert st.st_uid == user.uid and st.st_mode & 0o077 == 0, (
                f"{p}: uid {st.st_uid}, mode {st.st_mode:o}"
            )
        # every run ok, each of its instances recorded as unconfined (no cgroup), run as the user
        # with no capability (not "root", "all")
        code = (
            "import json\nfrom labkit.store import Store\n"
            f"st = Store.for_campaign('data', {NB01_CAMPAIGN!r}, readonly=True)\n"
            "print(json.dumps([[r.status, [(i.get('limits_enforced'), i.get('cgroup_version'),\n"
            "                               i['isolation']['user'], i['isolation']['capabilities'])\n"
            "                              for i in r.metadata['instances']]] for r in st.runs().itertuples()]))"
        )
        runs = json.loads(as_user(user, venv, folder, "python", "-c", code, home=home).stdout)
        assert len(runs) == NB01_RUNS and {status for status, _ in runs} == {"ok"}, runs
        assert {(a, b, c, tuple(d)) for _, insts in runs for a, b, c, d in insts} == {
            (False, None, f"uid {user.uid} ({user.name}), the controller's user", ())
        }, runs
        # the executed notebook: every cell ran, no error; its conclusions say the runs were unconfined
        nb = json.loads((folder / "run.ipynb").read_text())
        outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
        assert not [o for o in outputs if o["output_type"] == "error"]
        text = json.dumps(outputs)
        assert "Traceback" not in text
        assert f"mode run, campaign '{NB01_CAMPAIGN}', data " in text
        (concl,) = [
            md
            for o in outputs
            if (md := "".join(o.get("data", {}).get("text/markdown", ""))).startswith(
                "**Does CPU affinity matter?"
            )
        ]
        assert f"unconfined: {NB01_RUNS} of {NB01_RUNS} runs ran without enforced limits" in concl, concl
        # nothing left: no process of the user's (the kernel, the instances), no cgroup of the campaign
        deadline = time.monotonic() + 60
        while user_processes_under(user, folder.parent) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = user_processes_under(user, folder.parent)
        assert not left, [" ".join(p.cmdline())[:120] for p in left]
        assert not cgroups_named(f"labkit-{NB01_CAMPAIGN}--")
    finally:
        for p in user_processes_under(user, folder.parent):
            with contextlib.suppress(Exception):
                p.kill()


#: ``labkit run`` of the tiny design on ``backend`` as the user: one command per run, no quarantine
#: re-runs (each run is a container or a VM boot)
def run_tiny(
    user, venv: Path, folder: Path, campaign: str, backend: str, *options: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    write_design(user, folder)
    return as_user(
        user,
        venv,
        folder,
        "labkit",
        "run",
        "tiny.yaml",
        "--backend",
        backend,
        *options,
        "--workload",
        "command",
        "--param",
        'argv=["nproc"]',
        "--campaign-id",
        campaign,
        "--telemetry",
        "off",
        "--no-quarantine",
        timeout=timeout,
    )


def stored_runs(user, venv: Path, folder: Path, campaign: str) -> list[dict]:
    """Each run of ``campaign`` (in ``./data``) as the user reads it: status, vcpus, the vCPUs seen
    inside the instance, and the instances' metadata."""
    code = (
        "import json\nfrom labkit.store import Store\n"
        f"st = Store.for_campaign('data', {campaign!r}, readonly=True)\n"
        "out = [{'status': r.status, 'vcpus': int(r.vcpus),\n"
        "        'observed': r.metadata['treatments']['vcpus'].get('observed'),\n"
        "        'instances': r.metadata['instances']} for r in st.runs().itertuples()]\n"
        "print(json.dumps(out, default=str))"
    )
    return json.loads(as_user(user, venv, folder, "python", "-c", code).stdout)


def check_runs(runs: list[dict]) -> None:
    """Both runs ok, each instance with the vCPUs its run asked for (seen from inside)."""
    assert sorted((r["status"], r["vcpus"], r["observed"]) for r in runs) == [("ok", 1, 1), ("ok", 2, 2)], (
        runs
    )


@pytest.mark.docker
def test_labkit_run_on_docker_as_a_member_of_the_docker_group(study):
    user, folder = study
    subprocess.run(["usermod", "-aG", "docker", user.name], check=True, capture_output=True, timeout=60)
    venv = wheel.venv(("docker",), name=USER_VENV)
    run_tiny(user, venv, folder, "tiny-docker", "docker")
    check_runs(stored_runs(user, venv, folder, "tiny-docker"))
    show = as_user(user, venv, folder, "labkit", "show", "tiny-docker").stdout
    assert "runs       2: 2 ok" in show


def _session_daemons(user) -> list[int]:
    """The pids of the user's own libvirtd and virtlogd (``qemu:///session``: libvirt starts them,
    each writes its pid file in ``~/.cache/libvirt``; they stop after 120 s idle)."""
    pids = []
    for name in ("libvirtd", "virtlogd"):
        with contextlib.suppress(OSError, ValueError):
            pid = int((user.home / ".cache" / "libvirt" / f"{name}.pid").read_text().split()[0])
            st = os.stat(f"/proc/{pid}")
            if st.st_uid == user.uid and Path(f"/proc/{pid}/comm").read_text().strip() == name:
                pids.append(pid)
    return pids


@pytest.fixture
def session_daemon(study):
    """Stops the user's session daemons the test made libvirt start (not left idling for 120 s)."""
    user, _ = study
    before = set(_session_daemons(user))
    yield
    for pid in set(_session_daemons(user)) - before:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


@pytest.mark.libvirt
def test_labkit_run_on_libvirt_session_as_a_user(study, session_daemon):
    """qemu:///session as a user who is not in the libvirt or kvm group: labkit makes its pool in the
    user's data dir and keeps the guest agents' sockets in the user's runtime dir. Root's 0700
    ``/run/labkit/virtiofs`` (left by a root campaign with mounts) is there: before, the run and
    ``labkit clean`` ended on a PermissionError reading it."""
    from labkit.backends.libvirt.mounts import RO_ROOT
    from labkit.backends.testing import required

    user, folder = study
    venv = wheel.venv(("libvirt",), name=USER_VENV)
    os.makedirs(RO_ROOT, mode=0o700, exist_ok=True)
    os.chmod(RO_ROOT, 0o700)
    # the user's own daemon must start (libvirt starts it; the first start probes QEMU): a failure
    # there is libvirt's, not labkit's
    probe = as_user(
        user,
        venv,
        folder,
        "python",
        "-c",
        "import libvirt; c = libvirt.open('qemu:///session'); print(c.getVersion())",
        check=False,
        timeout=180,
    )
    if probe.returncode != 0:
        why = f"qemu:///session does not start for {user.name}: {probe.stderr.strip()[-500:]}"
        if "libvirt" in required():
            pytest.fail(why)
        pytest.skip(why)
    run = run_tiny(user, venv, folder, "tiny-session", "libvirt", "--backend-option", "uri=qemu:///session")
    assert "PermissionError" not in run.stderr
    runs = stored_runs(user, venv, folder, "tiny-session")
    check_runs(runs)
    for r in runs:
        (inst,) = r["instances"]
        assert (inst["uri"], inst["domain_type"]) == ("qemu:///session", "qemu"), (
            inst
        )  # TCG: no /dev/kvm access
    # the pool is the user's, in its data dir, and nothing of the campaign is left in it or in the runtime dir
    pool = user.home / ".local" / "share" / "labkit" / "libvirt-pool"
    assert pool.is_dir() and pool.stat().st_uid == user.uid
    assert not list(pool.glob("labkit-tiny-session--*"))
    runtime = user.home / ".cache" / "labkit"
    assert runtime.stat().st_uid == user.uid and runtime.stat().st_mode & 0o077 == 0
    assert not list((runtime / "libvirt").glob("*.agent"))
    # labkit clean, of the campaign (its backend options from the store) and of every campaign
    clean = as_user(user, venv, folder, "labkit", "clean", "tiny-session")
    assert "removed 0 leftover(s)" in clean.stdout
    clean = as_user(
        user,
        venv,
        folder,
        "labkit",
        "clean",
        "--backend",
        "libvirt",
        "--backend-option",
        "uri=qemu:///session",
    )
    assert "nothing to remove" in clean.stdout


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_dashboard_as_a_user_over_the_study_data_dir(study):
    """``labkit dashboard --data-dir data`` as the user: its first page answers over HTTP; SIGTERM
    ends it with Voila and the page's kernel (all the user's processes)."""
    user, folder = study
    venv = wheel.venv(("notebooks",), name=USER_VENV)
    data = folder / "data"
    if not (data / "affinity-local").is_dir():
        data.mkdir(exist_ok=True)
        shutil.copytree(
            ROOT / "data" / "affinity-local", data / "affinity-local", ignore=shutil.ignore_patterns("output")
        )
        own(user, data)
    # the kernel the explorer names (a spec left by another test process would name a venv now gone)
    as_user(user, venv, folder, "python", "-m", "ipykernel", "install", "--user", "--name", "python3")
    port = free_port()
    log = folder.parent / f"dashboard-{port}.log"
    # a page that never connects (no JavaScript runs here) loses its kernel after --unconnected-timeout:
    # generous, as tests/notebooks/test_dashboard_lifecycle.py has it (the explorer runs long on a loaded host)
    cmd, env = user_argv(
        user, venv, "labkit", "dashboard", f"--port={port}", "--data-dir", "data", "--unconnected-timeout=600"
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    dash = None
    try:
        end = time.monotonic() + 180
        while dash is None:
            m = re.search(r"open (http://127\.0\.0\.1:\d+/\?token=\S+)", log.read_text(errors="replace"))
            if m:
                dash = Dashboard(proc, m.group(1), port, log)
            else:
                assert proc.poll() is None and time.monotonic() < end, log.read_text()[-3000:]
                time.sleep(0.2)
        assert dash.wait_for(dash.answers, 180, step=0.3), dash.output()[-3000:]
        status, body = dash.load(600)
        assert status == 200, body[-2000:]
        # the explorer ran over the study's data dir: it counts the campaigns there, naming the folder as
        # the study sees it ("data/"), never the server's absolute path
        m = re.search(r"(\d+) campaigns?.{0,40}? in data/", body)
        assert m, f"{body[-2000:]}\n{dash.output()[-3000:]}"
        assert str(data) not in body
        assert int(m.group(1)) == len(list(data.glob("*/store.sqlite")))
        kernels = dash.wait_for(dash.kernels, 60)
        assert len(kernels) == 1 and len(dash.voila()) == 1, dash.output()[-3000:]
        assert {p.uids().real for p in dash.processes()} == {user.uid}
        proc.send_signal(signal.SIGTERM)
        gone = dash.wait_for(lambda: not dash.left() and proc.poll() is not None, 60)
        assert gone, (
            f"still running: {[' '.join(p.cmdline())[:80] for p in dash.left()]}\n{dash.output()[-3000:]}"
        )
        assert proc.returncode == 0 and not dash.answers()
        assert "labkit dashboard: stopped on SIGTERM: Voila and 1 kernel ended" in dash.output()
    finally:
        seen = list(dash.seen.values()) if dash is not None else []
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for p in seen:
            with contextlib.suppress(Exception):
                p.kill()
        proc.wait(30)
