"""The explorer's first view read by SQL aggregates (issue 45): :func:`labkit.report.explore_data.load_campaign`
gives what the old path gave from every measurement row (:meth:`labkit.store.Store.tidy` through
:func:`labkit.report.catalog.run_table`, :func:`~labkit.report.catalog.primary_response`,
:func:`~labkit.report.catalog.response_metrics`), on the committed stores and on a campaign of
600 runs written through the store's write path with suspect runs, several hosts, two instances
per run (one of a second boot), iterations and failures. Times are measured by
benchmarks/bench_scale.py, never asserted here."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
COMMITTED = ("affinity-local", "affinity-apache-local", "interconnect-local-pingpong", "overhead-bonnie")


def _old_path(data: Path, cid: str):
    """What the explorer showed before: its first view built from the tidy rows."""
    from labkit.report.catalog import primary_response, response_metrics, run_table
    from labkit.store import Store

    with Store(data / cid / "store.sqlite", readonly=True) as st:
        meta, tidy = st.meta(), st.tidy()
    design = list((meta.get("design") or {}).get("factors") or {})
    factors = [f for f in design if f in tidy and tidy[f].nunique() > 1]
    response, why = primary_response(meta, tidy)
    return factors, response_metrics(tidy), response, why, run_table(tidy, design, response)


def _same(data: Path, cid: str) -> pd.DataFrame:
    from labkit.report.explore_data import load_campaign

    factors, metrics, response, why, runs = _old_path(data, cid)
    d = load_campaign(data, cid)
    assert (d.factors, d.metrics, d.response, d.response_why) == (factors, metrics, response, why)
    assert [str(t) for t in d.runs.dtypes] == [str(t) for t in runs.dtypes]
    # the response: a mean over the run's instances, by SQL or by pandas (summed in another order)
    pd.testing.assert_frame_equal(d.runs, runs, check_exact=False, rtol=1e-12)
    return d.runs


@pytest.mark.parametrize("cid", COMMITTED)
def test_the_first_view_of_a_committed_store_is_what_the_tidy_rows_gave(cid):
    _same(REPO / "data", cid)


def _campaign(data: Path, n: int = 600) -> None:
    """A 2^2 campaign of ``n`` runs through the store's write path: 3 hosts, run_seq per host, every
    7th run suspect, every 11th failed, two instances (the second of boot 2 on odd runs), two
    iterations on every 5th run, a constant metric and a response."""
    from labkit.design import Design
    from labkit.store import Store, now_iso
    from labkit.workloads.base import Measurement

    design = Design.from_dict(
        {
            "name": "sql",
            "factors": {"vcpus": [1, 2], "affinity": ["pinned", "floating"]},
            "replications": n // 4,
            "seed": 3,
        }
    )
    with Store.for_campaign(data, "sql") as st:
        st.set_meta(
            campaign_id="sql",
            design=design.to_dict(),
            backend="sim",
            created=now_iso(),
            workload={"name": "sim", "response": "wall_time_s"},
        )
        seq: dict[str, int] = {}
        for i, r in enumerate(design.plan()):
            host = f"h{i % 3}"
            seq[host] = seq.get(host, 0) + 1
            failed = i % 11 == 10
            md = {
                "host": host,
                "run_seq": seq[host],
                "boot_group": f"g{i // 2}",
                "instances": [
                    {"name": f"vm-{i}-0", "index": 0, "boot": 1},
                    {"name": f"vm-{i // 2}-1", "index": 1, "boot": 1 + i % 2},
                ],
            }
            if i % 7 == 3:
                md["suspect"] = "cpu_other 40% > 10%"
            its = (1, 2) if i % 5 == 0 else (None,)
            ms = (
                []
                if failed
                else [
                    Measurement(
                        metric,
                        1.0 + i % 13 + 0.5 * inst + (it or 0) if metric == "wall_time_s" else 8.0,
                        "s",
                        instance=inst,
                        **({"iteration": it} if it else {}),
                    )
                    for inst in (0, 1)
                    for it in its
                    for metric in ("wall_time_s", "solutions")
                ]
            )
            st.record_run(
                r,
                status="failed" if failed else "ok",
                started=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}",
                duration_s=1.0 + i % 3,
                measurements=ms,
                metadata=md,
                error="boom\nsecond line" if failed else None,
            )


def test_the_first_view_of_a_written_campaign_is_what_the_tidy_rows_gave(tmp_path):
    _campaign(tmp_path)
    runs = _same(tmp_path, "sql")
    # the campaign exercises what the SQL path reads: not every column constant
    assert runs["suspect"].any() and set(runs["host"]) == {"h0", "h1", "h2"}
    assert set(runs["boot"].dropna()) == {1, 2} and runs["iteration"].notna().any()
    assert (runs["status"] == "failed").any() and runs["instances"].max() == 2


def test_a_run_picker_lists_suspect_runs_first_and_at_most_the_cap(tmp_path):
    from labkit.report.explore_data import load_campaign, shown_runs

    _campaign(tmp_path)
    runs = load_campaign(tmp_path, "sql").runs
    every = shown_runs(runs, limit=len(runs))
    assert [r for _, r in every] == list(runs["run_id"])  # all runs, in run order
    suspects = list(runs.loc[runs["suspect"], "run_id"])
    capped = shown_runs(runs, limit=len(suspects) + 10)
    assert len(suspects) > 10 and len(capped) == len(suspects) + 10
    assert [r for _, r in capped[: len(suspects)]] == suspects  # the suspect runs first, in run order
    assert all(label == f"{r} (suspect)" for label, r in capped[: len(suspects)])
    assert [r for _, r in capped[len(suspects) :]] == list(runs.loc[~runs["suspect"], "run_id"][:10])


def test_the_first_figure_is_the_response_of_every_configuration(tmp_path):
    from matplotlib.figure import Figure

    from labkit.report.explore_data import first_view, load_campaign

    shutil.copytree(REPO / "data" / "affinity-local", tmp_path / "affinity-local")
    d = load_campaign(tmp_path, "affinity-local")
    words, fig = first_view(d)
    assert isinstance(fig, Figure) and "by configuration" in fig.axes[0].get_title()
    ok = int(((d.runs["status"] == "ok") & d.runs[d.response].notna()).sum())
    assert f"{ok} of {len(d.runs)} runs ok" in words.data
    # one x position per configuration of the factors that vary
    configs = d.runs[d.factors].drop_duplicates()
    assert len(fig.axes[0].get_xticks()) == len(configs)
