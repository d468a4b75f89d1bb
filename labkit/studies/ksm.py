"""Kernel same-page merging (KSM) in the seed studies (seed 000 credits KSM for several results;
notebook 03): the host's KSM counters (:func:`ksm_state`), the ``ksm`` factor's levels and
switching them per run (:class:`KsmSwitch`, a run hook :func:`labkit.studies.seeds.SeedCampaign`
adds), ksmd's scan settings for a campaign (:data:`KSM_SCAN`), and the KSM state and manipulation
check recorded with each stored run, as a table and in words (:func:`run_ksm`,
:func:`ksm_check_statement`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..run.hooks import RunContext, RunHook
from ..store import Store

if TYPE_CHECKING:
    import pandas as pd

#: where the kernel keeps KSM's switch and counters
KSM = Path("/sys/kernel/mm/ksm")
KSM_FILES = ("run", "pages_shared", "pages_sharing", "pages_unshared", "full_scans")


def ksm_state(root: Path = KSM) -> dict:
    """The host's kernel same-page merging counters (``run``: 0 off, 1 on, 2 unmerge;
    ``pages_shared``, ``pages_sharing``, ``pages_unshared``, ``full_scans``), as integers;
    empty when the kernel has no KSM."""
    out = {}
    for name in KSM_FILES:
        try:
            out[name] = int((root / name).read_text().strip())
        except (OSError, ValueError):
            continue
    return out


#: levels of the ``ksm`` factor -> what is written to /sys/kernel/mm/ksm/run before the run
#: (2 unmerges every merged page and stops ksmd: no sharing is left over from an earlier run)
KSM_LEVELS = {"off": "2", "on": "1"}


def check_ksm_levels(levels: Iterable[object], where: str = "factor 'ksm'") -> list[str]:
    """``levels`` as a list of distinct ``on``/``off``; ConfigError naming ``where`` otherwise."""
    given = list(levels)
    good = [lv for lv in given if isinstance(lv, str) and lv in KSM_LEVELS]
    if len(good) != len(given) or len(set(good)) != len(good) or not good:
        raise ConfigError(
            f"{where}: levels {given!r} not allowed; use distinct levels from {', '.join(KSM_LEVELS)}"
        )
    return good


def set_ksm(level: str, root: Path = KSM) -> None:
    """Switch this host's kernel same-page merging for ``level`` (:data:`KSM_LEVELS`)."""
    check_ksm_levels([level])
    _write_ksm(root, KSM_LEVELS[level])


def _write_ksm(root: Path, value: str, name: str = "run") -> None:
    path = root / name
    if not path.exists():
        raise ConfigError(f"factor 'ksm': this kernel has no KSM ({path} is missing)")
    try:
        path.write_text(value)
    except OSError as exc:
        raise ConfigError(
            f"factor 'ksm': cannot write {value} to {path} ({exc.strerror}); KSM is "
            "host-wide and switching it needs root"
        ) from exc


#: ksmd's scan settings a campaign may set (``ksm_scan``) -> their bounds
KSM_SCAN = {"pages_to_scan": (1, 100_000), "sleep_millisecs": (0, 10_000)}


