"""One design, three paths, the same behaviour (issue 33, first "Done when" bullet).

The same small design runs on each path:

* ``one-backend``: ``Campaign(backend="local")``, no testbed;
* ``platforms``: a ``platform`` factor over two platforms of this machine, both the local
  backend (``isolation: strict`` and ``relaxed``), so a testbed of one host and two slots;
* ``testbed``: a testbed of two namespace test hosts of scripts/setup-fleet.sh (``ns1``,
  ``ns2``), whose platform is the ``ssh`` backend.

The design, identical on every path: a ``noise`` factor (``none``, ``cpu``: a stress-ng
neighbour beside the run), a ``network`` factor (``none``, ``private``: a run network; on the
``ssh`` hosts a bridge the backend makes there, each instance in a network namespace on it, see
:mod:`labkit.backends.ssh_network`), adaptive replication
(``min: 2, max: 3`` and a target CI no run can meet, so every configuration gets an adaptive
round beyond ``min``), the ``command`` workload whose very first run fails on purpose
(:class:`tests.support.fails_first.FailsFirst`), run with ``retries=1``. Each path's campaign
runs once (:func:`outcome`) and the tests compare what it stored with the one-backend path: the
same runs (configuration without ``platform``, replicate), all ``ok``, the injected failure
kept as an earlier attempt, the same per-run metadata keys, and nothing left behind (no
instance, and no network bridge on this machine or on the ssh hosts).
"""

from __future__ import annotations

import contextlib
import json
import secrets
from dataclasses import dataclass, field

import pandas as pd
import pytest

from labkit.backends import get_backend
from labkit.core.ids import campaign_prefix
from labkit.core.network_factors import bridges, bridges_in
from labkit.run.campaign import Campaign
from labkit.run.hooks import RunHook
from labkit.run.platforms import options_for
from labkit.run.testbed import Testbed
from tests.support.fails_first import INJECTED, FailsFirst

from .test_fleet import HOSTS, KEY, fleet_or_skip

MIN, MAX = 2, 3
NOISE = ["none", "cpu"]
NETWORK = ["none", "private"]
PLATFORMS = {
    "strict": {"backend": "local", "isolation": "strict"},
    "relaxed": {"backend": "local", "isolation": "relaxed"},
}
FLEET = {"hosts": [{"name": n, "address": a, "key": KEY} for n, a in HOSTS[:2]], "connect_timeout": 5}
#: (host, platform, backend) each path's runs record
SLOTS = {
    "one-backend": {("local", "local", "local")},
    "platforms": {("here", "strict", "local"), ("here", "relaxed", "local")},
    "testbed": {("ns1", "ssh", "ssh"), ("ns2", "ssh", "ssh")},
}
PATHS = ["one-backend", "platforms", "testbed"]
_done: dict[str, Outcome] = {}


def design(path: str) -> dict:
    factors: dict = {"noise": NOISE, "network": NETWORK}
    if path == "platforms":
        factors["platform"] = list(PLATFORMS)
    return {"factors": factors, "seed": 33, "replications": {"min": MIN, "max": MAX, "target_ci": 1e-9}}


class Stamp(RunHook):
    """A declared hook: it stamps each run's metadata with its run id and counts the campaigns
    it was entered around."""

    def __init__(self):
        self.campaigns: list[str] = []

    @contextlib.contextmanager
    def around_campaign(self, campaign):
        self.campaigns.append("enter")
        try:
            yield
        finally:
            self.campaigns.append("exit")

    def around_run(self, ctx):
        ctx.metadata["stamped"] = ctx.run.run_id
        return contextlib.nullcontext([])


@dataclass
class Outcome:
    """What one path's campaign stored (read once from its store, which is then closed)."""

    path: str
    prefix: str
    runs: pd.DataFrame
    attempts: pd.DataFrame
    meta: dict
    failed_in: list[str]
    left: dict[str, list[str]]  # "<host>/<platform>" -> instances still there afterwards; "bridges"
    hook_campaigns: list[str] = field(default_factory=list)


