"""Output caps on the daemon backends (issue 28): a command printing 200 MiB costs the controller
less than 100 MB of memory while its byte totals stay exact. Each measure runs in a child Python
process (its peak RSS, VmHWM, before and after the exec); the local backend's is in
tests/unit/test_output.py."""
from __future__ import annotations

import pytest

from tests.support.exec_memory import check_big, exec_in_child

from .conftest import PREFIX


@pytest.mark.parametrize("backend_name", [pytest.param("docker", marks=pytest.mark.docker),
                                          pytest.param("lxd", marks=pytest.mark.lxd),
                                          pytest.param("ssh", marks=pytest.mark.ssh)])
def test_exec_of_200_mib_keeps_controller_memory_bounded(backend_name):
    check_big(exec_in_child(backend_name, f"{PREFIX}-out-"))
