"""labkit's data side at cluster scale (issue 45): campaigns of 1k and 10k runs (100k with ``--full``).

Each campaign is written through the store's own write path, one run at a time as a fleet worker
records it (:meth:`Store.claim_group <labkit.store.Store.claim_group>`, the run's output file
:meth:`~labkit.store.Store.write_run_output`, then the run with its measurements and telemetry
through group commit, :class:`~labkit.store.group.GroupCommit`, as the engine writes it): a 2^4 design, 3 metrics and 200 telemetry rows per run (10 s at 1 Hz,
20 metrics), realistic metadata (spec, host, instances, versions). Then every step a reader takes
runs in its own process, timed, its peak memory read from the kernel (``ru_maxrss`` of that process):

    list, show, analyze (``labkit list/show/analyze``), export csv / parquet (``labkit export``),
    report (``labkit report``), explorer first figure (the explorer's application as ``labkit dashboard``
    serves it, until its first figure is drawn as PNG: the response by configuration)

beside the same work done by pandas / pyarrow / statsmodels on the same rows (read the exported
Parquet, group, fit the factorial OLS; for export also the export's whole work, the store's tables
and telemetry read by ``pandas.read_sql`` in chunks and written by pyarrow's ``ParquetWriter``). Prints time, peak memory and, from one size to the next,
the growth exponent ``log(t2/t1) / log(n2/n1)`` (1: linear; 2: quadratic). Also the recording rate
(runs/s, with the per-run output file) with group commit beside one transaction per run (the write
path before group commit, on up to 5,000 runs; ``benchmarks/bench_record.py`` compares the two alone).

Never asserts a duration: this prints, you judge (a loaded machine's numbers vary).

    .venv/bin/python benchmarks/bench_scale.py            # 1k and 10k runs (a few minutes)
    .venv/bin/python benchmarks/bench_scale.py --full     # and 100k (about 2 GB of disk, long)
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
import _sim_runs  # noqa: E402  (benchmarks/: the simulated runs of issue 45)

CID = "scale"


def build(data: Path, runs: int, *, output: bool = True, group: bool = True) -> dict:
    """Write a campaign of ``runs`` runs through the store's write path (``group``: with group commit,
    as the engine does; else one transaction per run); its recording rate."""
    from labkit.store import Store, now_iso
    from labkit.store.group import GroupCommit

    design, plan = _sim_runs.plan("scale", runs)
    st = Store.for_campaign(data, CID)
    st.set_meta(
        campaign_id=CID,
        design=design.to_dict(),
        backend="sim",
        created=now_iso(),
        workload={"name": "sim", "response": "wall_time_s"},
    )
    writer = GroupCommit(st, owner="bench")
    t0 = time.perf_counter()
    for r in plan:
        with writer.lock:  # the connection's lock (the group commit's timer writes on its own thread)
            if not st.claim_group([[r.run_id]], "h1", "bench", 60.0):
                raise SystemExit(f"run {r.run_id} not claimed")
        if output:
            st.write_run_output(r.run_id, f"$ sim run {r.run_id}\n" + "output line\n" * 40, "ok")
        record = writer.add if group else st.record_run
        with writer.lock:
            record(r, **_sim_runs.result(r, CID))
    writer.close()
    rate = len(plan) / (time.perf_counter() - t0)
    st.close()
    return {"runs": len(plan), "runs_per_s": rate}


def child(code: str, *args: str) -> tuple[float, float, str]:
    """Run ``code`` in a fresh Python; (seconds, peak RSS MiB, stderr tail)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-c", code, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t0
    tail = "" if proc.returncode == 0 else (err.strip().splitlines() or ["?"])[-1][:120]
    return dt, usage.ru_maxrss / 1024, tail


