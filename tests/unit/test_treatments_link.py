"""The ``link`` manipulation check (issue 41, item 4): the qdiscs read back with ``tc -j`` are
parsed right, the rate over ~1 s windows of a byte counter is computed right, and the record is
judged as the module docstring says (a tbf at the level's rate and no traffic above it, within the
stated tolerances; unshaped: no shaping qdisc; unreadable: null, never a failed run)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from labkit.core.instance import InstanceSpec
from labkit.core.network_factors import Link, parse_link
from labkit.errors import BackendError, ConfigError
from labkit.run import treatments
from labkit.run.hooks import RunContext
from labkit.run.treatments import (
    LinkWatch,
    TreatmentChecks,
    bit_text,
    check_link,
    link_devices,
    link_traffic,
    parse_qdiscs,
    rate_windows,
)

# Captured on this machine (iproute2 6.1.0, kernel 6.18): `tc -j -s qdisc show dev X` of a veth
# shaped as labkit.core.network_factors.shape_commands shapes it (tbf rate 50000000bit burst 65536
# latency 50ms): tc prints the rate in bytes/s and the burst it stored (65531 of 65536 asked).
TBF_50MBIT = (
    '[{"kind":"tbf","handle":"1:","root":true,"refcnt":3,"options":{"rate":6250000,"burst":65531,'
    '"lat":50000},"bytes":426,"packets":5,"drops":0,"overlimits":0,"requeues":0,"backlog":0,"qlen":0}]'
)
# the same veth after `tc qdisc replace ... tbf rate 12345bit ...`: tc keeps whole bytes/s (1543 B/s =
# 12344 bit/s), the rounding the 1 % tolerance allows for
TBF_12345BIT = (
    '[{"kind":"tbf","handle":"1:","root":true,"refcnt":3,"options":{"rate":1543,"burst":65535,'
    '"lat":49903},"bytes":426,"packets":5,"drops":0,"overlimits":0,"requeues":0,"backlog":0,"qlen":0}]'
)
# its peer, never shaped: the veth's default
NOQUEUE = (
    '[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{},"bytes":0,"packets":0,"drops":0,'
    '"overlimits":0,"requeues":0,"backlog":0,"qlen":0}]'
)
# NOT captured (this kernel has no sch_netem): a netem root with a tbf child as shape_commands
# makes them for '50mbit/5ms', written after iproute2's tc/q_netem.c netem_print_opt, which prints
# "limit" and, in JSON, "delay": {"delay": <s>, "jitter": <s>} (tick2time(latency) / 1e6)
NETEM_TBF = (
    '[{"kind":"netem","handle":"1:","root":true,"refcnt":2,"options":{"limit":100000,'
    '"delay":{"delay":0.005,"jitter":0}},"bytes":0,"packets":0},'
    '{"kind":"tbf","handle":"10:","parent":"1:1","options":{"rate":6250000,"burst":65531,"lat":50000},'
    '"bytes":0,"packets":0}]'
)

RATE = 50e6


def steady(
    bit_per_s: float, seconds: float = 3.0, step: float = 0.2, start: int = 1000
) -> list[tuple[float, int]]:
    """Readings of a byte counter every ``step`` s with traffic at ``bit_per_s``."""
    n = int(round(seconds / step))
    return [(i * step, start + int(round(bit_per_s / 8 * i * step))) for i in range(n + 1)]


def test_tc_json_is_parsed():
    (tbf,) = parse_qdiscs(TBF_50MBIT)
    assert tbf == {
        "kind": "tbf",
        "handle": "1:",
        "parent": "root",
        "rate_bit_per_s": 50e6,
        "burst_bytes": 65531,
        "delay_s": None,
        "bytes": 426,
    }
    assert parse_qdiscs(TBF_12345BIT)[0]["rate_bit_per_s"] == 8 * 1543
    assert parse_qdiscs(NOQUEUE) == [
        {
            "kind": "noqueue",
            "handle": "0:",
            "parent": "root",
            "rate_bit_per_s": None,
            "burst_bytes": None,
            "delay_s": None,
            "bytes": 0,
        }
    ]
    netem, child = parse_qdiscs(NETEM_TBF)
    assert (netem["kind"], netem["delay_s"], netem["rate_bit_per_s"]) == ("netem", 0.005, None)
    assert (child["parent"], child["rate_bit_per_s"]) == ("1:1", 50e6)
    # an older tc printed the rate as text
    assert (
        parse_qdiscs('[{"kind":"tbf","options":{"rate":"50Mbit","burst":"64Kb"}}]')[0]["rate_bit_per_s"]
        == 50e6
    )
    assert parse_qdiscs("") == [] and parse_qdiscs('[{"handle":"1:"}, 3]') == []
    with pytest.raises(ConfigError, match="not the JSON of tc"):
        parse_qdiscs("qdisc tbf 1: root refcnt 3 rate 50Mbit")
    with pytest.raises(ConfigError, match="a list of qdiscs"):
        parse_qdiscs('{"kind": "tbf"}')


def test_rates_are_measured_over_windows_of_a_second():
    # 1 MB in the second from 0.5 s to 1.5 s, 1 MB either side of it over 1 s: by hand, the
    # windows are (0-1 s: 1 MB), (0.5-1.5 s: 2 MB), (1-2 s: 1 MB); the peak 2 MB/s = 16 Mbit/s
    samples = [(0.0, 0), (0.5, 0), (1.0, 1_000_000), (1.5, 2_000_000), (2.0, 2_000_000)]
    assert rate_windows(samples) == [(1.0, 1_000_000), (1.0, 2_000_000), (1.0, 1_000_000)]
    got = link_traffic(list(reversed(samples)))  # order of readings does not matter
    assert got == {
        "bytes": 2_000_000,
        "mean_bit_per_s": 8e6,
        "peak_bit_per_s": 16e6,
        "window_s": 1.0,
        "readings": 5,
    }
    # a run shorter than a window: its whole span is the one window
    assert rate_windows([(0.0, 0), (0.4, 100_000)]) == [(0.4, 100_000)]
    assert link_traffic([(0.0, 0), (0.4, 100_000)])["peak_bit_per_s"] == 2e6
    # one reading: no rate; a counter that went back (its device made anew) counts nothing
    assert link_traffic([(0.0, 5)]) == {
        "bytes": 0,
        "mean_bit_per_s": None,
        "peak_bit_per_s": None,
        "window_s": None,
        "readings": 1,
    }
    assert rate_windows([(0.0, 900), (1.0, 100)]) == [(1.0, 0)]
    assert (
        bit_text(50e6) == "50 Mbit/s"
        and bit_text(1.5e9) == "1.5 Gbit/s"
        and bit_text(12344) == "12.34 kbit/s"
    )


def dev(qdisc_json=TBF_50MBIT, samples=None, **kw):
    return {"qdiscs": parse_qdiscs(qdisc_json), "samples": steady(48e6) if samples is None else samples, **kw}


def test_a_link_held_to_its_rate_is_verified():
    rec = check_link("50mbit/", parse_link("50mbit/"), {"lkh0": dev(), "lkh1": dev(samples=steady(0.1e6))})
    assert rec["verified"] is True, rec
    ob = rec["observed"]
    assert ob["qdisc"] == "tbf" and ob["qdisc_rate_bit_per_s"] == RATE and ob["rate_bit_per_s"] == RATE
    assert ob["peak_bit_per_s"] == pytest.approx(48e6, rel=1e-6) and ob["peak_bit_per_s"] <= RATE
    assert ob["mean_bit_per_s"] == pytest.approx(48e6, rel=1e-6)  # the busiest device's
    assert ob["bytes"] == round(48e6 / 8 * 3.0) + round(0.1e6 / 8 * 3.0)  # both devices, over the 3 s
    assert set(ob["devices"]) == {"lkh0", "lkh1"} and ob["devices"]["lkh0"]["qdiscs"] == ["tbf 50 Mbit/s"]
    assert "tc -j -s qdisc show" in rec["how"] and "tx_bytes" in rec["how"]
    # tc's rounding is within the 1 %
    assert (
        check_link("12345bit/", parse_link("12345bit/"), {"d": dev(TBF_12345BIT, samples=steady(10_000))})[
            "verified"
        ]
        is True
    )


def test_traffic_may_exceed_the_rate_only_by_the_tolerance_and_the_burst():
    # 54 Mbit/s: within 10 % of 50
    assert check_link("50mbit/", parse_link("50mbit/"), {"d": dev(samples=steady(54e6))})["verified"] is True
    # 60 Mbit/s sustained: beyond 10 % + a 65531-byte burst (0.52 Mbit) over each second
    beat = check_link("50mbit/", parse_link("50mbit/"), {"d": dev(samples=steady(60e6))})
    assert beat["verified"] is False and "traffic at 60 Mbit/s" in beat["how"], beat
    assert "above 50 Mbit/s + 10% and the tbf's 65531-byte burst" in beat["how"]
    assert beat["observed"]["peak_bit_per_s"] > RATE
    # at the rate, plus a full bucket (the tbf burst) sent at once: allowed
    burst = [(t, b + (65531 if t >= 0.5 else 0)) for t, b in steady(50e6)]
    assert check_link("50mbit/", parse_link("50mbit/"), {"d": dev(samples=burst)})["verified"] is True


def test_a_missing_or_other_qdisc_is_a_treatment_not_applied():
    other = check_link("100mbit/", parse_link("100mbit/"), {"d": dev()})
    assert other["verified"] is False and "tbf 50 Mbit/s, not 100 Mbit/s" in other["how"]
    gone = check_link("50mbit/", parse_link("50mbit/"), {"d": dev(NOQUEUE, samples=steady(900e6))})
    assert gone["verified"] is False and "no tbf qdisc (found noqueue)" in gone["how"]
    assert "traffic at 900 Mbit/s" in gone["how"] and gone["observed"]["qdisc_rate_bit_per_s"] is None
    # one device of two unshaped is enough; the rate "installed" is then none
    half = check_link("50mbit/", parse_link("50mbit/"), {"a": dev(), "b": dev(NOQUEUE)})
    assert half["verified"] is False and half["observed"]["qdisc"] == "tbf+noqueue"
    assert half["observed"]["qdisc_rate_bit_per_s"] is None and "and the tbf's" not in half["how"]


def test_an_unshaped_level_has_no_shaping_qdisc():
    ok = check_link("none", None, {"d": dev(NOQUEUE, samples=steady(2e9))})
    assert ok["verified"] is True and "no shaping qdisc" in ok["how"] and ok["observed"]["qdisc"] == "noqueue"
    assert ok["observed"]["peak_bit_per_s"] == pytest.approx(2e9, rel=1e-6)
    left = check_link("none", None, {"d": dev()})
    assert left["verified"] is False and "though the level is unshaped" in left["how"]
    nothing = check_link("none", None, {})  # no private network: nothing to shape
    assert nothing["verified"] is True and "nothing is shaped" in nothing["how"]


def test_delays_are_read_from_netem_except_in_a_vm():
    five = parse_link("50mbit/5ms")
    assert check_link("50mbit/5ms", five, {"d": dev(NETEM_TBF)})["verified"] is True
    assert check_link("/5ms", parse_link("/5ms"), {"d": dev(NETEM_TBF)})["verified"] is True
    two = check_link("50mbit/2ms", parse_link("50mbit/2ms"), {"d": dev(NETEM_TBF)})
    assert two["verified"] is False and "netem 5 ms, not a 2 ms delay" in two["how"]
    assert check_link("50mbit/5ms", five, {"d": dev()})["verified"] is False  # no netem at all
    # libvirt: the host-side tap carries the rate, the guest its own delay (not read from here)
    vm = check_link("50mbit/5ms", five, {"d": dev()}, delay_here=False)
    assert vm["verified"] is True and "inside the VM: not read" in vm["how"]
    only_delay = check_link("/5ms", Link(None, 0.005), {"d": dev(NOQUEUE)}, delay_here=False)
    assert only_delay["verified"] is None and only_delay["how"].startswith("not verified")


def test_what_cannot_be_read_is_null_never_false():
    unread = check_link(
        "50mbit/",
        parse_link("50mbit/"),
        {"d": {"qdiscs": None, "error": "Cannot find device", "samples": []}},
    )
    assert unread["verified"] is None and "Cannot find device" in unread["how"]
    one = check_link("50mbit/", parse_link("50mbit/"), {"d": dev(samples=[(0.0, 10)])})
    assert one["verified"] is None and "fewer than two readings" in one["how"]
    none = check_link("50mbit/", parse_link("50mbit/"), {})
    assert none["verified"] is None and none["how"].startswith("not read")
    # a failure still wins over what could not be read
    both = check_link(
        "50mbit/", parse_link("50mbit/"), {"a": dev(NOQUEUE), "b": {"qdiscs": None, "samples": []}}
    )
    assert both["verified"] is False


class Inst(SimpleNamespace):
    pass


def test_link_devices_are_the_shaped_host_ends_and_bonded_nics():
    insts = [
        Inst(host_device="lkh0", metadata={"network": {"data_devices": ["lk1h0", "lk2h0"]}}),
        Inst(host_device="lkh1", metadata={}),
        Inst(host_device=None),
        SimpleNamespace(name="x"),
        Inst(host_device="lkh0", metadata=None),
    ]
    assert link_devices(insts) == ["lkh0", "lk1h0", "lk2h0", "lkh1"]


def fake_net(tmp_path, counters):
    for d, n in counters.items():
        (tmp_path / d / "statistics").mkdir(parents=True)
        (tmp_path / d / "statistics" / "tx_bytes").write_text(f"{n}\n")
    return tmp_path


def context(levels, instances, backend="local"):
    run = SimpleNamespace(levels=levels, run_id="r1")
    be = SimpleNamespace(name=backend, host_cpus=lambda: 4)
    return RunContext(
        run,
        InstanceSpec(count=len(instances)),
        {},
        be,
        "labkit-t-",  # type: ignore[arg-type]
        instances=instances,
    )


def test_the_watch_reads_each_devices_counter_until_stopped(tmp_path):
    net = fake_net(tmp_path, {"lkh0": 5000})
    ctx = context({"link": "50mbit/"}, [Inst(host_device="lkh0", metadata={}), Inst(host_device="lkgone")])
    seen = LinkWatch(ctx, net, 0.01).start().stop()  # type: ignore[arg-type]
    assert set(seen) == {"lkh0"} and len(seen["lkh0"]) >= 2 and {b for _, b in seen["lkh0"]} == {5000}


def test_the_hook_records_the_link_and_never_fails_the_run(tmp_path, monkeypatch):
    net = fake_net(tmp_path, {"lkh0": 100, "lkh1": 100})
    insts = [Inst(host_device="lkh0", metadata={}), Inst(host_device="lkh1", metadata={})]
    monkeypatch.setattr(
        treatments, "read_qdiscs", lambda d: parse_qdiscs(TBF_50MBIT if d == "lkh0" else NOQUEUE)
    )
    ctx = context({"link": "50mbit/"}, insts)
    with TreatmentChecks(sys_net=net, poll_s=0.01).around_run(ctx):
        pass
    rec = ctx.metadata["treatments"]["link"]
    assert rec["verified"] is False and "lkh1: no tbf qdisc" in rec["how"], rec
    assert ctx.metadata["treatment_failed"] == ["link"] and rec["observed"]["bytes"] == 0

    def broken(d):
        raise BackendError('tc -j -s qdisc show dev lkh0 failed: Cannot find device "lkh0"')

    monkeypatch.setattr(treatments, "read_qdiscs", broken)
    ctx = context({"link": "50mbit/"}, insts)
    with pytest.raises(RuntimeError), TreatmentChecks(sys_net=net, poll_s=0.01).around_run(ctx):
        raise RuntimeError("the workload failed")
    rec = ctx.metadata["treatments"]["link"]
    assert (
        rec["verified"] is None
        and "Cannot find device" in rec["how"]
        and ctx.metadata["treatment_failed"] == []
    )
    # instances elsewhere: their links are shaped there
    ctx = context({"link": "50mbit/"}, insts, backend="ssh")
    with TreatmentChecks(sys_net=net).around_run(ctx):
        pass
    rec = ctx.metadata["treatments"]["link"]
    assert rec["verified"] is None and rec["how"].startswith("not read") and "another machine" in rec["how"]
    # a level that is not a link is said, not raised
    ctx = context({"link": "fast"}, insts)
    with TreatmentChecks(sys_net=net, poll_s=0.01).around_run(ctx):
        pass
    assert ctx.metadata["treatments"]["link"]["verified"] is None
