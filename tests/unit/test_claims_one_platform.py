"""Notebook 02 run on one platform: its campaigns have no ``platform`` factor (the platform is the
campaign's backend), and its claims step failed with "claims: the runs have no column
'platform'". The claims on that platform are measured; those comparing it with a platform that did
not run are ``not measured``, with a note saying so."""

from types import SimpleNamespace

import pytest

from labkit.design import Design
from labkit.report.claim_compute import compute
from labkit.report.claim_verdicts import NOT_COMPARABLE, NOT_MEASURED
from labkit.report.claims import Measured
from labkit.store import Store, load_results
from labkit.studies.verdicts import overhead_claims

PREFIX = "ov"


def _store(data, bench: str, factors: dict, workload: dict, values) -> None:
    """``data/ov-<bench>``: a campaign run on ``local`` alone (no platform factor), as notebook
    02's ``overhead_design`` makes it with one platform; ``values(run)`` -> {metric: value}."""
    design = Design.from_dict({"name": f"overhead_{bench}", "factors": factors, "replications": 2, "seed": 1})
    with Store(data / f"{PREFIX}-{bench}" / "store.sqlite") as st:
        st.set_meta(
            campaign_id=f"{PREFIX}-{bench}", design=design.to_dict(), backend="local", workload=workload
        )
        for run in design.plan():
            st.record_run(
                run,
                status="ok",
                started=f"2026-01-01T00:00:{run.order:02d}+00:00",
                duration_s=1.0,
                measurements=[
                    SimpleNamespace(instance=0, metric=m, unit="", value=v) for m, v in values(run).items()
                ],
                metadata={"host": "local"},
            )


@pytest.fixture
def one_platform(tmp_path):
    _store(
        tmp_path,
        "network",
        {"path": ["to_host", "from_host"]},
        {"name": "iperf3", "params": {"protocol": "both"}, "response": "tcp_mbit_per_s"},
        lambda run: {
            "tcp_mbit_per_s": 900.0 + run.replicate,
            "udp_mbit_per_s": 800.0 + run.replicate,
            "udp_lost_percent": 0.1,
        },
    )
    _store(
        tmp_path,
        "bonnie",
        {"files": [1, 2]},
        {"name": "bonnie", "params": {}, "response": "write_kib_per_s"},
        lambda run: {"write_kib_per_s": 5e5 + 1e3 * run.replicate, "seeks_per_s": 900.0 + run.replicate},
    )
    return tmp_path


def test_a_claim_selects_the_platform_of_a_one_platform_campaign(one_platform):
    assert "platform" not in load_results(one_platform, f"{PREFIX}-bonnie").columns  # what the store holds
    local = compute(
        Measured((f"{PREFIX}-bonnie",), "write_kib_per_s", "mean", select={"platform": "local"}), one_platform
    )
    assert local["n"] == 4  # 2 levels x 2 replicates, all on local
    docker = compute(
        Measured(
            (f"{PREFIX}-bonnie",),
            "write_kib_per_s",
            "change_pct",
            select={"platform": "docker"},
            baseline={"platform": "local"},
        ),
        one_platform,
    )
    assert docker["n"] == 0 and docker["n_base"] == 4 and docker["value"] != docker["value"]  # NaN: no value
    ranked = compute(
        Measured(
            (f"{PREFIX}-bonnie",),
            "write_kib_per_s",
            "rank",
            select={"platform": "local"},
            levels=("local", "docker"),
        ),
        one_platform,
    )
    assert ranked["value"] != ranked["value"]  # a ranking of one platform is not one


def test_notebook_02s_claims_on_one_platform_say_not_measured(one_platform):
    claims = {c.key: c for c in overhead_claims(one_platform, PREFIX)}
    udp = {k: c for k, c in claims.items() if k.startswith("004.udp.")}
    assert (
        udp["004.udp.local"].n == 2 and udp["004.udp.local"].verdict == NOT_COMPARABLE
    )  # measured, never scored
    assert {udp[f"004.udp.{p}"].verdict for p in ("docker", "lxd", "libvirt")} == {NOT_MEASURED}
    changes = [c for c in claims.values() if c.source.statistic in ("change_pct", "rank")]
    assert changes and {c.verdict for c in changes} == {NOT_MEASURED}
    notes = {c.note for c in changes if c.source.statistic == "change_pct"}
    assert {n.split(": ")[0] for n in notes} == {"platform not measured here"}
    assert any("ov-bonnie ran on local, not docker" in n for n in notes)
    assert claims["004.mean.bonnie.local"].n == 4 and "004.mean.bonnie.docker" not in claims
