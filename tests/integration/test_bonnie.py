"""bonnie++ on a real local instance: block write and rewrite come back as positive KiB/s
(never a nominal value: the machine is shared)."""

from __future__ import annotations

import shutil

import pytest

from labkit.backends import get_backend, teardown
from labkit.core.instance import InstanceSpec
from labkit.workloads import get_workload

pytestmark = pytest.mark.root


def test_bonnie_on_local():
    if shutil.which("bonnie++") is None:
        pytest.skip("bonnie++ is not installed (scripts/setup-tools.sh)")
    be = get_backend("local")
    insts = []
    try:
        insts = be.provision(InstanceSpec(vcpus=1, memory_mb=256, count=1), prefix="labkit-test-bonnie--")
        wl = get_workload("bonnie", size_mb=256)
        wl.prepare(insts[0])
        rows = {r.metric: r for r in wl.run(insts[0], {})}
        assert rows["write_kib_per_s"].value > 0 and rows["write_kib_per_s"].unit == "KiB/s"
        assert set(rows) <= {"write_kib_per_s", "rewrite_kib_per_s", "read_kib_per_s", "seeks_per_s"}
        assert "bonnie++" in wl.version(insts[0])
    finally:
        assert teardown(insts) == []
        be.close()
