"""labkit.studies.pipeline_verdicts.pipeline_platforms and pipeline_claims (notebook 04): platforms compared
inside one randomized campaign (its ``platform`` factor) when it is stored, else across the older
per-platform campaigns, labelled not randomized together; nothing scored (a stand-in workload).
Claims compare the timed stages (``stages_s``); a run stored without it (older campaigns) counts
the sum of its stage times (labkit.studies.with_stages_total). The expected ratio is computed here
from the values written (stage times summing to means 15 and 10: +50 %; the whole process, 1 s
longer per run, would give +45.5 %)."""

import math

import pandas as pd
import pytest

from labkit.design import Design
from labkit.errors import ConfigError
from labkit.store import Store
from labkit.studies import with_stages_total
from labkit.studies.pipeline_verdicts import (
    NOT_TOGETHER,
    PIPELINE_STAND_IN,
    pipeline_claims,
    pipeline_platforms,
)
from labkit.workloads import Measurement

WALL = {"local": [9.0, 11.0], "lxd": [14.0, 16.0]}  # per platform, both apps alike


def _store(data, cid, factors, value, *, total=False):
    """Runs of the pipeline as stored before ``stages_s`` (two stage times summing to ``value``, the
    process 1 s longer), or with ``total`` as the workload stores them now (plus ``stages_s``)."""
    design = Design.from_dict({"factors": factors, "replications": 2, "seed": 1})
    (data / cid).mkdir(parents=True)
    with Store(data / cid / "store.sqlite") as st:
        st.set_meta(
            campaign_id=cid,
            design=design.to_dict(),
            backend="local",
            workload={"name": "pipeline", "params": {"size_mb": 4}, "response": "wall_time_s"},
        )
        for run in design.plan():
            st.record_run(
                run,
                status="ok",
                started="2026-01-01T00:00:00",
                duration_s=1.0,
                measurements=[
                    Measurement("wall_time_s", value(run) + 1.0, "s"),
                    Measurement("stage_fragment_s", 0.25 * value(run), "s"),
                    Measurement("stage_compress_s", 0.75 * value(run), "s"),
                ]
                + ([Measurement("stages_s", value(run), "s")] if total else []),
            )


@pytest.mark.parametrize("total", [False, True])
def test_one_campaign_with_a_platform_factor_is_randomized_together(tmp_path, total):
    _store(
        tmp_path,
        "pl",
        {"platform": ["local", "lxd"], "app": ["dedup", "ferret"]},
        lambda run: WALL[run.levels["platform"]][run.replicate - 1],
        total=total,
    )
    assert sorted(pipeline_platforms(tmp_path, "pl")) == ["local", "lxd"]
    claims = {c.key: c for c in pipeline_claims(tmp_path, "pl")}
    for app in ("dedup", "ferret"):
        c = claims[f"001.{app}.lxc_native"]
        assert c.source.campaigns == ("pl",) and c.randomized and c.source.metric == "stages_s"
        assert c.value == pytest.approx(50.0) and c.n == 2 and c.n_base == 2
        assert c.comparable is False and c.why == PIPELINE_STAND_IN and not c.scored
    assert math.isnan(claims["001.dedup.kvm_lxc"].value)  # no libvirt level: not measured


def test_older_per_platform_campaigns_are_not_randomized_together(tmp_path):
    for p in ("local", "lxd"):
        _store(tmp_path, f"pl-{p}", {"app": ["dedup", "ferret"]}, lambda run, p=p: WALL[p][run.replicate - 1])
    assert pipeline_platforms(tmp_path, "pl") == []
    c = {c.key: c for c in pipeline_claims(tmp_path, "pl")}["001.dedup.lxc_native"]
    assert c.source.campaigns == ("pl-lxd", "pl-local") and c.randomized is False
    assert NOT_TOGETHER in c.why and PIPELINE_STAND_IN in c.why
    assert c.value == pytest.approx(50.0) and c.verdict == "not comparable"


def test_a_campaign_of_one_platform_names_its_backend(tmp_path):
    _store(tmp_path, "pl", {"app": ["dedup", "ferret"]}, lambda run: 1.0)
    assert pipeline_platforms(tmp_path, "pl") == ["local"]
    assert pipeline_platforms(tmp_path, "absent") == []


def test_with_stages_total_adds_the_stages_sum_only_where_it_is_missing():
    tidy = pd.DataFrame(
        {
            "run_id": ["r1"] * 4 + ["r2"] * 4,
            "instance": ["a"] * 4 + ["b"] * 4,
            "metric": ["wall_time_s", "stage_hash_s", "stage_rank_s", "chunks"] * 2,
            "value": [3.0, 0.5, 1.25, 16.0, 4.0, 1.0, 2.0, 16.0],
            "app": ["ferret"] * 8,
        }
    )
    tidy.loc[7, "metric"] = "stages_s"  # r2 reports its own total (3.5, not its stages' 3.0)
    tidy.loc[7, "value"] = 3.5
    out = with_stages_total(tidy)
    totals = out[out.metric == "stages_s"].set_index("run_id")
    assert totals.value.to_dict() == {"r1": 1.75, "r2": 3.5}
    assert totals.loc["r1", "app"] == "ferret" and totals.loc["r1", "instance"] == "a"
    assert len(out) == len(tidy) + 1 and list(out.columns) == list(tidy.columns)
    no_stages = tidy[~tidy.metric.str.startswith("stage_")]
    assert with_stages_total(no_stages).equals(no_stages)
    with pytest.raises(ConfigError, match="no column value"):
        with_stages_total(tidy.drop(columns="value"))
