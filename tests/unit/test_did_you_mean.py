"""A misspelt name gets the closest known one (issue 46): backends (``labkit run --backend``,
``Campaign(backend=...)``, a testbed platform's ``backend:``, a design's ``platform`` level),
factor levels (affinity, noise, a workload's string parameter), design keys, factor names and
workloads. The suggestion is :func:`labkit.errors.did_you_mean` (difflib), which these tests do
not call: they check the words a user reads."""

import pytest

from labkit.backends import backend_class, get_backend
from labkit.cli import main
from labkit.design import Design, Factor
from labkit.errors import ConfigError
from labkit.run.campaign import Campaign
from labkit.run.platforms import parse_platforms, resolve
from labkit.workloads import get_workload

DESIGN = "name: dym\nfactors:\n  vcpus: [1, 2]\nseed: 1\n"


def test_unknown_backend_names_the_closest_and_lists_the_known_ones():
    with pytest.raises(ConfigError) as exc:
        backend_class("lcoal")
    assert str(exc.value) == (
        "unknown backend 'lcoal' (did you mean 'local'?); available: local, docker, "
        "lxd, libvirt, ssh, ssh-hosts, cloud, slurm"
    )
    with pytest.raises(ConfigError, match=r"unknown backend 'dokcer' \(did you mean 'docker'\?\)"):
        get_backend("dokcer")
    with pytest.raises(ConfigError, match=r"unknown backend 'zzzz'; available: local"):  # nothing close
        backend_class("zzzz")


def test_labkit_run_with_a_misspelt_backend(tmp_path, capsys):
    design = tmp_path / "d.yaml"
    design.write_text(DESIGN)
    rc = main(
        [
            "run",
            str(design),
            "--backend",
            "lcoal",
            "--workload",
            "nqueens",
            "--no-quarantine",
            "--data-dir",
            str(tmp_path / "data"),
        ]
    )
    assert rc == 2
    assert (
        "unknown backend 'lcoal' (did you mean 'local'?); available: local, docker" in capsys.readouterr().err
    )
    assert not (tmp_path / "data" / "dym-1").exists()  # refused before any store


def test_campaign_with_a_misspelt_backend(tmp_path):
    campaign = Campaign(
        Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1}),
        backend="lxdd",
        workload="nqueens",
        data_dir=tmp_path,
    )
    with pytest.raises(ConfigError, match=r"unknown backend 'lxdd' \(did you mean 'lxd'\?\)"):
        campaign.run()


def test_misspelt_platform_level_and_testbed_backend():
    with pytest.raises(
        ConfigError, match=r"platform 'dockr' is neither declared .* \(did you mean 'docker'\?\)"
    ):
        resolve("dockr", {})
    declared = parse_platforms({"kvm": {"backend": "libvirt"}})
    with pytest.raises(ConfigError, match=r"platform 'kmv' .* \(did you mean 'kvm'\?\)"):
        resolve("kmv", declared)
    with pytest.raises(
        ConfigError,
        match=r"platforms.kvm.backend: 'libvrit' is not a backend "
        r"\(did you mean 'libvirt'\?\); allowed: local",
    ):
        parse_platforms({"kvm": {"backend": "libvrit"}})


def test_misspelt_levels_keys_factors_and_workloads():
    with pytest.raises(
        ConfigError, match=r"level 'pinnd' not allowed; use one of .* \(did you mean 'pinned'\?\)"
    ):
        Factor("affinity", ["floating", "pinnd"])
    d = Design.from_dict({"factors": {"noise": ["none", "cpuu"]}, "seed": 1})
    with pytest.raises(
        ConfigError, match=r"factor 'noise': level 'cpuu' not allowed; .* \(did you mean 'cpu'\?\)"
    ):
        d.validate_for(get_workload("nqueens"))
    d = Design.from_dict({"factors": {"memory_oper": ["read", "wirte"]}, "seed": 1})
    with pytest.raises(
        ConfigError,
        match=r"'wirte' is not allowed; expected one of read, write, none "
        r"\(did you mean 'write'\?\)",
    ):
        d.validate_for(get_workload("sysbench"))
    with pytest.raises(
        ConfigError, match=r"unknown key\(s\) 'replication' \(did you mean 'replications'\?\)"
    ):
        Design.from_dict({"factors": {"vcpus": [1, 2]}, "replication": 3})
    d = Design.from_dict({"factors": {"bord": [8, 10]}, "seed": 1})
    with pytest.raises(ConfigError, match=r"design factor 'bord' .* \(did you mean 'board'\?\)"):
        d.validate_for(get_workload("nqueens"))
    with pytest.raises(ConfigError, match=r"unknown workload 'nqeens' \(did you mean 'nqueens'\?\)"):
        get_workload("nqeens")
