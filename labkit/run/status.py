"""``labkit status <campaign>``: per-host progress, lost hosts, runs in flight and failures.

Read-only: works while the campaign runs (a claim whose lease is still fresh is a run in flight;
an expired one was left by a controller that stopped, and runs again on resume).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from ..store import Store


def host_progress(store: Store) -> pd.DataFrame:
    """One row per host: host, assigned (runs the plan gives it; blank with ``assign: random``),
    stored, ok, failed (failed + timeout), host_lost, moved_in (runs moved to it from lost hosts),
    in_flight, state ("live", "lost" or "idle")."""
    import pandas as pd

    meta, runs, claims = store.meta(), store.runs(), store.claims()
    tb = meta.get("testbed") or {}
    assigned = meta.get("fleet_assignment") or {}
    lost = (meta.get("fleet_hosts") or {}).get("lost", {})
    moves = meta.get("fleet_moves") or []
    hosts = runs.metadata.map(lambda m: m.get("host") or "local") if len(runs) else pd.Series(dtype=object)
    # a Slurm testbed lists no hosts: its nodes are those its allocations gave (assigned, ran, claimed)
    names = (
        [h["name"] for h in tb.get("hosts", [])]
        or sorted({*assigned.values(), *hosts, *(c["host"] for c in claims), *lost})
        or ["local"]
    )
    now = time.time()
    rows = []
    for name in names:
        mine = runs[hosts == name] if len(runs) else runs
        flying = [c for c in claims if c["host"] == name and c["lease_until"] >= now]
        rows.append(
            {
                "host": name,
                "assigned": sum(1 for h in assigned.values() if h == name) if assigned else None,
                "stored": len(mine),
                "ok": int((mine.status == "ok").sum()) if len(mine) else 0,
                "failed": int(mine.status.isin(["failed", "timeout"]).sum()) if len(mine) else 0,
                "host_lost": int((mine.status == "host-lost").sum()) if len(mine) else 0,
                "moved_in": sum(1 for m in moves if m["to"] == name),
                "in_flight": len(flying),
                "state": "lost" if name in lost else ("live" if flying else "idle"),
            }
        )
    return pd.DataFrame(rows)


def status_text(store: Store, campaign: str) -> str:
    """The report ``labkit status`` prints."""
    meta, runs, claims = store.meta(), store.runs(), store.claims()
    from ..design import Design

    total = len(Design.from_dict(meta["design"]).plan()) if meta.get("design") else None
    lines = [
        f"campaign {campaign}: {len(runs)} of {total} runs stored"
        + (f" {runs.status.value_counts().to_dict()}" if len(runs) else "")
    ]
    table = host_progress(store)
    lines.append(table.to_string(index=False))
    for name, info in ((meta.get("fleet_hosts") or {}).get("lost") or {}).items():
        lines.append(f"lost host {name} since {info.get('since')}: {info.get('reason')}")
    for job in meta.get("slurm_jobs") or []:
        lines.append(
            f"slurm job {job.get('job_id') or '(no id yet)'} ({job.get('name')}): {job.get('state')}"
            + (f", nodes {', '.join(job['nodes'])}" if job.get("nodes") else "")
            + (f", released {job['released']}" if job.get("released") else "")
        )
    stale = [c for c in claims if c["lease_until"] < time.time()]
    if stale:
        lines.append(
            f"{len(stale)} run(s) claimed by a controller that stopped (they run again on resume): "
            + ", ".join(c["run_id"] for c in stale[:10])
        )
    for w in meta.get("fleet_fingerprint_warnings") or []:
        lines.append(f"warning: {w}")
    earlier = store.attempts()
    if len(earlier):
        lines.append(
            f"{earlier.run_id.nunique()} run(s) ran again; their {len(earlier)} earlier attempt(s) "
            f"are kept ({earlier.status.value_counts().to_dict()}; Store.attempts()): "
            + ", ".join(sorted(set(earlier.run_id))[:10])
        )
    suspect = runs[runs.suspect] if len(runs) else runs
    if len(suspect):
        lines.append(
            f"{len(suspect)} run(s) flagged suspect by the quiet-host guard (Store.runs().suspect_reason):"
        )
        for r in suspect.head(10).itertuples():
            lines.append(f"  {r.run_id}: {str(r.suspect_reason)[:160]}")
    bad = runs[runs.status != "ok"] if len(runs) else runs
    if len(bad):
        lines.append("failures:")
        for r in bad.head(20).itertuples():
            err = (r.error or "").strip().splitlines()
            lines.append(
                f"  {r.run_id} on {r.metadata.get('host') or 'local'}: {r.status}: "
                f"{err[0][:160] if err else ''}"
            )
    return "\n".join(lines)
