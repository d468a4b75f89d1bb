"""`labkit clean` without an id (issue 28, second pass): objects of campaigns that are not running go
when the campaign is registered as stopped, or when no registry knows it and its newest sign of life
(an object made, as its backend says; its store written) is older than the grace period. Before,
any object of an unregistered campaign was removed at once: a campaign running from another
network namespace, machine or unreadable registry lost its instances to the first `labkit clean`.

The backends are small stand-ins reporting creation times (the real backends' ``created`` are in
tests/integration/test_campaign_registry.py); the registry is a temporary LABKIT_RUN_DIR.
"""

import json
import os
import time
from pathlib import Path

import pytest

import labkit.backends
from labkit import cli
from labkit.core import registry
from labkit.run.clean import find_leftovers, remove_leftovers, running_ids, stopped_ids
from tests.unit.test_reliability_campaign import FakeBackend

NOW = 1_800_000_000.0


class Aged(FakeBackend):
    """A backend whose objects have creation times (name -> seconds before NOW; None: untold)."""

    def __init__(self, ages: dict, **options):
        super().__init__(**options)
        self.ages = ages
        self.listed = list(ages)

    def created(self, names):
        return {n: NOW - self.ages[n] for n in names if self.ages.get(n) is not None}


@pytest.fixture(autouse=True)
def run_dir(tmp_path, monkeypatch):
    d = tmp_path / "run"
    monkeypatch.setenv("LABKIT_RUN_DIR", str(d))
    return d


def _stopped_entry(run_dir: Path, cid: str) -> None:
    """What a SIGKILLed campaign leaves in its registry: its entry, its lock not held."""
    run_dir.mkdir(mode=0o755, exist_ok=True)
    (run_dir / f"{cid}.json").write_text(
        json.dumps(
            {"campaign_id": cid, "pid": 999999, "data_dir": "/d", "started": "2026-11-27T04:00:00.000+00:00"}
        )
    )


def _states(found) -> dict:
    return {x.name: x.state for x in found}


def test_unregistered_campaigns_wait_for_the_grace_period(tmp_path, run_dir):
    ages = {
        "labkit-old--a": 3600,
        "labkit-young--a": 60,
        "labkit-mixed--a": 7200,
        "labkit-mixed--b": 30,  # one young object keeps its campaign
        "labkit-untold--a": None,
        "labkit-killed--a": 5,
        "labkit-busy--a": 9999,
        "labkit-test-1": 9999,
    }
    be = Aged(ages)
    _stopped_entry(run_dir, "killed")
    with registry.register("busy", tmp_path / "d"):
        busy = running_ids()
        found = find_leftovers({"local": be}, busy, stopped=stopped_ids(), grace_s=600, now=NOW)
    assert _states(found) == {
        "labkit-old--a": "unregistered",
        "labkit-young--a": "recent",
        "labkit-mixed--a": "recent",
        "labkit-mixed--b": "recent",
        "labkit-untold--a": "recent",
        "labkit-killed--a": "stopped",
        "labkit-busy--a": "running",
        "labkit-test-1": "unknown",
    }
    why = {x.name: x.why for x in found}
    assert why["labkit-old--a"] == (
        "campaign old is not registered on this host; its newest sign of life (local "
        "object labkit-old--a made) is 60 min old and the grace period is 10 min"
    )
    assert (
        "only 60 s old and the grace period is 10 min (it may run elsewhere; --grace 0"
        in why["labkit-young--a"]
    )
    assert "labkit-mixed--b made) is only 30 s old" in why["labkit-mixed--a"]
    assert "no one tells how old" in why["labkit-untold--a"]
    assert why["labkit-killed--a"].startswith(
        "campaign killed is registered as stopped: data dir /d, pid 999999"
    )
    removed = remove_leftovers({"local": be}, found)
    assert removed == {"local": ["labkit-killed--a", "labkit-old--a"]}
    assert sorted(be.listed) == [
        "labkit-busy--a",
        "labkit-mixed--a",
        "labkit-mixed--b",
        "labkit-test-1",
        "labkit-untold--a",
        "labkit-young--a",
    ]
    # --grace 0: every campaign not running goes, of any age
    found = find_leftovers({"local": be}, {"busy": "x"}, grace_s=0, now=NOW)
    assert {n for n, s in _states(found).items() if s == "unregistered"} == {
        "labkit-mixed--a",
        "labkit-mixed--b",
        "labkit-untold--a",
        "labkit-young--a",
    }


def test_a_store_written_lately_keeps_its_campaign_and_an_old_one_ages_it(tmp_path):
    """No creation time from the backend: the campaign's store in a known data dir tells its age."""
    be = Aged({"labkit-fresh--a": None, "labkit-stale--a": None})
    for cid, age in (("fresh", 30), ("stale", 86400)):
        store = tmp_path / "data" / cid / "store.sqlite"
        store.parent.mkdir(parents=True)
        store.write_bytes(b"")
        os.utime(store, (NOW - age, NOW - age))
    found = find_leftovers({"ssh": be}, {}, grace_s=600, data_dirs=[tmp_path / "data"], now=NOW)
    assert _states(found) == {"labkit-fresh--a": "recent", "labkit-stale--a": "unregistered"}
    assert f"its store in {tmp_path / 'data'} written) is 24.0 h old" in found[1].why


def test_the_cli_shows_what_it_keeps_and_why_and_takes_a_grace(tmp_path, run_dir, monkeypatch, capsys):
    now = time.time()
    monkeypatch.setattr(labkit.backends, "REGISTRY", {"local": None})
    made = []

    def get_backend(name, **options):
        be = Aged({"labkit-young--a": 90, "labkit-old--a": 7200})
        be.created = lambda names: {n: now - be.ages[n] for n in names}
        made.append(be)
        return be

    monkeypatch.setattr(labkit.backends, "get_backend", get_backend)
    assert cli.main(["clean", "--data-dir", str(tmp_path), "--yes"]) == 0
    out = capsys.readouterr().out
    assert "local: labkit-old--a: remove: campaign old is not registered on this host; its newest sign" in out
    assert (
        "local: labkit-young--a: kept: campaign young is not registered on this host, but its newest sign "
        "of life (local object labkit-young--a made) is only 90 s old and the grace period is 10 min"
    ) in out
    assert made[-1].listed == ["labkit-young--a"]
    assert cli.main(["clean", "--data-dir", str(tmp_path), "--yes", "--grace", "1m"]) == 0
    assert made[-1].listed == []
    for bad in ("-5", "ten", "5x", "nan"):
        with pytest.raises(SystemExit):
            cli.main(["clean", "--grace", bad])
