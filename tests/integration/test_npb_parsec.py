"""The experimental ``npb`` and ``parsec`` workloads on real backends, on programs built here.

labkit cannot ship NPB or PARSEC, so the tests build two small programs of tests/support
(``npb_like.c``: an MPI or OpenMP kernel with a verification printing NPB 3.4's report;
``parsec_like.c``: a pthreads kernel printing PARSEC's hooks lines) on this host, give them to
the instances as a user's install (the backends' ``mounts`` option: the same path on local, a
read-only bind on docker, a disk device on lxd) and run them through the workloads:

* ``npb`` with ``ranks=2``: mpirun on the host, one rank in each of the run's 2 instances (the
  binary links the host's OpenMPI, the same 4.1 as in the ``mpi``/``study`` image variants);
* ``npb`` built with OpenMP, 2 threads in one instance;
* ``parsec`` running the hooks binary directly with 2 threads;
* a failed verification (the programs' ``-f`` flag) is a BenchmarkError, and, in a campaign on
  local, a failed run beside an ok one.

Only figures the programs print are checked, and only for being what was run (positive time and
Mop/s, the rank or thread count): never a nominal duration, the machine is shared.
"""

from __future__ import annotations

import secrets
import shutil

import pytest

from labkit.backends import teardown
from labkit.backends.testing import required
from labkit.core.instance import InstanceSpec
from labkit.errors import BenchmarkError
from labkit.run.campaign import Campaign
from labkit.workloads import get_workload

from ..support import build_npb_like, build_parsec_like
from .test_network import BACKENDS, NO_MPI, backend, gone

pytestmark = pytest.mark.network
ON_BACKENDS = pytest.mark.parametrize("backend_name", BACKENDS)
TAG = secrets.token_hex(2)
#: the programs run for well under a second: a hung launch fails the test, never CI's budget
TIMEOUT_S = 180


def _need(tool: str, package: str) -> None:
    if shutil.which(tool) is None:
        why = f"{tool} is not installed on this host (apt-get install {package}; scripts/setup-tools.sh)"
        if "network" in required():
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    """A host directory holding the three builds: npb/bin/zs.S.x (MPI), npb-omp/bin/zs.S.x
    (OpenMP), parsec/bin/parsec_like; every directory world-readable (unprivileged LXD maps
    the container's root to an unprivileged host uid)."""
    _need("mpicc", "libopenmpi-dev")
    _need("mpirun", "openmpi-bin")
    root = tmp_path_factory.mktemp("npb-suites")
    build_npb_like(root / "npb")
    build_npb_like(root / "npb-omp", omp=True)
    build_parsec_like(root / "parsec")
    for d in (root, *root.rglob("*")):
        if d.is_dir():
            d.chmod(0o755)
    return root


def prefix(backend_name: str) -> str:
    return f"labkit-test-npb{TAG}-{backend_name}--"


def target(backend_name: str, suites) -> str:
    """Where the instances see the suites: the same path on local (no mount namespace there)."""
    return str(suites) if backend_name == "local" else "/opt/labkit-npb-suites"


@pytest.fixture(scope="module")
def runs():
    """backend name -> (backend, network, [inst0, inst1]); removed at the end."""
    made: dict = {}
    yield made
    for be, net, insts in made.values():
        try:
            assert teardown(insts) == []
            net.remove()
            assert gone(be, prefix(be.name)) == []
        finally:
            be.close()


@pytest.fixture
def run(runs, backend_name, suites):
    """Two instances of one run on a private network, the suites mounted read-only."""
    if backend_name not in runs:
        be = backend(backend_name, mounts=f"{suites}:{target(backend_name, suites)}")
        pfx = prefix(backend_name)
        net = be.create_network(pfx, 2)
        try:
            insts = be.provision(InstanceSpec(vcpus=1, memory_mb=128, count=2), prefix=pfx, network=net)
        except BaseException:
            net.remove()
            raise
        runs[backend_name] = (be, net, insts)
    be, net, insts = runs[backend_name]
    if (
        backend_name != "local"
        and not insts[0].exec(["sh", "-c", "command -v orted"], check=False, timeout=30).ok
    ):
        why = NO_MPI.format(be.options.get("image") or backend_name)
        if "network" in required():
            pytest.fail(why)
        pytest.skip(why)
    return be, net, insts


