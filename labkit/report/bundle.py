"""What a bundle holds besides its data, so that anyone can check it (docs/verify.md).

:func:`labkit.report.write_bundle` adds to the zip:

* the report's tables and claims as data, computed from the bundled store with the settings in
  ``settings.json`` (response, alpha, bootstrap resamples): ``summary.csv``,
  ``effects.csv``, ``variation.csv`` (when there is one) and ``claims.json``
  (headline, findings, assumptions, significant terms);
* ``datapackage.json``: a Frictionless Data Package with a Table Schema for each CSV (fields,
  types, units, descriptions) that ``frictionless validate datapackage.json`` accepts;
* ``ro-crate-metadata.json``: RO-Crate 1.1 metadata describing every file with its SHA-256, the
  labkit version and code state, the hosts' fingerprints and the licence (the Workflow Run
  Crate's ``CreateAction``: labkit made these files from the campaign);
* ``code_diff-<sha256>.patch``: the uncommitted changes a ``+dirty`` campaign ran with, when the
  store keeps them (:mod:`labkit.store.codestate`): ``git apply`` them on the commit.

:func:`labkit.report.verify.verify_bundle` re-computes all of it from the bundled store.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

#: the licence of a bundle's data unless told otherwise (SPDX id)
DEFAULT_LICENCE = "CC-BY-4.0"
#: the member names of the derived data
TABLES = ("summary", "effects", "variation")
SETTINGS = "settings.json"
CLAIMS = "claims.json"
DATAPACKAGE = "datapackage.json"
CRATE = "ro-crate-metadata.json"

#: what the columns of results.csv / runs.csv mean (the others: a factor of the design)
DESCRIPTIONS = {
    "campaign": "campaign id",
    "run_id": "run id: configuration and replicate (c0003r012)",
    "run_order": "position of the run in the randomized execution order (0-based)",
    "replicate": "replicate of the configuration (1-based)",
    "config": "configuration, standard (Yates) order index",
    "instance": "the instance that measured it",
    "metric": "what was measured",
    "value": "the measured value, in `unit`",
    "unit": "unit of `value`",
    "status": "ok, failed, timeout or host-lost",
    "error": "error text of a failed run",
    "started": "start time (ISO 8601)",
    "duration_s": "run duration",
    "fingerprint_id": "host fingerprint id",
    "host": "host that ran it",
    "instance_index": "index of the instance in its run",
    "boot": "instance's start count",
    "run_seq": "order of the run on its host (1-based)",
    "iteration": "iteration inside the run (1-based)",
    "suspect": "flagged by the quiet-host guard",
    "suspect_reason": "why the run is suspect",
    "metadata": "the run's metadata (JSON)",
    "term": "effect term (factor names joined by ':')",
    "effect": "the effect (2q), in the response's unit",
    "q": "Jain's q, in the response's unit",
    "pct_variation": "share of the variation",
    "pct_low": "share of the variation: lower bound",
    "pct_high": "share of the variation: upper bound",
    "mean": "mean of the response",
    "n": "runs",
    "p": "p-value",
    "p_adj": "p-value after the family's correction",
    "t": "t statistic",
}
UNITS = {"duration_s": "s", "pct_variation": "%", "pct_low": "%", "pct_high": "%"}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def derived(store_path: Path, campaign: str, settings: dict) -> tuple[dict[str, str], dict, dict]:
    """(tables as CSV text by member name, claims, settings as used) of the campaign in the store at
    ``store_path`` (its folder is the campaign's): the analysis of :func:`labkit.report.analyze`
    with ``settings`` (response, alpha, n_boot); an analysis that cannot be made is a claim saying
    why, the same on every re-computation."""
    from ..errors import LabkitError
    from .analysis import analyze

    data_dir = store_path.parent.parent
    response = settings.get("response")
    alpha, n_boot = float(settings.get("alpha", 0.05)), int(settings.get("n_boot", 1000))
    used: dict[str, Any] = {"response": response, "alpha": alpha, "n_boot": n_boot}
    try:
        a = analyze(
            data_dir,
            campaign,
            response=None if response is None else str(response),
            alpha=alpha,
            n_boot=n_boot,
        )
    except LabkitError as exc:
        return {}, {"analysis": "none", "error": str(exc).splitlines()[0]}, used
    used["response"] = a.response
    tables = {"summary.csv": _csv(a.summary), "effects.csv": _csv(a.effects)}
    if a.variation is not None:
        tables["variation.csv"] = _csv(a.variation)
    c = a.conclusions
    claims = {
        "analysis": a.kind,
        "response": a.response,
        "factors": list(a.factors),
        "headline": c.headline,
        "findings": list(c.findings),
        "assumptions": list(c.assumptions),
        "significant": list(c.significant),
    }
    return tables, claims, used


def _csv(df: pd.DataFrame) -> str:
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].map(
                lambda x: json.dumps(x, default=str) if isinstance(x, (dict, list, tuple)) else x
            )
    return out.to_csv(index=False, float_format="%.12g")


def _type(series: pd.Series) -> str:
    if pd.api.types.is_bool_dtype(series):
        return "boolean"
    if pd.api.types.is_integer_dtype(series):
        return "integer"
    if pd.api.types.is_numeric_dtype(series):
        return "number"
    return "string"


def table_schema(text: str, *, factors: list[str], response_unit: str | None = None) -> dict:
    """A Table Schema of a CSV's text: each column's name, type (read back as pandas reads the
    CSV), description and unit."""
    import io

    df = pd.read_csv(io.StringIO(text), keep_default_na=True)
    fields = []
    for col in df.columns:
        f: dict[str, Any] = {"name": str(col), "type": _type(df[col])}
        if f["type"] == "boolean":
            f["trueValues"], f["falseValues"] = ["True", "true"], ["False", "false"]
        desc = DESCRIPTIONS.get(str(col)) or (f"level of factor {col}" if col in factors else None)
        if desc:
            f["description"] = desc
        unit = UNITS.get(str(col)) or (
            response_unit
            if col in ("mean", "effect", "q", "median", "sd", "ci_low", "ci_high", "std")
            else None
        )
        if unit:
            f["unit"] = unit
        fields.append(f)
    return {"fields": fields, "missingValues": [""]}


def datapackage(
    csvs: dict[str, str], *, campaign: str, factors: list[str], response_unit: str | None, licence: str
) -> dict:
    """The Frictionless Data Package of the bundle's CSV members (name -> text)."""
    resources = []
    for name, text in csvs.items():
        stem = Path(name).stem.replace("_", "-").lower()
        resources.append(
            {
                "name": stem,
                "path": name,
                "profile": "tabular-data-resource",
                "format": "csv",
                "mediatype": "text/csv",
                "encoding": "utf-8",
                "hash": "sha256:" + sha256_bytes(text.encode()),
                "bytes": len(text.encode()),
                "schema": table_schema(text, factors=factors, response_unit=response_unit),
            }
        )
    return {
        "name": f"labkit-{campaign}".lower().replace("_", "-"),
        "title": f"labkit campaign {campaign}",
        "profile": "tabular-data-package",
        "licenses": [{"name": licence, "path": f"https://spdx.org/licenses/{licence}"}],
        "resources": resources,
    }


def ro_crate(
    members: dict[str, bytes], *, campaign: str, meta: dict, fingerprints: dict, licence: str, created: str
) -> dict:
    """RO-Crate 1.1 metadata of the bundle: every member with its SHA-256 and size, labkit (version
    and code state), the hosts' fingerprints, the licence, and the Workflow Run Crate's
    ``CreateAction`` (labkit ran the campaign's design and made these files)."""
    from .. import __version__
    from ..core.fingerprint import labkit_commit

    licence_id = f"https://spdx.org/licenses/{licence}"
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    commits = sorted(
        {str(fp.get("labkit_commit")) for fp in fingerprints.values() if fp.get("labkit_commit")}
    )
    files = []
    for name, data in members.items():
        files.append(
            {
                "@id": name,
                "@type": "File",
                "name": name,
                "sha256": sha256_bytes(data),
                "contentSize": str(len(data)),
                "encodingFormat": _media(name),
            }
        )
    hosts = [
        {
            "@id": f"#host-{fid}",
            "@type": "Thing",
            "name": f"host fingerprint {fid}",
            "description": json.dumps(fp, sort_keys=True, default=str)[:4000],
        }
        for fid, fp in fingerprints.items()
    ]
    labkit = {
        "@id": "#labkit",
        "@type": "SoftwareApplication",
        "name": "labkit",
        "version": __version__,
        "description": f"code state when bundled: {labkit_commit()}; measured with: "
        f"{', '.join(commits) or (host or {}).get('labkit_commit') or 'not recorded'}",
    }
    action: dict[str, Any] = {
        "@id": "#campaign-run",
        "@type": "CreateAction",
        "name": f"labkit campaign {campaign}",
        "instrument": {"@id": "#labkit"},
        "endTime": created,
        "result": [{"@id": f["@id"]} for f in files],
        "description": f"backend {meta.get('backend')}, workload {json.dumps(meta.get('workload'), default=str)}",
    }
    if "imported" in meta:
        action["description"] += "; imported from other tools' output (see the store's meta 'imported')"
    root = {
        "@id": "./",
        "@type": "Dataset",
        "name": f"labkit campaign {campaign}",
        "description": (meta.get("design") or {}).get("description")
        or f"results of labkit campaign {campaign}",
        "datePublished": created,
        "license": {"@id": licence_id},
        "hasPart": [{"@id": f["@id"]} for f in files],
        "mentions": [{"@id": "#campaign-run"}],
        "about": [{"@id": h["@id"]} for h in hosts],
    }
    graph = [
        {
            "@id": CRATE,
            "@type": "CreativeWork",
            "conformsTo": {"@id": "https://w3id.org/ro/crate/1.1"},
            "about": {"@id": "./"},
        },
        root,
        *files,
        labkit,
        action,
        *hosts,
        {"@id": licence_id, "@type": "CreativeWork", "name": licence},
    ]
    return {
        "@context": [
            "https://w3id.org/ro/crate/1.1/context",
            {"sha256": "https://w3id.org/ro/terms/workflow-run#sha256"},
        ],
        "@graph": graph,
    }


def _media(name: str) -> str:
    return {
        ".csv": "text/csv",
        ".json": "application/json",
        ".parquet": "application/vnd.apache.parquet",
        ".sqlite": "application/vnd.sqlite3",
        ".patch": "text/x-diff",
    }.get(Path(name).suffix, "application/octet-stream")


def finite(x: object) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def data_members(store_path: Path, campaign: str, settings: dict) -> tuple[dict[str, bytes], dict]:
    """The members re-derived from the store at ``store_path``: ``results.csv``, ``runs.csv``, the
    tables, ``claims.json`` and ``settings.json`` (name -> bytes), and the store's meta."""
    from ..store import Store

    with Store(store_path, readonly=True) as st:
        tidy, runs, meta = st.tidy(), st.runs(), st.meta()
    if len(runs):
        runs["metadata"] = runs["metadata"].map(lambda d: json.dumps(d, sort_keys=True, default=str))
    out = {"results.csv": tidy.to_csv(index=False).encode(), "runs.csv": runs.to_csv(index=False).encode()}
    tables, claims, used = derived(store_path, campaign, settings)
    out.update({name: text.encode() for name, text in tables.items()})
    out[CLAIMS] = json.dumps(claims, indent=2, sort_keys=True, default=str).encode()
    out[SETTINGS] = json.dumps(used, indent=2, sort_keys=True).encode()
    return out, meta


def bundle_members(
    store_path: Path, campaign: str, settings: dict, *, env: dict, licence: str
) -> dict[str, Any]:
    """Every member of a bundle, in order (name -> bytes, or the Path of the store copy)."""
    import io

    from ..core.clock import now_iso
    from ..store import Store

    derived_members, meta = data_members(store_path, campaign, settings)
    with Store(store_path, readonly=True) as st:
        tidy, fps, diffs = st.tidy(), st.fingerprints(), st.code_diffs()
    pq = io.BytesIO()
    tidy.to_parquet(pq, index=False)
    members: dict[str, Any] = {
        "results.csv": derived_members.pop("results.csv"),
        "results.parquet": pq.getvalue(),
        "runs.csv": derived_members.pop("runs.csv"),
        "store.sqlite": store_path,
        "fingerprints.json": json.dumps(fps, indent=2, default=str).encode(),
        "campaign.json": json.dumps({"campaign": campaign}).encode(),
        "environment.json": json.dumps(env, indent=2, sort_keys=True, default=str).encode(),
    }
    members.update(derived_members)
    for sha, d in diffs.items():  # the uncommitted changes it ran with: `git apply` on its commit
        if isinstance(d.get("diff"), str):
            members[f"code_diff-{sha[:16]}.patch"] = d["diff"].encode("utf-8", "surrogateescape")
    factors = list((meta.get("design") or {}).get("factors") or {})
    used = json.loads(members[SETTINGS])
    units = tidy.loc[tidy.metric == used.get("response"), "unit"].dropna().unique()
    csvs = {name: data.decode() for name, data in members.items() if name.endswith(".csv")}
    members[DATAPACKAGE] = json.dumps(
        datapackage(
            csvs,
            campaign=campaign,
            factors=factors,
            response_unit=str(units[0]) if len(units) == 1 else None,
            licence=licence,
        ),
        indent=2,
    ).encode()
    as_bytes = {
        name: (data.read_bytes() if isinstance(data, Path) else data) for name, data in members.items()
    }
    members[CRATE] = json.dumps(
        ro_crate(
            as_bytes, campaign=campaign, meta=meta, fingerprints=fps, licence=licence, created=now_iso()
        ),
        indent=2,
    ).encode()
    return members


def write_bundle(
    data_dir: str | Path,
    campaign: str,
    out: str | Path,
    *,
    response: str | None = None,
    alpha: float = 0.05,
    n_boot: int = 1000,
    licence: str | None = None,
) -> Path:
    """A zip with the campaign's ``results.csv``, ``results.parquet``, ``runs.csv``, a copy of
    ``store.sqlite``, ``fingerprints.json``, ``campaign.json`` (the campaign id) and
    ``environment.json`` (Python, installed package versions, this host's fingerprint), and, so
    that anyone can check it (:mod:`labkit.report.bundle`, ``labkit verify``): the report's
    tables and claims as data (``summary.csv``, ``effects.csv``, ``variation.csv``, ``claims.json``) computed from the bundled store
    with the settings in ``settings.json`` (``response``, ``alpha``, ``n_boot``), a Frictionless
    ``datapackage.json`` and RO-Crate 1.1 ``ro-crate-metadata.json`` (every file's SHA-256, labkit's
    version and code state, the hosts, the ``licence``: an SPDX id, CC-BY-4.0 by default).
    Member names are plain relative names (no ``..``, nothing unpacks outside where it is
    unpacked), and every member is 0600 (``ZipInfo.external_attr``: unpacked, no member is
    readable by others, whatever the files it was made from). Written with
    :func:`labkit.core.files.atomic_write` (0600, a symbolic link at ``out`` or at its directory
    refused). The store is read, never written (opened by its URI: a path holding ``?`` or ``#``
    is that path). Returns the path."""
    import shutil
    import sqlite3
    import stat
    import tempfile
    import time
    import zipfile
    from importlib import metadata

    from ..core.fingerprint import host_fingerprint
    from ..store import sqlite_uri

    src = Path(data_dir) / campaign / "store.sqlite"
    if not src.is_file():
        from ..errors import StoreError

        raise StoreError(f"no result store at {src}")
    env = {
        "packages": {d.metadata["Name"]: d.version for d in metadata.distributions()},
        "host": host_fingerprint(),
    }
    settings = {"response": response, "alpha": alpha, "n_boot": n_boot}
    from ..core.files import atomic_write

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        copy = tmp / "data" / campaign / "store.sqlite"
        copy.parent.mkdir(parents=True, mode=0o700)
        s = sqlite3.connect(sqlite_uri(src, readonly=True), uri=True)
        d = sqlite3.connect(sqlite_uri(copy), uri=True)
        try:
            s.backup(d)  # a consistent copy, made through SQLite's read-only connection
        finally:
            s.close()
            d.close()
        # everything else is derived from the copy: what is bundled is what verify re-derives from
        members = bundle_members(copy, campaign, settings, env=env, licence=licence or DEFAULT_LICENCE)
        stamp = time.localtime()[:6]

        def member(z: zipfile.ZipFile, name: str, data: bytes | Path) -> None:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | 0o600) << 16  # unpacked: the owner's alone
            big = isinstance(data, Path) and data.stat().st_size > (1 << 30)  # zip64 ahead of a large store
            with z.open(info, "w", force_zip64=big) as dst:
                if isinstance(data, Path):
                    with open(data, "rb") as src_fh:
                        shutil.copyfileobj(src_fh, dst, 1 << 20)
                else:
                    dst.write(data)

        def write(fh):
            with zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as z:
                for name, data in members.items():
                    member(z, name, data)

        return atomic_write(out, write)
