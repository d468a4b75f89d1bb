"""``labkit replicate``'s verdicts (labkit.report.replication) on data whose truth is known, and how a
replica is built from a stored campaign (labkit.run.replicate) without running it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.weightstats import ttost_ind

from labkit.errors import ConfigError
from labkit.report.replication import (
    TABLE_COLUMNS,
    effects_kept,
    host_differences,
    replication_table,
)
from labkit.run.replicate import replica_campaign
from labkit.store import Store

# ten runs around their mean, mean exactly 0, sd ~0.96 (deterministic: no seed to trust)
SPREAD = np.array([-1.5, -1.0, -0.5, -0.25, 0.0, 0.0, 0.25, 0.5, 1.0, 1.5])


def tidy(
    values: dict[str, list[float]], campaign: str, *, failed: dict[str, int] | None = None
) -> pd.DataFrame:
    """A tidy frame as Store.tidy() writes it: factor ``cfg`` between ``config`` and ``instance``,
    one ok measurement of wall_time_s per run, plus ``failed[level]`` failed runs (no value)."""
    rows = []
    order = 0
    for c, (level, xs) in enumerate(values.items()):
        for i, x in enumerate(xs):
            order += 1
            rows.append(
                {
                    "campaign": campaign,
                    "run_id": f"{level}-{i}",
                    "run_order": order,
                    "replicate": i + 1,
                    "config": c,
                    "cfg": level,
                    "instance": "i0",
                    "metric": "wall_time_s",
                    "value": x,
                    "unit": "s",
                    "status": "ok",
                }
            )
        for j in range((failed or {}).get(level, 0)):
            order += 1
            rows.append(
                {
                    "campaign": campaign,
                    "run_id": f"{level}-f{j}",
                    "run_order": order,
                    "replicate": len(xs) + j + 1,
                    "config": c,
                    "cfg": level,
                    "instance": None,
                    "metric": None,
                    "value": np.nan,
                    "unit": None,
                    "status": "failed",
                }
            )
    return pd.DataFrame(rows)


ORIGINAL = {
    "equal": list(100 + SPREAD),  # replica: the same values -> equivalent, no difference
    "slower": list(100 + SPREAD),  # replica 30 % slower -> changed
    "nudged": list(100 + 0.05 * SPREAD),  # replica 1 % slower, tiny noise -> negligible difference
    "noisy": [80.0, 120.0],  # two wild runs a side -> inconclusive
    "lonely": list(100 + SPREAD),  # the replica ran it once -> not measured
}
REPLICA = {
    "equal": list(100 + SPREAD[::-1]),
    "slower": list(130 + SPREAD),
    "nudged": list(101 + 0.05 * SPREAD),
    "noisy": [85.0, 125.0],
    "lonely": [100.0],
}


def table(margin: float = 0.05) -> pd.DataFrame:
    return replication_table(
        tidy(ORIGINAL, "orig"),
        tidy(REPLICA, "rep", failed={"lonely": 3}),
        response="wall_time_s",
        margin=margin,
        alpha=0.05,
    )


def row(t: pd.DataFrame, level: str) -> pd.Series:
    return t.set_index("cfg").loc[level]


def test_verdicts_on_known_truth():
    t = table()
    assert list(t.columns) == ["cfg", *TABLE_COLUMNS]
    assert dict(zip(t.cfg, t.verdict)) == {
        "equal": "reproduced (equivalent)",
        "slower": "changed",
        "nudged": "negligible difference",
        "noisy": "inconclusive",
        "lonely": "not measured",
    }
    assert dict(zip(t.cfg, t.equivalence))["lonely"] == ""
    assert "the replica has 1 successful run" in row(t, "lonely").note
    assert t.attrs["correction"] == {"method": "holm", "family": 4}


def test_ratio_and_its_interval():
    t = table()
    eq, slow = row(t, "equal"), row(t, "slower")
    assert eq.ratio == pytest.approx(1.0) and slow.ratio == pytest.approx(1.30)
    # the equivalent configuration's interval lies inside 1 ± margin, the changed one's far above it
    assert 0.95 < eq.ratio_low < 1 < eq.ratio_high < 1.05
    assert slow.ratio_low > 1.05
    assert (row(t, "lonely").n_original, row(t, "lonely").n_replica) == (10, 1)
    assert np.isnan(row(t, "lonely").ratio_low)


def test_p_values_match_statsmodels_and_holm_matches_r():
    t = table()
    for level in ("equal", "slower", "nudged", "noisy"):
        a, b = np.array(REPLICA[level]), np.array(ORIGINAL[level])
        m = 0.05 * b.mean()
        # statsmodels: ttost_ind(replica, original, -m, m, usevar="unequal")[0]
        assert row(t, level).p_tost == pytest.approx(ttost_ind(a, b, -m, m, usevar="unequal")[0], rel=1e-9)
    # R: p.adjust(p, "holm") = pmin(1, cummax((n - i + 1) * sort(p))) over the 4 tested configurations
    tested = t[t.verdict != "not measured"]
    p = tested.p_tost.to_numpy()
    o = np.argsort(p)
    expected = np.empty(4)
    expected[o] = np.minimum(1, np.maximum.accumulate((4 - np.arange(4)) * p[o]))
    assert tested.p_tost_holm.to_numpy() == pytest.approx(expected)


def test_holm_can_turn_a_verdict():
    """One configuration with a raw TOST p between alpha/4 and alpha: equivalent alone, inconclusive
    among four (Holm multiplies the smallest p by 4)."""
    orig = {"x": list(100 + 4 * SPREAD[:4])}
    rep = {"x": list(100.5 + 4 * SPREAD[:4])}
    alone = replication_table(tidy(orig, "o"), tidy(rep, "r"), response="wall_time_s", margin=0.05)
    p = float(alone.p_tost.iloc[0])
    assert 0.05 / 4 < p < 0.05 and alone.verdict.iloc[0] == "reproduced (equivalent)"
    many = {f"x{i}": orig["x"] for i in range(4)}
    crowd = replication_table(
        tidy(many, "o"), tidy({k: rep["x"] for k in many}, "r"), response="wall_time_s", margin=0.05
    )
    assert set(crowd.verdict) == {"inconclusive"}


def test_constant_values_are_not_testable_and_said():
    t = replication_table(
        tidy({"c": [5.0, 5.0]}, "o"), tidy({"c": [5.0, 5.0]}, "r"), response="wall_time_s", margin=0.05
    )
    assert t.verdict.iloc[0] == "not testable" and "variation" in t.note.iloc[0]


@pytest.mark.parametrize("margin", [0, -0.1, 5, float("nan"), True, "0.05"])
def test_bad_margin_is_a_config_error(margin):
    with pytest.raises(ConfigError, match="margin must be a fraction"):
        table(margin)


def test_original_without_the_response_is_refused():
    with pytest.raises(ConfigError, match="no successful run measuring 'ops'.*wall_time_s"):
        replication_table(tidy(ORIGINAL, "o"), tidy(REPLICA, "r"), response="ops", margin=0.05)


def test_replica_without_factor_columns_is_refused():
    with pytest.raises(ConfigError, match="replica_tidy: factors"):
        replication_table(
            tidy(ORIGINAL, "o"), tidy(REPLICA, "r").drop(columns="cfg"), response="wall_time_s", margin=0.05
        )


def test_host_differences():
    a = {"f1": {"host": {"kernel": "6.1", "cpus": 8, "smt": "1"}, "backend": {"backend": "local"}}}
    b = {"f2": {"host": {"kernel": "6.8", "cpus": 8}, "backend": {"backend": "docker", "image": "x"}}}
    d = host_differences(a, b)
    assert list(d.columns) == ["fact", "original", "replica", "kind"]
    kinds = dict(zip(d.fact, d.kind))
    assert kinds == {
        "host.kernel": "differs",
        "backend.backend": "differs",
        "host.smt": "only in original",
        "backend.image": "only in replica",
    }
    assert dict(zip(d.fact, d.replica))["host.kernel"] == "6.8"


def runs(effect_a: float, effect_b: float, noise: float = 0.1) -> pd.DataFrame:
    """A 2^2·4 design: y = 10 + effect_a/2·A + effect_b/2·B + small deterministic noise."""
    rows = []
    e = noise * np.array([-1.0, 1.0, -0.5, 0.5])
    for a in (-1, 1):
        for b in (-1, 1):
            for i in range(4):
                rows.append(
                    {
                        "a": "lo" if a < 0 else "hi",
                        "b": "lo" if b < 0 else "hi",
                        "y": 10 + effect_a / 2 * a + effect_b / 2 * b + e[(i + a + b) % 4],
                    }
                )
    return pd.DataFrame(rows)


def test_effects_kept_sign_and_significance():
    levels = {"a": ["lo", "hi"], "b": ["lo", "hi"]}
    e = effects_kept(runs(2.0, 1.0), runs(-2.0, 0.0), factors=["a", "b"], response="y", levels=levels)
    status = dict(zip(e.term, e.status))
    assert status == {"a": "reversed", "b": "lost significance", "a:b": "kept (not significant)"}
    assert dict(zip(e.term, e.kept)) == {"a": False, "b": False, "a:b": True}
    same = effects_kept(runs(2.0, 1.0), runs(2.1, 1.0), factors=["a", "b"], response="y", levels=levels)
    assert dict(zip(same.term, same.status))["a"] == "kept (significant, same sign)"


def test_effects_not_compared_when_a_cell_is_short():
    short = runs(2.0, 1.0).iloc[1:]
    e = effects_kept(runs(2.0, 1.0), short, factors=["a", "b"], response="y")
    assert e.empty and "no 2^k analysis of the replica" in e.attrs["note"]


# -- the replica's campaign, built from a store's meta (nothing runs) -----------------------------------


def stored(tmp_path, cid: str = "orig", **changes) -> str:
    meta = {
        "campaign_id": cid,
        "design": {"name": "d", "factors": {"vcpus": [1, 2]}, "replications": 4, "seed": 7},
        "backend": "local",
        "backend_options": {"workroot": "/srv/lab", "mounts": [], "isolation": "none"},
        "workload": {
            "name": "command",
            "params": {"argv": ["sleep", "0.05"], "timeout_s": 60},
            "response": "wall_time_s",
        },
        "defaults": {"vcpus": 1, "memory_mb": 256, "affinity": "floating", "count": 1},
        "host": {},
        "testbed": None,
    } | changes
    with Store.for_campaign(tmp_path, cid) as st:
        st.set_meta(**meta)
    return cid


def test_replica_carries_the_design_and_says_what_options_it_drops(tmp_path):
    r = replica_campaign(tmp_path, stored(tmp_path), backend="docker")
    c = r.campaign
    assert c.campaign_id == "orig-on-docker" and c.backend_name == "docker"
    assert c.design.to_dict()["factors"] == {"vcpus": [1, 2]} and c.design.seed == 7
    assert c.design.replications == 4
    assert c.workload.name == "command" and c.workload.params["argv"] == ["sleep", "0.05"]
    assert c.defaults.memory_mb == 256
    # docker takes mounts, not workroot nor isolation
    assert c.backend_options == {"mounts": []}
    dropped = next(n for n in r.notes if "dropped" in n)
    assert "workroot='/srv/lab'" in dropped and "isolation='none'" in dropped
    assert any("kept: mounts=[]" in n for n in r.notes)


def test_same_backend_keeps_every_option(tmp_path):
    r = replica_campaign(tmp_path, stored(tmp_path), backend="local", campaign_id="again")
    assert r.campaign.backend_options == {"workroot": "/srv/lab", "mounts": [], "isolation": "none"}
    assert r.notes == []


@pytest.mark.parametrize(
    "kw,changes,match",
    [
        ({}, {}, "say where to run the replica"),
        ({"backend": "docker", "campaign_id": "orig"}, {}, "its own campaign id"),
        ({"backend": "docker"}, {"imported": {"files": []}}, "imported from another tool"),
        (
            {"backend": "docker"},
            {"design": {"name": "d", "factors": {"platform": ["a", "b"]}, "replications": 2, "seed": 1}},
            "varies 'platform'",
        ),
        ({"backend": "nosuch"}, {}, "unknown backend 'nosuch'"),
    ],
)
def test_replica_refusals(tmp_path, kw, changes, match):
    cid = stored(tmp_path, **changes)
    with pytest.raises(ConfigError, match=match):
        replica_campaign(tmp_path, cid, **kw)


def test_missing_original_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no campaign 'ghost'"):
        replica_campaign(tmp_path, "ghost", backend="docker")


def test_cli_refuses_a_replicate_without_a_place_to_run(tmp_path, capsys):
    from labkit.cli import main

    cid = stored(tmp_path)
    assert main(["replicate", cid, "--data-dir", str(tmp_path)]) == 2
    assert "say where to run the replica: --backend B" in capsys.readouterr().err
