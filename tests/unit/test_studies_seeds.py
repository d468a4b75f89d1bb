"""labkit.studies.seeds: seed 000's scenarios, label factors, seed 003's stated gains.

Expected values: seed 000 (Maron et al. 2018, 000_8a70f6a90476fa6b.txt) section 2.5 and 3.1
define the scenarios on 8-core hosts (dedicated: 1 VM with the whole host; shared: instances
splitting it, 2 x 4 vCPUs in 3.1; overcommitted: more vCPUs than cores, 6 LINPACK runs of the
shared size in 3.2.3); seed 003 (Maliszewski 2021) section 5.2.2 states the gains checked
against its Table 5.1 (tests/vectors/interconnect_table_5_1.csv).
"""

from pathlib import Path

import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.studies.public_cloud import stated_gains
from labkit.studies.seeds import LabelledDesign, ksm_state, read_reference, scenario_settings
from labkit.workloads import get_workload

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def test_scenarios_on_the_papers_8_core_host():
    assert scenario_settings("dedicated", 8) == {"vcpus": 8, "count": 1}
    assert scenario_settings("shared", 8) == {"vcpus": 4, "count": 2}  # 3.1: 2 x 4 vCPUs
    over = scenario_settings("overcommitted", 8)
    assert over["vcpus"] * over["count"] / 8 >= 1.5  # more vCPUs than cores
    assert scenario_settings("overcommitted", 2) == {"vcpus": 1, "count": 3}
    with pytest.raises(ConfigError, match="scenario 'busy'"):
        scenario_settings("busy", 8)
    with pytest.raises(ConfigError, match="host_cpus"):
        scenario_settings("shared", 0)


def _design(labels, factors=None):
    factors = factors or {"scenario": ["dedicated", "shared"], "threads": [1, 2]}
    return LabelledDesign.with_labels({"factors": factors, "replications": 2, "seed": 3}, labels)


def test_label_factor_carries_its_settings_into_every_run():
    d = _design({"scenario": {"dedicated": {"vcpus": 2, "count": 1}, "shared": {"vcpus": 1, "count": 2}}})
    d.validate_for(get_workload("stream"))
    for run in d.plan():
        assert (run.levels["vcpus"], run.levels["count"]) == (
            (2, 1) if run.levels["scenario"] == "dedicated" else (1, 2)
        )
    assert len(d.plan()) == 8
    other = _design({"scenario": {"dedicated": {"vcpus": 2, "count": 1}, "shared": {"vcpus": 1, "count": 3}}})
    assert other.digest() != d.digest()  # a resume must match the mapping too


def test_label_errors_name_the_problem():
    with pytest.raises(ConfigError, match="no settings for level 'shared'"):
        _design({"scenario": {"dedicated": {}}})
    with pytest.raises(ConfigError, match="not allowed"):
        _design({"scenario": {"dedicated": {"threads": 1}, "shared": {}}})  # a design factor
    with pytest.raises(ConfigError, match="not a factor"):
        _design({"nope": {}})
    d = _design({"scenario": {"dedicated": {"noise": "loud"}, "shared": {}}})
    with pytest.raises(ConfigError, match="'noise'.*loud"):
        d.validate_for(get_workload("stream"))
    d = _design({"scenario": {"dedicated": {"vcpus": 0}, "shared": {}}})
    with pytest.raises(ConfigError, match="vcpus"):
        d.validate_for(get_workload("stream"))
    d = _design({"threads": {1: {}, 2: {}}}, {"threads": [1, 2]})
    with pytest.raises(ConfigError, match="also a parameter"):
        d.validate_for(get_workload("stream"))


def test_neighbours_label_without_settings_passes_validation():
    d = _design({"neighbours": {0: {}, 1: {}, 3: {}}}, {"neighbours": [0, 1, 3], "n": [100, 200]})
    d.validate_for(get_workload("hpcc"))
    assert {r.levels["neighbours"] for r in d.plan()} == {0, 1, 3}


def test_stated_gains_match_table_5_1():
    times = pd.read_csv(VECTORS / "interconnect_table_5_1.csv", comment="#")
    # section 5.2.2: "IS shows the higher gain using the F8 instance (up to ≈ 491 % compared to the
    # A10 instance and ≈ 28 % compared to the DS4_v2)"; EP on DS4_v2 "≈ 7 % compared to the A10 and
    # ≈ 9.2 % to the F8"
    gains = pd.DataFrame(
        {
            "app": ["IS", "IS", "EP", "EP"],
            "faster": ["F8", "F8", "DS4_v2", "DS4_v2"],
            "slower": ["A10", "DS4_v2", "A10", "F8"],
            "stated_pct": [491, 28, 7, 9.2],
        }
    )
    out = stated_gains(times, gains)
    assert out.computed_pct.tolist() == pytest.approx([491, 28, 7, 9.2], abs=0.7)
    assert (out.ci_low < out.computed_pct).all() and (out.computed_pct < out.ci_high).all()
    assert (out.p < 1e-6).all()
    with pytest.raises(ConfigError, match="no Table 5.1 row"):
        stated_gains(times, gains.assign(slower="H100"))


