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
* :meth:`Explorer.app`, the same as one ipywidgets application
  (:class:`labkit.report.explore_app.ExplorerApp`): the campaign picker at the top (search text
  and filters on study, backend, platform, dates and status, the filtered catalog below them),
  then tabs for the analysis, the runs, a second campaign side by side, the design and hosts,
  and telemetry;
* :meth:`Explorer.show`, what notebook 00 calls: the application in JupyterLab or Voila
  (``interactive=True``), the views one after another under papermill.

A campaign is read for the first view by SQL aggregates
(:func:`labkit.report.explore_data.load_campaign`: the run table, the response, the factors that
vary), never as all its measurement rows; the analysis and the telemetry are computed when a view
asks for them, once, a failure too.

Everything shown from a store (ids, names, levels, error texts, host facts) is escaped
(:func:`labkit.report.escape_md`, :func:`labkit.report.escape_html`); a LabkitError raised while
the application runs is shown as one line where the view would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import LabkitError
from .catalog import campaign_catalog, design_table, filter_runs, require_campaign, settings_table
from .deferred import DEFER_ENV, shown_path
from .escape import escape_md
from .explore_data import SHOWN_RUNS, CampaignData, load_campaign
from .order import order_sentences
from .tables import decisions_table, effects_table, html_table

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CATALOG_SHOWN", "Explorer"]

#: catalog columns the picker's table shows
CATALOG_SHOWN = [
    "campaign",
    "study",
    "platforms",
    "workload",
    "response",
    "factors",
    "runs",
    "status",
    "date",
]
_SCROLL = '<div class="lk-scroll" style="max-height:{h};overflow:auto">{body}</div>'


def _md(text: str):
    from IPython.display import Markdown

    return Markdown(text)


def _html(text: str):
    from IPython.display import HTML

    return HTML(text)


