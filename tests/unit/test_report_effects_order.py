"""Issue 41, item 8 (report and explorer): every estimate the report shows sits beside its own
interval (q with q's CI, the effect 2q with the effect's CI), and the level order a design declares
(``noise: [none, memory]``) is kept by the words, the tables and the figures of the report, the
explorer and ``labkit analyze``."""

from __future__ import annotations

import shutil
from html.parser import HTMLParser
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from labkit import stats  # noqa: E402
from labkit.cli import main  # noqa: E402
from labkit.design import Design  # noqa: E402
from labkit.errors import ConfigError  # noqa: E402
from labkit.report import analyze, analyze_results, declared_levels, write_report  # noqa: E402
from labkit.report.explore import Explorer  # noqa: E402
from labkit.report.tables import effects_table  # noqa: E402
from labkit.store import Store  # noqa: E402
from labkit.workloads import Measurement  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


class _Sections(HTMLParser):
    """The report's tables, by the heading of the section that holds them: {heading: [rows]},
    each row a list of cell texts (the header row first)."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[list[str]]]] = {}
        self._h2: list[str] | None = None
        self._heading = ""
        self._cell: list[str] | None = None
        self._row: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self._h2 = []
        elif tag == "table":
            self.tables.setdefault(self._heading, []).append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "h2" and self._h2 is not None:
            self._heading = "".join(self._h2).split(". ", 1)[-1]
            self._h2 = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._heading][-1].append(self._row)
            self._row = None

    def handle_data(self, data):
        for part in (self._h2, self._cell):
            if part is not None:
                part.append(data)


def _number(text: str) -> float:
    return float(text.replace("∞", "inf")) if text.strip() else np.nan


def intervals_shown(header: list[str]) -> dict[str, tuple[str, str]]:
    """Which interval a reader reads beside each estimate: ``<name>_low``/``<name>_high`` belong to
    ``<name>`` (``pct_low``/``pct_high`` to ``pct_variation``); a bare ``ci_low``/``ci_high`` to the
    column printed just before them."""
    out = {}
    for i, name in enumerate(header):
        stem = "pct" if name == "pct_variation" else name
        if f"{stem}_low" in header and f"{stem}_high" in header:
            out[name] = (f"{stem}_low", f"{stem}_high")
        elif f"{name}_low" in header and f"{name}_high" in header:
            out[name] = (f"{name}_low", f"{name}_high")
        elif name == "ci_low" and i > 0 and "ci_high" in header:
            out[header[i - 1]] = ("ci_low", "ci_high")
    return out


def test_the_affinity_local_report_shows_no_estimate_outside_its_interval(tmp_path):
    """The report of the committed campaign affinity-local: each estimate of its effects table lies
    inside the interval printed beside it, and the vcpus effect (computed here from the store) inside
    its own. Before the fix the effect (2q) stood beside q's CI: on the campaign as committed then,
    vcpus -0.2699 with [-0.1395, -0.1304], 3 of 15 terms outside."""
    from labkit.store import load_results
    from labkit.store.results import responses

    data = tmp_path / "data"
    shutil.copytree(REPO / "data" / "affinity-local", data / "affinity-local")
    page = write_report(data, "affinity-local", tmp_path / "r.html").read_text()
    parser = _Sections()
    parser.feed(page)
    tables = parser.tables["Effects"]  # the estimates, then the shares of variation
    checked, shown, cells = 0, set(), {}
    for table in tables:
        header, rows = table[0], table[1:]
        pairs = intervals_shown(header)
        shown |= set(pairs)
        for row in rows:
            cell = dict(zip(header, row))
            cells.setdefault(cell["term"], {}).update(cell)
            for est, (lo, hi) in pairs.items():
                x, low, high = _number(cell[est]), _number(cell[lo]), _number(cell[hi])
                if np.isnan(x) or np.isnan(low):
                    continue
                checked += 1
                assert low <= x <= high, f"{cell['term']}: {est} {x} outside [{low}, {high}]"
    assert {"effect", "pct_variation"} <= shown  # the estimates that have an interval here
    assert len(cells) == 17 and checked >= 2 * 15  # I, 15 terms, error: effects and shares
    vcpus = cells["vcpus"]  # Jain's q beside the effect 2q
    # both printed to 4 significant figures
    assert _number(vcpus["effect"]) == pytest.approx(2 * _number(vcpus["q"]), rel=1e-3)
    factors = ["vcpus", "memory_mb", "affinity", "count"]
    runs = responses(load_results(data, "affinity-local"), "wall_time_s", factors)
    effect = stats.factorial_effects(runs, factors=factors, response="wall_time_s").set_index("term").effect
    assert _number(vcpus["effect"]) == pytest.approx(effect["vcpus"], rel=1e-3)
    assert _number(vcpus["effect_low"]) < effect["vcpus"] < _number(vcpus["effect_high"])


def test_effects_table_gives_each_estimate_its_own_interval():
    """effects_table on factorial_effects: q, and the effect with twice q's CI (so 2q lies in it
    whenever q lies in q's); no bare ci_low/ci_high left beside the wrong estimate; the mean (I) has
    no effect and so no effect interval; an ANOVA table keeps df, F, p and the share, with no
    estimate columns it cannot fill."""
    rng = np.random.default_rng(7)
    data = pd.DataFrame(
        [
            {"A": a, "B": b, "y": 10 + 1.5 * a + rng.normal(0, 0.2)}
            for a in (-1, 1)
            for b in (-1, 1)
            for _ in range(3)
        ]
    )
    eff = stats.factorial_effects(data, factors=["A", "B"], response="y")
    shown = effects_table(eff).set_index("term")
    raw = eff.set_index("term")
    assert list(shown.columns) == [
        "q",
        "effect",
        "effect_low",
        "effect_high",
        "df",
        "t",
        "p",
        "pct_variation",
    ]
    for t in ("A", "B", "A:B"):
        assert shown.loc[t, "q"] == raw.loc[t, "q"]
        assert shown.loc[t, "effect_low"] == 2 * raw.loc[t, "ci_low"]
        assert shown.loc[t, "effect_high"] == 2 * raw.loc[t, "ci_high"]
        assert shown.loc[t, "effect_low"] <= shown.loc[t, "effect"] <= shown.loc[t, "effect_high"]
    # A's effect (about 3) lies outside q's interval (about 1.5 ± 0.1): the pairing matters here
    assert not raw.loc["A", "ci_low"] <= raw.loc["A", "effect"] <= raw.loc["A", "ci_high"]
    assert np.isnan(shown.loc["I", "effect_low"]) and shown.loc["I", "q"] == raw.loc["I", "q"]
    three = pd.DataFrame({"A": ["x", "y", "z"] * 4, "y": rng.normal(0, 1, 12)})
    table = stats.anova(three, response="y", factors=["A"])
    anova = table.assign(pct_variation=100 * table["eta_sq"], effect=np.nan)
    assert list(effects_table(anova).columns) == ["term", "df", "F", "p", "pct_variation"]
    with pytest.raises(ConfigError, match="term"):
        effects_table(pd.DataFrame({"x": [1]}))


# -- declared level order -----------------------------------------------------------------------------
NOISE = Design.from_dict(
    {"name": "noise", "factors": {"noise": ["none", "memory"], "vcpus": [1, 2]}, "replications": 3, "seed": 5}
)
#: the true effect of noise (memory - none) and of vcpus (2 - 1) on wall_time_s
NOISE_EFFECT, VCPUS_EFFECT = 0.8, -0.3


@pytest.fixture(scope="module")
def noise_store(tmp_path_factory) -> Path:
    """A store of the NOISE design (runs in their randomized order): wall_time_s = 2 + 0.8 when
    noise is memory - 0.3 with 2 vCPUs + N(0, 0.02²)."""
    data = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(11)
    with Store(data / "noise-c" / "store.sqlite") as st:
        st.set_meta(
            campaign_id="noise-c",
            design=NOISE.to_dict(),
            backend="local",
            workload={"name": "nqueens", "response": "wall_time_s"},
        )
        for i, run in enumerate(NOISE.plan()):
            y = (
                2
                + NOISE_EFFECT * (run.levels["noise"] == "memory")
                + VCPUS_EFFECT * (run.levels["vcpus"] == 2)
                + rng.normal(0, 0.02)
            )
            st.record_run(
                run,
                status="ok",
                started=f"2026-01-01T00:{i:02d}:00+00:00",
                duration_s=1.0,
                measurements=[Measurement("wall_time_s", float(y), "s", 0)],
            )
    return data


def _ticks(fig, xlabel: str) -> list[str]:
    (ax,) = [ax for ax in fig.axes if ax.get_xlabel() == xlabel]
    return [t.get_text() for t in ax.get_xticklabels()]


def test_declared_level_order_is_kept_by_the_analysis_tables_and_figures(noise_store):
    """noise: [none, memory] (declared against the alphabet): the words go from none to memory, the
    summary lists none first, the main-effects and interaction plots put none left of memory.
    Before the fix the report said "going from memory to none lowers ..." and drew memory | none."""
    a = analyze(noise_store, "noise-c", n_boot=200)
    words = str(a.conclusions)
    effect = float(a.effects.set_index("term").loc["noise", "effect"])
    assert effect == pytest.approx(NOISE_EFFECT, abs=0.05)
    assert f"noise: going from none to memory raises wall time (s) by {abs(effect):.3g} on average" in words
    assert "from memory to none" not in words
    assert a.effects.attrs["levels"]["noise"] == ("none", "memory")
    assert list(dict.fromkeys(a.summary["noise"])) == ["none", "memory"]
    assert list(dict.fromkeys(a.quantiles["noise"])) == ["none", "memory"]
    figs = a.figures()
    assert _ticks(figs["main_effects"], "noise") == ["none", "memory"]
    assert _ticks(figs["interactions"], "noise") == ["none", "memory"]
    legend = [t.get_text() for t in figs["run_order"].axes[0].get_legend().get_texts()]
    assert legend[:2] == ["none", "memory"]
    assert a.level_order == {"noise": ("none", "memory"), "vcpus": (1, 2)}


def test_declared_level_order_in_the_report_cli_and_explorer(noise_store, tmp_path, capsys):
    """The same words in the HTML report, in `labkit analyze` and in the explorer's analysis, whose
    effects table and main-effects plot follow the declared order too."""
    page = write_report(noise_store, "noise-c", tmp_path / "r.html").read_text()
    assert "noise: going from none to memory raises wall time (s) by" in page
    assert "from memory to none" not in page
    assert main(["analyze", "noise-c", "--data-dir", str(noise_store)]) == 0
    out = capsys.readouterr().out
    assert "going from none to memory raises" in out and "from memory to none" not in out
    ex = Explorer(noise_store, campaign="noise-c")
    view = ex.analysis_view("noise-c")
    text = "\n".join(getattr(item, "data", "") or "" for item in view)
    assert "going from none to memory raises" in text and "from memory to none" not in text
    figs = [item for item in view if isinstance(item, matplotlib.figure.Figure)]
    assert ["none", "memory"] in [
        _ticks(f, "noise") for f in figs if any(ax.get_xlabel() == "noise" for ax in f.axes)
    ]


def test_declared_levels_leaves_out_what_the_design_does_not_order():
    """Tidy rows without a design keep their sorted order; with one, its order; a factor whose data
    hold a level the design does not list (or that the design does not declare) keeps its sorted
    order too."""
    rows = pd.DataFrame(
        [
            {
                "campaign": "c",
                "run_id": f"r{i}",
                "run_order": i,
                "replicate": 1 + i // 2,
                "config": i % 2,
                "noise": ("none", "memory")[i % 2],
                "metric": "y",
                "value": 1.0 + i % 2 + 0.01 * i,
                "unit": "s",
                "status": "ok",
                "error": None,
                "duration_s": 1.0,
                "fingerprint_id": None,
                "host": "h1",
                "boot": 1,
                "instance_index": 0,
                "iteration": pd.NA,
                "suspect": False,
                "suspect_reason": "",
                "started": f"2026-01-01T00:00:{i:02d}+00:00",
            }
            for i in range(6)
        ]
    )
    declared = analyze_results(
        rows,
        meta={"design": {"factors": {"noise": ["none", "memory"]}}, "workload": {"response": "y"}},
        n_boot=200,
    )
    assert list(dict.fromkeys(declared.summary["noise"])) == ["none", "memory"]
    assert "going from none to memory raises" in str(declared.conclusions)
    sorted_ = analyze_results(rows, meta={"workload": {"response": "y"}}, factors=["noise"], n_boot=200)
    assert list(dict.fromkeys(sorted_.summary["noise"])) == ["memory", "none"]
    assert "going from memory to none lowers" in str(sorted_.conclusions)
    meta = {"design": {"factors": {"noise": ["none", "memory"], "vcpus": [1, 2]}}}
    data = pd.DataFrame({"noise": ["memory", "none"], "vcpus": [1, 3], "host": ["a", "b"]})
    assert declared_levels(meta, ["noise", "vcpus", "host"], data) == {"noise": ("none", "memory")}
    assert declared_levels(None, ["noise"]) == {}


def test_declared_level_order_reaches_the_mixed_model():
    """Runs sharing instances (kind "levels": the EMS test against the instances) code the factor
    in the declared order too: A declared [high, low] against its sorted order."""
    from tests.unit.test_report_levels import META, split_campaign

    t = split_campaign()
    t["A"] = t["A"].map({-1: "low", 1: "high"})
    meta = {**META, "design": {"factors": {"A": ["low", "high"], "B": [-1, 1]}}}
    a = analyze_results(t, meta=meta)
    assert a.kind == "levels" and a.effects.attrs["levels"]["A"] == ("low", "high")
    flipped = analyze_results(t, meta={**META, "design": {"factors": {"A": ["high", "low"], "B": [-1, 1]}}})
    assert flipped.effects.attrs["levels"]["A"] == ("high", "low")
    q = {
        x.effects.attrs["levels"]["A"]: float(x.effects.set_index("term").loc["A", "q"]) for x in (a, flipped)
    }
    assert q[("low", "high")] == pytest.approx(-q[("high", "low")]) and q[("low", "high")] != 0
