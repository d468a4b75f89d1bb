"""Run a stored campaign's design again elsewhere: the run half of ``labkit replicate`` (issue 43).

:func:`replica_campaign` rebuilds, from an original campaign's store (its ``meta``, read-only),
everything a :class:`~labkit.run.campaign.Campaign` needs: the design (factors, levels,
replication rule, seed, so the same plan in the same random order; blocks, fraction, runs per
instance, telemetry and the guard's settings with it), the workload with its parameters and the
default instance spec; and points it at another backend or testbed under a new campaign id.
:func:`replicate` runs it and records in the replica's store which campaign it replicates. The
verdicts (ratio, equivalence, host facts, effects) are :mod:`labkit.report.replication`'s: run
never imports report.

Backend options belong to the backend they were given to. On the same backend they are kept; on
another one, those the new backend does not know are dropped and each is said in
:attr:`Replica.notes` (a local ``workroot`` means nothing to docker); with a testbed, its
platforms' declarations hold the options and the original's are all dropped (said). Options given
for the replica (``backend_options``) are checked by the new backend, which refuses unknown ones.
A campaign that labkit did not run (``labkit import``) has no runnable workload settings and is
refused, as is a design with a ``platform`` factor given ``--backend`` (its platforms are the
factor: give a testbed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import backend_class
from ..core.ids import MAX_ID, check_campaign_id
from ..core.instance import InstanceSpec
from ..core.redact import REDACTED
from ..design import Design
from ..errors import ConfigError, StoreError
from ..store import Store
from ..store.results import store_path
from .campaign import Campaign
from .platforms import FACTOR

log = logging.getLogger("labkit.run.replicate")

__all__ = ["Replica", "replica_campaign", "replicate"]


@dataclass
class Replica:
    """A replica ready to run: the :class:`Campaign`, the original's id and backend, and what was
    carried over or dropped (``notes``, one sentence each, to show the user)."""

    campaign: Campaign
    original: str
    original_backend: str
    notes: list[str] = field(default_factory=list)

    @property
    def campaign_id(self) -> str:
        return self.campaign.campaign_id


def default_replica_id(original: str, target: str) -> str:
    """``<original>-on-<target>`` (the target's name made id-safe), cut to the id's length limit."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in target.lower()).strip("-_") or "other"
    while "--" in safe:
        safe = safe.replace("--", "-")
    suffix = f"-on-{safe}"[: MAX_ID - 1]
    return (original[: MAX_ID - len(suffix)] + suffix).rstrip("-")


def _original_meta(data_dir: str | Path, original: str) -> dict:
    path = store_path(data_dir, original)
    if not path.is_file():
        raise ConfigError(f"replicate: no campaign {original!r} under {data_dir} (no {path})")
    with Store(path, readonly=True) as st:
        meta = st.meta()
    for key in ("design", "workload", "backend"):
        if not meta.get(key):
            raise StoreError(
                f"{path}: campaign {original!r} has no {key!r} recorded in its meta; "
                "it cannot be replicated (a store written by another tool?)"
            )
    if meta.get("imported"):
        raise ConfigError(
            f"replicate: campaign {original!r} was imported from another tool's results "
            f"(labkit import, parser {(meta.get('workload') or {}).get('name')!r}): labkit did not run "
            "it, so there is no workload with parameters to run again; run the study with "
            "`labkit run` on each backend instead"
        )
    return meta


def _options(meta: dict, backend: str | None, testbed: Any, given: dict | None) -> tuple[dict, list[str]]:
    """The backend options the replica starts with, and a note for each option dropped or kept."""
    stored = dict(meta.get("backend_options") or {})
    original = str(meta.get("backend"))
    notes: list[str] = []
    secret = sorted(k for k, val in stored.items() if val == REDACTED)
    for k in secret:
        stored.pop(k)
    if secret:
        notes.append(
            f"backend option(s) {', '.join(secret)} of {original!r} were stored redacted (secrets) and "
            "are not carried over; give them again with --backend-option"
        )
    if testbed is not None:
        if stored:
            notes.append(
                f"backend options of {original!r} dropped: {_shown(stored)} (on a testbed its "
                "platforms declare their options)"
            )
        return dict(given or {}), notes
    target = str(backend)
    if target == original:
        kept = stored
    else:
        allowed = set(backend_class(target).OPTIONS)
        kept = {k: val for k, val in stored.items() if k in allowed}
        dropped = {k: val for k, val in stored.items() if k not in allowed}
        if dropped:
            notes.append(
                f"backend options of {original!r} that {target!r} does not take were dropped: "
                f"{_shown(dropped)}"
            )
        if kept:
            notes.append(
                f"backend options of {original!r} that {target!r} also takes were kept: {_shown(kept)} "
                "(override with --backend-option)"
            )
    return {**kept, **(given or {})}, notes


def _shown(options: dict) -> str:
    return ", ".join(f"{k}={val!r}" for k, val in sorted(options.items()))


def replica_campaign(
    data_dir: str | Path,
    original: str,
    *,
    backend: str | None = None,
    testbed: Any = None,
    campaign_id: str | None = None,
    backend_options: dict | None = None,
    run_timeout: float | None = 3600,
    progress: bool = False,
) -> Replica:
    """A :class:`Replica` of stored campaign ``original`` (under ``data_dir``) on ``backend`` (a
    backend name) or ``testbed`` (a Testbed, dict or YAML path; ``backend`` then names its
    platform, default the testbed's), stored as ``campaign_id`` (default
    ``<original>-on-<backend or testbed>``) under the same ``data_dir``.

    The design (with its seed: the same plan, in the same random order), workload and parameters
    and instance defaults are the original's; backend options as the module docstring says.
    ConfigError when neither ``backend`` nor ``testbed`` is given, the original is not stored,
    was imported, varies ``platform`` without a testbed, or the new id is the original's;
    StoreError when its store lacks the settings; the Campaign's own errors (an unknown backend, a
    workload parameter the workload no longer takes) as they are.
    """
    if backend is None and testbed is None:
        raise ConfigError(
            "replicate: say where to run the replica: --backend B (local, docker, lxd, libvirt, "
            "ssh, ...) or --testbed T"
        )
    if backend is not None and (not isinstance(backend, str) or not backend):
        raise ConfigError(f"replicate: backend must be a backend (or platform) name, got {backend!r}")
    meta = _original_meta(data_dir, original)
    source = f"campaign {original!r} ({store_path(data_dir, original)})"
    design = Design.from_dict(meta["design"], source=source)
    notes: list[str] = []
    if FACTOR in design.factor_names and testbed is None:
        raise ConfigError(
            f"replicate: {original!r} varies {FACTOR!r} ({', '.join(map(str, meta['design']['factors'][FACTOR]))}): "
            "its platforms are a factor of the design, not a backend to swap; replicate it on "
            "another testbed declaring those platforms (--testbed T)"
        )
    workload = meta["workload"]
    if not isinstance(workload, dict) or not isinstance(workload.get("name"), str):
        raise StoreError(
            f"{source}: its workload is recorded as {str(workload)[:80]!r}, not {{name, params}}"
        )
    params = workload.get("params") or {}
    if not isinstance(params, dict):
        raise StoreError(
            f"{source}: its workload parameters are recorded as {str(params)[:80]!r}, not a mapping"
        )
    redacted = sorted(k for k, val in params.items() if val == REDACTED)
    if redacted:
        raise ConfigError(
            f"replicate: the workload parameter(s) {', '.join(redacted)} of {original!r} were stored "
            "redacted (secrets): the replica cannot run them"
        )
    try:
        defaults = InstanceSpec(**(meta.get("defaults") or {}))
    except TypeError as exc:
        raise StoreError(
            f"{source}: its instance defaults {meta.get('defaults')!r} are not an InstanceSpec ({exc})"
        ) from None
    options, more = _options(meta, backend, testbed, backend_options)
    notes += more
    if meta.get("testbed") and testbed is None:
        notes.append(
            f"{original!r} ran on testbed {(meta['testbed'] or {}).get('name', '?')!r}; the replica runs on "
            f"this machine's {backend!r} backend"
        )
    if campaign_id is None:
        if testbed is None:
            target = str(backend)
        else:  # the platform named, else the testbed's file name
            target = backend or (Path(testbed).stem if isinstance(testbed, str | Path) else "testbed")
        campaign_id = default_replica_id(original, target)
    campaign_id = check_campaign_id(campaign_id)
    if campaign_id == original:
        raise ConfigError(
            f"replicate: the replica needs its own campaign id, not the original's {original!r} "
            "(--campaign-id)"
        )
    campaign = Campaign(
        design,
        backend=backend,
        workload=workload["name"],
        workload_params=params,
        campaign_id=campaign_id,
        data_dir=data_dir,
        backend_options=options or None,
        defaults=defaults,
        testbed=testbed,
        run_timeout=run_timeout,
        progress=progress,
    )
    return Replica(campaign, original, str(meta["backend"]), notes)


def replicate(data_dir: str | Path, original: str, **kw: Any) -> tuple[Store, Replica]:
    """Build (:func:`replica_campaign`, same keywords) and run the replica; returns its store
    (read-only) and the :class:`Replica`. Starting it again resumes it (the runs stored are
    kept). The replica's meta gets ``replica_of``: the original's id, backend and the notes."""
    replica = replica_campaign(data_dir, original, **kw)
    for note in replica.notes:
        log.warning("replicate %s: %s", original, note)
    replica.campaign.run()
    with Store.for_campaign(data_dir, replica.campaign_id) as st:
        st.set_meta(
            replica_of={"campaign": original, "backend": replica.original_backend, "notes": replica.notes}
        )
    return Store.for_campaign(data_dir, replica.campaign_id, readonly=True), replica
