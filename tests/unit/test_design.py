"""Design validation, standard order and seeded randomization."""

import pytest

from labkit.design import Design, Factor
from labkit.errors import ConfigError
from labkit.workloads import get_workload

BASE = {
    "factors": {
        "vcpus": [1, 2],
        "memory_mb": [256, 512],
        "affinity": ["floating", "pinned"],
        "count": [1, 2],
    },
    "replications": 3,
    "seed": 7,
}


def test_full_factorial_yates_order_first_factor_fastest():
    d = Design.from_dict({"factors": {"a": [1, 2], "b": ["x", "y"], "c": [0, 5]}, "seed": 1})
    cfgs = d.configurations()
    assert [(c["a"], c["b"], c["c"]) for c in cfgs] == [
        (1, "x", 0),
        (2, "x", 0),
        (1, "y", 0),
        (2, "y", 0),
        (1, "x", 5),
        (2, "x", 5),
        (1, "y", 5),
        (2, "y", 5),
    ]
    assert [r["a"] for r in d.coded()] == [-1, 1, -1, 1, -1, 1, -1, 1]


def test_general_factorial_with_multilevel_factor():
    d = Design.from_dict(
        {"factors": {"vcpus": [1, 2, 4], "affinity": ["floating", "pinned"]}, "replications": 2, "seed": 3}
    )
    assert len(d.configurations()) == 6 and len(d.plan()) == 12
    assert not d.is_two_level


def test_plan_holds_every_run_once_and_same_seed_same_order():
    d1, d2 = Design.from_dict(BASE), Design.from_dict(BASE)
    p1, p2 = d1.plan(), d2.plan()
    assert [r.run_id for r in p1] == [r.run_id for r in p2]
    assert len({r.run_id for r in p1}) == 16 * 3
    assert sorted((r.config, r.replicate) for r in p1) == [(c, r) for c in range(16) for r in (1, 2, 3)]
    other = Design.from_dict({**BASE, "seed": 8}).plan()
    assert [r.run_id for r in other] != [r.run_id for r in p1]
    assert [r.order for r in p1] == list(range(48))


def test_randomized_not_standard_order():
    plan = Design.from_dict(BASE).plan()
    assert [r.config for r in plan] != sorted(r.config for r in plan)


def test_missing_seed_is_drawn_and_recorded():
    d = Design.from_dict({"factors": {"vcpus": [1, 2]}})
    assert isinstance(d.seed, int) and d.to_dict()["seed"] == d.seed


@pytest.mark.parametrize(
    "data, words",
    [
        ({**BASE, "replication": 2}, ["unknown key", "replication", "replications"]),
        ({**BASE, "factors": {"vcpus": [1]}}, ["vcpus", "at least 2 levels"]),
        ({**BASE, "replications": 0}, ["replications", "from 1 to"]),
        ({**BASE, "replications": 1.5}, ["replications"]),
        ({**BASE, "factors": {"vcpus": [1, 2.5]}}, ["vcpus", "2.5", "integer"]),
        ({**BASE, "factors": {"vcpus": [1, "two"]}}, ["vcpus", "two"]),
        ({**BASE, "factors": {"affinity": ["floating", "sometimes"]}}, ["affinity", "sometimes", "pinned"]),
        ({**BASE, "factors": {"vcpus": [1, 1]}}, ["duplicate levels"]),
        ({**BASE, "factors": {"bad name": [1, 2]}}, ["bad name"]),
        ({**BASE, "factors": []}, ["factors"]),
        ({**BASE, "seed": "abc"}, ["seed"]),
    ],
)
def test_bad_designs_name_the_key(data, words):
    with pytest.raises(ConfigError) as err:
        Design.from_dict(data)
    for w in words:
        assert w in str(err.value)


def test_duplicate_factor_names_rejected():
    with pytest.raises(ConfigError, match="duplicate factor name.*vcpus"):
        Design([Factor("vcpus", [1, 2]), Factor("vcpus", [2, 4])])


def test_memory_below_workload_need_rejected():
    d = Design.from_dict({**BASE, "factors": {"memory_mb": [4, 512]}})
    with pytest.raises(ConfigError, match=r"memory_mb.*\[4\].*nqueens"):
        d.validate_for(get_workload("nqueens"))


