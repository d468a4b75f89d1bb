"""The explorer's application: :class:`ExplorerApp`, the ipywidgets of
:meth:`labkit.report.explore.Explorer.app` and their callbacks.

The campaign picker at the top (search text and filters on study, backend, platform, dates and
status, the filtered catalog below them), then tabs for the analysis, the runs, a second campaign
side by side, the design and hosts, and telemetry. With ``defer`` (``labkit dashboard``), or for a
campaign of more than :data:`DEFER_RUNS` runs, the first pick's slow views (the run table and
its widgets, the analysis, a comparison, telemetry) are computed after the page is returned, in a
background thread (:func:`labkit.report.deferred.fill_later`); until then the analysis tab shows
the first figure (:func:`labkit.report.explore_data.first_view`), drawn from SQL aggregates
(issue 45). A run picker lists at most :data:`labkit.report.explore_data.SHOWN_RUNS` runs, suspect
ones first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError, LabkitError
from .catalog import filter_catalog
from .deferred import fill_later, shown_path
from .escape import escape_html, escape_md
from .explore_data import CampaignData, first_view, shown_runs

if TYPE_CHECKING:
    from .explore import Explorer

__all__ = ["ANY", "DEFER_RUNS", "ExplorerApp", "options"]

#: a filter's "any" value
ANY = ""
#: a campaign of more runs has its first run table, analysis and telemetry computed after the page is shown
DEFER_RUNS = 20_000


def _md(text: str):
    from IPython.display import Markdown

    return Markdown(text)


def _html(text: str):
    from IPython.display import HTML

    return HTML(text)


def _error_html(exc: BaseException) -> str:
    return f'<p class="lk-error"><b>{escape_html(type(exc).__name__)}</b>: {escape_html(exc)}</p>'


def options(values) -> list[tuple[str, str]]:
    """A filter's options: "any", then each value."""
    return [("any", ANY)] + [(str(v), str(v)) for v in values]


