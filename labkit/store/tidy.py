"""The store's tidy table: one row per measurement with every factor's level and the levels of
the measurement (:mod:`labkit.store.levels`), read column-wise and in chunks
(:meth:`TidyTables.tidy`, :meth:`TidyTables.tidy_chunks`), and with the runs an analysis reads,
each run's metadata read once by SQL (:meth:`TidyTables.analysis_tables`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from .bulk import JsonBatch, gc_paused
from .levels import boot_key, rekey, run_levels
from .rows import Malformed, check_measurement, json_value, parse_run
from .runs import RunRecords
from .schema import RUN_COLUMNS, STATUSES, TIDY_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

#: the metadata fields the levels of a run are read from (:mod:`labkit.store.levels`)
_LEVEL_FIELDS = ("host", "run_seq", "suspect", "boot_group", "instances")
#: the metadata fields an analysis reads whole (:meth:`TidyTables.analysis_tables`): the telemetry
#: summary (:func:`labkit.run.telemetry.covariates`, :func:`~labkit.run.telemetry.measurement_notes`),
#: the manipulation checks (:func:`labkit.report.treatments.untaken`) and the workload's own times
#: (:func:`labkit.run.runlength.measured_work`)
ANALYSIS_FIELDS = ("telemetry", "treatments", "workload_s")
#: SQL: the two flags :func:`~labkit.run.telemetry.measurement_notes` reads from the rest of the
#: metadata: the guard did not look before the run, and a ``limits_enforced`` false anywhere
_ANALYSIS_FLAGS = (
    "json_type(metadata, '$.quiet_check.measured') = 'false'",
    "EXISTS (SELECT 1 FROM json_tree(metadata) WHERE key = 'limits_enforced' AND type = 'false')",
)
#: a ``runs`` row SQLite can read as labkit writes it (:func:`parse_run` checks the others in Python)
_RUN_VALID = (
    "typeof(run_id) = 'text' AND typeof(run_order) = 'integer' AND typeof(config) = 'integer' "
    "AND typeof(replicate) = 'integer' AND typeof(duration_s) IN ('integer', 'real') "
    f"AND status IN ({', '.join(repr(s) for s in STATUSES)}) "
    "AND (error IS NULL OR typeof(error) = 'text') AND typeof(started) = 'text' "
    "AND (fingerprint_id IS NULL OR typeof(fingerprint_id) = 'text') "
    "AND typeof(levels) = 'text' AND (CASE WHEN json_valid(levels) THEN json_type(levels) END) = 'object' "
    "AND typeof(metadata) = 'text' "
    "AND (CASE WHEN json_valid(metadata) THEN json_type(metadata) END) = 'object'"
)


def _measurement_valid(has_iteration: bool) -> str:
    """SQL: a ``measurements`` row (alias ``m``) as labkit writes it (:func:`check_measurement`)."""
    return (
        "typeof(m.instance) = 'integer' AND typeof(m.metric) = 'text' AND m.metric != '' "
        "AND (m.value IS NULL OR typeof(m.value) IN ('integer', 'real')) "
        "AND (m.unit IS NULL OR typeof(m.unit) = 'text')"
        + (" AND typeof(m.iteration) = 'integer' AND m.iteration >= 0" if has_iteration else "")
    )


#: the columns of :meth:`TidyTables.runs` (and of the exported runs.csv) before the factors' levels
RUNS_HEAD = ("run_id", "run_order", "config", "replicate")
#: ... and after them
RUNS_TAIL = (
    "status",
    "error",
    "started",
    "duration_s",
    "metadata",
    "fingerprint_id",
    "host",
    "run_seq",
    "suspect",
    "suspect_reason",
)


class RunTable(NamedTuple):
    """The runs as the tidy rows read them (:meth:`TidyTables._read_runs`)."""

    runs: pd.DataFrame
    instances: dict[tuple[str, int], tuple[str, int]]  # (run_id, index) -> (instance id, boot)
    texts: dict[str, str]  # run_id -> its stored metadata (when asked)
    notes: dict[str, dict]  # run_id -> what an analysis reads of it (when asked)


class TidyTables(RunRecords):
    """The tidy rows of :class:`labkit.store.Store`."""

    def _run_table(self) -> tuple[pd.DataFrame, dict[tuple[str, int], tuple[str, int]], dict[str, str]]:
        """``(runs, instances, stored_md)`` of :meth:`_read_runs` with the stored metadata text of
        each run."""
        with gc_paused():
            got = self._read_runs(texts=True)
        return got.runs, got.instances, got.texts

    def _read_runs(self, *, texts: bool = False, fields: bool = False) -> RunTable:
        """One row per run that reads, in run order (columns run_id, run_order, config, replicate,
        levels (its JSON text), status, error, started, duration_s, fingerprint_id, host, run_seq,
        suspect, suspect_reason), ``(run_id, index) -> (instance id, boot)``
        (:func:`~labkit.store.levels.key_instances`), with ``texts`` the stored metadata text of
        each run and with ``fields`` what an analysis reads of it (:meth:`analysis_tables`).

        A row SQLite's JSON functions accept is read there, only the fields asked for leaving
        SQLite (its host, run_seq, suspect flag, boot group and instances); a row they do not
        (e.g. a NaN Python wrote) is parsed whole in Python (:func:`parse_run`) and reported and
        left out when it is not what labkit writes."""
        import pandas as pd

        base_columns = RUN_COLUMNS[:-2] + ("fingerprint_id",)  # every column but the metadata text
        cols = ", ".join(base_columns)
        names = _LEVEL_FIELDS + (ANALYSIS_FIELDS if fields else ())
        md_fields = ", ".join(f"json_type(metadata, '$.{k}'), json_extract(metadata, '$.{k}')" for k in names)
        more = "".join(f", {flag}" for flag in _ANALYSIS_FLAGS) if fields else ""
        first = len(base_columns)  # the columns before the metadata's fields
        base, light, text, notes = [], {}, {}, {}
        later = JsonBatch()
        for row in self._read(
            f"SELECT {cols}, {md_fields}{more}{', metadata' if texts else ''} FROM runs "
            f"WHERE {_RUN_VALID} ORDER BY run_order"
        ):
            rid = row[0]
            md: dict = {}
            note: dict = {}
            for i, k in enumerate(names):
                kind = row[first + 2 * i]
                if kind is None:
                    continue
                into = md if i < len(_LEVEL_FIELDS) else note
                if kind in ("array", "object"):
                    later.put(into, k, row[first + 2 * i + 1])
                else:
                    into[k] = json_value(kind, row[first + 2 * i + 1])
            if fields:
                blind, unconfined = row[first + 2 * len(names) : first + 2 * len(names) + 2]
                if blind:
                    note["quiet_check"] = {"measured": False}
                if unconfined:
                    note["limits_enforced"] = False
                notes[rid] = note
            light[rid] = md
            if texts:
                text[rid] = row[-1]
            base.append(row[:first])
        later.flush()
        # (coalesce: a NULL of SQLite's three-valued logic, e.g. json_type of metadata it cannot read,
        # is a row to parse whole, not one left out of both queries)
        slow = [
            row
            for row in self._read(
                f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE NOT coalesce({_RUN_VALID}, 0) "
                "ORDER BY run_order"
            )
        ]
        for row in slow:
            try:
                r = parse_run(row)
            except Malformed as exc:
                self._malformed(f"run {str(row[0])[:80]}", exc)
                continue
            light[r["run_id"]] = r["metadata"]
            if texts:
                text[r["run_id"]] = row[9]
            if fields:
                notes[r["run_id"]] = r["metadata"]  # read whole: what every reader of it reads
            base.append(
                (
                    r["run_id"],
                    r["run_order"],
                    r["config"],
                    r["replicate"],
                    row[4],
                    r["status"],
                    r["error"],
                    r["started"],
                    r["duration_s"],
                    r["fingerprint_id"],
                )
            )
        if slow:
            base.sort(key=lambda b: b[1])
        runs = pd.DataFrame(base, columns=list(base_columns))
        levels = rekey(
            run_levels((b[0], b[1], b[7], light[b[0]]) for b in base),
            {rid: boot_key(rid, md) for rid, md in light.items()},
        )
        lv = [levels[rid] for rid in runs["run_id"]]
        runs["host"] = [x.host for x in lv]
        runs["run_seq"] = pd.array([x.run_seq for x in lv], dtype="Int64")
        runs["suspect"] = [x.suspect_reason is not None for x in lv]
        runs["suspect_reason"] = pd.Series([x.suspect_reason for x in lv], dtype=object)
        instances = {(x.run_id, i): (name, x.boots.get(i, 1)) for x in lv for i, name in x.names.items()}
        return RunTable(runs, instances, text, notes)

    def _bad_measurements(self, has_it: bool) -> set[str]:
        """The runs with a measurement row that is not what labkit writes (found by SQL, each
        reported as :func:`check_measurement` words it)."""
        bad: set[str] = set()
        it = "iteration" if has_it else "NULL"
        for rid, inst, metric, value, unit, iteration in self._read(
            f"SELECT run_id, instance, metric, value, unit, {it} FROM measurements m "
            f"WHERE NOT ({_measurement_valid(has_it)})"
        ):
            try:
                check_measurement(inst, metric, value, unit, iteration)
            except Malformed as exc:
                if rid not in bad:
                    self._malformed(f"run {rid}", exc)
                bad.add(rid)
        return bad

    def tidy(self) -> pd.DataFrame:
        """One row per measurement, with every factor's level as a column (docs/design.md "Store").

        Columns: campaign, run_id, run_order, replicate, config, <factor columns>,
        instance (the id of the instance that measured it: its name, unique per started instance;
        ``<name>@<boot>`` should two boots have drawn one name, :func:`~labkit.store.levels.key_instances`),
        metric, value, unit, status, error, started, duration_s, fingerprint_id,
        host (the host that ran it: a testbed host's name, ``local`` on this machine), then
        the levels of the measurement: instance_index (the instance's index in its run),
        boot (the instance's start count within the campaign, 1-based), run_seq (order of the run
        on its host, 1-based, in execution order), iteration (1-based iteration inside the run for
        a workload that reports repeated iterations, NA otherwise), and the quiet-host guard's
        suspect (bool) and suspect_reason. ``instance_index``, ``boot``, ``run_seq`` and
        ``iteration`` are nullable integers. A failed or timed-out run has one row with
        metric/value (and instance) empty. A store written before levels were recorded is read
        as described in :mod:`labkit.store.levels`.

        Read column-wise: one SQL query for the measurements, the runs' JSON read by SQLite (only
        the fields the levels need) and each distinct ``levels`` text parsed once
        (:meth:`tidy_chunks`, which :meth:`export` writes from chunk by chunk).
        """
        import pandas as pd

        with gc_paused():  # no reference cycle among the rows: the collector only slows them
            parts = list(self.tidy_chunks())
        return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True).infer_objects()

    def tidy_chunks(self, rows: int = 200_000) -> Iterator[pd.DataFrame]:
        """:meth:`tidy`'s rows, at most ``rows`` at a time, in its order and with its columns and
        types (at least one frame, empty for a store without runs). Memory: the chunk, plus a few
        fields per run and per instance."""
        with gc_paused():
            table = self._read_runs()
        return self._tidy_parts(table, rows)

    def analysis_tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``(tidy, runs)`` for an analysis (:func:`labkit.report.analysis.analyze`), the runs read
        once: :meth:`tidy`, and :meth:`runs`'s rows and columns with each run's ``metadata`` holding
        only what the analysis reads of it: its ``telemetry``, ``treatments`` and ``workload_s`` as
        stored, ``quiet_check: {"measured": false}`` when the guard did not look before it and
        ``limits_enforced: false`` when any part of it says so. Read by SQLite's JSON functions
        (a row they cannot read is parsed whole, as :meth:`runs` would), no run's metadata parsed
        in Python."""
        import pandas as pd

        with gc_paused():  # no reference cycle among the rows: the collector only slows them
            table = self._read_runs(fields=True)
            runs = table.runs
            parsed = {t: json.loads(t) for t in runs["levels"].unique()}  # one per configuration
            head, tail = list(RUNS_HEAD), list(RUNS_TAIL)
            out = pd.DataFrame()  # as runs() gives it for a store without runs
            if len(runs):
                codes, texts = pd.factorize(runs["levels"])  # a frame of the distinct levels, one row per run
                levels = pd.DataFrame([parsed[t] for t in texts]).iloc[codes].set_axis(runs.index)
                keys = [k for k in levels.columns if k not in head + tail]
                rest = runs.drop(columns=head + ["levels"]).assign(
                    metadata=[table.notes[r] for r in runs["run_id"]]
                )
                out = pd.concat([runs[head], levels[keys], rest], axis=1)[head + keys + tail]
            parts = list(self._tidy_parts(table, 200_000))
            tidy = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True).infer_objects()
            return tidy, out

    def _tidy_parts(self, table: RunTable, rows: int) -> Iterator[pd.DataFrame]:
        """:meth:`tidy_chunks` from the runs read (:meth:`_read_runs`)."""
        import pandas as pd

        meta = self.meta()
        factors = list(meta.get("design", {}).get("factors", {}))
        cols = TIDY_COLUMNS[:5] + factors + TIDY_COLUMNS[5:]
        has_it = "iteration" in self._columns("measurements")  # not in a store of before (read-only)
        runs, instances = table.runs.copy(), table.instances
        bad = self._bad_measurements(has_it)
        if bad:
            runs = runs[~runs["run_id"].isin(bad)]
        # the measurements of runs left out (unreadable, or with a bad measurement) are dropped below
        every = len(runs) == self._read("SELECT count(*) FROM runs").fetchone()[0]
        parsed = {
            t: json.loads(t) for t in runs["levels"].unique()
        }  # distinct levels texts: one per configuration
        for f in factors:
            runs[f] = runs["levels"].map(lambda t, f=f: parsed[t].get(f))
        runs = runs.drop(columns=["levels"]).assign(campaign=meta.get("campaign_id")).set_index("run_id")
        inst = pd.DataFrame(
            [(rid, i, name, boot) for (rid, i), (name, boot) in instances.items()],
            columns=["run_id", "instance_index", "instance", "boot"],
        )
        q = (
            "SELECT r.run_id, m.instance, m.metric, m.value, m.unit, "
            f"{'m.iteration' if has_it else 'NULL'} "
            "FROM runs r LEFT JOIN measurements m ON m.run_id = r.run_id "
            f"ORDER BY r.run_order, m.instance, m.metric{', m.iteration' if has_it else ''}"
        )
        for got in self._chunks(self._read(q), rows):
            m = pd.DataFrame(
                got, columns=["run_id", "instance_index", "metric", "value", "unit", "iteration"]
            )
            if not every:
                m = m[m["run_id"].isin(runs.index)]
            out = m.join(runs, on="run_id")
            out["instance_index"] = out["instance_index"].astype("Int64")
            out = out.merge(
                inst.astype({"instance_index": "Int64"}),
                on=["run_id", "instance_index"],
                how="left",
                sort=False,
            )
            miss = out["instance"].isna() & out["instance_index"].notna()
            if miss.any():  # an instance the run's metadata does not name: <run_id>:<index>, boot 1
                out.loc[miss, "instance"] = (
                    out.loc[miss, "run_id"] + ":" + out.loc[miss, "instance_index"].astype(str)
                )
                out.loc[miss, "boot"] = 1
            out["iteration"] = out["iteration"].where(out["iteration"].fillna(0) != 0)
            out = out.reindex(columns=cols)
            for col in ("instance_index", "boot", "run_seq", "iteration"):
                out[col] = out[col].astype("Int64")
            out["suspect"] = out["suspect"].astype(bool)
            for col in ("instance", "metric", "unit", "error", "fingerprint_id", "host", "suspect_reason"):
                out[col] = out[col].astype(object).where(out[col].notna(), None)
            out = out.infer_objects()  # the column types the DataFrame constructor would give
            yield out.reset_index(drop=True)