def test_unknown_factor_for_workload_rejected():
    d = Design.from_dict({**BASE, "factors": {"vcpus": [1, 2], "colour": ["red", "blue"]}})
    with pytest.raises(ConfigError, match="colour.*neither a host factor.*board"):
        d.validate_for(get_workload("nqueens"))
    ok = Design.from_dict({**BASE, "factors": {"vcpus": [1, 2], "board": [8, 10]}})
    ok.validate_for(get_workload("nqueens"))


def test_affinity_aliases_from_the_paper():
    d = Design.from_dict({"factors": {"affinity": ["no", "yes"]}, "seed": 1})
    assert d.factors[0].levels == ("floating", "pinned")


def test_from_yaml_errors_name_the_file(tmp_path):
    good = tmp_path / "d.yaml"
    good.write_text("factors:\n  vcpus: [1, 2]\n  count: [1, 2]\nreplications: 2\nseed: 5\n")
    d = Design.from_yaml(good)
    assert d.replications == 2 and d.factor_names == ["vcpus", "count"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("factors:\n  vcpus: [1]\n")
    with pytest.raises(ConfigError, match="bad.yaml.*vcpus"):
        Design.from_yaml(bad)
    broken = tmp_path / "broken.yaml"
    broken.write_text("factors: [\n")
    with pytest.raises(ConfigError, match="broken.yaml.*YAML"):
        Design.from_yaml(broken)
    with pytest.raises(ConfigError, match="missing.yaml"):
        Design.from_yaml(tmp_path / "missing.yaml")


def test_digest_changes_with_levels_not_description():
    a = Design.from_dict(BASE)
    b = Design.from_dict({**BASE, "description": "other words"})
    c = Design.from_dict({**BASE, "factors": {**BASE["factors"], "count": [1, 3]}})
    assert a.digest() == b.digest() != c.digest()


# -- issue 47, finding 8: bounds on the design numbers that commit time ----------------------------


def test_a_telemetry_interval_longer_than_a_minute_is_refused_with_the_range_and_where():
    """``telemetry: 1000000000`` (31 years) was accepted and the campaign waited on its first
    interval before its first run: the interval is bounded (0.05 s to 60 s), the error names the
    design and the range."""
    base = {"factors": {"vcpus": [1, 2]}, "seed": 1}
    assert Design.from_dict({**base, "telemetry": 60}).telemetry == 60.0  # the longest allowed
    for value in (1000000000, 60.5):
        with pytest.raises(ConfigError) as err:
            Design.from_dict({**base, "telemetry": value}, source="d.yaml")
        assert str(err.value) == (
            "d.yaml: 'telemetry': expected 'off', 'on' or an interval in seconds from "
            f"0.05 to 60 (e.g. 1.0), got {value!r}"
        )


def test_adaptive_max_is_at_most_1000_runs_per_configuration():
    """``replications: {max: 10000}`` was accepted with a ``target_ci`` that may never be met:
    ``max`` is bounded (1000 runs of one configuration), the error says why and where."""

    def design(mx):
        return Design.from_dict(
            {
                "factors": {"vcpus": [1, 2]},
                "seed": 1,
                "replications": {"target_ci": 0.02, "min": 3, "max": mx},
            },
            source="d.yaml",
        )

    assert design(1000).adaptive["max"] == 1000
    for mx in (1001, 10000):
        with pytest.raises(ConfigError) as err:
            design(mx)
        assert str(err.value) == (
            "d.yaml: replications: max must be an integer from min (3) to 1000 (runs of "
            "one configuration at most, the campaign's worst case: configurations x max), "
            f"got {mx}"
        )


def test_quarantine_states_its_cap_of_one_rerun_per_suspect_run():
    """Quarantine re-runs are bounded: each suspect run runs again at most once (a re-run flagged
    suspect again stays), a constant the design module states; ``quarantine`` itself must be a
    true/false flag."""
    from labkit.design import options

    assert options.QUARANTINE_RERUNS == 1
    with pytest.raises(ConfigError, match=r"'quarantine' must be true or false, got 3"):
        Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1, "quarantine": 3})
