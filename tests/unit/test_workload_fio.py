"""fio JSON parser and runner, against real captured outputs (fixtures/fio)."""

import json

import pytest

from labkit.errors import BenchmarkError, ConfigError
from labkit.workloads.fio import Fio, parse, parse_version

from .fixtures.fakes import FakeInstance, fixture

ALL = ["seqread", "seqwrite", "randread", "randwrite"]


def test_four_patterns():
    text = fixture("fio", "fio_4patterns.json")
    r = {m.metric: (m.value, m.unit) for m in parse(text, ALL)}
    assert len(r) == 12
    doc = json.loads(text)
    rr = next(j for j in doc["jobs"] if j["jobname"] == "randread")["read"]
    assert r["randread_iops"] == (pytest.approx(rr["iops"]), "IO/s")
    assert r["randread_bw_mib_per_s"] == (pytest.approx(rr["bw_bytes"] / 1048576), "MiB/s")
    assert r["randread_lat_mean_us"] == (pytest.approx(rr["clat_ns"]["mean"] / 1000), "us")
    sw = next(j for j in doc["jobs"] if j["jobname"] == "seqwrite")["write"]
    assert r["seqwrite_iops"][0] == pytest.approx(sw["iops"])


def test_group_reported_jobs():
    r = {m.metric: m.value for m in parse(fixture("fio", "fio_randread_2jobs.json"), ["randread"])}
    assert set(r) == {"randread_iops", "randread_bw_mib_per_s", "randread_lat_mean_us"}


def test_job_error_with_text_before_json():
    with pytest.raises(BenchmarkError, match="error 22") as err:
        parse(fixture("fio", "fio_job_error.json"), command=["fio", "x"])
    assert err.value.command == ["fio", "x"]


@pytest.mark.parametrize("cut", [100, 5000, -200])
def test_truncated_json(cut):
    text = fixture("fio", "fio_4patterns.json")
    with pytest.raises(BenchmarkError, match="malformed or truncated"):
        parse(text[:cut], ALL)


def test_malformed():
    with pytest.raises(BenchmarkError, match="no JSON"):
        parse("fio: failed parsing rw=bogus")
    with pytest.raises(BenchmarkError, match="no jobs"):
        parse('{"fio version": "fio-3.33", "jobs": []}')
    with pytest.raises(BenchmarkError, match="expected field"):
        parse('{"jobs": [{"jobname": "randread", "error": 0, "read": {"total_ios": 5}}]}')
    with pytest.raises(BenchmarkError):
        parse("")


def test_missing_pattern_and_no_io():
    text = fixture("fio", "fio_randread_2jobs.json")
    with pytest.raises(BenchmarkError, match="no result for seqwrite"):
        parse(text, ["randread", "seqwrite"])
    doc = json.loads(text)
    doc["jobs"][0]["read"]["total_ios"] = 0
    doc["jobs"][0]["read"]["io_bytes"] = 0
    with pytest.raises(BenchmarkError, match="did no I/O"):
        parse(json.dumps(doc), ["randread"])


def test_version():
    assert parse_version(fixture("fio", "version.txt")) == "3.33"
    assert parse_version(fixture("fio", "fio_4patterns.json")) == "3.33"
    with pytest.raises(BenchmarkError):
        parse_version("sh: fio: not found")


def test_command_and_parameters():
    w = Fio(patterns="randwrite,seqread", size_mb=8, direct=1)
    assert w.response == "randwrite_iops"
    argv = w.command(w.params_for({}, 1), "/w/f.dat")
    assert "--filename=/w/f.dat" in argv and "--size=8M" in argv and "--direct=1" in argv
    assert argv[-4:] == ["--name=randwrite", "--rw=randwrite", "--name=seqread", "--rw=read"]
    assert "--output-format=json" in argv and "--stonewall" in argv
    with pytest.raises(ConfigError):
        Fio(patterns="sequential")
    with pytest.raises(ConfigError):
        Fio(patterns=[])
    with pytest.raises(ConfigError):
        w.command(w.params_for({"size_mb": 0}, 1), "/w/f")


def test_run_removes_the_file_on_every_path():
    inst = FakeInstance({"fio --filename": (0, fixture("fio", "fio_4patterns.json"))})
    rows = Fio().run(inst, {"vcpus": 1})
    assert len(rows) == 12
    assert inst.calls[-1][:2] == ["rm", "-f"] and inst.calls[-1][2].startswith("/work/labkit-fio-")
    bad = FakeInstance({"fio --filename": (1, fixture("fio", "fio_job_error.json"))})
    with pytest.raises(BenchmarkError, match="exit 1"):
        Fio().run(bad, {"vcpus": 1})
    assert bad.calls[-1][:2] == ["rm", "-f"]


def test_missing_fio():
    with pytest.raises(BenchmarkError, match="Debian package 'fio'"):
        Fio().prepare(FakeInstance({"command -v": (1, "")}))
