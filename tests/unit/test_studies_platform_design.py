"""labkit.studies.platform_design (every platform in one randomized plan) and untimed_share
(the part of a run outside its timed stages), notebook 04's helpers."""

import pandas as pd
import pytest

from labkit.design import Design
from labkit.errors import ConfigError
from labkit.studies import platform_design, untimed_share


def test_platforms_become_the_first_factor_crossed_with_the_others():
    design, fixed = platform_design(
        "pipeline",
        ["local", "lxd"],
        {"app": ["dedup", "ferret"], "threads": [1, 2]},
        replications=3,
        seed=5,
        description="stand-in",
    )
    assert list(design["factors"]) == ["platform", "app", "threads"]
    assert design["factors"]["platform"] == ["local", "lxd"] and fixed == {}
    plan = Design.from_dict(design)
    assert len(plan.factors) == 3 and design["replications"] == 3 and design["description"] == "stand-in"


def test_one_platform_is_the_backend_and_one_level_is_a_parameter():
    design, fixed = platform_design(
        "p", ["local"], {"app": ["dedup", "ferret"], "threads": [2]}, replications=2, seed=1
    )
    assert design["factors"] == {"app": ["dedup", "ferret"]} and fixed == {"threads": 2}
    assert "description" not in design


@pytest.mark.parametrize(
    "platforms, factors, words",
    [
        ([], {"app": ["dedup", "ferret"]}, "no platform"),
        (["local", "local"], {"app": ["dedup", "ferret"]}, "twice"),
        (["local", "lxd"], {"app": []}, "'app' needs at least one level"),
        (["local"], {"app": ["dedup"]}, "nothing varies"),
    ],
)
def test_bad_designs_say_what_is_wrong(platforms, factors, words):
    with pytest.raises(ConfigError, match=words):
        platform_design("p", platforms, factors, replications=2, seed=1)


def _tidy(rows):
    out = []
    for run_id, platform, status, metrics in rows:
        for m, v in metrics.items():
            for inst, val in enumerate(v if isinstance(v, list) else [v]):
                out.append(
                    {
                        "run_id": run_id,
                        "platform": platform,
                        "app": "dedup",
                        "status": status,
                        "metric": m,
                        "value": val,
                        "instance": inst,
                    }
                )
    return pd.DataFrame(out)


def test_untimed_share_is_the_wall_time_less_the_stages_per_group():
    tidy = _tidy(
        [
            ("r1", "local", "ok", {"wall_time_s": 2.0, "stage_a_s": 1.0, "stage_b_s": 0.5, "chunks": 9.0}),
            ("r2", "local", "ok", {"wall_time_s": 4.0, "stage_a_s": 2.0, "stage_b_s": 1.5}),
            # two instances: each metric is their mean (wall 3, stages 2)
            ("r3", "lxd", "ok", {"wall_time_s": [2.0, 4.0], "stage_a_s": [1.0, 3.0]}),
            ("r4", "lxd", "failed", {"wall_time_s": 100.0, "stage_a_s": 1.0}),  # left out
        ]
    )
    got = untimed_share(tidy, ["platform", "app"]).set_index("platform")
    # local: outside 0.5 and 0.5 s of 2 and 4 s; lxd: 1 s of 3 s
    assert got.loc["local", "runs"] == 2 and got.loc["local", "wall_s"] == pytest.approx(3.0)
    assert got.loc["local", "stages_s"] == pytest.approx(2.5)
    assert got.loc["local", "outside_s"] == pytest.approx(0.5)
    assert got.loc["local", "outside_pct"] == pytest.approx(100 * 0.5 / 3.0)
    assert got.loc["lxd", "runs"] == 1 and got.loc["lxd", "outside_s"] == pytest.approx(1.0)
    assert got.loc["lxd", "outside_pct"] == pytest.approx(100 / 3)


def test_untimed_share_refuses_results_without_stages_or_columns():
    tidy = _tidy([("r1", "local", "ok", {"wall_time_s": 2.0})])
    with pytest.raises(ConfigError, match="stage_"):
        untimed_share(tidy, ["platform"])
    with pytest.raises(ConfigError, match="no column threads"):
        untimed_share(tidy, ["threads"])