def test_read_reference_needs_a_citation(tmp_path):
    table, cite = read_reference(VECTORS / "interconnect_prices.csv", ["instance"])
    assert "Table 4.1" in cite and len(table) == 3
    bare = tmp_path / "bare.csv"
    bare.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="no citation"):
        read_reference(bare, ["a"])
    with pytest.raises(ConfigError, match="missing"):
        read_reference(VECTORS / "interconnect_prices.csv", ["nope"])


def test_ksm_state_reads_counters(tmp_path):
    (tmp_path / "run").write_text("1\n")
    (tmp_path / "pages_sharing").write_text("42\n")
    assert ksm_state(tmp_path) == {"run": 1, "pages_sharing": 42}
    assert ksm_state(tmp_path / "absent") == {}


def test_ksm_factor_levels_and_where_it_may_run(tmp_path):
    """A ``ksm`` factor takes distinct on/off levels, is crossed with the scenarios by
    scenario_design, and is refused where KSM would be switched on the wrong host."""
    from labkit.studies.seeds import SeedCampaign, check_ksm_levels, scenario_design

    assert check_ksm_levels(["off", "on"]) == ["off", "on"]
    for bad in (["on", "on"], ["yes"], []):
        with pytest.raises(ConfigError, match="factor 'ksm': levels"):
            check_ksm_levels(bad)
    bench = {"scenarios": ["dedicated", "shared"]}
    d = scenario_design(bench, 2, replications=1, seed=1, name="d", ksm=["off", "on"])
    assert sorted((c["scenario"], c["ksm"]) for c in d.configurations()) == [
        ("dedicated", "off"),
        ("dedicated", "on"),
        ("shared", "off"),
        ("shared", "on"),
    ]
    assert "ksm" not in scenario_design(bench, 2, replications=1, seed=1, name="d").factor_names
    with pytest.raises(ConfigError, match="parameter ksm_levels"):
        scenario_design(bench, 2, replications=1, seed=1, name="d", ksm=["of"])
    for backend, opts in (("ssh", {}), ("libvirt", {"uri": "qemu+ssh://h/system"})):
        with pytest.raises(ConfigError, match="switches KSM on this host"):
            SeedCampaign(
                d,
                backend=backend,
                workload="command",
                workload_params={"argv": ["true"]},
                data_dir=tmp_path,
                backend_options=opts,
            )


def test_threads_factor_crossed_with_the_scenarios():
    """Seed 000's threads sweep (section 3.1: up to 8 threads, one per core/vCPU) as a factor
    beside ``scenario``, checked against the workload's threads parameter; refused for the
    network test, whose workload takes no threads."""
    from labkit.studies.seeds import deployment_benchmarks, scenario_design
    from labkit.studies.sweeps import paper_sweep, sweep_levels
    from labkit.workloads import get_workload

    b = deployment_benchmarks(scenarios=["dedicated", "shared", "overcommitted"])
    threads, _ = sweep_levels("paper", paper_sweep("000", "dedicated", "threads"), limit=2)
    d = scenario_design(b["cpu"], 2, replications=1, seed=1, name="d", threads=threads)
    assert sorted((c["scenario"], c["threads"], c["vcpus"], c["count"]) for c in d.configurations()) == [
        ("dedicated", 1, 2, 1),
        ("dedicated", 2, 2, 1),
        ("overcommitted", 1, 1, 3),
        ("overcommitted", 2, 1, 3),
        ("shared", 1, 1, 2),
        ("shared", 2, 1, 2),
    ]
    d.validate_for(get_workload("sysbench", **b["cpu"]["params"]))
    with pytest.raises(ConfigError, match="one level is not a sweep"):
        scenario_design(b["cpu"], 2, replications=1, seed=1, name="d", threads=[2])
    bad = scenario_design(b["cpu"], 2, replications=1, seed=1, name="d", threads=[0, 1])
    with pytest.raises(ConfigError, match="threads"):
        bad.validate_for(get_workload("sysbench", **b["cpu"]["params"]))
    with pytest.raises(ConfigError, match="workload 'iperf3' takes no threads"):
        scenario_design(b["network"], 2, replications=1, seed=1, name="d", threads=[1, 2])
    assert "threads" not in scenario_design(b["cpu"], 2, replications=1, seed=1, name="d").factor_names