@ON_BACKENDS
def test_npb_mpi_ranks_across_two_instances(run, backend_name, suites):
    """2 ranks, one per instance: the report's time, Mop/s and process count are stored."""
    _be, _net, (a, b) = run
    wl = get_workload(
        "npb",
        install_path=f"{target(backend_name, suites)}/npb",
        benchmark="zs",
        ranks=2,
        timeout_s=TIMEOUT_S,
    )
    assert wl.spans(wl.params)
    for inst in (a, b):
        wl.prepare(inst)
    got = {r.metric: (r.value, r.unit, r.instance) for r in wl.run_group([a, b], {"vcpus": 1})}
    assert set(got) == {"time_s", "mops_total", "processes"}
    assert got["time_s"][0] > 0 and got["mops_total"][0] > 0
    assert got["processes"] == (2, "count", 0)
    assert wl.version(a)["npb"] == "labkit-test"


@ON_BACKENDS
def test_npb_failed_verification_is_a_benchmark_error(run, backend_name, suites):
    _be, _net, (a, b) = run
    wl = get_workload(
        "npb",
        install_path=f"{target(backend_name, suites)}/npb",
        benchmark="zs",
        ranks=2,
        args="-f",
        timeout_s=TIMEOUT_S,
    )
    with pytest.raises(BenchmarkError, match="verification UNSUCCESSFUL"):
        wl.run_group([a, b], {"vcpus": 1})


@ON_BACKENDS
def test_npb_openmp_threads_in_one_instance(run, backend_name, suites):
    _be, _net, (a, _b) = run
    wl = get_workload(
        "npb", install_path=f"{target(backend_name, suites)}/npb-omp", benchmark="zs", timeout_s=TIMEOUT_S
    )
    wl.prepare(a)
    got = {r.metric: r.value for r in wl.run(a, wl.params_for({"threads": 2}, 1))}
    assert got["time_s"] > 0 and got["mops_total"] > 0 and got["threads"] == 2


@ON_BACKENDS
def test_parsec_hooks_binary_with_threads(run, backend_name, suites):
    """The hooks binary run directly with 2 threads: labkit's wall time, the ROI time, the
    thread count it printed; its failed check (-f) exits 1 before the hooks' end: a BenchmarkError."""
    _be, _net, (a, _b) = run
    binary = f"{target(backend_name, suites)}/parsec/bin/parsec_like"
    wl = get_workload("parsec", binary=binary, args="-ns 16 -nt {threads}", timeout_s=TIMEOUT_S)
    wl.prepare(a)
    got = {r.metric: (r.value, r.unit) for r in wl.run(a, wl.params_for({"threads": 2}, 1))}
    assert set(got) == {"wall_time_s", "roi_time_s", "threads"}
    assert got["wall_time_s"][0] > 0 and got["roi_time_s"][0] > 0 and got["threads"] == (2, "count")
    assert got["roi_time_s"][0] <= got["wall_time_s"][0]
    bad = get_workload("parsec", binary=binary, args="-ns 16 -nt {threads} -f", timeout_s=TIMEOUT_S)
    with pytest.raises(BenchmarkError, match="exit 1"):
        bad.run(a, bad.params_for({"threads": 2}, 1))


@pytest.mark.root
def test_npb_campaign_stores_the_failed_verification_as_a_failed_run(suites, tmp_path):
    """A campaign (on local: the run path does not depend on the backend) over ``args`` levels ""
    and "-f": the first run is ok with its figures, the second failed, its error naming the
    verification."""
    cid = f"t-npb{TAG}-campaign"
    d = {"factors": {"args": ["", "-f"]}, "replications": 1, "seed": 11}
    st = Campaign(
        d,
        backend="local",
        workload="npb",
        backend_options={"mounts": str(suites)},  # /tmp is the instances' own
        workload_params={"install_path": f"{suites}/npb", "benchmark": "zs", "ranks": 2},
        defaults=InstanceSpec(count=2, vcpus=1, memory_mb=128),
        campaign_id=cid,
        data_dir=tmp_path / "data",
        progress=False,
        run_timeout=300,
    ).run()
    runs = st.runs()
    assert len(runs) == 2, runs
    by_args = {r.args: r for r in runs.itertuples()}
    ok, failed = by_args[""], by_args["-f"]
    assert ok.status == "ok" and failed.status == "failed", runs[["status", "error"]]
    assert "UNSUCCESSFUL" in failed.error
    tidy = st.tidy()
    assert (tidy[tidy.metric == "mops_total"].value > 0).all() and len(tidy[tidy.metric == "mops_total"]) == 1
    assert set(tidy[tidy.metric == "processes"].value) == {2}