class Explorer:
    """Browse the campaigns under ``data_dir`` (default: the repository's ``data/``), read-only.

    ``campaign`` (default: the first in the catalog), ``response`` (default: the campaign's
    declared primary response), ``factors`` (default: the design's factors that vary),
    ``compare_with`` (a second campaign of the same design) and ``alpha`` set what is shown
    first. A campaign that is not stored is a ConfigError with "did you mean".
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        campaign: str | None = None,
        response: str | None = None,
        factors: Sequence[str] | None = None,
        compare_with: str | None = None,
        alpha: float = 0.05,
    ):
        from ..core import paths

        self.data_dir = paths.data_dir(data_dir)
        self.catalog = campaign_catalog(self.data_dir)
        self.alpha = alpha
        if campaign is not None:
            require_campaign(self.data_dir, campaign)
        if compare_with is not None:
            require_campaign(self.data_dir, compare_with)
        readable = self.catalog[self.catalog.status != "unreadable"]
        self.campaign = (
            campaign if campaign is not None else (str(readable.campaign.iloc[0]) if len(readable) else None)
        )
        self.response = response
        self.factors = list(factors) if factors is not None else None
        self.compare_with = compare_with
        self._data: dict[str, CampaignData] = {}
        self._analyses: dict[tuple, Any] = {}

    # -- data ---------------------------------------------------------------------------------
    def data(self, campaign: str) -> CampaignData:
        """The :class:`~labkit.report.explore_data.CampaignData` of ``campaign`` (read once, then
        kept; :func:`~labkit.report.explore_data.load_campaign`: what the first view shows, by SQL)."""
        if campaign not in self._data:
            cid = require_campaign(self.data_dir, campaign)
            self._data[cid] = load_campaign(self.data_dir, cid)  # by SQL aggregates: no tidy rows
        return self._data[campaign]

    def analysis(self, campaign: str, *, response: str | None = None, factors: Sequence[str] | None = None):
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
                self._analyses[key] = analyze(
                    self.data_dir,
                    campaign,
                    response=key[1],
                    factors=list(chosen) if chosen else None,
                    alpha=self.alpha,
                )
            except LabkitError as exc:  # kept too: a widget change does not run a failed analysis again
                self._analyses[key] = exc
            except MemoryError:  # one line where the view would be, kept as any failure
                self._analyses[key] = LabkitError(
                    f"the analysis of {campaign} needs more memory than this machine has; "
                    "labkit export writes its rows for another tool"
                )
        got = self._analyses[key]
        if isinstance(got, LabkitError):
            raise got
        return got

    def comparable(self, campaign: str) -> list[str]:
        """Other campaigns whose design has the same factors (in the same order): those
        :func:`labkit.report.compare` can set beside ``campaign``."""
        factors = self.catalog.set_index("campaign").loc[campaign, "factors"]
        same = self.catalog[
            (self.catalog.factors == factors)
            & (self.catalog.campaign != campaign)
            & (self.catalog.status != "unreadable")
        ]
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
        status = d.responses.status.value_counts().to_dict() if len(d.responses) else {}
        return [
            _md(f"### {escape_md(campaign)}: settings"),
            _html(html_table(settings_table(d.meta, status))),
            _md("**Design** (first level = low level of a two-level factor)"),
            _html(html_table(design_table(d.meta))),
            _md("**Host fingerprints** (one column per host or backend the campaign ran on)"),
            _html(_SCROLL.format(h="24em", body=html_table(fingerprint_table(d.fingerprints)))),
        ]

    def runs_view(
        self,
        campaign: str,
        *,
        status=None,
        host=None,
        suspect: bool | None = None,
        max_rows: int = SHOWN_RUNS,
    ) -> list:
        """The run table of ``campaign`` filtered (:func:`labkit.report.catalog.filter_runs`), with a
        line saying how many runs match (and how many of them are suspect, when known); the first
        ``max_rows`` of them shown ("first N of M")."""
        d = self.data(campaign)
        runs = filter_runs(d.runs, status=status, host=host, suspect=suspect)
        line = f"{len(runs)} of {len(d.runs)} runs"
        if "suspect" in runs:
            line += f", {int(runs['suspect'].fillna(False).astype(bool).sum())} suspect"
        if d.response:
            line += f"; {d.response}: mean over the run's instances"
        if len(runs) > max_rows:  # the table's last row says how many more
            line += f"; the first {max_rows} shown (labkit export writes them all)"
        return [
            _md(f"**Runs of {escape_md(campaign)}**: {escape_md(line)}"),
            _html(_SCROLL.format(h="28em", body=html_table(runs, max_rows=max_rows))),
        ]

    def analysis_view(
        self, campaign: str, *, response: str | None = None, factors: Sequence[str] | None = None
    ) -> list:
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
        if len(a.effects):  # q and the effect (2q), each beside its own interval
            out.append(_html(html_table(effects_table(a.effects, a.variation))))
        decided = a.conclusions.decided
        if decided is not None and decided["verdict"].notna().any():  # each term's verdict, the rules
            out += [
                _md(f"**Decisions** ({escape_md(a.conclusions.rules)})"),
                _html(html_table(decisions_table(decided))),
            ]
        if a.diagnostics is not None:
            out.append(_md(escape_md(a.diagnostics.message)))
        out.append(_md(md["conclusions"]))
        out += list(a.figures(alpha=self.alpha).values())
        parts = [p for p in (levels_section(a), drift_section(a)) if p is not None]
        out += displayable(parts, heading="####", html_tables=True)
        if a.order_effects is not None:  # beside the drift check: trend and carry-over in run order
            out += [
                _md("#### Order effects\n\n" + escape_md(order_sentences(a.order_effects, a.response)[0])),
                _html(html_table(a.order_effects)),
            ]
        return out

    def comparison_view(self, a: str, b: str, *, response: str | None = None) -> list:
        """:func:`labkit.report.compare` of ``a`` and ``b``: how their settings differ, the verdict,
        the per-configuration table, the host facts that differ (and those one side did not
        record, named but not counted) and :func:`labkit.report.plots.comparison`."""
        from . import plots
        from .comparison import compare

        table, fpd, verdict = compare(
            self.data_dir, a, b, response=response or self.data(a).response, alpha=self.alpha
        )
        out: list[Any] = [_md(f"### {escape_md(a)} and {escape_md(b)}")]
        notes = table.attrs.get("notes") or []
        if notes:
            out.append(_md("**How they differ**\n\n" + "\n".join(f"- {escape_md(n)}" for n in notes)))
        out += [_md(f"**Verdict**: {escape_md(verdict)}"), _html(html_table(table))]
        differs = fpd[fpd.kind == "differs"]
        if len(differs):
            out += [
                _md("**Host facts that differ**"),
                _html(html_table(differs.drop(columns="kind").rename(columns={"a": a, "b": b}))),
            ]
        for side in (a, b):
            only = fpd[fpd.kind == f"only in {side}"]
            if len(only):
                out.append(
                    _md(
                        f"*Recorded only for {escape_md(side)}* (not differences): "
                        + escape_md(", ".join(only.fact))
                    )
                )
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
        with Store(
            self.data_dir / require_campaign(self.data_dir, campaign) / "store.sqlite", readonly=True
        ) as st:
            runs = d.runs
            if run_id is None and len(runs):
                flagged = (
                    runs[runs["suspect"].fillna(False).astype(bool)] if "suspect" in runs else runs.iloc[:0]
                )
                run_id = str((flagged if len(flagged) else runs).run_id.iloc[0])
            samples = run_series(st, run_id) if run_id is not None else None
            config = st.run_config(run_id) if run_id is not None else None
            if samples is not None and not samples.empty and config is not None:
                summary = config_summary(st, config)
        if samples is None or samples.empty:
            return [
                _md(
                    f"No telemetry stored for {escape_md(run_id or campaign)} (campaigns run before "
                    "telemetry was kept have none)."
                )
            ]
        out: list[Any] = []
        if d.response is not None:
            part = telemetry_section(self.analysis(campaign))
            out += displayable([part], heading="####", html_tables=True) if part is not None else []
        flag = runs.loc[runs.run_id == run_id, "suspect"] if "suspect" in runs else None
        why = ""
        if flag is not None and len(flag) and bool(flag.fillna(False).astype(bool).iloc[0]):
            reason = (
                runs.loc[runs.run_id == run_id, "suspect_reason"].iloc[0] if "suspect_reason" in runs else ""
            )
            why = f", **suspect**: {escape_md(reason)}" if reason else ", **suspect**"
        if summary is not None and not summary.empty and summary.attrs["runs_used"] > 1:
            out += [
                _md(f"**Telemetry of configuration {config}**: {escape_md(summary_note(summary))}"),
                summary_figure(summary, title=f"host telemetry of configuration {config}"),
            ]
        note = samples.attrs.get("note") or ""
        return out + [
            _md(
                f"**Telemetry of run {escape_md(run_id)}** ({samples.t.nunique()} "
                f"{'time points' if note else 'samples'}{why}{'; ' + escape_md(note) if note else ''})"
            ),
            plots.telemetry(samples, title=f"telemetry of run {run_id}" + (f"\n({note})" if note else "")),
        ]

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
        views = [
            self.analysis_view(self.campaign, response=self.response, factors=self.factors),
            self.runs_view(self.campaign),
            self.overview(self.campaign),
            self.telemetry_view(self.campaign),
        ]
        if self.compare_with is not None:
            views.insert(1, self.comparison_view(self.campaign, self.compare_with, response=self.response))
        for view in views:
            for item in view:
                display(item)

    def app(self, *, defer: bool = False):
        """The explorer as one ipywidgets application (see the module docstring). With ``defer``
        (:meth:`show` under ``labkit dashboard``), the first campaign's analysis and telemetry are
        computed after the application is returned, in a background thread that fills their tabs
        (a line says they are being computed): the page is served at once, with the first figure
        (:func:`labkit.report.explore_data.first_view`). So is a campaign of more than
        :data:`labkit.report.explore_app.DEFER_RUNS` runs."""
        from .explore_app import ExplorerApp

        return ExplorerApp(self, defer=defer).root