class ExplorerApp:
    """The widgets of :meth:`labkit.report.explore.Explorer.app` (``root``) and their callbacks."""

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

        def lay():  # one Layout per widget: a shared one would hide them all with one
            return W.Layout(width="15em")

        self.search = W.Text(
            placeholder="id, study, workload, factor…",
            description="search",
            continuous_update=True,
            layout=W.Layout(width="22em"),
        )
        studies = sorted(set(cat.study[cat.status != "unreadable"]))
        self.study = W.Dropdown(options=options(studies), description="study", layout=lay())
        self.backend = W.Dropdown(
            options=options(sorted(set(cat.backend))), description="backend", layout=lay()
        )
        self.platform = W.Dropdown(options=options(plats), description="platform", layout=lay())
        self.status = W.Dropdown(
            options=options(
                [
                    s
                    for s in ("complete", "failures", "incomplete", "empty", "unreadable")
                    if s in set(cat.status)
                ]
            ),
            description="status",
            layout=lay(),
        )
        self.since = W.DatePicker(description="from", layout=lay())
        self.until = W.DatePicker(description="to", layout=lay())
        self.count = W.HTML()
        self.pick = W.Dropdown(description="campaign", layout=W.Layout(width="30em"))
        self.table = W.HTML()
        for w, cls in (
            (self.search, "lk-search"),
            (self.study, "lk-study"),
            (self.backend, "lk-backend"),
            (self.platform, "lk-platform"),
            (self.status, "lk-status"),
            (self.since, "lk-since"),
            (self.until, "lk-until"),
            (self.pick, "lk-pick"),
            (self.table, "lk-catalog"),
            (self.count, "lk-count"),
        ):
            w.add_class(cls)
        # tabs
        self.resp = W.Dropdown(description="response", layout=W.Layout(width="22em"))
        self.facs = W.SelectMultiple(description="factors", rows=4)
        self.go = W.Button(description="analyse", button_style="primary")
        self.analysis_out = W.Output()
        self.first_out = W.Output()  # the first figure until the deferred analysis is shown
        self.run_status = W.Dropdown(description="status", layout=lay())
        self.run_host = W.Dropdown(description="host", layout=lay())
        self.run_suspect = W.Dropdown(
            options=[("any", "any"), ("suspect", "yes"), ("not suspect", "no")],
            description="suspect",
            layout=lay(),
        )
        self.runs_out = W.Output()
        self.other = W.Dropdown(description="with", layout=W.Layout(width="30em"))
        self.compare_out = W.Output()
        self.overview_out = W.Output()
        self.tel_run = W.Dropdown(description="run", layout=lay())
        self.tel_out = W.Output()
        for w, cls in (
            (self.resp, "lk-response"),
            (self.facs, "lk-factors"),
            (self.go, "lk-analyse"),
            (self.analysis_out, "lk-analysis"),
            (self.first_out, "lk-first-view"),
            (self.run_status, "lk-run-status"),
            (self.run_host, "lk-run-host"),
            (self.run_suspect, "lk-run-suspect"),
            (self.runs_out, "lk-runs"),
            (self.other, "lk-other"),
            (self.compare_out, "lk-compare"),
            (self.overview_out, "lk-overview"),
            (self.tel_run, "lk-tel-run"),
            (self.tel_out, "lk-telemetry"),
        ):
            w.add_class(cls)
        self.tabs = W.Tab(
            children=[
                W.VBox([W.HBox([self.resp, self.facs, self.go]), self.first_out, self.analysis_out]),
                W.VBox([W.HBox([self.run_status, self.run_host, self.run_suspect]), self.runs_out]),
                W.VBox([self.other, self.compare_out]),
                self.overview_out,
                W.VBox([self.tel_run, self.tel_out]),
            ]
        )
        self.tabs.titles = ("Analysis", "Runs", "Compare", "Design and hosts", "Telemetry")
        self.tabs.add_class("lk-tabs")
        title = W.HTML(
            f"<b>{len(cat)} campaigns</b> in {escape_html(shown_path(ex.data_dir))} "
            "(read-only). Pick one; filter to narrow the list."
        )
        self.root = W.VBox(
            [
                title,
                W.HBox([self.search, self.status, self.since, self.until], layout=wrap(W)),
                W.HBox([self.study, self.backend, self.platform], layout=wrap(W)),
                W.HBox([self.pick, self.count]),
                self.table,
                self.tabs,
            ]
        )
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
        fill_later(
            [(out, _md(f"*Computing {escape_md(what)}…*"), make) for out, what, make in jobs],
            lock=self.lock,
            current=lambda: pick == self.picks,
            failed=lambda e: _html(_error_html(e)),
        )

    def on_filter(self, change=None) -> None:
        ex = self.ex
        try:
            shown = filter_catalog(
                ex.catalog,
                search=self.search.value,
                study=self.study.value or None,
                backend=self.backend.value or None,
                platform=self.platform.value or None,
                status=self.status.value or None,
                since=self.since.value,
                until=self.until.value,
            )
        except ConfigError as exc:
            self.table.value = _error_html(exc)
            return
        self.table.value = ex.catalog_html(shown)
        self.count.value = f"{len(shown)} of {len(ex.catalog)} campaigns match"
        ids = [c for c, s in zip(shown.campaign, shown.status) if s != "unreadable"]
        before = self.pick.value
        keep = (
            before
            if before in ids
            else (ex.campaign if self._first and ex.campaign in ids else (ids[0] if ids else None))
        )
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
        if not self._first:  # the first pick's outputs are empty (and a deferred one is not captured)
            for out in (self.analysis_out, self.runs_out, self.compare_out, self.overview_out, self.tel_out):
                out.clear_output()
        self.first_out.outputs = ()
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
        later = (self.defer or len(d.responses) > DEFER_RUNS) and self._first
        self._quiet = True  # filling the tabs' widgets below must not run their views (each once, below)
        try:
            self._set_choices(d, cid, first)
            if not later:
                self._set_run_choices(d)
        finally:
            self._quiet = False
        others = ex.comparable(cid)
        jobs: list = []
        if (
            later
        ):  # the page first, with the first figure: the runs and slow views computed after it is served
            resp, facs = self.resp.value, list(self.facs.value) or None
            self._first_figure(d)
            jobs.append((self.runs_out, f"the runs of {cid}", lambda: self._runs_later(cid, d)))

            def analysed() -> list:
                items = ex.analysis_view(cid, response=resp, factors=facs)
                self.first_out.outputs = ()  # the analysis shows the same and more
                return items

            jobs.append((self.analysis_out, f"the analysis of {cid}", analysed))
        else:
            self.on_analyse()
            self.on_runs()
        self._fill(self.overview_out, lambda: ex.overview(cid))
        if not others:
            self._fill(
                self.compare_out,
                lambda: [
                    _md(
                        f"No other campaign has the factors of {escape_md(cid)} "
                        f"({escape_md(', '.join(map(str, d.factors)) or 'none')}): nothing to compare with."
                    )
                ],
            )
        elif self.other.value:
            if later:
                other = self.other.value
                jobs.append(
                    (
                        self.compare_out,
                        f"the comparison with {other}",
                        lambda: ex.comparison_view(cid, other, response=resp),
                    )
                )
            else:
                self.on_compare()
        if later:  # the run picker is set by the runs' job, before this one
            jobs.append((self.tel_out, "the telemetry", lambda: ex.telemetry_view(cid, self.tel_run.value)))
            self._later(jobs)
        else:
            self.on_telemetry()

    def _first_figure(self, d: CampaignData) -> None:
        """:func:`~labkit.report.explore_data.first_view` of ``d`` as the state of its Output widget
        (:func:`labkit.report.deferred.output`: never captured, as the deferred views)."""
        from .deferred import output

        with self.lock:
            try:
                items = first_view(d, alpha=self.ex.alpha)
            except LabkitError as exc:
                items = [_html(_error_html(exc))]
            self.first_out.outputs = tuple(output(item) for item in items)

    def _runs_later(self, cid: str, d: CampaignData) -> list:
        """The runs tab of a deferred pick: its widgets set from the run table (read now), then its view."""
        self._quiet = True
        try:
            self._set_run_choices(d)
        finally:
            self._quiet = False
        return self.ex.runs_view(cid)

    def _set_choices(self, d: CampaignData, cid: str, first: bool) -> None:
        """The tabs' widgets set for campaign ``cid`` (its metrics, factors, campaigns to compare with)."""
        ex = self.ex
        self.resp.options = d.metrics
        want = ex.response if first and ex.response in d.metrics else d.response
        self.resp.value = want if want in d.metrics else (d.metrics[0] if d.metrics else None)
        self.facs.options = d.factors
        chosen = [f for f in (ex.factors or []) if f in d.factors] if first else []
        self.facs.value = tuple(chosen or d.factors)
        others = ex.comparable(cid)
        self.other.options = [("(pick a campaign of the same design)", ANY)] + [(o, o) for o in others]
        self.other.value = ex.compare_with if first and ex.compare_with in others else ANY

    def _set_run_choices(self, d: CampaignData) -> None:
        """The runs' and the telemetry's widgets set from ``d``'s run table (its statuses, hosts, runs)."""
        self.run_status.options = options(sorted(set(d.runs.status)))
        self.run_host.options = options(sorted(set(d.runs.host) - {""}))
        self.run_host.disabled = not (set(d.runs.host) - {""})
        self.run_suspect.layout.display = None if "suspect" in d.runs else "none"
        picks = shown_runs(d.runs)  # every run, or the suspect ones first and SHOWN_RUNS in all
        self.tel_run.options = picks
        suspects = [r for label, r in picks if label != r]
        self.tel_run.value = (
            suspects[0] if suspects else (str(d.runs.run_id.iloc[0]) if len(d.runs) else None)
        )

    def on_analyse(self, _=None) -> None:
        cid = self.pick.value
        if cid is None:
            return
        self._fill(
            self.analysis_out,
            lambda: self.ex.analysis_view(
                cid, response=self.resp.value, factors=list(self.facs.value) or None
            ),
        )

    def on_runs(self, change=None) -> None:
        if self._quiet:
            return
        cid = self.pick.value
        if cid is None:
            return
        suspect = {"yes": True, "no": False}.get(self.run_suspect.value)
        self._fill(
            self.runs_out,
            lambda: self.ex.runs_view(
                cid, status=self.run_status.value or None, host=self.run_host.value or None, suspect=suspect
            ),
        )

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


def wrap(W):
    """A row layout that wraps."""
    return W.Layout(flex_flow="row wrap")
