"""Seed 003's ping-pong message-size sweep, tiny: the ``pingpong`` workload across two ``local``
instances on the run's private network, ``message_bytes`` as a factor with three of the seed's
levels (data/reference/sweeps.csv: 1 B to 4 MiB), real MPI (Debian's openmpi-bin), real store."""

from __future__ import annotations

import shutil

import pytest

from labkit.core.instance import InstanceSpec
from labkit.run.campaign import Campaign
from labkit.studies.sweeps import paper_sweep, sweep_levels

pytestmark = [pytest.mark.root, pytest.mark.network]


def test_message_size_sweep_on_local(tmp_path):
    if shutil.which("mpirun") is None or shutil.which("mpicc") is None:
        pytest.fail(
            "mpirun/mpicc missing: apt-get install openmpi-bin libopenmpi-dev (scripts/setup-core.sh)"
        )
    sizes, note = sweep_levels([1, 1024, 65536], paper_sweep("003", "pingpong", "message_bytes"))
    assert "1 Byte up to 4 MBytes" in note and "4194304" in note  # the seed's range, cited
    design = {"name": "pingpong-sweep", "factors": {"message_bytes": sizes}, "replications": 2, "seed": 3}
    st = Campaign(
        design,
        backend="local",
        workload="pingpong",
        workload_params={"timeout_s": 300},
        defaults=InstanceSpec(count=2, memory_mb=256),
        campaign_id="pp-sweep",
        data_dir=tmp_path / "data",
        progress=False,
        run_timeout=600,
    ).run()
    runs = st.runs()
    assert len(runs) == 6 and set(runs.status) == {"ok"}, runs[["status", "error"]]
    assert {m["network"]["mode"] for m in runs.metadata} == {"private"}
    tidy = st.tidy()
    assert sorted(set(tidy.message_bytes)) == [1, 1024, 65536]
    for metric in ("pingpong_latency_us", "pingpong_bandwidth_mb_per_s", "wall_time_s"):
        per = tidy[tidy.metric == metric].groupby("message_bytes").value.count()
        assert per.to_dict() == {1: 2, 1024: 2, 65536: 2}, (metric, per)
    lat = tidy[tidy.metric == "pingpong_latency_us"]
    bw = tidy[tidy.metric == "pingpong_bandwidth_mb_per_s"]
    # physical bounds only (a loaded 2-core machine): a round trip over TCP takes more than 1 us;
    # bandwidth = size / one-way time, so the two figures of a run agree
    assert (lat.value > 1).all() and (bw.value > 0).all() and (bw.value < 100_000).all()
    both = lat.merge(bw, on=["run_id", "message_bytes"], suffixes=("_lat", "_bw"))
    ratio = both.message_bytes / both.value_lat / both.value_bw  # bytes/us / MB/s = 1
    # up to the printed precision (%.3f each: a 1-byte message's 0.02 MB/s under load is rounded by
    # up to 2.5 %), plus 1 %
    slack = 0.01 + 0.0005 / both.value_bw + 0.0005 / both.value_lat
    assert ((ratio - 1).abs() <= slack).all(), both
