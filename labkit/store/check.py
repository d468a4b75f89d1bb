"""``labkit check ID``: verify a campaign's store and say what is wrong with it.

:func:`check_store` opens the store read-only (nothing is written) and checks, in turn:

* that it is an SQLite file at all, and its integrity (``PRAGMA integrity_check``);
* its schema: not written by a newer labkit (``PRAGMA user_version``, :data:`~labkit.store.SCHEMA_VERSION`),
  every table and column this labkit reads present, no column it does not know;
* every row: ``meta`` values and ``fingerprints`` data are JSON, the campaign's ``design`` and the
  pending adaptive round (``adaptive_pending``) are what labkit writes, each ``runs`` row's
  numbers are numbers, its ``levels`` and ``metadata`` JSON objects, its status a known one, each
  measurement's columns of their type, each earlier attempt's metadata a JSON object;
* orphans: measurements of a run the store does not hold;
* the code state (:mod:`labkit.store.codestate`): a kept uncommitted diff whose digest is not its
  key is a problem; a ``+dirty`` commit whose diff is not kept (a campaign from before labkit kept
  diffs) is a *warning*: the store reads, but its code cannot be rebuilt.

It returns a :class:`CheckResult`: the problems found, one line each naming the campaign, the
row (run id, meta key) and the column, the warnings, and what was counted.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from .codestate import code_state_of, diff_problems
from .rows import Malformed, check_measurement, json_object, parse_run
from .schema import CODE_DIFF_KEY, RUN_COLUMNS, SCHEMA_VERSION, newer_store_message, writer_version
from .sqlite import sqlite_uri

#: the tables and columns this labkit reads (``attempts``, ``claims``, ``samples`` and
#: ``store_info`` came later: a store of before may lack them)
COLUMNS = {
    "meta": ("key", "value"),
    "fingerprints": ("id", "data", "captured"),
    "runs": RUN_COLUMNS,
    "measurements": ("run_id", "instance", "metric", "value", "unit", "iteration"),
    "attempts": ("run_id", "status", "error", "started", "duration_s", "metadata", "fingerprint_id"),
    "claims": ("run_id", "host", "owner", "lease_until", "claimed"),
    "samples": ("run_id", "t", "metric", "value", "instance"),
    "store_info": ("key", "value"),
}
REQUIRED = ("meta", "fingerprints", "runs", "measurements")
#: problems listed at most (the count says how many there were)
MAX_LISTED = 200


@dataclass
class CheckResult:
    """What :func:`check_store` found: ``problems`` (one line each), ``warnings`` (what does not
    make the store wrong but should be known: a code state not recorded), ``counts`` (rows checked
    per table) and the store's ``schema`` and ``writer`` (labkit version, None when not recorded)."""

    path: Path
    campaign: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    schema: int | None = None
    writer: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def text(self) -> str:
        """The report ``labkit check`` prints."""
        if self.ok:
            counted = ", ".join(f"{n} {t}" for t, n in self.counts.items())
            return "\n".join(
                [
                    f"campaign {self.campaign}: store {self.path}: ok (schema {self.schema}, written by "
                    f"labkit {self.writer or '(version not recorded)'}; {counted})",
                    *(f"  warning: {w}" for w in self.warnings),
                ]
            )
        shown = self.problems[:MAX_LISTED]
        more = len(self.problems) - len(shown)
        lines = [f"campaign {self.campaign}: store {self.path}: {len(self.problems)} problem(s):"]
        lines += [f"  {p}" for p in shown]
        if more:
            lines.append(f"  ... and {more} more")
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def check_store(path: str | Path, campaign: str | None = None) -> CheckResult:
    """Check the store at ``path`` (see the module docstring); ``campaign`` names it in the
    report (default: its folder's name). Never raises for what it finds: it reports it."""
    path = Path(path)
    res = CheckResult(path, campaign or path.parent.name)
    cid = res.campaign

    def problem(text: str) -> None:
        res.problems.append(f"campaign {cid}: {text}")

    if not path.is_file():
        problem(f"no store file at {path}")
        return res
    if path.stat().st_size == 0:
        problem(f"{path} is empty (0 bytes): it was truncated")
        return res
    try:
        db = sqlite3.connect(sqlite_uri(path, readonly=True), uri=True)
    except sqlite3.DatabaseError as exc:
        problem(f"cannot open {path}: {exc}")
        return res
    try:
        try:
            bad = [r for (r,) in db.execute("PRAGMA integrity_check(50)")]
            res.schema = int(db.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            problem(f"not an SQLite store, or corrupt ({exc})")
            return res
        if bad != ["ok"]:
            problem(f"integrity check failed: {'; '.join(bad)[:500]}")
            return res
        res.writer = writer_version(db)
        if res.schema > SCHEMA_VERSION:
            problem(newer_store_message(path, res.writer, res.schema))
            return res
        have = _schema(db, problem)
        if not all(t in have for t in REQUIRED):
            return res
        _rows(db, have, res, problem)
    finally:
        db.close()
    return res


def _schema(db: sqlite3.Connection, problem) -> dict[str, set[str]]:
    """table -> its columns, for the tables this labkit knows; the schema's problems reported."""
    tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    have = {}
    for table, cols in COLUMNS.items():
        if table not in tables:
            if table in REQUIRED:
                problem(f"table {table} is missing: not a labkit store, or a damaged one")
            continue
        found = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        have[table] = found
        optional = {("measurements", "iteration"), ("samples", "instance")}  # migrated when written
        missing = [c for c in cols if c not in found and (table, c) not in optional]
        extra = sorted(found - set(cols))
        if missing:
            problem(f"table {table}: column(s) {', '.join(missing)} missing")
        if extra:
            problem(
                f"table {table}: column(s) {', '.join(extra)} this labkit does not know (a store written "
                "by another labkit, or altered by hand)"
            )
    return have


def _rows(db: sqlite3.Connection, have: dict[str, set[str]], res: CheckResult, problem) -> None:
    meta: dict[str, object] = {}
    diffs: dict[str, dict] = {}
    n = 0
    for key, value in db.execute("SELECT key, value FROM meta"):
        n += 1
        try:
            loaded = json.loads(value)
        except (TypeError, ValueError, RecursionError) as exc:
            problem(f"meta key {str(key)[:60]!r}: column value: not JSON ({str(exc).splitlines()[0][:80]})")
            continue
        if str(key).startswith(CODE_DIFF_KEY):
            diffs[str(key)[len(CODE_DIFF_KEY) :]] = loaded if isinstance(loaded, dict) else {}
        else:
            meta[key] = loaded
    res.counts["meta rows"] = n
    design = _design(meta, problem)
    _pending(meta, design, problem)

    res.counts["fingerprints"] = _json_objects(
        db, "SELECT id, data FROM fingerprints", "data", problem, lambda key: f"fingerprint {str(key)[:60]}"
    )
    _code_state(db, diffs, res, problem)

    runs: set[str] = set()
    n = 0
    for row in db.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs"):
        n += 1
        if isinstance(row[0], str):
            runs.add(row[0])
        try:
            parsed = parse_run(row)
        except Malformed as exc:
            problem(f"run {str(row[0])[:80]}: {exc}")
            continue
        lacking = sorted(set(design or ()) - set(parsed["levels"]))
        if lacking:
            problem(
                f"run {parsed['run_id']}: column levels: no level of the design's factor(s) "
                f"{', '.join(lacking)} (has {', '.join(sorted(parsed['levels']))[:120] or 'none'})"
            )
    res.counts["runs"] = n

    it = "iteration" if "iteration" in have["measurements"] else "NULL"
    n = orphans = 0
    orphan_runs: list[str] = []
    for rid, inst, metric, value, unit, iteration in db.execute(
        f"SELECT run_id, instance, metric, value, unit, {it} FROM measurements"
    ):
        n += 1
        if rid not in runs:
            orphans += 1
            if str(rid) not in orphan_runs:
                orphan_runs.append(str(rid)[:80])
            continue
        try:
            check_measurement(inst, metric, value, unit, iteration)
        except Malformed as exc:
            problem(f"run {rid}: {exc}")
    res.counts["measurements"] = n
    if orphans:
        shown = ", ".join(orphan_runs[:10]) + (
            f" and {len(orphan_runs) - 10} more" if len(orphan_runs) > 10 else ""
        )
        problem(f"{orphans} orphan measurement(s): of run(s) {shown}, which the store does not hold")

    if "attempts" in have:
        res.counts["earlier attempts"] = _json_objects(
            db,
            "SELECT run_id, metadata FROM attempts",
            "metadata",
            problem,
            lambda key: f"earlier attempt of run {str(key)[:80]}",
        )


def _code_state(db: sqlite3.Connection, diffs: dict[str, dict], res: CheckResult, problem) -> None:
    """The kept diffs are sound (:func:`~labkit.store.codestate.diff_problems`); a ``+dirty`` code
    state without its diff is a warning (:func:`~labkit.store.codestate.code_state_of`)."""
    for text in diff_problems(diffs):
        problem(text)
    fps = {}
    for key, value in db.execute("SELECT id, data FROM fingerprints"):
        try:
            fps[key] = json_object(value, "data")
        except Malformed:
            continue  # reported by the fingerprints' check
    state = code_state_of(fps, diffs)
    if state.kind == "dirty, not recorded":
        res.warnings.append(
            f"campaign {res.campaign}: {state.line(res.campaign)}: its code cannot be rebuilt"
        )


def _json_objects(db: sqlite3.Connection, sql: str, column: str, problem, what) -> int:
    """Check that the second column of each row of ``sql`` is a JSON object, naming a row that is
    not by ``what(its first column)``; the number of rows."""
    n = 0
    for key, value in db.execute(sql):
        n += 1
        try:
            json_object(value, column)
        except Malformed as exc:
            problem(f"{what(key)}: {exc}")
    return n


def _design(meta: dict, problem) -> list[str] | None:
    """The design's factor names (None when it is missing or unreadable: reported). Only its shape
    is checked: a design of an earlier labkit may hold keys this one no longer takes."""
    if "design" not in meta:
        if meta:
            problem("meta key 'design': missing: the campaign's design is not recorded")
        return None
    design = meta["design"]
    factors = design.get("factors") if isinstance(design, dict) else None
    if not isinstance(factors, dict) or not factors:
        problem(f"meta key 'design': column value: not a design (no factors): {str(design)[:80]}")
        return None
    return [str(f) for f in factors]


def _pending(meta: dict, factors: list[str] | None, problem) -> None:
    """The pending adaptive round's entries are runs (:func:`labkit.run.adaptive.pending_runs`
    checks them against the design when a campaign resumes)."""
    value = meta.get("adaptive_pending")
    if value is None:
        return
    from ..design import Run

    fields = {f.name for f in dataclasses.fields(Run)}
    if not isinstance(value, list):
        problem(
            f"meta key 'adaptive_pending': column value: a JSON {type(value).__name__}, not a list of runs"
        )
        return
    for i, entry in enumerate(value):
        where = f"meta key 'adaptive_pending': entry {i}"
        if not isinstance(entry, dict):
            problem(f"{where}: a JSON {type(entry).__name__}, not a run")
            continue
        unknown = sorted(set(entry) - fields)
        missing = sorted({"run_id", "order", "config", "replicate", "levels"} - set(entry))
        if unknown or missing:
            problem(
                f"{where}: not a run ("
                + "; ".join(
                    ([f"unknown field(s) {', '.join(map(repr, unknown))[:120]}"] if unknown else [])
                    + ([f"missing {', '.join(missing)}"] if missing else [])
                )
                + ")"
            )
            continue
        ints = [
            k
            for k in ("order", "config", "replicate", "block", "boot")
            if k in entry and (isinstance(entry[k], bool) or not isinstance(entry[k], int))
        ]
        if ints:
            problem(f"{where}: {ints[0]} {str(entry[ints[0]])[:40]!r} is not a whole number")
        elif not isinstance(entry["levels"], dict) or not set(factors or ()) <= set(entry["levels"]):
            problem(f"{where}: levels {str(entry['levels'])[:80]} are not a configuration of the design")