def _leftovers(testbed: dict | None, platforms: list[str], prefix: str) -> dict[str, list[str]]:
    """ "<host>/<platform>" -> its instances named ``prefix*`` (and, on an ssh host, the bridges of
    its run networks there) after the campaign."""
    tb = Testbed.load(testbed)
    out = {}
    for h in tb.hosts:
        for p in platforms:
            be = get_backend(tb.platform(p).backend, **options_for(tb.platform(p), h))
            try:
                out[f"{h.name}/{p}"] = be.list_labkit(prefix)
                if be.name == "ssh":
                    links = json.loads(
                        be.run_script("ip -j -d link show type bridge", "listing bridges").stdout
                    )
                    out[f"{h.name}/{p}"] += sorted(bridges_in(links, prefix))
            finally:
                be.close()
    return out


def outcome(path: str, tmp_path_factory) -> Outcome:
    """Run ``path``'s campaign once per session (later calls return what it stored)."""
    if path == "testbed":
        fleet_or_skip()
    if path in _done:
        return _done[path]
    cid = f"t-one-{path}-{secrets.token_hex(3)}"
    testbed = (
        {"platforms": PLATFORMS, "hosts": [{"name": "here"}]}
        if path == "platforms"
        else (FLEET if path == "testbed" else None)
    )
    workload = FailsFirst(argv=["true"])
    stamp = Stamp()
    store = Campaign(
        design(path),
        backend="local" if path == "one-backend" else None,
        workload=workload,
        campaign_id=cid,
        data_dir=tmp_path_factory.mktemp(path),
        testbed=testbed,
        progress=False,
        run_timeout=120,
        hooks=[stamp],
    ).run(retries=1)
    try:
        runs, attempts, meta = store.runs(), store.attempts(), store.meta()
    finally:
        store.close()
    platforms = list(PLATFORMS) if path == "platforms" else ["ssh" if path == "testbed" else "local"]
    left = _leftovers(testbed, platforms, campaign_prefix(cid))
    left["bridges"] = sorted(bridges(campaign_prefix(cid)))  # the run networks' bridges, removed
    _done[path] = Outcome(
        path, campaign_prefix(cid), runs, attempts, meta, workload.failed_in, left, stamp.campaigns
    )
    return _done[path]


def column(runs: pd.DataFrame, name: str, absent) -> pd.Series:
    """Factor column ``name`` of ``runs``, or ``absent`` in every row for a design without it."""
    return runs[name] if name in runs else pd.Series([absent] * len(runs), index=runs.index, dtype=object)


def run_keys(runs: pd.DataFrame) -> dict[str | None, set[tuple[str, str, int]]]:
    """platform (None without that factor) -> {(noise, network, replicate)} of the stored runs."""
    out: dict = {}
    for p, noise, net, rep in zip(
        column(runs, "platform", None), runs["noise"], column(runs, "network", "none"), runs["replicate"]
    ):
        out.setdefault(p, set()).add((noise, net, int(rep)))
    return out


def metadata_keys(runs: pd.DataFrame) -> dict[tuple[str, str], set[str]]:
    """(noise, network) -> the top-level metadata keys of its runs (asserted the same in each)."""
    out: dict[tuple[str, str], set[str]] = {}
    for cfg, md in zip(zip(runs["noise"], column(runs, "network", "none")), runs["metadata"]):
        keys = set(md)
        assert out.setdefault(cfg, keys) == keys, f"{cfg}: runs differ in their metadata keys"
    return out


pytestmark = [pytest.mark.root, pytest.mark.network]
path_param = pytest.mark.parametrize(
    "path", [pytest.param(p, marks=pytest.mark.fleet) if p == "testbed" else p for p in PATHS]
)


