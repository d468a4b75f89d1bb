"""``labkit verify BUNDLE``: check a bundle of :func:`labkit.report.write_bundle` (docs/verify.md).

Two checks, each naming what differs:

1. digests: every member the RO-Crate metadata lists has the SHA-256 it states, every member is
   listed, and every listed file is there;
2. re-computation: ``results.csv``, ``runs.csv``, every table (``summary.csv``, ``effects.csv``, ``variation.csv``) and every claim
   (``claims.json``) re-computed from the bundled ``store.sqlite`` with the bundled
   ``settings.json`` equal the bundled ones (numbers to a relative 1e-9), cell by cell.

A value changed in ``results.csv`` fails both (its digest, and "results.csv row R column
value: bundled X, from the store Y"); a changed store fails its digest and re-computes to other
tables and claims, each named.
"""

from __future__ import annotations

import io
import json
import math
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pandas as pd

from ..errors import ConfigError
from .bundle import CLAIMS, CRATE, SETTINGS, TABLES, data_members, sha256_bytes

#: members checked by digest only (they describe where the bundle was made, not what it holds)
RTOL = 1e-9


@dataclass
class Verdict:
    """``problems``: one line per file or claim that differs (empty: all match); ``checked``: counts."""

    bundle: str
    problems: list[str] = field(default_factory=list)
    checked: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        c = self.checked
        if self.ok:
            return (
                f"{self.bundle}: OK: {c.get('files', 0)} files match their SHA-256; {c.get('tables', 0)} "
                f"tables and {c.get('claims', 0)} claims re-computed from the bundled store match"
            )
        return f"{self.bundle}: {len(self.problems)} difference(s)"


def _read_zip(path: Path) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(path) as z:
            out = {}
            for info in z.infolist():
                name = info.filename
                p = PurePosixPath(name)
                if p.is_absolute() or ".." in p.parts:
                    raise ConfigError(
                        f"{path}: member {name!r} is not a plain relative name; not a labkit bundle"
                    )
                out[name] = z.read(info)
            return out
    except (OSError, zipfile.BadZipFile) as exc:
        raise ConfigError(f"{path}: cannot read the bundle ({exc})") from None


def _digests(members: dict[str, bytes], v: Verdict) -> None:
    if CRATE not in members:
        v.problems.append(f"{CRATE}: missing (no digests to check)")
        return
    try:
        graph = json.loads(members[CRATE])["@graph"]
    except (ValueError, KeyError, TypeError) as exc:
        v.problems.append(f"{CRATE}: not RO-Crate JSON ({exc})")
        return
    files = {e["@id"]: e for e in graph if isinstance(e, dict) and e.get("@type") == "File"}
    for name, entity in files.items():
        if name not in members:
            v.problems.append(f"{name}: listed in {CRATE} but not in the bundle")
        elif entity.get("sha256") != sha256_bytes(members[name]):
            v.problems.append(
                f"{name}: SHA-256 differs from {CRATE} (stated {str(entity.get('sha256'))[:16]}..., "
                f"found {sha256_bytes(members[name])[:16]}...)"
            )
    for name in sorted(set(members) - set(files) - {CRATE}):
        v.problems.append(f"{name}: in the bundle but not described in {CRATE}")
    v.checked["files"] = len(files)


def _num(x: object) -> float | None:
    try:
        f = float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f


def _same(a: object, b: object) -> bool:
    if (pd.isna(a) if not isinstance(a, (list, dict)) else False) and (
        pd.isna(b) if not isinstance(b, (list, dict)) else False
    ):
        return True
    fa, fb = _num(a), _num(b)
    if fa is not None and fb is not None:
        if math.isnan(fa) and math.isnan(fb):
            return True
        return math.isclose(fa, fb, rel_tol=RTOL, abs_tol=1e-12)
    return str(a) == str(b)


