"""labkit import (labkit.store.imports): real tools' outputs made here, recorded ones where the tool
is absent (tests/unit/fixtures/README.md), hand-made variants for units and truncation."""

from __future__ import annotations

import http.server
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from labkit.cli import main
from labkit.store import Store
from labkit.store.imports import ImportRefused, import_manifest

FIX = Path(__file__).parent / "fixtures"


def manifest(
    tmp_path: Path,
    workload: str,
    files: dict[str, str | list[str]],
    *,
    factor: str = "platform",
    extra: dict | None = None,
) -> Path:
    """A manifest of one factor whose levels are ``files``' keys, each file the texts joined."""
    entries = []
    for level, texts in files.items():
        path = tmp_path / f"{level}.log"
        path.write_text("".join([texts] if isinstance(texts, str) else texts))
        entries.append({factor: level, "path": path.name})
    doc = {
        "campaign": f"imp-{workload}",
        "workload": workload,
        "factors": {factor: list(files)},
        "files": entries,
        **(extra or {}),
    }
    out = tmp_path / "manifest.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def tidy(path: Path):
    with Store(path, readonly=True) as st:
        return st.tidy(), st.meta()


def values(t, metric: str) -> list[float]:
    return list(t.loc[t.metric == metric].sort_values("run_order").value)


def need(tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} is not installed: scripts/setup-tools.sh installs it")


# -- STREAM: units and appended reports -----------------------------------------------------------
STREAM_1 = (FIX / "stream" / "labkit_stream_1thread.txt").read_text()
STREAM_2 = (FIX / "stream" / "labkit_stream_2threads.txt").read_text()
# McCalpin's stream.c layout printing GB/s (hand-made from STREAM_1: same rates / 1000)
STREAM_GB = """-------------------------------------------------------------
STREAM version $Revision: 5.10 $
-------------------------------------------------------------
Array size = 4000000 (elements), Offset = 0 (elements)
-------------------------------------------------------------
Function      Rate (GB/s)   Avg time     Min time     Max time
Copy:           14.9186     0.004295     0.004290     0.004299
Scale:          13.1524     0.004875     0.004866     0.004884
Add:            18.7637     0.006621     0.005116     0.008125
Triad:          23.6670     0.005115     0.004056     0.006174
-------------------------------------------------------------
Solution Validates: avg error less than 1.000000e-13 on all three arrays
-------------------------------------------------------------
"""


def test_stream_reports_in_file_order_and_gb_per_s_read_as_mb_per_s(tmp_path):
    m = manifest(tmp_path, "stream", {"native": [STREAM_1, STREAM_2], "docker": STREAM_GB})
    assert main(["import", str(m), "--data-dir", str(tmp_path / "data")]) == 0
    t, meta = tidy(tmp_path / "data" / "imp-stream" / "store.sqlite")
    triad = t[t.metric == "triad_mb_per_s"].sort_values("run_order")
    # two reports appended to one log are two runs, in file order; the GB/s report is 1000x its number
    assert list(triad.platform) == ["native", "native", "docker"]
    assert list(triad.replicate) == [1, 2, 1]
    assert list(triad.value) == pytest.approx([23667.0, 29754.8, 23667.0])
    assert set(triad.unit) == {"MB/s"}
    imported = meta["imported"]
    assert imported["parser"] == "stream" and imported["parser_version"]
    import hashlib

    assert (
        imported["files"][0]["sha256"] == hashlib.sha256((tmp_path / "native.log").read_bytes()).hexdigest()
    )
    assert [f["reports"] for f in imported["files"]] == [2, 1]
    assert meta["workload"]["response"] == "triad_mb_per_s"
    assert (tmp_path / "data" / "imp-stream" / "results.csv").exists()  # exported as a run campaign is


def test_stream_without_a_unit_header_is_refused(tmp_path):
    text = STREAM_GB.replace("Function      Rate (GB/s)   Avg time     Min time     Max time\n", "")
    m = manifest(tmp_path, "stream", {"native": STREAM_1, "docker": text})
    with pytest.raises(ImportRefused, match=r"docker.log line 1-\d+ .*unit"):
        import_manifest(m, tmp_path / "data")


