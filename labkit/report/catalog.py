"""The campaigns under a data directory, as a reader browses them (all opened read-only).

* :func:`campaign_catalog`: one row per stored campaign with what a picker filters on
  (study, backend, platforms, workload, declared response, dates, runs by status, a status word);
  :func:`filter_catalog` applies a search text and filters to it.
* :func:`require_campaign`: a campaign id checked against what is stored, or a ConfigError with
  "did you mean" (:func:`labkit.errors.did_you_mean`).
* :func:`response_metrics` and :func:`primary_response`: the metrics worth analysing (constant
  ones left out) and the campaign's declared primary response (the workload's ``response``).
* :func:`run_table` and :func:`filter_runs`: one row per run (factors, status, host, duration,
  the response, the error's first line; ``suspect``, ``boot``, ``run_seq``, ``iteration`` and the
  number of instances when the store has them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, StoreError, did_you_mean

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CATALOG_COLUMNS",
    "OPTIONAL_RUN_COLUMNS",
    "STATUS_WORDS",
    "campaign_catalog",
    "campaign_ids",
    "design_table",
    "declared_response",
    "filter_catalog",
    "filter_runs",
    "primary_response",
    "require_campaign",
    "response_metrics",
    "run_table",
    "settings_table",
]

CATALOG_COLUMNS = [
    "campaign",
    "study",
    "backend",
    "platforms",
    "workload",
    "response",
    "factors",
    "runs",
    "ok",
    "not_ok",
    "planned",
    "status",
    "first_run",
    "last_run",
    "date",
]
#: the status word of a campaign: every planned run stored and ok / some run failed, timed out or
#: was lost with its host / fewer runs stored than planned (and none failed) / no run / unreadable
STATUS_WORDS = ("complete", "failures", "incomplete", "empty", "unreadable")
#: per-run columns shown when the store has them (the measurement levels of docs/design.md "Store")
OPTIONAL_RUN_COLUMNS = ("suspect", "boot", "run_seq", "iteration")


def campaign_ids(data_dir: str | Path) -> list[str]:
    """The ids of the campaigns stored under ``data_dir`` (folders holding a ``store.sqlite``), sorted."""
    return sorted(p.parent.name for p in Path(data_dir).glob("*/store.sqlite"))


def require_campaign(data_dir: str | Path, campaign: object) -> str:
    """``campaign`` when ``data_dir/campaign/store.sqlite`` exists; else a one-line ConfigError
    naming the data directory, the closest stored ids ("did you mean") and how many are stored.
    A name that is not a plain folder name (a path, "..") is refused before anything is opened;
    a stored folder whose name is no valid new campaign id (a copied store) is still found."""
    if (
        not isinstance(campaign, str)
        or not campaign
        or campaign in (".", "..")
        or "/" in campaign
        or "\\" in campaign
        or "\0" in campaign
        or len(campaign) > 255
    ):
        raise ConfigError(
            f"campaign {str(campaign)[:80]!r}: give a campaign id, a folder name under the "
            "data directory (no '/', not '.' or '..')"
        )
    cid = campaign
    if (Path(data_dir) / cid / "store.sqlite").is_file():
        return cid
    have = campaign_ids(data_dir)
    hint = did_you_mean(cid, have)
    if not have:
        raise ConfigError(f"no campaign {cid!r} under {data_dir}: no campaign is stored there")
    listing = "" if hint else f"; stored: {', '.join(have[:12])}{', ...' if len(have) > 12 else ''}"
    raise ConfigError(
        f"no campaign {cid!r} under {data_dir}{hint}{listing} ({len(have)} stored; `labkit list` shows them)"
    )


def _planned(design: dict) -> int | None:
    """Runs the design plans (configurations x replications), None when that is not fixed
    (adaptive replications, a fraction)."""
    reps, factors = design.get("replications", 1), design.get("factors") or {}
    if not isinstance(reps, int) or design.get("fraction") or not isinstance(factors, dict):
        return None
    try:
        return math.prod(len(v) for v in factors.values()) * reps
    except TypeError:
        return None


def _platforms(meta: dict) -> str:
    factors = (meta.get("design") or {}).get("factors") or {}
    if isinstance(factors, dict) and isinstance(factors.get("platform"), list):
        return ",".join(map(str, factors["platform"]))
    return str(meta.get("backend") or "")


def campaign_catalog(data_dir: str | Path) -> pd.DataFrame:
    """One row per campaign stored under ``data_dir`` (read-only), sorted by id.

    Columns: ``campaign``, ``study`` (the design's name), ``backend``, ``platforms`` (the levels
    of a ``platform`` factor, comma-joined, else the backend), ``workload``, ``response`` (the
    workload's declared primary response), ``factors`` (comma list), ``runs``, ``ok``,
    ``not_ok`` (failed, timed out or lost), ``planned`` (configurations x replications, or
    NA), ``status`` (one of :data:`STATUS_WORDS`), ``first_run`` and ``last_run`` (ISO
    times) and ``date`` (the last run's day, ``YYYY-MM-DD``). A store that cannot be read is a
    row with status "unreadable" and the reason as its study.
    """
    import pandas as pd

    from ..store import Store

    rows = []
    for cid in campaign_ids(data_dir):
        row: dict = {"campaign": cid}
        try:
            with Store(Path(data_dir) / cid / "store.sqlite", readonly=True) as st:
                meta, counts = st.meta(), st.run_counts()  # SQL aggregates: no run's JSON parsed
        except (StoreError, OSError) as exc:
            rows.append(row | {"study": f"unreadable: {str(exc).splitlines()[0]}", "status": "unreadable"})
            continue
        design = meta.get("design") or {}
        workload = meta.get("workload") or {}
        n = counts["runs"]
        ok = counts["by_status"].get("ok", 0)
        planned = _planned(design)
        status = (
            "empty"
            if n == 0
            else "failures"
            if ok < n
            else "incomplete"
            if planned is not None and n < planned
            else "complete"
        )
        last = counts["last_run"]
        rows.append(
            row
            | {
                "study": str(design.get("name", "")),
                "backend": str(meta.get("backend") or ""),
                "platforms": _platforms(meta),
                "workload": str(workload.get("name") or ""),
                "response": str(workload.get("response") or ""),
                "factors": ",".join(map(str, design.get("factors") or {})),
                "runs": n,
                "ok": ok,
                "not_ok": n - ok,
                "planned": planned,
                "status": status,
                "first_run": counts["first_run"],
                "last_run": last,
                "date": str(last)[:10] if last else "",
            }
        )
    out = pd.DataFrame(rows, columns=CATALOG_COLUMNS)
    out["planned"] = out["planned"].astype("Int64")
    for col in ("runs", "ok", "not_ok"):
        out[col] = out[col].fillna(0).astype(int)
    for col in ("study", "backend", "platforms", "workload", "response", "factors", "status", "date"):
        out[col] = out[col].fillna("").astype(str)
    return out


def _chosen(value) -> list[str]:
    if value is None or value == "" or value == ():
        return []
    return [str(value)] if isinstance(value, str) else [str(x) for x in value]


def filter_catalog(
    catalog: pd.DataFrame,
    *,
    search: str = "",
    study=None,
    backend=None,
    platform=None,
    status=None,
    since: object = None,
    until: object = None,
) -> pd.DataFrame:
    """The rows of :func:`campaign_catalog` that match every filter given.

    ``search``: words that must all occur (case ignored) in the campaign id, study, workload,
    factors, backend or platforms; ``study``, ``backend``, ``status``: a value or a list of
    accepted values; ``platform``: a value or list, matched against each campaign's platforms
    (a campaign with ``local,docker,lxd`` matches ``docker``); ``since``/``until``: dates
    (``datetime.date`` or ``YYYY-MM-DD``) bounding the last run's day, inclusive.
    """
    if not isinstance(search, str):
        raise ConfigError(f"search must be text, got {type(search).__name__}")
    mask = catalog["campaign"].notna()
    hay = (
        catalog[["campaign", "study", "workload", "factors", "backend", "platforms"]]
        .fillna("")
        .astype(str)
        .agg(" ".join, axis=1)
        .str.lower()
    )
    for word in search.lower().split():
        mask &= hay.str.contains(word, regex=False)
    for col, want in (("study", study), ("backend", backend), ("status", status)):
        chosen = _chosen(want)
        if chosen:
            mask &= catalog[col].astype(str).isin(chosen)
    plats = set(_chosen(platform))
    if plats:
        mask &= catalog["platforms"].astype(str).map(lambda p: bool(plats & set(p.split(","))))
    for bound, keep in ((since, lambda d, b: d >= b), (until, lambda d, b: d <= b)):
        if bound is None or bound == "":
            continue
        b = str(bound)[:10]
        if len(b) != 10 or b[4] != "-" or b[7] != "-":
            raise ConfigError(f"date filter {bound!r}: use a date or YYYY-MM-DD")
        mask &= catalog["date"].astype(str).map(lambda d, b=b, keep=keep: bool(d) and keep(d, b))
    return catalog[mask].reset_index(drop=True)


def response_metrics(tidy: pd.DataFrame) -> list[str]:
    """Metrics with at least one successful value that varies across the campaign's runs, in
    order of first appearance: a constant (N-queens' solution count, a fixed block size) is no
    response to analyse."""
    ok = tidy[(tidy["status"] == "ok") & tidy["metric"].notna()]
    out = []
    for metric, values in ok.groupby("metric", sort=False)["value"]:
        if values.dropna().nunique() > 1:
            out.append(str(metric))
    return out


def primary_response(meta: dict, tidy: pd.DataFrame) -> tuple[str | None, str]:
    """``(metric, why)``: the workload's declared ``response`` when it has varying successful
    values; else the first varying metric (:func:`response_metrics`), with ``why`` saying what
    was declared and why it is not used; ``(None, why)`` when no metric varies."""
    return declared_response(meta, response_metrics(tidy), set(tidy["metric"].dropna()))


def declared_response(meta: dict, metrics: Sequence[str], present: set) -> tuple[str | None, str]:
    """:func:`primary_response` from the campaign's varying ``metrics`` (:func:`response_metrics`)
    and the metrics ``present`` in its rows."""
    declared = (meta.get("workload") or {}).get("response")
    if declared in metrics:
        return str(declared), f"the workload's declared response {declared!r}"
    if declared is None:
        why = "no response declared by the workload"
    elif declared in present:
        why = f"the declared response {declared!r} is constant"
    else:
        why = f"the declared response {declared!r} was not measured"
    if not metrics:
        return None, why + "; no metric varies"
    return metrics[0], why + f"; using {metrics[0]!r}, the first metric that varies"


def _run_level(tidy: pd.DataFrame, col: str) -> pd.Series:
    """Per run: the column's value when it is one per run, else the number of distinct values."""
    g = tidy.groupby("run_id", sort=False)[col]
    n = g.nunique(dropna=True)
    first = g.first()
    return first.where(n <= 1, n.astype(object))


def run_table(tidy: pd.DataFrame, factors: Sequence[str], response: str | None = None) -> pd.DataFrame:
    """One row per run of a campaign's tidy rows (:meth:`labkit.store.Store.tidy`): ``run_order``,
    ``run_id``, the ``factors``, ``status``, ``host`` (testbed host, or "" on this machine),
    ``started``, ``duration_s``, ``response`` (mean over the run's instances; NA when it failed),
    ``instances`` (how many reported), ``error`` (first line, at most 160 characters) and, when
    the tidy rows have them, :data:`OPTIONAL_RUN_COLUMNS` (``suspect`` as a boolean). Ordered by
    run order."""
    import pandas as pd

    missing = [f for f in factors if f not in tidy.columns]
    if missing:
        raise ConfigError(
            f"run_table: factor(s) {missing} not in the results{did_you_mean(missing[0], list(tidy.columns))}"
        )
    runs = tidy.drop_duplicates("run_id").set_index("run_id")
    out = pd.DataFrame({"run_order": runs["run_order"]})
    for f in factors:
        out[f] = runs[f]
    out["status"] = runs["status"]
    out["host"] = runs["host"].fillna("").astype(str) if "host" in runs else ""
    out["started"] = runs["started"]
    out["duration_s"] = runs["duration_s"]
    if response is not None:
        ok = tidy[(tidy["metric"] == response) & (tidy["status"] == "ok")]
        out[response] = ok.groupby("run_id")["value"].mean().reindex(out.index)
    if "instance" in tidy:
        out["instances"] = (
            tidy.dropna(subset=["metric"])
            .groupby("run_id")["instance"]
            .nunique()
            .reindex(out.index)
            .fillna(0)
            .astype(int)
        )
    for col in OPTIONAL_RUN_COLUMNS:
        if col in tidy.columns:
            if col == "suspect":
                out[col] = (
                    tidy.groupby("run_id", sort=False)[col]
                    .agg(lambda s: bool(s.fillna(False).astype(bool).any()))
                    .reindex(out.index)
                )
            else:
                out[col] = _run_level(tidy, col).reindex(out.index)
    out["error"] = runs["error"].fillna("").astype(str).map(lambda e: (e.splitlines() or [""])[0][:160])
    return (
        out.reset_index()
        .sort_values("run_order", kind="stable")
        .reset_index(drop=True)[["run_order", "run_id", *[c for c in out.columns if c != "run_order"]]]
    )


def filter_runs(runs: pd.DataFrame, *, status=None, host=None, suspect: bool | None = None) -> pd.DataFrame:
    """Rows of :func:`run_table` with ``status`` and ``host`` among those given (a value or a
    list; None or empty: any) and, when ``suspect`` is True or False and the table has that
    column, only suspect or only unsuspected runs."""
    mask = runs["run_id"].notna()
    for col, want in (("status", status), ("host", host)):
        chosen = _chosen(want)
        if chosen:
            mask &= runs[col].astype(str).isin(chosen)
    if suspect is not None and "suspect" in runs:
        mask &= runs["suspect"].fillna(False).astype(bool) == bool(suspect)
    return runs[mask].reset_index(drop=True)


def design_table(meta: dict) -> pd.DataFrame:
    """A stored design as a table: one row per factor, ``factor``, ``levels`` (in order, the
    first being the low level of a two-level factor) and ``n_levels``."""
    import pandas as pd

    factors = (meta.get("design") or {}).get("factors") or {}
    rows = [
        {
            "factor": str(name),
            "levels": ", ".join(map(str, levels if isinstance(levels, list) else [levels])),
            "n_levels": len(levels) if isinstance(levels, list) else 1,
        }
        for name, levels in (factors.items() if isinstance(factors, dict) else [])
    ]
    return pd.DataFrame(rows, columns=["factor", "levels", "n_levels"])


def settings_table(meta: dict, status: dict | None = None) -> pd.DataFrame:
    """A stored campaign's settings as ``setting``/``value`` rows: campaign, study, description,
    replications, seed, backend, platforms, workload, its parameters (``key=value``), the declared
    response and, with ``status`` (counts by run status), the runs."""
    import json

    import pandas as pd

    design = meta.get("design") or {}
    workload = meta.get("workload") or {}
    params = workload.get("params") or {}
    rows = [
        ("campaign", meta.get("campaign_id")),
        ("study", design.get("name")),
        ("description", design.get("description")),
        ("replications", json.dumps(design.get("replications"), default=str)),
        ("seed", design.get("seed")),
        ("backend", meta.get("backend")),
        ("platforms", _platforms(meta)),
        ("workload", workload.get("name")),
        ("parameters", ", ".join(f"{k}={v}" for k, v in params.items() if v is not None)),
        ("declared response", workload.get("response")),
    ]
    if status is not None:
        from .tables import count_words

        rows.append(("runs", count_words(status)))
    return pd.DataFrame(
        [(k, "" if v is None else str(v)) for k, v in rows if v not in (None, "")],
        columns=["setting", "value"],
    )