def compare_csv(name: str, bundled: bytes, fresh: bytes, v: Verdict, *, limit: int = 10) -> None:
    """Name each cell of ``bundled`` that differs from ``fresh`` (at most ``limit``)."""
    try:
        a = pd.read_csv(io.BytesIO(bundled), dtype=str, keep_default_na=False)
        b = pd.read_csv(io.BytesIO(fresh), dtype=str, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as exc:
        v.problems.append(f"{name}: not readable as CSV ({exc})")
        return
    if list(a.columns) != list(b.columns):
        v.problems.append(f"{name}: columns {list(a.columns)} differ from the store's {list(b.columns)}")
        return
    if len(a) != len(b):
        v.problems.append(f"{name}: {len(a)} rows, the store gives {len(b)}")
        return
    found = 0
    key = next((c for c in ("run_id", "term") if c in a.columns), None)
    for i in range(len(a)):
        for col in a.columns:
            x, y = a.iat[i, a.columns.get_loc(col)], b.iat[i, b.columns.get_loc(col)]
            if not _same(x if x != "" else float("nan"), y if y != "" else float("nan")):
                found += 1
                if found <= limit:
                    where = (
                        f" ({key} {a.at[i, key]}{', metric ' + a.at[i, 'metric'] if 'metric' in a.columns else ''})"
                        if key
                        else ""
                    )
                    v.problems.append(
                        f"{name}: row {i + 2}{where} column {col}: bundled {x!r}, "
                        f"re-computed from the store {y!r}"
                    )
    if found > limit:
        v.problems.append(f"{name}: {found - limit} more cell(s) differ")


def compare_claims(bundled: bytes, fresh: bytes, v: Verdict) -> None:
    try:
        a = json.loads(bundled)
    except ValueError as exc:
        v.problems.append(f"{CLAIMS}: not JSON ({exc})")
        return
    b = json.loads(fresh)
    n = 0
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, list) and isinstance(y, list):
            for i in range(max(len(x), len(y))):
                n += 1
                xi = x[i] if i < len(x) else None
                yi = y[i] if i < len(y) else None
                if xi != yi:
                    v.problems.append(
                        f"{CLAIMS}: claim {key}[{i}] differs: bundled {str(xi)[:200]!r}, "
                        f"re-computed from the store {str(yi)[:200]!r}"
                    )
        else:
            n += 1
            if x != y:
                v.problems.append(
                    f"{CLAIMS}: claim {key} differs: bundled {str(x)[:200]!r}, "
                    f"re-computed from the store {str(y)[:200]!r}"
                )
    v.checked["claims"] = n


def verify_bundle(path: str | Path) -> Verdict:
    """Check the bundle at ``path`` (module docstring); a :class:`Verdict` (ConfigError only when
    it is not a zip)."""
    path = Path(path)
    members = _read_zip(path)
    v = Verdict(str(path))
    _digests(members, v)
    try:
        campaign = json.loads(members["campaign.json"])["campaign"]
        settings = json.loads(members[SETTINGS])
        store = members["store.sqlite"]
    except (KeyError, ValueError, TypeError) as exc:
        v.problems.append(
            f"cannot re-compute: the bundle lacks a readable {exc} (campaign.json, settings.json, "
            "store.sqlite)"
        )
        return v
    with tempfile.TemporaryDirectory() as tmpdir:
        copy = Path(tmpdir) / "data" / str(campaign) / "store.sqlite"
        copy.parent.mkdir(parents=True, mode=0o700)
        copy.write_bytes(store)
        try:
            fresh, _meta = data_members(copy, str(campaign), settings)
        except Exception as exc:  # noqa: BLE001 (a store that cannot be read is a difference, said)
            v.problems.append(f"store.sqlite: cannot be re-computed from ({str(exc).splitlines()[0][:200]})")
            return v
    tables = 0
    for name, data in fresh.items():
        if name == SETTINGS:
            continue
        if name not in members:
            v.problems.append(f"{name}: re-computed from the store but missing from the bundle")
            continue
        if name == CLAIMS:
            compare_claims(members[name], data, v)
        else:
            tables += 1
            compare_csv(name, members[name], data, v)
    for name in sorted(n for n in members if n in {t + ".csv" for t in TABLES} and n not in fresh):
        v.problems.append(f"{name}: in the bundle but the store gives no such table")
    v.checked["tables"] = tables
    return v
