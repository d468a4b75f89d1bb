"""Shape a store's tidy rows into analysis tables (store → stats, never the other way)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, StoreError
from .schema import STATUSES

if TYPE_CHECKING:
    import pandas as pd


def responses(tidy: pd.DataFrame, metric: str, factors: list[str], *, how: str = "mean") -> pd.DataFrame:
    """One row per successful run: factor columns, ``replicate``, ``run_id`` and ``metric``.

    When ``count`` > 1 instances ran, their values are combined with ``how``
    ("mean", "max" or "min"). Runs that failed or timed out are left out;
    ``attrs["excluded"]`` counts them so notebooks can say so.
    """
    if how not in ("mean", "max", "min"):
        raise ConfigError(f"responses: how={how!r}; use mean, max or min")
    missing = [c for c in factors if c not in tidy.columns]
    if missing:
        raise ConfigError(f"responses: factor column(s) {missing} not in results; have {list(tidy.columns)}")
    ok = tidy[(tidy["status"] == "ok") & (tidy["metric"] == metric)]
    if ok.empty:
        metrics = sorted(m for m in tidy["metric"].dropna().unique())
        raise ConfigError(f"responses: no successful rows for metric {metric!r}; metrics present: {metrics}")
    out = (
        ok.groupby(["run_id", "replicate", *factors], sort=False, observed=True)["value"]
        .agg(how)
        .rename(metric)
        .reset_index()
    )
    out.attrs["excluded"] = int(tidy.loc[tidy["status"] != "ok", "run_id"].nunique())
    return out


def store_path(data_dir: str | Path, campaign_id: str) -> Path:
    """Where campaign ``campaign_id``'s store lies under ``data_dir``."""
    return Path(data_dir) / campaign_id / "store.sqlite"


def list_campaigns(data_dir: str | Path) -> pd.DataFrame:
    """The campaigns stored under ``data_dir`` (read-only): one row per folder with a store.

    Columns: ``campaign``, ``design`` (name), ``factors`` (comma list), ``backend``,
    ``workload``, ``runs``, ``ok``, ``failed``, ``timeout``, ``first_run``, ``last_run``
    (ISO times). A folder whose store cannot be read has ``design`` = "unreadable: <why>".
    """
    import pandas as pd

    from .store import Store

    rows = []
    for path in sorted(Path(data_dir).glob("*/store.sqlite")):
        row = {"campaign": path.parent.name}
        try:
            with Store(path, readonly=True) as st:
                meta, runs = st.meta(), st.runs()
        except (StoreError, OSError) as exc:
            rows.append(row | {"design": f"unreadable: {exc}"})
            continue
        counts = runs.status.value_counts().to_dict() if len(runs) else {}
        design = meta.get("design", {})
        rows.append(
            row
            | {
                "design": design.get("name", ""),
                "factors": ",".join(design.get("factors", {})),
                "backend": meta.get("backend", ""),
                "workload": (meta.get("workload") or {}).get("name", ""),
                "runs": len(runs),
                **{s: int(counts.get(s, 0)) for s in STATUSES},
                "first_run": runs.started.min() if len(runs) else None,
                "last_run": runs.started.max() if len(runs) else None,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "campaign",
            "design",
            "factors",
            "backend",
            "workload",
            "runs",
            *STATUSES,
            "first_run",
            "last_run",
        ],
    )


def run_facts(data_dir: str | Path, campaign_id: str) -> dict:
    """Facts scraped from a stored campaign's run metadata (read-only).

    Returns ``versions`` (tool -> version, from the first run that recorded them),
    ``domain_types`` (set of libvirt domain types: "kvm", or "qemu" for TCG emulation)
    and ``fingerprints`` (id -> host/backend fingerprint).
    """
    from .store import Store

    with Store(store_path(data_dir, campaign_id), readonly=True) as st:
        runs, fps = st.runs(), st.fingerprints()
    versions: dict = {}
    kinds: set = set()
    if len(runs):
        versions = next((m["versions"] for m in runs.metadata if m.get("versions")), {})
        kinds = {i.get("domain_type") for m in runs.metadata for i in m.get("instances", [])} - {None}
    return {"versions": versions, "domain_types": kinds, "fingerprints": fps}