def test_truncated_report_names_file_and_line_and_writes_nothing(tmp_path):
    cut = STREAM_2[: STREAM_2.index("Add:")]
    m = manifest(tmp_path, "stream", {"native": STREAM_1, "docker": [STREAM_1, cut]})
    data = tmp_path / "data"
    with pytest.raises(ImportRefused) as exc:
        import_manifest(m, data)
    msg = str(exc.value)
    # the second report of docker.log starts at its second "labkit STREAM" line
    text = (tmp_path / "docker.log").read_text().splitlines()
    line = [i for i, x in enumerate(text, 1) if x.startswith("labkit STREAM")][1]
    assert f"docker.log line {line}-{len(text)} (report 2 of 2)" in msg and "truncated" in msg
    assert not data.exists() or list(data.iterdir()) == []  # nothing half-imported
    assert main(["import", str(m), "--data-dir", str(data)]) == 2


def test_existing_campaign_and_unknown_level_refused(tmp_path):
    m = manifest(tmp_path, "stream", {"native": STREAM_1, "docker": STREAM_2})
    import_manifest(m, tmp_path / "data")
    with pytest.raises(ImportRefused, match="exists already"):
        import_manifest(m, tmp_path / "data")
    doc = yaml.safe_load(m.read_text())
    doc["files"][1]["platform"] = "kvm"
    doc["campaign"] = "other"
    m.write_text(yaml.safe_dump(doc))
    with pytest.raises(ImportRefused, match=r"files\[1\].*'kvm' is not one of the levels"):
        import_manifest(m, tmp_path / "data")


# -- real tools, run here briefly --------------------------------------------------------------
def run(argv: list[str], **kw) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60, **kw).stdout


def test_sysbench_cpu_and_memory_real_output(tmp_path):
    need("sysbench")
    cpu = [
        run(["sysbench", "cpu", "--threads=1", "--time=1", "--cpu-max-prime=2000", "run"]) for _ in range(2)
    ]
    mem = run(["sysbench", "memory", "--threads=1", "--time=1", "--memory-total-size=64M", "run"])
    m = manifest(tmp_path, "sysbench", {"a": cpu, "b": cpu[0]}, factor="setup")
    t, meta = tidy(import_manifest(m, tmp_path / "data"))
    expected = [float(re.search(r"events per second:\s*([0-9.]+)", c).group(1)) for c in [*cpu, cpu[0]]]
    assert values(t, "events_per_s") == pytest.approx(expected)
    assert meta["workload"]["response"] == "events_per_s"
    m = manifest(tmp_path, "sysbench", {"a": mem, "b": mem}, factor="setup", extra={"campaign": "mem"})
    t, _ = tidy(import_manifest(m, tmp_path / "data"))
    mib = float(re.search(r"MiB transferred \(([0-9.]+) MiB/sec\)", mem).group(1))
    assert values(t, "mib_per_s") == pytest.approx([mib, mib])


def test_fio_json_and_classic_text_real_output(tmp_path):
    need("fio")
    common = [
        "fio",
        "--name=randread",
        "--rw=randread",
        "--size=4M",
        "--bs=4k",
        f"--filename={tmp_path}/f",
        "--ioengine=psync",
    ]
    js = run([*common, "--output-format=json"])
    txt = run(common)
    m = manifest(tmp_path, "fio", {"json": js, "text": [txt, txt]}, factor="fmt")
    t, meta = tidy(import_manifest(m, tmp_path / "data"))
    import json

    job = json.loads(js[js.index("{") :])["jobs"][0]["read"]
    got = values(t, "randread_iops")
    assert got[0] == pytest.approx(job["iops"])
    # text: IOPS=12.8k (k = 1000), BW in the unit fio printed
    iops = re.search(r"IOPS=([0-9.]+)(k?)", txt)
    assert got[1] == pytest.approx(float(iops.group(1)) * (1000 if iops.group(2) else 1))
    bw = re.search(r"BW=([0-9.]+)(KiB|MiB|GiB)/s", txt)
    mib = float(bw.group(1)) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[bw.group(2)]
    assert values(t, "randread_bw_mib_per_s")[1] == pytest.approx(mib)
    assert values(t, "randread_bw_mib_per_s")[0] == pytest.approx(job["bw_bytes"] / 1048576)
    assert len(got) == 3


