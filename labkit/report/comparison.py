"""What differs between two campaigns besides their results: designs, workloads, host facts.

:func:`setting_differences` lists, in words, how two stores' designs and workloads differ (used
by :func:`labkit.report.compare`, which refuses campaigns whose factors differ and says when
anything else does); :func:`fingerprint_groups` sorts the host facts that differ into facts
recorded on both sides with different values and facts recorded on one side only (a newer
labkit, another backend), and leaves out facts missing on both.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MISSING", "fingerprint_groups", "fingerprint_summary", "setting_differences"]

#: a host fact with one of these values (compared as lower-case text) was not recorded
MISSING = frozenset({"n/a", "none", "", "null", "nan", "[]", "{}"})


def _missing(value: object) -> bool:
    return str(value).strip().lower() in MISSING


def fingerprint_groups(diff: pd.DataFrame, a: str = "a", b: str = "b") -> pd.DataFrame:
    """:func:`labkit.core.fingerprint.fingerprint_diff` output (``fact``, ``a``, ``b``) with a
    ``kind`` column: "differs" (recorded on both sides), ``"only in <a>"``, ``"only in <b>"``;
    facts missing on both sides are dropped. Rows: the differing facts first, then those of
    ``a`` only, then of ``b`` only, each in their order."""
    import pandas as pd
    rows = []
    for rec in diff.itertuples(index=False):
        ma, mb = _missing(rec.a), _missing(rec.b)
        if ma and mb:
            continue
        kind = "differs" if not (ma or mb) else f"only in {a}" if mb else f"only in {b}"
        rows.append({"fact": rec.fact, "a": rec.a, "b": rec.b, "kind": kind})
    out = pd.DataFrame(rows, columns=["fact", "a", "b", "kind"])
    order = {"differs": 0, f"only in {a}": 1, f"only in {b}": 2}
    return out.sort_values("kind", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)


def fingerprint_summary(groups: pd.DataFrame, a: str = "a", b: str = "b", *, listed: int = 6) -> str:
    """A sentence or two from :func:`fingerprint_groups`: the facts that differ with both values
    (at most ``listed``), then how many facts only one side recorded (not counted as differences)."""
    if groups.empty:
        return "The host fingerprints are identical."
    parts = []
    differs = groups[groups.kind == "differs"]
    if len(differs):
        shown = [f"{r.fact} ({r.a} vs {r.b})" for r in differs.head(listed).itertuples()]
        more = f" and {len(differs) - listed} more" if len(differs) > listed else ""
        parts.append("Host facts that differ: " + "; ".join(shown) + more + ".")
    else:
        parts.append("No host fact recorded on both sides differs.")
    one_side = [f"{n} only {side} recorded" for side in (a, b)
                if (n := int((groups.kind == f"only in {side}").sum()))]
    if one_side:
        parts.append("Facts one side did not record are not differences (" + "; ".join(one_side) + ").")
    return " ".join(parts)


def _params(workload: dict) -> dict:
    return {k: v for k, v in (workload.get("params") or {}).items() if k != "timeout_s"}


def _text(value: object) -> str:
    return json.dumps(value, default=str, sort_keys=True) if isinstance(value, dict | list) else str(value)


def setting_differences(meta_a: dict, meta_b: dict, a: str = "a", b: str = "b") -> list[str]:
    """Sentences saying how two stores' settings differ: workload (name, parameters, declared
    response), the design's factors (names, then levels per factor), replications and backend.
    Empty when they are the same. ``meta_*`` are :meth:`labkit.store.Store.meta` dicts."""
    out = []
    wa, wb = meta_a.get("workload") or {}, meta_b.get("workload") or {}
    if wa.get("name") != wb.get("name"):
        out.append(f"the workloads differ: {wa.get('name')} in {a}, {wb.get('name')} in {b}")
    else:
        pa, pb = _params(wa), _params(wb)
        changed = [k for k in dict.fromkeys([*pa, *pb]) if pa.get(k) != pb.get(k)]
        if changed:
            out.append("the workload parameters differ: " + "; ".join(
                f"{k} {_text(pa.get(k, 'n/a'))} vs {_text(pb.get(k, 'n/a'))}" for k in changed))
    if wa.get("response") != wb.get("response"):
        out.append(f"the declared responses differ: {wa.get('response')} vs {wb.get('response')}")
    da, db = meta_a.get("design") or {}, meta_b.get("design") or {}
    fa, fb = da.get("factors") or {}, db.get("factors") or {}
    if list(fa) != list(fb):
        out.append(f"the designs differ: factors {list(fa)} in {a}, {list(fb)} in {b}")
    else:
        for name in fa:
            if list(fa[name]) != list(fb[name]):
                out.append(f"the designs differ: levels of {name} {_text(list(fa[name]))} vs "
                           f"{_text(list(fb[name]))} (only configurations in both are compared)")
    if da.get("replications") != db.get("replications"):
        out.append(f"replications differ: {_text(da.get('replications'))} vs {_text(db.get('replications'))}")
    if meta_a.get("backend") != meta_b.get("backend"):
        out.append(f"the backends differ: {meta_a.get('backend')} vs {meta_b.get('backend')}")
    return out
