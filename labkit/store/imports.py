"""Import other tools' results: ``labkit import MANIFEST.yaml`` (docs/import.md).

A manifest names the campaign, the parser that reads the files (a labkit workload's own, or
``csv`` with a column mapping), the factors and their levels, and the files with the factor
levels each holds::

    campaign: stream-2014
    workload: stream          # stream, fio, sysbench, oltp, iperf3, hpcc, apache (ab), redis, npb, parsec, csv
    factors: {platform: [native, docker, kvm]}
    files:
      - {platform: native, path: results/linux.log}
      - {platform: docker, path: results/docker.log}

Each report found in a file is one run, in file order (the run order is the order read: the
files in the manifest's order, the reports in each file's order); a file with several reports
(repeated runs appended to one log) gives several runs. Paths are relative to the manifest.
Each tool's parser (how its files are cut into reports and each report read) lives in
:mod:`labkit.store.import_formats`.

The campaign is stored through the :class:`~labkit.store.Store`'s public API like a campaign
that ran (its design, one run per report with its measurements), so every analysis, report,
export and the explorer read it; its ``meta`` says it was imported (``imported``: each file's
SHA-256 and size, the reports it gave, the parser and its version, the labkit version, the
manifest). Nothing is half-imported: every file is read and parsed before anything is written,
the store is written in a private staging directory beside the campaign's and renamed into place
as a whole, and a campaign that exists already is refused. An error names the file, the line
and what was expected (:class:`ImportRefused`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..core.clock import now_iso
from ..core.ids import check_campaign_id
from ..core.paths import check_data_dir
from ..errors import BenchmarkError, ConfigError, LabkitError
from .import_formats import ALIASES, CSV, FORMATS, Report, format_names
from .store import Store

#: the keys a manifest may hold
MANIFEST_KEYS = {
    "campaign",
    "workload",
    "factors",
    "files",
    "params",
    "columns",
    "response",
    "description",
    "host",
    "replications",
}
#: a file larger than this is refused (a log of reports, not a data set)
MAX_FILE_BYTES = 256 << 20


class ImportRefused(ConfigError):
    """The manifest or one of its files cannot be imported; nothing was written. The message names
    the manifest or the file, the line, and what was expected there."""


# -- the manifest ----------------------------------------------------------------------------
@dataclass
class Manifest:
    path: Path
    campaign: str
    workload: str
    factors: dict[str, list]
    files: list[dict]
    params: dict
    columns: dict | None
    response: str | None
    description: str
    host: dict | None
    raw: dict


def load_manifest(path: str | Path) -> Manifest:
    """Read and check a manifest; :class:`ImportRefused` naming the key and what is allowed."""
    from ..core.yamlsafe import load_yaml

    path = Path(path)
    try:
        data = load_yaml(path)
    except LabkitError as exc:
        raise ImportRefused(str(exc)) from None
    where = str(path)
    if not isinstance(data, dict):
        raise ImportRefused(f"{where}: a manifest is a mapping with keys {', '.join(sorted(MANIFEST_KEYS))}")
    unknown = sorted(str(k) for k in data if k not in MANIFEST_KEYS)
    if unknown:
        raise ImportRefused(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(MANIFEST_KEYS))}"
        )
    for key in ("campaign", "workload", "factors", "files"):
        if key not in data:
            raise ImportRefused(
                f"{where}: '{key}' is missing (a manifest names campaign, workload, factors, files)"
            )
    try:
        campaign = check_campaign_id(data["campaign"])
    except ConfigError as exc:
        raise ImportRefused(f"{where}: 'campaign': {exc}") from None
    workload = data["workload"]
    if not isinstance(workload, str) or (
        workload not in FORMATS and workload not in ALIASES and workload != CSV
    ):
        raise ImportRefused(
            f"{where}: 'workload': {str(workload)[:40]!r} is not a parser labkit has; use one of "
            f"{', '.join(format_names())}"
        )
    factors = data["factors"]
    if (
        not isinstance(factors, dict)
        or not factors
        or not all(isinstance(k, str) and isinstance(v, list) for k, v in factors.items())
    ):
        raise ImportRefused(f"{where}: 'factors' must map each factor name to its list of levels")
    files = data["files"]
    if not isinstance(files, list) or not files or not all(isinstance(f, dict) for f in files):
        raise ImportRefused(
            f"{where}: 'files' must be a list of mappings like {{path: results/a.log, <factor>: <level>}}"
        )
    params = data.get("params") or {}
    if not isinstance(params, dict):
        raise ImportRefused(f"{where}: 'params' must be a mapping (e.g. {{test: cpu}} for sysbench)")
    columns = data.get("columns")
    if workload == CSV:
        _check_columns(where, columns, factors)
    elif columns is not None:
        raise ImportRefused(f"{where}: 'columns' is for workload: csv only")
    host = data.get("host")
    if host is not None and not isinstance(host, dict):
        raise ImportRefused(f"{where}: 'host' must be a mapping of host facts (cpu, kernel, ...)")
    response = data.get("response")
    if response is not None and not isinstance(response, str):
        raise ImportRefused(f"{where}: 'response' must be a metric name")
    return Manifest(
        path,
        campaign,
        ALIASES.get(workload, workload),
        factors,
        files,
        params,
        columns,
        response,
        str(data.get("description") or ""),
        host,
        data,
    )


def _check_columns(where: str, columns: Any, factors: dict) -> None:
    if (
        not isinstance(columns, dict)
        or not isinstance(columns.get("metrics"), dict)
        or not columns["metrics"]
    ):
        raise ImportRefused(
            f"{where}: workload csv needs 'columns: {{metrics: {{<metric>: {{column: <CSV column>, "
            "unit: <unit>}}}}, factors: {{<factor>: <CSV column>}}}}' (factors optional)"
        )
    bad = sorted(set(columns) - {"metrics", "factors", "scale"})
    if bad:
        raise ImportRefused(f"{where}: 'columns': unknown key(s) {', '.join(bad)}; allowed: metrics, factors")
    for metric, spec in columns["metrics"].items():
        if (
            not isinstance(metric, str)
            or not isinstance(spec, dict)
            or not isinstance(spec.get("column"), str)
            or not isinstance(spec.get("unit"), str)
        ):
            raise ImportRefused(
                f"{where}: columns.metrics.{metric}: give {{column: <CSV column>, unit: <unit>}} "
                "(the unit is required: a number without its unit is not imported)"
            )
        scale = spec.get("scale", 1)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ImportRefused(f"{where}: columns.metrics.{metric}.scale must be a number")
    fcols = columns.get("factors") or {}
    if not isinstance(fcols, dict) or any(
        f not in factors or not isinstance(c, str) for f, c in fcols.items()
    ):
        raise ImportRefused(f"{where}: columns.factors must map factors of 'factors' to CSV column names")


# -- importing ---------------------------------------------------------------------------------
@dataclass
class _Parsed:
    levels: dict
    rows: list
    versions: dict
    file: str
    report: int
    lines: tuple[int, int]


def _read(manifest: Manifest, entry: dict, i: int) -> tuple[str, Path, bytes]:
    where = f"{manifest.path}: files[{i}]"
    rel = entry.get("path")
    if not isinstance(rel, str) or not rel:
        raise ImportRefused(f"{where}: 'path' is missing (the file to read, relative to the manifest)")
    path = (manifest.path.parent / rel) if not os.path.isabs(rel) else Path(rel)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ImportRefused(
                f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB; import a log of reports, not a data set"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ImportRefused(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    return rel, path, data


def _levels(manifest: Manifest, entry: dict, where: str, csv_factors: set[str]) -> dict:
    out = {}
    extra = sorted(set(entry) - {"path"} - set(manifest.factors))
    if extra:
        raise ImportRefused(
            f"{where}: {', '.join(extra)} is not a factor of the manifest "
            f"({', '.join(manifest.factors)}) nor 'path'"
        )
    for name, levels in manifest.factors.items():
        if name in csv_factors:
            continue
        if name not in entry:
            raise ImportRefused(f"{where}: no level of factor {name!r} (one of {levels})")
        if entry[name] not in levels:
            raise ImportRefused(f"{where}: {name} = {entry[name]!r} is not one of the levels {levels}")
        out[name] = entry[name]
    return out


def _parse_csv(manifest: Manifest, text: str, shown: str, base: dict) -> list[tuple[Report, list]]:
    from ..workloads.base import Measurement

    assert manifest.columns is not None
    metrics, fcols = manifest.columns["metrics"], manifest.columns.get("factors") or {}
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise ImportRefused(f"{shown} line 1: empty file; expected a CSV header naming the columns") from None
    header = [h.strip() for h in header]
    wanted = [s["column"] for s in metrics.values()] + list(fcols.values())
    missing = [c for c in wanted if c not in header]
    if missing:
        raise ImportRefused(
            f"{shown} line 1: no column {missing[0]!r} in the header ({', '.join(header)[:200]})"
        )
    out = []
    for rec in reader:
        n = reader.line_num
        if not any(x.strip() for x in rec):
            continue
        if len(rec) != len(header):
            raise ImportRefused(
                f"{shown} line {n}: {len(rec)} field(s), expected {len(header)} as in the header"
            )
        row = dict(zip(header, rec))
        levels = dict(base)
        for f, col in fcols.items():
            value = _level_of(row[col].strip(), manifest.factors[f])
            if value is None:
                raise ImportRefused(
                    f"{shown} line {n}: column {col!r} = {row[col]!r} is not a level of factor "
                    f"{f!r} ({manifest.factors[f]})"
                )
            levels[f] = value
        ms = []
        for metric, spec in metrics.items():
            cell = row[spec["column"]].strip()
            try:
                value = float(cell) * float(spec.get("scale", 1))
            except ValueError:
                raise ImportRefused(
                    f"{shown} line {n}: column {spec['column']!r} = {cell!r}: expected a number "
                    f"({metric}, {spec['unit']})"
                ) from None
            ms.append(Measurement(metric, value, spec["unit"]))
        out.append((Report("", n, n, levels), ms))
    if not out:
        raise ImportRefused(f"{shown}: no data row after the header")
    return out


def _level_of(text: str, levels: list) -> Any:
    """The declared level whose text is ``text`` (a CSV cell is text; the manifest's levels may be numbers)."""
    return next((lv for lv in levels if str(lv) == text), None)


def parse_manifest(manifest: Manifest) -> tuple[list[_Parsed], list[dict]]:
    """Every report of every file, parsed; nothing written. Returns (reports in run order, the
    files' records: path, sha256, bytes, reports)."""
    fmt = FORMATS.get(manifest.workload)
    csv_factors = set((manifest.columns or {}).get("factors") or {}) if manifest.workload == CSV else set()
    parsed: list[_Parsed] = []
    records = []
    for i, entry in enumerate(manifest.files):
        rel, path, data = _read(manifest, entry, i)
        where = f"{manifest.path}: files[{i}] ({rel})"
        base = _levels(manifest, entry, where, csv_factors)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise ImportRefused(
                f"{rel} line {line}: not UTF-8 text (byte {exc.start}); expected a tool's text output"
            ) from None
        if fmt is None:  # csv
            found = _parse_csv(manifest, text, rel, base)
            for k, (rep, rows) in enumerate(found, 1):
                parsed.append(_Parsed(rep.levels, rows, {}, rel, k, (rep.first, rep.last)))
        else:
            reports = fmt.split(text)
            if not reports:
                raise ImportRefused(f"{rel} line 1: no {fmt.tool} report found; expected {fmt.expected}")
            for k, rep in enumerate(reports, 1):
                try:
                    rows, versions = fmt.parse(rep.text, manifest.params)
                except (BenchmarkError, ConfigError) as exc:
                    why = str(exc).splitlines()[0]
                    raise ImportRefused(
                        f"{rel} line {rep.first}-{rep.last} (report {k} of {len(reports)}): {why}; "
                        f"expected {fmt.expected}"
                    ) from None
                parsed.append(_Parsed(base, rows, versions, rel, k, (rep.first, rep.last)))
        records.append(
            {
                "path": rel,
                "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data),
                "levels": base,
                "reports": sum(1 for p in parsed if p.file == rel),
            }
        )
    return parsed, records


def import_manifest(manifest_path: str | Path, data_dir: str | Path = "data") -> Path:
    """Import the reports a manifest names as a new campaign under ``data_dir``; returns the
    campaign's store path. All or nothing (module docstring); :class:`ImportRefused` otherwise."""
    from ..design import Design, Run, run_id

    manifest = load_manifest(manifest_path)
    data_dir = check_data_dir(Path(data_dir).absolute())
    target = data_dir / manifest.campaign
    if target.exists():
        raise ImportRefused(
            f"campaign {manifest.campaign!r} exists already under {data_dir}; import under "
            "another campaign name (nothing was changed)"
        )
    parsed, records = parse_manifest(manifest)
    fmt = FORMATS.get(manifest.workload)
    counts: dict[tuple, int] = {}
    for p in parsed:
        key = tuple(p.levels[f] for f in manifest.factors)
        counts[key] = counts.get(key, 0) + 1
    try:
        design = Design.from_dict(
            {
                "name": manifest.campaign,
                "description": manifest.description,
                "factors": manifest.factors,
                "replications": max(counts.values()),
                "seed": 0,
            },
            source=str(manifest.path),
        )
    except ConfigError as exc:
        raise ImportRefused(str(exc)) from None
    configs = design.configurations()
    index = {json.dumps([c[f.name] for f in design.factors], default=str): i for i, c in enumerate(configs)}
    response = (
        manifest.response or (fmt.response(parsed[0].rows) if fmt else None) or parsed[0].rows[0].metric
    )
    if not any(r.metric == response for p in parsed for r in p.rows):
        raise ImportRefused(f"{manifest.path}: 'response': no report has the metric {response!r}")
    started = now_iso()
    imported = {
        "manifest": manifest.raw,
        "manifest_path": str(manifest.path),
        "files": records,
        "parser": manifest.workload,
        "parser_version": fmt.version if fmt else "1",
        "labkit_version": __version__,
        "imported_at": started,
        "reports": len(parsed),
    }
    meta = {
        "campaign_id": manifest.campaign,
        "design_digest": design.digest(),
        "design": design.to_dict(),
        "seed_drawn": False,
        "backend": "imported",
        "backend_options": {},
        "workload": {"name": manifest.workload, "params": manifest.params, "response": response},
        "defaults": {},
        "host": manifest.host,
        "testbed": None,
        "imported": imported,
    }
    staging = data_dir / f".labkit-import-{manifest.campaign}-{secrets.token_hex(4)}"
    try:
        with Store(staging / "store.sqlite") as store:
            store.set_meta(created=started, **meta)
            if manifest.host:
                store.add_fingerprint("imported", manifest.host)
            seen: dict[int, int] = {}
            for order, p in enumerate(parsed):
                # the factor levels normalised as the design holds them (8 and "8" are one level)
                held = [f.levels[manifest.factors[f.name].index(p.levels[f.name])] for f in design.factors]
                cfg = index[json.dumps(held, default=str)]
                seen[cfg] = rep = seen.get(cfg, 0) + 1
                run = Run(run_id(cfg, rep), order, cfg, rep, dict(configs[cfg]))
                store.record_run(
                    run,
                    status="ok",
                    started=started,
                    duration_s=0.0,
                    measurements=p.rows,
                    metadata={
                        "host": "imported",
                        "run_seq": order + 1,
                        "versions": p.versions,
                        "imported": {"file": p.file, "report": p.report, "lines": list(p.lines)},
                    },
                    fingerprint_id="imported" if manifest.host else None,
                )
            store.export()
        os.rename(staging, target)  # the campaign appears whole, or not at all
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target / "store.sqlite"