CLI = "import sys; from labkit.cli import main; sys.exit(main(sys.argv[1:]))"
STEPS = {
    "list": (CLI, "list", "--data-dir", "{data}"),
    "show": (CLI, "show", CID, "--data-dir", "{data}"),
    "analyze": (CLI, "analyze", CID, "--data-dir", "{data}"),
    "export csv": (CLI, "export", CID, "--data-dir", "{data}", "--out", "{tmp}/csv", "--format", "csv"),
    "export parquet": (
        CLI,
        "export",
        CID,
        "--data-dir",
        "{data}",
        "--out",
        "{tmp}/pq",
        "--format",
        "parquet",
    ),
    "report": (CLI, "report", CID, "--data-dir", "{data}", "-o", "{tmp}/report.html"),
    "explorer first figure": (
        "import os, sys, json; from IPython.core.interactiveshell import InteractiveShell; "
        "from IPython.core.pylabtools import select_figure_formats; "
        "select_figure_formats(InteractiveShell.instance(), {'png'}); "
        "from labkit.report.explore import Explorer; "
        "root = Explorer(sys.argv[1], campaign=sys.argv[2]).app(defer=True); "
        "todo, pngs = [root], 0\n"
        "while todo:\n w = todo.pop(); todo.extend(getattr(w, 'children', ()))\n"
        " pngs += 'lk-first-view' in w._dom_classes and 'image/png' in json.dumps(w.outputs)\n"
        "sys.stdout.flush(); os._exit(0 if pngs else 1)   # the deferred analysis not awaited",
        "{data}",
        CID,
    ),
}
#: the same work by the libraries labkit builds on (on the exported Parquet of the same rows)
BASELINES = {
    "list": "import sys, sqlite3; db = sqlite3.connect(sys.argv[1]); "
    "db.execute('SELECT status, count(*) FROM runs GROUP BY status').fetchall()",
    # the same counts as a pandas user gets them (most of it is importing pandas, as labkit's table does)
    "list with pandas": "import sys, sqlite3, pandas as pd; db = sqlite3.connect(sys.argv[1]); "
    "pd.read_sql('SELECT status, count(*) AS n FROM runs GROUP BY status', db)",
    "analyze": "import sys, pandas as pd, statsmodels.formula.api as smf; t = pd.read_parquet(sys.argv[2]); "
    "t = t[t.metric == 'wall_time_s']; "
    "smf.ols('value ~ C(vcpus) * C(memory_mb) * C(affinity) * C(count)', data=t).fit()",
    # the same fit on the rows read from the store itself (the response joined to each run's levels by
    # SQL, the levels' JSON parsed by Python), as the analysis must
    "analyze from the store": (
        "import sys, sqlite3, json, pandas as pd, statsmodels.formula.api as smf\n"
        "db = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True)\n"
        't = pd.read_sql("SELECT m.run_id, m.value, r.levels FROM measurements m JOIN runs r USING (run_id) "\n'
        "                \"WHERE m.metric = 'wall_time_s' AND r.status = 'ok'\", db)\n"
        "t = pd.concat([t.drop(columns='levels'), pd.DataFrame([json.loads(x) for x in t['levels']])], axis=1)\n"
        "smf.ols('value ~ C(vcpus) * C(memory_mb) * C(affinity) * C(count)', data=t).fit()"
    ),
    "export parquet": "import sys, pyarrow.parquet as pq; t = pq.read_table(sys.argv[2]); "
    "pq.write_table(t, sys.argv[2] + '.copy')",
    # the export's own work done with pandas and pyarrow: the store's measurements, runs and 20 M
    # telemetry rows read by SQL (pandas.read_sql in chunks, the samples in run order) and written as Parquet
    "export parquet from the store": (
        "import sys, sqlite3, pandas as pd, pyarrow as pa, pyarrow.parquet as pq\n"
        "db = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True)\n"
        "for name, sql in [('measurements', 'SELECT * FROM measurements'), ('runs', 'SELECT * FROM runs'),\n"
        "                  ('samples', 'SELECT * FROM samples ORDER BY run_id, t')]:\n"
        " w = None\n"
        " for chunk in pd.read_sql(sql, db, chunksize=500_000):\n"
        "  t = pa.Table.from_pandas(chunk, preserve_index=False)\n"
        "  w = w or pq.ParquetWriter(f'{sys.argv[2]}.{name}.parquet', t.schema)\n"
        "  w.write_table(t)\n"
        " w.close()"
    ),
    "explorer first figure": "import io, sys, pandas as pd, matplotlib.pyplot as plt; f = ['vcpus', 'memory_mb', "
    "'affinity', 'count']; t = pd.read_parquet(sys.argv[2]); "
    "t = t[(t.metric == 'wall_time_s') & (t.status == 'ok')]; "
    "s = t.groupby(['run_id', *f]).value.mean().groupby(f).agg(['mean', 'std']); "
    "fig, ax = plt.subplots(); ax.errorbar(range(len(s)), s['mean'], yerr=s['std'], fmt='o'); "
    "fig.savefig(io.BytesIO(), format='png')",
}


def measure(size: int, data: Path, tmp: Path) -> dict:
    rows: dict = {}
    for name, (code, *args) in STEPS.items():
        rows[name] = child(code, *(a.format(data=data, tmp=tmp) for a in args))
    store = data / CID / "store.sqlite"
    parquet = tmp / "pq" / "results.parquet"
    for name, code in BASELINES.items():
        rows[name + " (baseline)"] = child(code, str(store), str(parquet))
    return rows


def exponent(t1: float, t2: float, n1: int, n2: int) -> str:
    if t1 <= 0 or t2 <= 0:
        return "-"
    return f"{math.log(t2 / t1) / math.log(n2 / n1):.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000", help="runs per campaign, comma-separated")
    ap.add_argument("--full", action="store_true", help="add 100,000 runs (20 M telemetry rows)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")] + ([100_000] if args.full else [])
    results: dict[int, dict] = {}
    rates: dict[int, tuple[float, float]] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="labkit-bench-scale-") as tmpdir:
            tmp = Path(tmpdir)
            data = tmp / "data"
            grouped = build(data, n)["runs_per_s"]
            one_tx = build(tmp / "one-tx", min(n, 5000), group=False)["runs_per_s"]
            rates[n] = (grouped, one_tx)
            size_mb = (data / CID / "store.sqlite").stat().st_size / 2**20
            print(
                f"-- {n} runs ({n * 200 / 1e6:.1f} M telemetry rows, store {size_mb:.0f} MiB): recorded "
                f"{grouped:.0f} runs/s with group commit, {one_tx:.0f} runs/s with one transaction per run "
                f"({grouped / one_tx:.2f}x)",
                flush=True,
            )
            results[n] = measure(n, data, tmp)
            for step, (dt, mib, err) in results[n].items():
                print(
                    f"   {step:28s} {dt:8.2f} s {mib:8.0f} MiB {('FAILED: ' + err) if err else ''}",
                    flush=True,
                )
    print("\nstep                          " + "".join(f"{n:>22,d}" for n in sizes) + "   exponent")
    for step in results[sizes[0]]:
        cells = "".join(f"{results[n][step][0]:9.2f} s {results[n][step][1]:7.0f} MiB" for n in sizes)
        exps = ",".join(
            exponent(results[a][step][0], results[b][step][0], a, b) for a, b in zip(sizes, sizes[1:])
        )
        print(f"{step:30s}{cells}   {exps}")
    print(
        "recorded runs/s with the output file (group commit / one transaction per run = ratio): "
        + "; ".join(f"{n:,d}: {a:.0f} / {b:.0f} = {a / b:.2f}x" for n, (a, b) in rates.items())
    )


if __name__ == "__main__":
    main()