def _listening(port: int) -> bool:
    """Whether 127.0.0.1:port is in LISTEN state (read from /proc, so no probe connection is made
    that iperf3's one-shot server (-1) would take for its test)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(line.split()[1] == want and line.split()[3] == "0A" for line in list(f)[1:])


def _iperf3(args: list[str]) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # iperf3 3.12 with -J exits 0 on "connection refused" (the error is in its JSON), so the
        # client starts only once the server listens.
        for _ in range(300):
            if _listening(port):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("iperf3 server did not start listening in 30 s")
        return run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "1", *args])
    finally:
        server.kill()
        server.wait()


def test_iperf3_json_bits_and_text_bytes_real_output(tmp_path):
    need("iperf3")
    js = _iperf3(["-J"])
    mbytes = _iperf3(["-f", "M"])  # rates in MBytes/sec: bytes, 1024-based
    m = manifest(tmp_path, "iperf3", {"json": js, "text": mbytes}, factor="fmt")
    t, _ = tidy(import_manifest(m, tmp_path / "data"))
    import json

    got = values(t, "tcp_mbit_per_s")
    assert got[0] == pytest.approx(json.loads(js)["end"]["sum_received"]["bits_per_second"] / 1e6)
    recv = float(re.search(r"([0-9.]+) MBytes/sec\s.*receiver", mbytes).group(1))
    assert got[1] == pytest.approx(recv * 8 * 1048576 / 1e6)  # not recv (bytes read as bits)


def test_ab_real_output(tmp_path):
    need("ab")
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "index.html").write_text("hello\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    handler = lambda *a, **k: Quiet(*a, directory=str(tmp_path / "www"), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
        outs = [run(["ab", "-n", "200", "-c", "2", url]) for _ in range(2)]
    finally:
        server.shutdown()
    m = manifest(tmp_path, "ab", {"x": outs[0], "y": outs[1]}, factor="setup")
    t, _ = tidy(import_manifest(m, tmp_path / "data"))
    rps = [float(re.search(r"Requests per second:\s*([0-9.]+)", o).group(1)) for o in outs]
    assert values(t, "requests_per_s") == pytest.approx(rps)


# -- recorded outputs of tools absent from the test hosts -----------------------------------------
def test_hpcc_with_gups_npb_and_redis_recorded(tmp_path):
    hpcc = (FIX / "hpcc" / "hpccoutf_2ranks.txt").read_text()
    m = manifest(tmp_path, "hpcc", {"a": hpcc, "b": [hpcc, hpcc]}, factor="setup")
    t, _ = tidy(import_manifest(m, tmp_path / "data"))
    assert values(t, "mpi_random_access_gups") == pytest.approx([0.00145264] * 3)
    assert values(t, "star_random_access_gups") == pytest.approx([0.177144] * 3)
    npb = (FIX / "npb" / "zs_S_omp_2threads.txt").read_text()
    m = manifest(tmp_path, "npb", {"a": [npb, npb], "b": npb}, factor="setup", extra={"campaign": "npb"})
    t, _ = tidy(import_manifest(m, tmp_path / "data"))
    assert values(t, "mops_total") == pytest.approx([267.56] * 3)
    redis = (FIX / "redis" / "redis_benchmark_csv.txt").read_text()
    m = manifest(
        tmp_path,
        "redis",
        {"a": redis, "b": redis.split('"test"')[0] + '"test"' + redis.split('"test"')[1]},
        factor="setup",
        extra={"campaign": "redis"},
    )
    t, meta = tidy(import_manifest(m, tmp_path / "data"))
    assert values(t, "get_rps") == pytest.approx([55555.56, 60606.06, 55555.56])  # two reports in one file
    assert values(t, "get_max_latency_ms")[1] == pytest.approx(4.111)
    assert meta["workload"]["response"] == "ping_inline_rps"
    bad = redis.replace('"SET","54054.05","0.050","0.016","0.055"', '"SET","54054.05","0.050"')
    m = manifest(tmp_path, "redis", {"a": redis, "b": bad}, factor="setup", extra={"campaign": "redis2"})
    with pytest.raises(
        ImportRefused, match=r"b.log line 6-10 \(report 2 of 2\): redis-benchmark CSV line 4: 6 field"
    ):
        import_manifest(m, tmp_path / "data")


def test_csv_with_column_mapping_and_a_bad_cell(tmp_path):
    (tmp_path / "r.csv").write_text("Platform,Triad GB/s\nnative,12.5\ndocker,12.0\nnative,12.7\n")
    doc = {
        "campaign": "csvimp",
        "workload": "csv",
        "factors": {"platform": ["native", "docker"]},
        "columns": {
            "factors": {"platform": "Platform"},
            "metrics": {"triad_mb_per_s": {"column": "Triad GB/s", "unit": "MB/s", "scale": 1000}},
        },
        "files": [{"path": "r.csv"}],
    }
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(doc))
    t, _ = tidy(import_manifest(tmp_path / "m.yaml", tmp_path / "data"))
    assert values(t, "triad_mb_per_s") == pytest.approx([12500, 12000, 12700])
    assert list(t.sort_values("run_order").platform) == ["native", "docker", "native"]
    (tmp_path / "r.csv").write_text("Platform,Triad GB/s\nnative,12.5\ndocker,n/a\n")
    doc["campaign"] = "csvbad"
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ImportRefused, match=r"r.csv line 3: column 'Triad GB/s' = 'n/a': expected a number"):
        import_manifest(tmp_path / "m.yaml", tmp_path / "data")
    assert not (tmp_path / "data" / "csvbad").exists()


def test_parsec_parsecmgmt_output_and_a_hooks_build_run_here(tmp_path):
    """PARSEC (issue 43's list): ``parsecmgmt -a run`` output (the recorded blackscholes fixture,
    two reports appended to one log: two runs) and a hooks build run directly, made here by
    tests/support/parsec_like.c (a program printing the hooks library's own lines around a timed
    region of interest): each report one run, ROI time as the response; a report cut before
    '[HOOKS] Terminating' is refused naming its file, lines and what was expected."""
    need("cc")
    mgmt = (FIX / "parsec" / "blackscholes_simsmall.txt").read_text()
    from tests.support import build_parsec_like

    binary = build_parsec_like(tmp_path / "parsec")
    runs = [
        subprocess.run(
            [str(binary), "-nt", str(n)], capture_output=True, text=True, check=True, timeout=120
        ).stdout
        for n in (1, 2)
    ]
    roi = [float(re.search(r"Total time spent in ROI: ([0-9.]+)s", r).group(1)) for r in runs]
    m = manifest(tmp_path, "parsec", {"mgmt": [mgmt, mgmt], "hooks": runs}, factor="build")
    t, meta = tidy(import_manifest(m, tmp_path / "data"))
    assert values(t, "roi_time_s") == pytest.approx([0.011, 0.011, *roi])
    assert values(t, "wall_time_s") == pytest.approx([0.062, 0.062])
    assert values(t, "threads") == [1, 2]
    assert meta["workload"]["response"] == "roi_time_s"
    cut = runs[0].split("[HOOKS] Terminating")[0]
    m = manifest(
        tmp_path,
        "parsec",
        {"mgmt": mgmt, "hooks": [runs[0], cut]},
        factor="build",
        extra={"campaign": "parsec-cut"},
    )
    with pytest.raises(ImportRefused, match=r"hooks.log line .*report 2 of 2.*Terminating"):
        import_manifest(m, tmp_path / "data2")
    assert not (tmp_path / "data2" / "parsec-cut").exists()
