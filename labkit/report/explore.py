"""The explorer: find, filter, analyse and compare stored campaigns (notebook 00 and the dashboard).

:class:`Explorer` reads every campaign under a data directory read-only and gives

* **views**, lists of things to display (Markdown, escaped HTML tables, figures) that a notebook
  or a test can show or inspect: :meth:`Explorer.overview` (settings, design, host facts),
  :meth:`Explorer.runs_view` (the run table, filtered by status, host and, when stores have it,
  ``suspect``), :meth:`Explorer.analysis_view` (:func:`labkit.report.analyze`: effects or ANOVA,
  conclusions, figures, each level's share of the variance and the drift check with its change
  points) on the campaign's declared primary response, :meth:`Explorer.comparison_view`
  (:func:`labkit.report.compare` with a figure) and :meth:`Explorer.telemetry_view` (every run's
  telemetry summaries with suspect runs marked, then one run's samples);
* :meth:`Explorer.app`, the same as one ipywidgets application: the campaign picker at the top
  (search text and filters on study, backend, platform, dates and status, the filtered catalog
  below them), then tabs for the analysis, the runs, a second campaign side by side, the
  design and hosts, and telemetry;
* :meth:`Explorer.show`, what notebook 00 calls: the application in JupyterLab or Voila
  (``interactive=True``), the views one after another under papermill.

Everything shown from a store (ids, names, levels, error texts, host facts) is escaped
(:func:`labkit.report.escape_md`, :func:`labkit.report.escape_html`); a LabkitError raised while
the application runs is shown as one line where the view would be.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, LabkitError
from .catalog import (
    campaign_catalog,
    design_table,
    filter_catalog,
    filter_runs,
    primary_response,
    require_campaign,
    response_metrics,
    run_table,
    settings_table,
)
from .deferred import DEFER_ENV, fill_later, shown_path
from .escape import escape_html, escape_md
from .order import order_sentences
from .tables import decisions_table, effects_table, html_table

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CATALOG_SHOWN", "CampaignData", "Explorer"]

#: catalog columns the picker's table shows
CATALOG_SHOWN = ["campaign", "study", "platforms", "workload", "response", "factors", "runs", "status", "date"]
_ANY = ""
_SCROLL = '<div class="lk-scroll" style="max-height:{h};overflow:auto">{body}</div>'


@dataclass
class CampaignData:
    """What the explorer keeps of one campaign: ``meta``, ``tidy`` (one row per measurement),
    ``fingerprints``, ``factors`` (the design's factors that vary), ``metrics`` (metrics that
    vary, :func:`labkit.report.catalog.response_metrics`), ``response`` and ``response_why``
    (:func:`labkit.report.catalog.primary_response`) and ``runs`` (the run table)."""
    campaign: str
    meta: dict
    tidy: pd.DataFrame
    fingerprints: dict
    factors: list
    metrics: list
    response: str | None
    response_why: str
    runs: pd.DataFrame


def _md(text: str):
    from IPython.display import Markdown
    return Markdown(text)


def _html(text: str):
    from IPython.display import HTML
    return HTML(text)


def _error_html(exc: BaseException) -> str:
    return f'<p class="lk-error"><b>{escape_html(type(exc).__name__)}</b>: {escape_html(exc)}</p>'


class Explorer:
    """Browse the campaigns under ``data_dir`` (default: the repository's ``data/``), read-only.

    ``campaign`` (default: the first in the catalog), ``response`` (default: the campaign's
    declared primary response), ``factors`` (default: the design's factors that vary),
    ``compare_with`` (a second campaign of the same design) and ``alpha`` set what is shown
    first. A campaign that is not stored is a ConfigError with "did you mean".
    """

    def __init__(self, data_dir: str | Path | None = None, *, campaign: str | None = None,
                 response: str | None = None, factors: Sequence[str] | None = None,
                 compare_with: str | None = None, alpha: float = 0.05):
        from ..core import paths
        self.data_dir = paths.data_dir(data_dir)
        self.catalog = campaign_catalog(self.data_dir)
        self.alpha = alpha
        if campaign is not None:
            require_campaign(self.data_dir, campaign)
        if compare_with is not None:
            require_campaign(self.data_dir, compare_with)
        readable = self.catalog[self.catalog.status != "unreadable"]
        self.campaign = campaign if campaign is not None else (
            str(readable.campaign.iloc[0]) if len(readable) else None)
        self.response = response
        self.factors = list(factors) if factors is not None else None
        self.compare_with = compare_with
        self._data: dict[str, CampaignData] = {}
        self._analyses: dict[tuple, Any] = {}

    # -- data ---------------------------------------------------------------------------------
    def data(self, campaign: str) -> CampaignData:
        """The :class:`CampaignData` of ``campaign`` (read once, then kept)."""
        if campaign not in self._data:
            from ..store import Store
            cid = require_campaign(self.data_dir, campaign)
            with Store(self.data_dir / cid / "store.sqlite", readonly=True) as st:
                meta, tidy, fps = st.meta(), st.tidy(), st.fingerprints()
            design = list((meta.get("design") or {}).get("factors") or {})
            factors = [f for f in design if f in tidy and tidy[f].nunique() > 1]
            response, why = primary_response(meta, tidy)
            self._data[cid] = CampaignData(cid, meta, tidy, fps, factors, response_metrics(tidy), response,
                                           why, run_table(tidy, design, response))
        return self._data[campaign]

    def analysis(self, campaign: str, *, response: str | None = None,
                 factors: Sequence[str] | None = None):
        """:func:`labkit.report.analyze` of ``campaign`` on ``response`` (default: its declared
        primary response) and ``factors`` (computed once, then kept, a failure too: the analysis
        and the telemetry tab share it, and a widget change never runs a failed analysis again)."""
        from .analysis import analyze
        d = self.data(campaign)
        # the design's varying factors, given or not, are one analysis (the analysis tab names
        # them, the telemetry tab does not): computed once
        chosen = tuple(factors) if factors and list(factors) != d.factors else None
        key = (campaign, response or d.response, chosen)
        if key not in self._analyses:
            try:
                self._analyses[key] = analyze(self.data_dir, campaign, response=key[1],
                                              factors=list(chosen) if chosen else None, alpha=self.alpha)
            except LabkitError as exc:   # kept too: a widget change does not run a failed analysis again
                self._analyses[key] = exc
        got = self._analyses[key]
        if isinstance(got, LabkitError):
            raise got
        return got

    def comparable(self, campaign: str) -> list[str]:
        """Other campaigns whose design has the same factors (in the same order): those
        :func:`labkit.report.compare` can set beside ``campaign``."""
        factors = self.catalog.set_index("campaign").loc[campaign, "factors"]
        same = self.catalog[(self.catalog.factors == factors) & (self.catalog.campaign != campaign)
                            & (self.catalog.status != "unreadable")]
        return list(same.campaign)

    # -- views: lists of displayable objects ----------------------------------------------------
    def catalog_html(self, table: pd.DataFrame | None = None, *, height: str = "16em") -> str:
        """The catalog (or ``table``, a filtered part of it) as an escaped, scrollable HTML table."""
        t = self.catalog if table is None else table
        return _SCROLL.format(h=height, body=html_table(t[CATALOG_SHOWN]))

    def overview(self, campaign: str) -> list:
        """Settings, design (one row per factor) and host fingerprints of ``campaign``."""
        from ..core.fingerprint import fingerprint_table
        d = self.data(campaign)
        status = d.runs.status.value_counts().to_dict() if len(d.runs) else {}
        return [_md(f"### {escape_md(campaign)}: settings"), _html(html_table(settings_table(d.meta, status))),
                _md("**Design** (first level = low level of a two-level factor)"),
                _html(html_table(design_table(d.meta))),
                _md("**Host fingerprints** (one column per host or backend the campaign ran on)"),
                _html(_SCROLL.format(h="24em", body=html_table(fingerprint_table(d.fingerprints))))]

    def runs_view(self, campaign: str, *, status=None, host=None, suspect: bool | None = None,
                  max_rows: int = 500) -> list:
        """The run table of ``campaign`` filtered (:func:`labkit.report.catalog.filter_runs`), with a
        line saying how many runs are shown (and how many of them are suspect, when known)."""
        d = self.data(campaign)
        runs = filter_runs(d.runs, status=status, host=host, suspect=suspect)
        line = f"{len(runs)} of {len(d.runs)} runs"
        if "suspect" in runs:
            line += f", {int(runs['suspect'].fillna(False).astype(bool).sum())} suspect"
        if d.response:
            line += f"; {d.response}: mean over the run's instances"
        return [_md(f"**Runs of {escape_md(campaign)}**: {escape_md(line)}"),
                _html(_SCROLL.format(h="28em", body=html_table(runs, max_rows=max_rows)))]

    def analysis_view(self, campaign: str, *, response: str | None = None,
                      factors: Sequence[str] | None = None) -> list:
        """:func:`labkit.report.analyze` of ``campaign`` on ``response`` (default: the declared
        primary response, never a constant) and ``factors``: heading, design, why this response,
        summary per configuration, effects (:func:`labkit.report.tables.effects_table`: q and the
        effect, each with its own interval) or ANOVA, residual checks, conclusions, figures (levels
        in the design's declared order, as in the words and tables), then
        the error term with each level's share of the variance and the drift check (each host's
        run-order residuals, change points marked: :mod:`labkit.report.measurement`)."""
        from .measurement import displayable, drift_section, levels_section
        d = self.data(campaign)
        if d.response is None and response is None:
            return [_md(f"**{escape_md(campaign)}**: nothing to analyse ({escape_md(d.response_why)}).")]
        a = self.analysis(campaign, response=response, factors=factors)
        md = a.markdown()
        out: list[Any] = [_md(md["title"]), _md(md["design"])]
        if response is None and d.response_why and not d.response_why.startswith("the workload's declared"):
            out.append(_md(f"*Response*: {escape_md(d.response_why)}."))
        out += [_md("**Summary per configuration**"), _html(html_table(a.summary)), _md(md["effects"])]
        if len(a.effects):     # q and the effect (2q), each beside its own interval
            out.append(_html(html_table(effects_table(a.effects, a.variation))))
        decided = a.conclusions.decided
        if decided is not None and decided["verdict"].notna().any():   # each term's verdict, the rules
            out += [_md(f"**Decisions** ({escape_md(a.conclusions.rules)})"),
                    _html(html_table(decisions_table(decided)))]
        if a.diagnostics is not None:
            out.append(_md(escape_md(a.diagnostics.message)))
        out.append(_md(md["conclusions"]))
        out += list(a.figures(alpha=self.alpha).values())
        parts = [p for p in (levels_section(a), drift_section(a)) if p is not None]
        out += displayable(parts, heading="####", html_tables=True)
        if a.order_effects is not None:     # beside the drift check: trend and carry-over in run order
            out += [_md("#### Order effects\n\n" + escape_md(order_sentences(a.order_effects, a.response)[0])),
                    _html(html_table(a.order_effects))]
        return out

    def comparison_view(self, a: str, b: str, *, response: str | None = None) -> list:
        """:func:`labkit.report.compare` of ``a`` and ``b``: how their settings differ, the verdict,
        the per-configuration table, the host facts that differ (and those one side did not
        record, named but not counted) and :func:`labkit.report.plots.comparison`."""
        from . import plots
        from .comparison import compare
        table, fpd, verdict = compare(self.data_dir, a, b, response=response or self.data(a).response,
                                      alpha=self.alpha)
        out: list[Any] = [_md(f"### {escape_md(a)} and {escape_md(b)}")]
        notes = table.attrs.get("notes") or []
        if notes:
            out.append(_md("**How they differ**\n\n" + "\n".join(f"- {escape_md(n)}" for n in notes)))
        out += [_md(f"**Verdict**: {escape_md(verdict)}"), _html(html_table(table))]
        differs = fpd[fpd.kind == "differs"]
        if len(differs):
            out += [_md("**Host facts that differ**"),
                    _html(html_table(differs.drop(columns="kind").rename(columns={"a": a, "b": b})))]
        for side in (a, b):
            only = fpd[fpd.kind == f"only in {side}"]
            if len(only):
                out.append(_md(f"*Recorded only for {escape_md(side)}* (not differences): "
                               + escape_md(", ".join(only.fact))))
        out.append(plots.comparison(table, table.attrs["factors"], a=a, b=b, alpha=self.alpha))
        return out

    def telemetry_view(self, campaign: str, run_id: str | None = None) -> list:
        """Every run's telemetry summaries (:func:`labkit.report.measurement.telemetry_section` of
        the campaign's analysis: the instances' CPU beside other processes' CPU, steal, CPU
        frequency, suspect runs drawn as red crosses and listed first), then the samples of one
        run (default: the first suspect run, else the first run) as a figure; or a line saying
        that the store holds none (stores written before telemetry was kept).

        Bounded at any campaign size (:mod:`labkit.report.downsample`): the run's samples as stored up
        to :data:`~labkit.report.downsample.RUN_SAMPLES`, else averaged over at most
        :data:`~labkit.report.downsample.MAX_POINTS` spans per metric; before it, when its configuration
        has more than one run, the median and p95 per second of run time across (at most
        :data:`~labkit.report.downsample.SUMMARY_RUNS` of) those runs, averaged in SQL; each figure's
        title says what was downsampled."""
        from ..store import Store
        from . import plots
        from .downsample import config_summary, run_series, summary_figure, summary_note
        from .measurement import displayable, telemetry_section
        d = self.data(campaign)
        summary = None
        with Store(self.data_dir / require_campaign(self.data_dir, campaign) / "store.sqlite",
                   readonly=True) as st:
            runs = d.runs
            if run_id is None and len(runs):
                flagged = runs[runs["suspect"].fillna(False).astype(bool)] if "suspect" in runs else runs.iloc[:0]
                run_id = str((flagged if len(flagged) else runs).run_id.iloc[0])
            samples = run_series(st, run_id) if run_id is not None else None
            config = st.run_config(run_id) if run_id is not None else None
            if samples is not None and not samples.empty and config is not None:
                summary = config_summary(st, config)
        if samples is None or samples.empty:
            return [_md(f"No telemetry stored for {escape_md(run_id or campaign)} (campaigns run before "
                        "telemetry was kept have none).")]
        out: list[Any] = []
        if d.response is not None:
            part = telemetry_section(self.analysis(campaign))
            out += displayable([part], heading="####", html_tables=True) if part is not None else []
        flag = runs.loc[runs.run_id == run_id, "suspect"] if "suspect" in runs else None
        why = ""
        if flag is not None and len(flag) and bool(flag.fillna(False).astype(bool).iloc[0]):
            reason = runs.loc[runs.run_id == run_id, "suspect_reason"].iloc[0] if "suspect_reason" in runs else ""
            why = f", **suspect**: {escape_md(reason)}" if reason else ", **suspect**"
        if summary is not None and not summary.empty and summary.attrs["runs_used"] > 1:
            out += [_md(f"**Telemetry of configuration {config}**: {escape_md(summary_note(summary))}"),
                    summary_figure(summary, title=f"host telemetry of configuration {config}")]
        note = samples.attrs.get("note") or ""
        return out + [_md(f"**Telemetry of run {escape_md(run_id)}** ({samples.t.nunique()} "
                          f"{'time points' if note else 'samples'}{why}{'; ' + escape_md(note) if note else ''})"),
                      plots.telemetry(samples, title=f"telemetry of run {run_id}" + (f"\n({note})" if note else ""))]

    # -- showing ----------------------------------------------------------------------------------
    def show(self, interactive: bool = True, *, defer: bool | None = None) -> None:
        """Notebook 00's output: :meth:`app` when ``interactive``, else the catalog and the views
        of the chosen campaign one after another (papermill, Binder without widgets). ``defer``
        (default: whether :data:`DEFER_ENV` is "1", as ``labkit dashboard`` sets it) is
        :meth:`app`'s: the first page served before the first analysis is computed."""
        import os

        from IPython.display import display
        if interactive:
            display(self.app(defer=os.environ.get(DEFER_ENV) == "1" if defer is None else defer))
            return
        display(_md(f"**{len(self.catalog)} campaigns** in {escape_md(shown_path(self.data_dir))}"))
        display(_html(self.catalog_html(height="none")))
        if self.campaign is None:
            display(_md(f"No campaign stored in {escape_md(shown_path(self.data_dir))}."))
            return
        views = [self.analysis_view(self.campaign, response=self.response, factors=self.factors),
                 self.runs_view(self.campaign), self.overview(self.campaign),
                 self.telemetry_view(self.campaign)]
        if self.compare_with is not None:
            views.insert(1, self.comparison_view(self.campaign, self.compare_with, response=self.response))
        for view in views:
            for item in view:
                display(item)

    def app(self, *, defer: bool = False):
        """The explorer as one ipywidgets application (see the module docstring). With ``defer``
        (:meth:`show` under ``labkit dashboard``), the first campaign's analysis and telemetry are
        computed after the application is returned, in a background thread that fills their tabs
        (a line says they are being computed): the page is served at once."""
        return _App(self, defer=defer).root


def _options(values) -> list[tuple[str, str]]:
    return [("any", _ANY)] + [(str(v), str(v)) for v in values]


class _App:
    """The widgets of :meth:`Explorer.app` and their callbacks."""

    def __init__(self, ex: Explorer, *, defer: bool = False):
        import threading

        import ipywidgets as W
        self.ex, self.W = ex, W
        # defer: the first pick's slow views (analysis, telemetry) are computed by a background
        # thread; ``lock`` keeps it and the callbacks from drawing at once (pyplot is not
        # thread-safe), ``picks`` counts picks so that it drops what a newer pick replaced
        self.defer, self.lock, self.picks = defer, threading.RLock(), 0
        self._quiet = False
        cat = ex.catalog
        plats = sorted({p for ps in cat.platforms for p in str(ps).split(",") if p})
        def lay():        # one Layout per widget: a shared one would hide them all with one
            return W.Layout(width="15em")
        self.search = W.Text(placeholder="id, study, workload, factor…", description="search",
                             continuous_update=True, layout=W.Layout(width="22em"))
        studies = sorted(set(cat.study[cat.status != "unreadable"]))
        self.study = W.Dropdown(options=_options(studies), description="study", layout=lay())
        self.backend = W.Dropdown(options=_options(sorted(set(cat.backend))), description="backend", layout=lay())
        self.platform = W.Dropdown(options=_options(plats), description="platform", layout=lay())
        self.status = W.Dropdown(options=_options([s for s in ("complete", "failures", "incomplete", "empty",
                                                               "unreadable") if s in set(cat.status)]),
                                 description="status", layout=lay())
        self.since = W.DatePicker(description="from", layout=lay())
        self.until = W.DatePicker(description="to", layout=lay())
        self.count = W.HTML()
        self.pick = W.Dropdown(description="campaign", layout=W.Layout(width="30em"))
        self.table = W.HTML()
        for w, cls in ((self.search, "lk-search"), (self.study, "lk-study"), (self.backend, "lk-backend"),
                       (self.platform, "lk-platform"), (self.status, "lk-status"), (self.since, "lk-since"),
                       (self.until, "lk-until"), (self.pick, "lk-pick"), (self.table, "lk-catalog"),
                       (self.count, "lk-count")):
            w.add_class(cls)
        # tabs
        self.resp = W.Dropdown(description="response", layout=W.Layout(width="22em"))
        self.facs = W.SelectMultiple(description="factors", rows=4)
        self.go = W.Button(description="analyse", button_style="primary")
        self.analysis_out = W.Output()
        self.run_status = W.Dropdown(description="status", layout=lay())
        self.run_host = W.Dropdown(description="host", layout=lay())
        self.run_suspect = W.Dropdown(options=[("any", "any"), ("suspect", "yes"), ("not suspect", "no")],
                                      description="suspect", layout=lay())
        self.runs_out = W.Output()
        self.other = W.Dropdown(description="with", layout=W.Layout(width="30em"))
        self.compare_out = W.Output()
        self.overview_out = W.Output()
        self.tel_run = W.Dropdown(description="run", layout=lay())
        self.tel_out = W.Output()
        for w, cls in ((self.resp, "lk-response"), (self.facs, "lk-factors"), (self.go, "lk-analyse"),
                       (self.analysis_out, "lk-analysis"), (self.run_status, "lk-run-status"),
                       (self.run_host, "lk-run-host"), (self.run_suspect, "lk-run-suspect"),
                       (self.runs_out, "lk-runs"), (self.other, "lk-other"), (self.compare_out, "lk-compare"),
                       (self.overview_out, "lk-overview"), (self.tel_run, "lk-tel-run"),
                       (self.tel_out, "lk-telemetry")):
            w.add_class(cls)
        self.tabs = W.Tab(children=[
            W.VBox([W.HBox([self.resp, self.facs, self.go]), self.analysis_out]),
            W.VBox([W.HBox([self.run_status, self.run_host, self.run_suspect]), self.runs_out]),
            W.VBox([self.other, self.compare_out]),
            self.overview_out,
            W.VBox([self.tel_run, self.tel_out])])
        self.tabs.titles = ("Analysis", "Runs", "Compare", "Design and hosts", "Telemetry")
        self.tabs.add_class("lk-tabs")
        title = W.HTML(f"<b>{len(cat)} campaigns</b> in {escape_html(shown_path(ex.data_dir))} "
                       "(read-only). Pick one; filter to narrow the list.")
        self.root = W.VBox([title,
                            W.HBox([self.search, self.status, self.since, self.until], layout=_wrap(W)),
                            W.HBox([self.study, self.backend, self.platform], layout=_wrap(W)),
                            W.HBox([self.pick, self.count]), self.table, self.tabs])
        self.root.add_class("lk-explorer")
        # wiring
        for w in (self.search, self.study, self.backend, self.platform, self.status, self.since, self.until):
            w.observe(self.on_filter, names="value")
        self.pick.observe(self.on_pick, names="value")
        self.go.on_click(self.on_analyse)
        for w in (self.run_status, self.run_host, self.run_suspect):
            w.observe(self.on_runs, names="value")
        self.other.observe(self.on_compare, names="value")
        self.tel_run.observe(self.on_telemetry, names="value")
        self._first, self._updating = True, False
        self.on_filter()

    # callbacks ------------------------------------------------------------------------------
    def _fill(self, out, make) -> None:
        from IPython.display import display
        with self.lock:
            out.clear_output(wait=True)
            with out:
                try:
                    for item in make():
                        display(item)
                except LabkitError as exc:
                    display(_html(_error_html(exc)))

    def _later(self, jobs: list) -> None:
        """Each ``(out, what, make)`` of ``jobs`` filled by a background thread
        (:func:`labkit.report.deferred.fill_later`), "Computing ``what``…" until then; a newer
        pick drops the rest."""
        pick = self.picks
        fill_later([(out, _md(f"*Computing {escape_md(what)}…*"), make) for out, what, make in jobs],
                   lock=self.lock, current=lambda: pick == self.picks, failed=lambda e: _html(_error_html(e)))

    def on_filter(self, change=None) -> None:
        ex = self.ex
        try:
            shown = filter_catalog(ex.catalog, search=self.search.value, study=self.study.value or None,
                                   backend=self.backend.value or None, platform=self.platform.value or None,
                                   status=self.status.value or None, since=self.since.value,
                                   until=self.until.value)
        except ConfigError as exc:
            self.table.value = _error_html(exc)
            return
        self.table.value = ex.catalog_html(shown)
        self.count.value = f"{len(shown)} of {len(ex.catalog)} campaigns match"
        ids = [c for c, s in zip(shown.campaign, shown.status) if s != "unreadable"]
        before = self.pick.value
        keep = before if before in ids else (
            ex.campaign if self._first and ex.campaign in ids else (ids[0] if ids else None))
        self._updating = True
        try:
            self.pick.options = ids
            self.pick.value = keep
        finally:
            self._updating = False
        if self._first or keep != before:
            self.on_pick()
        self._first = False

    def on_pick(self, change=None) -> None:
        if self._updating:
            return
        self.picks += 1
        cid = self.pick.value
        if not self._first:     # the first pick's outputs are empty (and a deferred one is not captured)
            for out in (self.analysis_out, self.runs_out, self.compare_out, self.overview_out, self.tel_out):
                out.clear_output()
        if cid is None:
            return
        ex = self.ex
        try:
            d = ex.data(cid)
        except LabkitError as exc:
            with self.analysis_out:
                from IPython.display import display
                display(_html(_error_html(exc)))
            return
        first = cid == ex.campaign and self._first
        self._quiet = True        # filling the tabs' widgets below must not run their views (each once, below)
        try:
            self._set_choices(d, cid, first)
        finally:
            self._quiet = False
        others = ex.comparable(cid)
        later = self.defer and self._first
        jobs: list = []
        if later:         # the page first: the slow views computed after it is served
            resp, facs = self.resp.value, list(self.facs.value) or None
            jobs.append((self.analysis_out, f"the analysis of {cid}",
                         lambda: ex.analysis_view(cid, response=resp, factors=facs)))
        else:
            self.on_analyse()
        self.on_runs()
        self._fill(self.overview_out, lambda: ex.overview(cid))
        if not others:
            self._fill(self.compare_out, lambda: [_md(
                f"No other campaign has the factors of {escape_md(cid)} "
                f"({escape_md(', '.join(map(str, d.factors)) or 'none')}): nothing to compare with.")])
        elif self.other.value:
            if later:
                other = self.other.value
                jobs.append((self.compare_out, f"the comparison with {other}",
                             lambda: ex.comparison_view(cid, other, response=resp)))
            else:
                self.on_compare()
        if later:
            run = self.tel_run.value
            jobs.append((self.tel_out, "the telemetry", lambda: ex.telemetry_view(cid, run)))
            self._later(jobs)
        else:
            self.on_telemetry()

    def _set_choices(self, d: CampaignData, cid: str, first: bool) -> None:
        """The tabs' widgets set for campaign ``cid`` (its metrics, factors, statuses, hosts, runs)."""
        ex = self.ex
        self.resp.options = d.metrics
        want = ex.response if first and ex.response in d.metrics else d.response
        self.resp.value = want if want in d.metrics else (d.metrics[0] if d.metrics else None)
        self.facs.options = d.factors
        chosen = [f for f in (ex.factors or []) if f in d.factors] if first else []
        self.facs.value = tuple(chosen or d.factors)
        self.run_status.options = _options(sorted(set(d.runs.status)))
        self.run_host.options = _options(sorted(set(d.runs.host) - {""}))
        self.run_host.disabled = not (set(d.runs.host) - {""})
        self.run_suspect.layout.display = None if "suspect" in d.runs else "none"
        others = ex.comparable(cid)
        self.other.options = [("(pick a campaign of the same design)", _ANY)] + [(o, o) for o in others]
        self.other.value = ex.compare_with if first and ex.compare_with in others else _ANY
        flagged = (d.runs["suspect"].fillna(False).astype(bool) if "suspect" in d.runs
                   else [False] * len(d.runs))
        self.tel_run.options = [(f"{r} (suspect)" if f else str(r), str(r)) for r, f in zip(d.runs.run_id, flagged)]
        suspects = [str(r) for r, f in zip(d.runs.run_id, flagged) if f]
        self.tel_run.value = suspects[0] if suspects else (str(d.runs.run_id.iloc[0]) if len(d.runs) else None)

    def on_analyse(self, _=None) -> None:
        cid = self.pick.value
        if cid is None:
            return
        self._fill(self.analysis_out, lambda: self.ex.analysis_view(
            cid, response=self.resp.value, factors=list(self.facs.value) or None))

    def on_runs(self, change=None) -> None:
        if self._quiet:
            return
        cid = self.pick.value
        if cid is None:
            return
        suspect = {"yes": True, "no": False}.get(self.run_suspect.value)
        self._fill(self.runs_out, lambda: self.ex.runs_view(
            cid, status=self.run_status.value or None, host=self.run_host.value or None, suspect=suspect))

    def on_compare(self, change=None) -> None:
        if self._quiet:
            return
        cid, other = self.pick.value, self.other.value
        if cid is None or not other:
            return
        self._fill(self.compare_out, lambda: self.ex.comparison_view(cid, other, response=self.resp.value))

    def on_telemetry(self, change=None) -> None:
        if self._quiet:
            return
        cid = self.pick.value
        if cid is None:
            return
        self._fill(self.tel_out, lambda: self.ex.telemetry_view(cid, self.tel_run.value))


def _wrap(W):
    return W.Layout(flex_flow="row wrap")
