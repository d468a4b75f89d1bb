"""The sweep figure (labkit.report.sweep_plot): means joined in order of the numeric level, an
interval per level, log axes only where the values span decades, plain tick labels."""

import numpy as np
import pandas as pd
import pytest

from labkit.errors import ConfigError
from labkit.report.sweep_plot import sweep


def _frame(sizes, per=4, scale=1.0):
    rng = np.random.default_rng(3)
    return pd.DataFrame(
        [
            {"message_bytes": s, "latency_us": scale * (5 + s / 1000) * (1 + 0.01 * rng.standard_normal())}
            for s in sizes
            for _ in range(per)
        ]
    )


def test_a_sweep_over_decades_is_drawn_on_log_axes_with_plain_ticks():
    sizes = [2**k for k in range(0, 23, 2)]
    fig = sweep(_frame(sizes), "message_bytes", "latency_us", title="t")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    means = [ln for ln in ax.get_lines() if ln.get_gid() != "raw"][0]
    assert list(means.get_xdata()) == sizes  # in order of the level
    ci = [c for c in ax.collections if c.get_gid() == "ci"][0]
    assert len(ci.get_segments()) == len(sizes)
    labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    assert labels and not any("$" in t for t in labels)  # no raw mathtext


def test_a_narrow_sweep_stays_linear_and_bad_input_is_refused():
    ax = sweep(_frame([1, 2, 4]), "message_bytes", "latency_us").axes[0]
    assert ax.get_xscale() == "linear" and ax.get_yscale() == "linear"
    with pytest.raises(ConfigError, match="numeric"):
        sweep(_frame([1, 2]).assign(message_bytes="big"), "message_bytes", "latency_us")
    with pytest.raises(ConfigError, match="at least 2"):
        sweep(_frame([8]), "message_bytes", "latency_us")
    with pytest.raises(ConfigError, match="missing"):
        sweep(_frame([1, 2]), "threads", "latency_us")
