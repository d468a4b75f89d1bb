"""labkit.report.plots.telemetry_runs at scale (issue 45): at most TELEMETRY_RUNS runs drawn, every
suspect run among them, the others spread evenly in run order, and the title naming how many of how many."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from labkit.errors import ConfigError  # noqa: E402
from labkit.report import plots  # noqa: E402
from labkit.report.measurement_plots import TELEMETRY_RUNS  # noqa: E402
from labkit.report.tables import PER_RUN_ROWS  # noqa: E402


def _table(n: int, suspect_at: tuple[int, ...] = ()) -> pd.DataFrame:
    """``n`` runs' telemetry summaries, in a shuffled row order; ``suspect_at``: run orders flagged."""
    order = np.random.default_rng(5).permutation(n)
    return pd.DataFrame(
        {
            "run_order": order,
            "campaign_cpu_mean_pct": 50.0 + order % 7,
            "cpu_other_mean_pct": 1.0 + order % 3,
            "steal_max_pct": 0.1 * (order % 5),
            "suspect": np.isin(order, suspect_at),
        }
    )


def _drawn_orders(fig) -> list[float]:
    """The run orders of the first panel's first line (one point per run drawn)."""
    return list(fig.axes[0].lines[0].get_xdata())


def test_the_cap_is_the_report_tables_cap():
    assert TELEMETRY_RUNS == PER_RUN_ROWS


def test_1000_runs_draw_at_most_the_cap_spread_over_the_campaign_with_every_suspect_run():
    suspects = (3, 4, 500, 998)
    fig = plots.telemetry_runs(_table(1000, suspects))
    try:
        drawn = _drawn_orders(fig)
        assert len(drawn) == TELEMETRY_RUNS < 1000
        assert drawn == sorted(drawn) and len(set(drawn)) == len(drawn)
        assert set(suspects) <= set(drawn)
        assert drawn[0] == 0 and drawn[-1] == 999  # first and last run kept: the whole campaign spanned
        gaps = np.diff([x for x in drawn if x not in suspects])
        assert gaps.max() <= 2 * 999 / (TELEMETRY_RUNS - len(suspects))  # evenly spread, no long hole
        title = fig.get_suptitle()
        assert f"{TELEMETRY_RUNS:,d} of 1,000 runs" in title and "4 suspect runs" in title
        crosses = [c for c in fig.axes[0].collections if c.get_gid() == "suspect"]
        assert crosses and sorted(crosses[0].get_offsets()[:, 0]) == sorted(suspects)
    finally:
        plt.close(fig)


def test_the_same_table_gives_the_same_runs_and_a_small_campaign_is_drawn_whole():
    a, b = plots.telemetry_runs(_table(1000)), plots.telemetry_runs(_table(1000))
    small = plots.telemetry_runs(_table(30, (7,)))
    try:
        assert _drawn_orders(a) == _drawn_orders(b)
        assert _drawn_orders(small) == list(range(30))
        assert " of " not in small.get_suptitle().split("(")[0]  # nothing left out: no "N of M"
    finally:
        for f in (a, b, small):
            plt.close(f)


def test_more_suspect_runs_than_the_cap_are_spread_among_them_and_the_title_says_so():
    fig = plots.telemetry_runs(_table(50, tuple(range(0, 50, 2))), max_runs=10, title="CPU")
    try:
        drawn = _drawn_orders(fig)
        assert drawn == [0, 6, 10, 16, 22, 26, 32, 38, 42, 48]  # 10 of the 25 suspects, evenly
        assert fig.get_suptitle() == "CPU (10 of 50 runs)"
    finally:
        plt.close(fig)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_max_runs_must_be_a_whole_number_of_runs(bad):
    with pytest.raises(ConfigError, match="max_runs"):
        plots.telemetry_runs(_table(5), max_runs=bad)
