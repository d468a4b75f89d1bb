import pytest

from labkit.core.instance import InstanceSpec
from labkit.errors import ConfigError


def test_pinned_placement_is_deterministic_and_wraps_when_overcommitted():
    spec = InstanceSpec(vcpus=2, count=2, affinity="pinned")
    assert spec.placement(4) == [[0, 1], [2, 3]]
    assert spec.placement(2) == [[0, 1], [0, 1]]  # overcommitted: instances share CPUs
    assert InstanceSpec(vcpus=3, count=1).placement(2) == [[0, 1, 0]]
    assert spec.overcommitted(2) and not spec.overcommitted(4)


@pytest.mark.parametrize(
    "kw", [{"vcpus": 0}, {"memory_mb": -1}, {"count": 1.5}, {"affinity": "x"}, {"vcpus": True}]
)
def test_bad_specs(kw):
    with pytest.raises(ConfigError):
        InstanceSpec(**kw)


def test_from_levels_uses_defaults_for_missing_host_factors():
    s = InstanceSpec.from_levels({"vcpus": 2, "board": 10}, InstanceSpec(memory_mb=300))
    assert (s.vcpus, s.memory_mb, s.affinity, s.count) == (2, 300, "floating", 1)
