"""What the explorer's first view needs of a campaign, read by SQL aggregates (issue 45).

At 100,000 runs the explorer read every measurement row (:meth:`labkit.store.Store.tidy`) and built
its run table from them before its first page: 14-21 s. :func:`load_campaign` reads only what
the first view shows, by SQL, into a :class:`CampaignData`: the runs' own columns, each run's
levels from the few metadata fields they come from (:func:`labkit.store.levels.run_levels`), and
per run the aggregates of its measurements (instances measured, boots, iterations, the mean of
the response over its instances); the response and the factors that vary are found by SQL
aggregates too. The result equals :func:`labkit.report.catalog.run_table` of the tidy rows
(tests/unit/test_explore_data.py). :func:`first_view` is the first figure: the response of every
configuration (:func:`labkit.report.plots.response_by_config`) drawn from that run table, before
the analysis (:func:`labkit.report.analyze`) and the telemetry are computed.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .catalog import OPTIONAL_RUN_COLUMNS, declared_response

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SHOWN_RUNS", "CampaignData", "first_view", "load_campaign", "shown_runs"]

#: the runs a per-run table or picker of the explorer lists at most ("first N of M")
SHOWN_RUNS = 500
#: the ok runs read one by one for the order in which metrics first appear (then one scan)
_FIRST_RUNS = 20
#: the metadata fields a run's levels come from (:func:`labkit.store.levels.run_levels`), but its
#: instances (their boots are read by SQL: :func:`_boots`)
_LEVEL_FIELDS = ("host", "run_seq", "suspect")
#: a run's recorded instances' (run id, index, boot), as :func:`labkit.store.levels.run_levels` reads them
_BOOTS = (
    "SELECT r.run_id, json_extract(j.value, '$.index'), json_extract(j.value, '$.boot') "
    "FROM runs r, json_each(r.metadata, '$.instances') j WHERE json_valid(r.metadata) "
    "AND json_type(r.metadata, '$.run_seq') IS NOT NULL AND json_type(r.metadata, '$.instances') = 'array' "
    "AND j.type = 'object' AND json_type(j.value, '$.name') = 'text' "
    "AND json_type(j.value, '$.index') IN ('integer', 'real')"
)


@dataclass
class CampaignData:
    """What the explorer keeps of one campaign: ``meta``, ``fingerprints``, ``factors`` (the
    design's factors that vary), ``metrics`` (metrics that vary, in order of first appearance:
    :func:`labkit.report.catalog.response_metrics`), ``response`` and ``response_why``
    (:func:`labkit.report.catalog.primary_response`), ``responses`` (one row per run, in run
    order: ``run_order``, ``run_id``, every factor, ``status`` and the response, the mean over
    the run's instances of an ok run) and :attr:`runs`, read when first asked for."""

    campaign: str
    meta: dict
    fingerprints: dict
    factors: list
    metrics: list
    response: str | None
    response_why: str
    responses: pd.DataFrame
    path: Path
    _runs: pd.DataFrame | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def runs(self) -> pd.DataFrame:
        """The run table (:func:`labkit.report.catalog.run_table` of the tidy rows), by SQL
        aggregates, read once (the runs' levels: a few fields of every run's metadata)."""
        with self._lock:
            if self._runs is None:
                design = list((self.meta.get("design") or {}).get("factors") or {})
                with _reading(self.path) as db:
                    self._runs = _run_table(db, self.responses, design, self.response)
            return self._runs


@contextmanager
def _reading(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the store at ``path``; SQLite's errors as a StoreError."""
    from ..store.sqlite import sqlite_uri, storage_error

    try:
        db = sqlite3.connect(sqlite_uri(path, readonly=True), uri=True)
    except sqlite3.Error as exc:
        raise storage_error(path, exc, "reading") from exc
    try:
        yield db
    except sqlite3.Error as exc:
        raise storage_error(path, exc, "reading") from exc
    finally:
        db.close()


def load_campaign(data_dir: str | Path, campaign: str) -> CampaignData:
    """The :class:`CampaignData` of the stored campaign ``campaign`` under ``data_dir`` (read-only):
    its meta and fingerprints through :class:`labkit.store.Store`, the rest by SQL aggregates."""
    from ..store import Store

    path = Path(data_dir) / campaign / "store.sqlite"
    with Store(path, readonly=True) as st:
        meta, fps = st.meta(), st.fingerprints()
    design = list((meta.get("design") or {}).get("factors") or {})
    with _reading(path) as db:
        metrics, present = _metrics(db)
        response, why = declared_response(meta, metrics, present)
        responses = _responses(db, design, response)
    factors = [f for f in design if f in responses and responses[f].nunique() > 1]
    return CampaignData(campaign, meta, fps, factors, metrics, response, why, responses, path)


def _metrics(db: sqlite3.Connection) -> tuple[list[str], set[str]]:
    """(metrics with successful values that vary, in the tidy rows' order of first appearance:
    run order, instance, metric; every metric measured)."""
    present = {str(m) for (m,) in db.execute("SELECT DISTINCT metric FROM measurements")}
    varies = dict(  # a metric varies when its smallest and largest successful values differ
        db.execute(
            "SELECT metric, coalesce(min(value) != max(value), 0) FROM measurements "
            "WHERE run_id IN (SELECT run_id FROM runs WHERE status = 'ok') GROUP BY metric"
        ).fetchall()
    )
    first: dict[str, tuple] = {}  # where each metric first appears: the first ok runs hold them all
    ok = db.execute("SELECT run_id, run_order FROM runs WHERE status = 'ok' ORDER BY run_order")
    for n, (rid, order) in enumerate(ok):
        if len(first) == len(varies) or n == _FIRST_RUNS:
            break
        for metric, inst in db.execute(
            "SELECT metric, min(instance) FROM measurements WHERE run_id = ? GROUP BY metric", (rid,)
        ):
            first.setdefault(metric, (order, inst, metric))
    late = sorted(set(varies) - set(first))
    if late:  # a metric of a later run: its first run by one scan
        marks = ", ".join("?" * len(late))
        for metric, order in db.execute(
            "SELECT m.metric, min(r.run_order) FROM measurements m JOIN runs r ON r.run_id = m.run_id "
            f"WHERE r.status = 'ok' AND m.metric IN ({marks}) GROUP BY m.metric",
            late,
        ).fetchall():
            (inst,) = db.execute(
                "SELECT min(m.instance) FROM measurements m JOIN runs r ON r.run_id = m.run_id "
                "WHERE r.run_order = ? AND r.status = 'ok' AND m.metric = ?",
                (order, metric),
            ).fetchone()
            first[metric] = (order, inst, metric)
    return [str(m) for m in sorted(varies, key=lambda m: first[m]) if varies[m]], present


def _responses(db: sqlite3.Connection, factors: list[str], response: str | None) -> pd.DataFrame:
    """One row per run in run order: run_order, run_id, the ``factors``, status and, with a
    ``response``, its mean over the run's instances (NA unless the run is ok)."""
    import pandas as pd

    out = pd.DataFrame(
        db.execute("SELECT run_order, run_id, levels, status FROM runs ORDER BY run_order").fetchall(),
        columns=["run_order", "run_id", "levels", "status"],
    )
    codes, texts = pd.factorize(out["levels"])  # one levels text per configuration, parsed once
    parsed = [json.loads(t) for t in texts]
    table = out[["run_order", "run_id"]].copy()
    for f in factors:
        by_config = pd.Series([p.get(f) for p in parsed], dtype=object).to_numpy()
        table[f] = pd.Series(by_config[codes]).infer_objects()
    table["status"] = out["status"]
    if response is not None:
        mean = dict(
            db.execute(
                "SELECT run_id, avg(value) FROM measurements WHERE metric = ? GROUP BY run_id", (response,)
            ).fetchall()
        )
        values = pd.Series(mean, dtype=float).reindex(pd.Index(out["run_id"])).to_numpy()
        table[response] = pd.Series(values).where((out["status"] == "ok").to_numpy())
    return table


def _json_field(kind: str | None, value: Any) -> Any:
    if kind in ("array", "object"):
        return json.loads(value)
    return {"true": True, "false": False}.get(kind or "", value)


def _run_table(
    db: sqlite3.Connection, responses: pd.DataFrame, factors: list[str], response: str | None
) -> pd.DataFrame:
    """:func:`labkit.report.catalog.run_table` of the store's tidy rows, by SQL aggregates, from
    ``responses`` (:func:`_responses`) and the runs' levels."""
    import pandas as pd

    from ..store.levels import run_levels

    fields = ", ".join(
        f"CASE WHEN json_valid(metadata) THEN json_type(metadata, '$.{k}') END, "
        f"CASE WHEN json_valid(metadata) THEN json_extract(metadata, '$.{k}') END"
        for k in _LEVEL_FIELDS
    )
    rows = db.execute(f"SELECT run_id, run_order, started, duration_s, error, {fields} FROM runs").fetchall()
    light = []
    for row in rows:
        md = {
            k: _json_field(row[5 + 2 * i], row[6 + 2 * i])
            for i, k in enumerate(_LEVEL_FIELDS)
            if row[5 + 2 * i] is not None
        }
        light.append((row[0], row[1], row[2], md))
    levels = run_levels(light)
    ids = pd.Index(responses["run_id"])
    out = pd.DataFrame(
        [r[:5] for r in rows], columns=["run_id", "run_order", "started", "duration_s", "error"]
    )
    out = out.set_index("run_id").reindex(ids)
    table = responses[["run_order", "run_id", *factors, "status"]].copy()
    lv = [levels[rid] for rid in ids]
    table["host"] = [x.host or "" for x in lv]
    table["started"] = out["started"].to_numpy()
    table["duration_s"] = out["duration_s"].to_numpy()
    if response is not None:
        table[response] = responses[response]
    measured = pd.DataFrame(
        db.execute("SELECT DISTINCT run_id, instance FROM measurements").fetchall(),
        columns=["run_id", "instance"],
    )
    table["instances"] = (
        measured.groupby("run_id")["instance"].nunique().reindex(ids).fillna(0).astype(int).to_numpy()
    )
    for col in OPTIONAL_RUN_COLUMNS:
        if col == "suspect":
            table[col] = [x.suspect_reason is not None for x in lv]
        elif col == "run_seq":
            table[col] = pd.array([x.run_seq for x in lv], dtype="Int64")
        elif col == "boot":
            table[col] = _one_or_count(_boots(db, measured), ids)
        else:
            table[col] = _one_or_count(_iterations(db), ids)
    error = pd.Series(out["error"].to_numpy(), dtype=object).fillna("").astype(str)
    some = error != ""
    table["error"] = error.where(~some, error[some].map(lambda e: (e.splitlines() or [""])[0][:160]))
    return table


def _boots(db: sqlite3.Connection, measured: pd.DataFrame) -> pd.DataFrame:
    """``run_id``, ``v``: the boot of each instance a run measured (``measured``: run_id, instance),
    1 when its metadata does not name it (:func:`labkit.store.levels.run_levels`)."""
    import pandas as pd

    named = pd.DataFrame(db.execute(_BOOTS).fetchall(), columns=["run_id", "instance", "boot"])
    index = pd.to_numeric(named["instance"], errors="coerce")
    boot = pd.to_numeric(named["boot"], errors="coerce")
    named = named.assign(instance=index, boot=boot.where(boot.mod(1).eq(0) & boot.ne(0), 1))
    named = named[index.mod(1).eq(0)].astype({"instance": "int64", "boot": "int64"})
    named = named.drop_duplicates(["run_id", "instance"], keep="last")  # as a dict keeps the last
    got = measured.merge(named, on=["run_id", "instance"], how="left")
    return pd.DataFrame({"run_id": got["run_id"], "v": got["boot"].fillna(1).astype("int64").astype(object)})


def _iterations(db: sqlite3.Connection) -> pd.DataFrame:
    """``run_id``, ``v``: the distinct iterations (not 0) each run measured (none in a store of before)."""
    import pandas as pd

    cols = {c for (_, c, *_) in db.execute("PRAGMA table_info(measurements)")}
    got = (
        db.execute("SELECT DISTINCT run_id, iteration FROM measurements WHERE iteration != 0").fetchall()
        if "iteration" in cols
        else []
    )
    return pd.DataFrame(got, columns=["run_id", "v"])


def _one_or_count(values: pd.DataFrame, ids: pd.Index) -> pd.Series:
    """Per run of ``ids``: its one value in ``values`` (``run_id``, ``v``: integers), else how many
    distinct values it has (NA for none), as the tidy rows' run-level column."""
    import pandas as pd

    g = values.dropna(subset=["v"]).groupby("run_id")["v"]
    n, first = g.nunique(), g.first()
    col = first.astype(object).where(n <= 1, n.astype(object)).reindex(ids)
    return pd.Series(col.to_numpy(), dtype=object).where(col.notna().to_numpy(), pd.NA).astype("Int64")


def shown_runs(runs: pd.DataFrame, limit: int = SHOWN_RUNS) -> list[tuple[str, str]]:
    """A run picker's options, (label, run id), suspect runs labelled so: every run in run order;
    of more than ``limit`` runs, the suspect ones first, then the others, ``limit`` in all."""
    ids = [str(r) for r in runs["run_id"]]
    flagged = list(runs["suspect"].fillna(False).astype(bool)) if "suspect" in runs else [False] * len(ids)
    marked = {r for r, f in zip(ids, flagged) if f}
    if len(ids) > limit:
        ids = ([r for r in ids if r in marked] + [r for r in ids if r not in marked])[:limit]
    return [(f"{r} (suspect)" if r in marked else r, r) for r in ids]


def first_view(d: CampaignData, *, alpha: float = 0.05) -> list:
    """The first figure of ``d``, after a line saying what it shows: the mean response of every
    configuration with its interval, of the ok runs' means (``d.responses``); nothing when there
    is no response."""
    from IPython.display import Markdown

    from . import plots
    from .escape import escape_md

    if d.response is None or d.response not in d.responses:
        return []
    runs = d.responses
    ok = runs[(runs["status"] == "ok") & runs[d.response].notna()]
    if not len(ok):
        return []
    by = d.factors or []
    data = ok[[*by, d.response]] if by else ok[[d.response]].assign(all="all")
    fig = plots.response_by_config(
        data,
        by or ["all"],
        d.response,
        alpha=alpha,
        title=f"{d.response} by configuration ({len(ok)} ok runs)",
    )
    return [
        Markdown(
            f"**{escape_md(d.campaign)}: {escape_md(d.response)} by configuration** "
            f"(each run's mean over its instances; {len(ok)} of {len(runs)} runs ok)"
        ),
        fig,
    ]
