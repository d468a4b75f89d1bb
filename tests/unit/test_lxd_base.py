"""labkit.backends.lxd.base: the base's name and readiness rules (the real LXD side is in
tests/integration/test_lxd.py)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from labkit.backends.lxd import base as lxd_base

SHIFTED = '[{"Isuid":true,"Isgid":false,"Hostid":100000,"Nsid":0,"Maprange":1000000000}]'


def test_base_name_is_a_valid_lxd_name_per_image_and_pool_and_never_a_campaigns():
    a = lxd_base.base_name("f" * 64, "labkit-btrfs")
    assert re.fullmatch(r"lkbase-[0-9a-f]{16}", a)
    assert a == lxd_base.base_name("f" * 64, "labkit-btrfs")
    assert a != lxd_base.base_name("f" * 64, "default") != lxd_base.base_name("e" * 64, "default")
    assert lxd_base.base_name("f" * 64, "a pool_with odd/chars").startswith("lkbase-")
    assert not a.startswith("labkit-")  # no campaign's cleanup (labkit-<id>-...) matches it


def test_only_a_stopped_shifted_base_is_ready():
    assert lxd_base.is_ready({"volatile.last_state.idmap": SHIFTED}, "Stopped")
    assert not lxd_base.is_ready({"volatile.last_state.idmap": SHIFTED}, "Running")  # being made
    assert not lxd_base.is_ready({"volatile.last_state.idmap": "[]"}, "Stopped")  # never started
    assert not lxd_base.is_ready({}, "Stopped")


def test_age_reads_lxds_nanosecond_utc_timestamps():
    now = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)
    assert lxd_base.age_s("2026-11-24T11:58:00.123456789Z", now) == 120.0
    assert lxd_base.age_s("2026-11-24T12:00:00Z", now) == 0.0