def load_campaigns(
    data_dir: str | Path, campaigns: Mapping[str | tuple[str, str], str], benchmarks: Mapping[str, Mapping]
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, dict]]:
    """Successful runs of several campaigns as one long table (notebooks 02 and 03).

    ``campaigns`` maps a key to a campaign id. The key is ``(platform, benchmark)`` for a
    campaign that ran on one platform (notebook 03: one campaign per platform and benchmark; its
    rows are labelled ``platform``), or ``benchmark`` alone for a campaign whose ``platform``
    factor spans several (notebook 02; its rows are labelled with each run's platform, a
    campaign without that factor with its backend). ``benchmarks`` maps each benchmark to its
    second ``factor`` and the ``metrics`` to load (a factor the campaign ran at one level, as a
    workload parameter, labels its rows with ``levels[0]``).

    Returns ``(data, failures, facts)``: ``data`` has one row per run and metric: ``platform``,
    ``benchmark``, ``metric``, ``factor``, ``level`` (str), ``run_id``, ``value``, ``test``
    ("<benchmark> <metric> <factor>=<level>"); ``failures`` one row per platform and campaign with
    failed runs, or per campaign that could not be read (``platform``, ``benchmark``,
    ``runs_failed``, ``note``); ``facts`` maps platform -> ``versions`` (per benchmark, from the
    first of its runs that recorded them), ``domain_types`` (libvirt domain types its runs
    recorded: "kvm", or "qemu" for TCG) and ``fingerprints`` (id -> the fingerprints its runs used).
    ConfigError for a key that is neither form, a benchmark missing from ``benchmarks``, or a
    platform given for a campaign with a ``platform`` factor.
    """
    import pandas as pd

    from .store import Store, load_results

    frames: list = []
    failures: list[dict] = []
    facts: dict[str, dict] = {}
    for key, cid in campaigns.items():
        given, bench = _campaign_key(key)
        if bench not in benchmarks:
            raise ConfigError(
                f"load_campaigns: campaign {cid!r}: benchmark {bench!r} is not among {sorted(benchmarks)}"
            )
        b = benchmarks[bench]
        try:
            tidy = load_results(data_dir, cid)
            with Store(store_path(data_dir, cid), readonly=True) as st:
                runs, fps, meta = st.runs(), st.fingerprints(), st.meta()
        except StoreError as exc:
            failures.append(
                {"platform": given, "benchmark": bench, "runs_failed": None, "note": str(exc).splitlines()[0]}
            )
            continue
        if "platform" in tidy.columns and given is not None:
            raise ConfigError(
                f"load_campaigns: campaign {cid!r} has a platform factor: key it by its "
                f"benchmark {bench!r} alone, not by ({given!r}, {bench!r})"
            )
        if "platform" not in tidy.columns:  # a one-platform campaign: the given one, or its backend
            tidy["platform"] = runs["platform"] = given if given is not None else meta.get("backend")
        for platform, bad in tidy.loc[tidy.status != "ok"].drop_duplicates("run_id").groupby("platform"):
            failures.append(
                {
                    "platform": platform,
                    "benchmark": bench,
                    "runs_failed": len(bad),
                    "note": str(bad.error.iloc[0]).splitlines()[0][:160],
                }
            )
        varied = b["factor"] in tidy.columns  # a one-level factor ran as a workload parameter
        for metric in b["metrics"]:
            if not ((tidy.metric == metric) & (tidy.status == "ok")).any():
                continue  # e.g. udp_mbit_per_s only exists in protocol=udp runs
            r = responses(tidy, metric, ["platform", b["factor"]] if varied else ["platform"])
            level = r[b["factor"]].astype(str) if varied else str(b["levels"][0])
            frames.append(
                pd.DataFrame(
                    {
                        "platform": r["platform"],
                        "benchmark": bench,
                        "metric": metric,
                        "factor": b["factor"],
                        "level": level,
                        "run_id": r["run_id"],
                        "value": r[metric],
                    }
                )
            )
        for platform, grp in runs.groupby("platform"):
            f = facts.setdefault(platform, {"versions": {}, "domain_types": set(), "fingerprints": {}})
            versions: dict = next((m["versions"] for m in grp.metadata if m.get("versions")), {})
            if versions:
                f["versions"][bench] = versions
            f["domain_types"] |= {
                i.get("domain_type") for m in grp.metadata for i in m.get("instances", [])
            } - {None}
            f["fingerprints"].update({k: v for k, v in fps.items() if k in set(grp.fingerprint_id)})
    cols = ["platform", "benchmark", "metric", "factor", "level", "run_id", "value"]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)
    data["test"] = data.benchmark + " " + data.metric + " " + data.factor + "=" + data.level
    return data, pd.DataFrame(failures, columns=["platform", "benchmark", "runs_failed", "note"]), facts


def _campaign_key(key: object) -> tuple[str | None, str]:
    """(platform or None, benchmark) of a :func:`load_campaigns` key; ConfigError otherwise."""
    if isinstance(key, str):
        return None, key
    if isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key):
        return key[0], key[1]
    raise ConfigError(
        f"load_campaigns: key {str(key)[:80]!r} is neither a benchmark name nor a (platform, benchmark) pair"
    )