@path_param
def test_same_runs_all_ok_with_adaptive_rounds(path, tmp_path_factory):
    o = outcome(path, tmp_path_factory)
    runs = o.runs
    assert set(runs.status) == {"ok"}, runs[["run_id", "status", "error"]]
    assert runs.run_id.is_unique
    # every configuration reached max replicates: adaptive rounds beyond min ran on this path
    want = {(n, net, r) for n in NOISE for net in NETWORK for r in range(1, MAX + 1)}
    by_platform = run_keys(runs)
    assert set(by_platform) == (set(PLATFORMS) if path == "platforms" else {None})
    for p, keys in by_platform.items():
        assert keys == want, f"platform {p}: stored {sorted(keys)}"
    assert int(o.meta.get("adaptive_round") or 0) >= 1, o.meta.get("adaptive_round")
    assert o.meta.get("adaptive_pending") == []
    # the same runs, with the same ids, as on one backend (the platform factor aside)
    base = outcome("one-backend", tmp_path_factory).runs
    assert all(keys == run_keys(base)[None] for keys in by_platform.values())
    if path != "platforms":
        assert sorted(runs.run_id) == sorted(base.run_id)
    assert o.left and not any(o.left.values()), o.left


@path_param
def test_injected_first_failure_is_retried(path, tmp_path_factory):
    o = outcome(path, tmp_path_factory)
    att = o.attempts
    assert len(o.failed_in) == 1
    assert len(att) == 1, att[["run_id", "status", "error"]]
    row = att.iloc[0]
    assert row.status == "failed" and INJECTED in row.error and o.failed_in[0] in row.error
    again = o.runs.set_index("run_id").loc[row.run_id]
    assert again.status == "ok" and again.started > row.started


@path_param
def test_noise_neighbour(path, tmp_path_factory):
    o = outcome(path, tmp_path_factory)
    for noise, md in zip(o.runs["noise"], o.runs["metadata"]):
        if noise == "none":
            assert "neighbours" not in md and "noise" not in md
            continue
        assert md["noise"] == "cpu"
        (nb,) = md["neighbours"]
        assert nb["kind"] == "cpu" and nb["workers"] >= 2 and nb["name"].startswith(o.prefix + "noise")
        assert nb["name"] != md["instances"][0]["name"]


@path_param
def test_run_network(path, tmp_path_factory):
    """Every path opens the run network of a ``network: private`` run (one per run, named with
    the campaign's prefix) and records the same metadata of it; its instance is on it."""
    o = outcome(path, tmp_path_factory)
    runs = o.runs
    modes = [md["network"]["mode"] for md in runs["metadata"]]
    assert modes == list(runs["network"]), modes
    private = [md for md, m in zip(runs["metadata"], modes) if m == "private"]
    names = [md["network"]["name"] for md in private]
    assert len(names) == len(runs) // 2 and len(set(names)) == len(names)
    assert all(n.startswith(o.prefix) for n in names)
    base = [
        md
        for md in outcome("one-backend", tmp_path_factory).runs["metadata"]
        if md["network"]["mode"] == "private"
    ]
    assert {frozenset(md["network"]) for md in private} == {frozenset(md["network"]) for md in base}
    for md in private:
        (inst,) = md["instances"]
        assert inst["network"]["name"] == md["network"]["name"] and inst["network"]["host"] == "inst0"


@path_param
def test_same_metadata_keys(path, tmp_path_factory):
    o = outcome(path, tmp_path_factory)
    base = metadata_keys(outcome("one-backend", tmp_path_factory).runs)
    mine = metadata_keys(o.runs)
    assert set(mine) == set(base)
    for cfg, keys in sorted(mine.items()):
        assert keys == base[cfg], (
            f"{cfg}: keys only on path {path}: {sorted(keys - base[cfg])}, "
            f"only on one backend: {sorted(base[cfg] - keys)}"
        )
    # the run's slot is named on every path, so the paths' keys are the same by content too
    slots = {(md["host"], md["platform"], md["backend"]) for md in o.runs["metadata"]}
    assert slots == SLOTS[path], slots


@pytest.mark.parametrize("path", PATHS)
def test_declared_hook_runs_around_every_run_and_the_campaign_once(path, tmp_path_factory):
    """A hook given to the campaign (``hooks=[...]``) is entered around every run on every path
    (its metadata is stored with the run, the failed first attempt included) and around the
    campaign once, retries and adaptive rounds included."""
    out = outcome(path, tmp_path_factory)
    assert list(out.runs.metadata.map(lambda m: m.get("stamped"))) == list(out.runs.run_id)
    assert list(out.attempts.metadata.map(lambda m: m.get("stamped"))) == list(out.attempts.run_id)
    assert out.hook_campaigns == ["enter", "exit"]