def test_platforms_as_a_factor_of_the_scenario_design_and_ksm_on_this_machine(tmp_path):
    """scenario_design(platforms=...): a platform factor first, crossed with the scenarios (and KSM),
    every platform in one plan; one platform is the backend, not a factor. A KSM campaign with a
    platform factor runs on a testbed of this machine alone and is accepted there, refused with a
    remote host or a remote URI."""
    from labkit.studies.seeds import SeedCampaign, deployment_benchmarks, scenario_design

    b = deployment_benchmarks(scenarios=["dedicated", "shared"])
    d = scenario_design(
        b["ksm"], 2, replications=1, seed=1, name="d", ksm=["off", "on"], platforms=["local", "lxd"]
    )
    assert d.factor_names[0] == "platform"
    assert sorted((c["platform"], c["scenario"], c["ksm"], c["count"]) for c in d.configurations()) == sorted(
        (p, s, k, n)
        for p in ("local", "lxd")
        for s, n in (("dedicated", 1), ("shared", 2))
        for k in ("off", "on")
    )
    assert (
        "platform"
        not in scenario_design(
            b["cpu"], 2, replications=1, seed=1, name="d", platforms=["local"]
        ).factor_names
    )
    for bad in ("local", [], ["local", "local"]):
        with pytest.raises(ConfigError, match="platforms must be a list of distinct"):
            scenario_design(b["cpu"], 2, replications=1, seed=1, name="d", platforms=bad)
    assert b["ksm"]["workload"] == "stream" and b["ksm"]["params"]["mergeable"] is True
    c = SeedCampaign(
        d, backend="local", workload="stream", workload_params=b["ksm"]["params"], data_dir=tmp_path
    )
    assert c.testbed is not None and c.workload.params["mergeable"] is True
    remote = {
        "name": "t",
        "hosts": [
            {"name": "c", "platforms": ["local", "lxd"]},
            {"name": "h", "address": "192.0.2.1", "platforms": ["lxd"]},
        ],
    }
    here_uri = {
        "name": "t",
        "hosts": [{"name": "c"}],
        "platforms": {"lxd": {"backend": "libvirt", "uri": "qemu+ssh://h/system"}},
    }
    for bed in (remote, here_uri):
        with pytest.raises(ConfigError, match="switches KSM on this host"):
            SeedCampaign(
                d,
                backend="local",
                testbed=bed,
                workload="stream",
                workload_params=b["ksm"]["params"],
                data_dir=tmp_path,
            )


def test_deployment_testbed_campaign_platforms_and_the_ksm_check_in_words(tmp_path):
    """The testbed of a notebook 03 campaign declares each platform's options and LINPACK's study
    image; campaign_platforms reads a stored campaign's platform factor (else its backend);
    ksm_check_statement counts the KSM on runs whose treatment check says verified."""
    import pandas as pd

    from labkit.store import Store
    from labkit.studies.seeds import campaign_platforms, deployment_testbed, ksm_check_statement

    assert deployment_testbed(["local", "lxd"]) is None
    bed = deployment_testbed(
        ["local", "lxd", "libvirt"], {"libvirt": {"uri": "qemu:///system"}}, variant="study"
    )
    assert bed["platforms"] == {
        "lxd": {"backend": "lxd", "image": "labkit-debian-12-study"},
        "libvirt": {"backend": "libvirt", "uri": "qemu:///system", "image": "study"},
    }
    assert campaign_platforms(tmp_path, "absent") == []
    for cid, meta in (
        ("both", {"backend": "local", "design": {"factors": {"platform": ["local", "lxd"]}}}),
        ("one", {"backend": "lxd", "design": {"factors": {"scenario": ["shared"]}}}),
    ):
        (tmp_path / cid).mkdir()
        with Store(tmp_path / cid / "store.sqlite") as st:
            st.set_meta(**meta)
    assert campaign_platforms(tmp_path, "both") == ["local", "lxd"]
    assert campaign_platforms(tmp_path, "one") == ["lxd"]
    ksm = pd.DataFrame(
        {
            "platform": ["local"] * 4 + ["libvirt"] * 2,
            "ksm_level": ["on", "on", "on", "off", "on", "on"],
            "ksm_verified": [True, False, True, True, None, None],
            "ksm_merged": [120, 0, 2257, 0, None, None],
        }
    )
    assert ksm_check_statement(ksm) == (
        "local: KSM on merged up to 2257 pages in 2 of 3 runs; libvirt: no treatment check recorded in its 2 KSM "
        "on runs (stored before labkit checked treatments): whether KSM took is not known."
    )
    assert ksm_check_statement(ksm.assign(ksm_level=None)) == "No run had KSM switched on (no `ksm` factor)."