def check_ksm_scan(scan: object) -> dict[str, int]:
    """``ksm_scan`` as ``{setting: int}`` within :data:`KSM_SCAN`; ConfigError otherwise."""
    if scan is None:
        return {}
    if not isinstance(scan, dict):
        raise ConfigError(f"ksm_scan must be a mapping of {', '.join(KSM_SCAN)} to integers, got {scan!r}")
    out = {}
    for key, value in scan.items():
        if key not in KSM_SCAN:
            raise ConfigError(f"ksm_scan: unknown setting {key!r}; use {', '.join(KSM_SCAN)}")
        lo, hi = KSM_SCAN[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ConfigError(f"ksm_scan: {key} must be an integer from {lo} to {hi}, got {value!r}")
        out[key] = value
    return out


class KsmSwitch(RunHook):
    """Records this host's KSM state (:func:`ksm_state`) with every run, as ``ksm`` when the run
    starts and ``ksm_end`` when its workload is over (its instances still exist), and, for a run
    with a ``ksm`` level (``off``, ``on``; :func:`scenario_design` makes the factor), switches KSM
    before the run's instances start (``off`` unmerges every page), so KSM is randomized with the
    other factors. With ``switch``, the state found when the campaign starts is put back when it
    ends (and a host where KSM cannot be switched fails before any run). ``scan``: ksmd's
    ``pages_to_scan`` and ``sleep_millisecs`` for the campaign (:data:`KSM_SCAN`; the kernel's
    default, 100 pages every 20 ms, scans 20 MB/s: a run of a few seconds sees few merges), put
    back when it ends; recorded with each run as ``ksm_scan``. Whether pages were merged during each
    run is the treatment check's (:mod:`labkit.run.treatments`)."""

    def __init__(self, root: Path = KSM, *, switch: bool = False, scan: dict | None = None):
        self.root, self.switch, self.scan = Path(root), switch, check_ksm_scan(scan)

    @contextlib.contextmanager
    def around_campaign(self, campaign):
        if not self.switch:
            yield
            return
        found = str(ksm_state(self.root).get("run", 0))
        _write_ksm(self.root, found)  # no KSM here, or no right to switch it: fails before any run
        saved = {k: (self.root / k).read_text().strip() for k in self.scan if (self.root / k).exists()}
        try:
            for key, setting in self.scan.items():
                _write_ksm(self.root, str(setting), key)
            yield
        finally:
            try:
                for key, value in saved.items():
                    _write_ksm(self.root, value, key)
            finally:
                _write_ksm(self.root, found)

    @contextlib.contextmanager
    def around_run(self, ctx: RunContext):
        if "ksm" in ctx.run.levels:
            set_ksm(ctx.run.levels["ksm"], self.root)
        ctx.metadata["ksm"] = ksm_state(self.root)
        if self.scan:
            ctx.metadata["ksm_scan"] = dict(self.scan)
        try:
            yield []
        finally:
            ctx.metadata["ksm_end"] = ksm_state(self.root)


def run_ksm(data_dir: str | Path, campaigns: dict) -> pd.DataFrame:
    """KSM state recorded with every run of ``campaigns`` (a key ``(platform, benchmark)`` for a
    campaign on one platform, or ``benchmark`` alone for a campaign whose runs carry their platform:
    a ``platform`` factor, else the campaign's backend -> campaign id).

    Returns ``platform``, ``benchmark``, ``run_id``, ``ksm_run`` (0 off, 1 on, 2 off after
    unmerging; NaN: not recorded), ``ksm_pages_sharing`` (as the run started),
    ``ksm_pages_sharing_end`` (once its workload was over; NaN before labkit recorded it),
    ``ksm_level`` (the run's ``ksm`` factor level, else None), and the run's KSM manipulation check
    (:mod:`labkit.run.treatments`): ``ksm_verified`` (True, False, or None: not read or not
    recorded) and ``ksm_merged`` (pages merged during the run, its most)."""
    import pandas as pd

    from ..errors import StoreError

    rows = []
    for key, cid in campaigns.items():
        given, bench = (None, key) if isinstance(key, str) else key
        path = Path(data_dir) / cid / "store.sqlite"
        if not path.exists():
            continue
        try:
            with Store(path, readonly=True) as st:
                runs, backend = st.runs(), st.meta().get("backend")
        except StoreError:
            continue
        for r in runs.to_dict("records"):
            md = r["metadata"] if isinstance(r["metadata"], dict) else {}
            k, end = md.get("ksm", {}), md.get("ksm_end", {})
            check = (md.get("treatments") or {}).get("ksm") or {}
            seen = check.get("observed")
            observed: dict = seen if isinstance(seen, dict) else {}
            level = r.get("ksm")
            rows.append(
                {
                    "platform": given or r.get("platform") or backend,
                    "benchmark": bench,
                    "run_id": r["run_id"],
                    "ksm_run": k.get("run"),
                    "ksm_pages_sharing": k.get("pages_sharing"),
                    "ksm_pages_sharing_end": end.get("pages_sharing"),
                    "ksm_level": level if isinstance(level, str) else None,
                    "ksm_verified": check.get("verified"),
                    "ksm_merged": observed.get("merged"),
                }
            )
    return pd.DataFrame(
        rows,
        columns=[
            "platform",
            "benchmark",
            "run_id",
            "ksm_run",
            "ksm_level",
            "ksm_verified",
            "ksm_merged",
            "ksm_pages_sharing",
            "ksm_pages_sharing_end",
        ],
    )


def ksm_check_statement(ksm: pd.DataFrame) -> str:
    """The KSM manipulation check of the ``on`` runs of :func:`run_ksm`'s table, in words, per
    platform: "KSM on merged N pages in k of n runs" (N: the most any run merged; k: the runs whose
    check says verified), or that the check was not recorded (runs from before it existed)."""
    on = ksm[ksm.ksm_level == "on"]
    if on.empty:
        return "No run had KSM switched on (no `ksm` factor)."
    parts = []
    for platform, grp in on.groupby("platform", sort=False):
        merged = _numeric(grp.ksm_merged)
        k = int((grp.ksm_verified == True).sum())  # noqa: E712 (True, False or None)
        unread = int(grp.ksm_verified.isna().sum())
        if unread == len(grp):
            parts.append(
                f"{platform}: no treatment check recorded in its {len(grp)} KSM on runs (stored before "
                "labkit checked treatments): whether KSM took is not known"
            )
            continue
        most = f"up to {int(merged.max())}" if merged.notna().any() else "an unknown number of"
        parts.append(
            f"{platform}: KSM on merged {most} pages in {k} of {len(grp)} runs"
            + (f" ({unread} not checked: no treatment check recorded)" if unread else "")
        )
    return "; ".join(parts) + "."


def _numeric(values: Iterable) -> pd.Series:
    import pandas as pd

    return pd.to_numeric(pd.Series(list(values), dtype=object), errors="coerce")
