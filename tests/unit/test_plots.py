"""labkit.report.plots: structure of the figures (bars, reference lines, labels) and saving."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from scipy import stats as sps  # noqa: E402

from labkit.errors import ConfigError  # noqa: E402
from labkit.report import plots  # noqa: E402
from labkit.stats import factorial_diagnostics, factorial_effects, lenth  # noqa: E402

from .test_stats_factorial import long_frame  # noqa: E402
from .test_stats_vectors import sv  # noqa: E402,F401  (sv is a fixture)


def line(ax, gid):
    found = [ln for ln in ax.lines if ln.get_gid() == gid]
    assert len(found) == 1, f"no single line with gid {gid!r}"
    return found[0]


def term_labels(ax):
    """Y tick labels from top to bottom."""
    pairs = zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels()))
    return [label for _, label in sorted(pairs, key=lambda p: -p[0])]


def bar_widths(ax):
    """Bar lengths from top to bottom."""
    bars = sorted(ax.patches, key=lambda p: -p.get_y())
    return [p.get_width() for p in bars]


def test_pareto_replicated_uses_t_and_the_t_quantile(sv):
    table = factorial_effects(
        long_frame(sv.JAIN_22R3["y"], ["A", "B"]), factors=["A", "B"], response="y", alpha=0.10
    )
    fig = plots.pareto(table)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.patches) == 3
    assert bar_widths(ax) == pytest.approx(sorted(table["t"].abs()[1:4], reverse=True))
    assert term_labels(ax) == ["A", "B", "A × B"]  # largest on top
    # Jain Ex. 18.4: t(0.95, 8) = 1.8595 (R: qt(0.95, 8))
    assert line(ax, "t_crit").get_xdata()[0] == pytest.approx(sv.JAIN_22R3["t_90_df8"], abs=5e-5)
    assert "|t|" in ax.get_xlabel()
    texts = sorted(t.get_text() for t in ax.texts)
    assert texts == ["15.4%", "4.3%", "78.9%"]  # Jain: 78.88, 15.40, 4.27
    assert "α = 0.1" in ax.get_title()
    # Jain Ex. 18.3: errors explain 100 - 78.88 - 15.40 - 4.27 = 1.45 % (1.5 % to one decimal)
    assert "error (residual): 1.5% of the variation" in ax.get_xlabel()


def test_pareto_unreplicated_uses_lenth_me_and_sme(sv):
    table = factorial_effects(long_frame(sv.JAIN_23["y"], list("ABC")), factors=list("ABC"), response="y")
    ax = plots.pareto(table).axes[0]
    res = lenth(table)
    assert len(ax.patches) == 7
    assert bar_widths(ax) == [40, 20, 10, 10, 6, 4, 2]  # Jain Ex. 17.3: 2q
    assert line(ax, "ME").get_xdata()[0] == pytest.approx(res.me)
    assert line(ax, "SME").get_xdata()[0] == pytest.approx(res.sme)
    assert ax.get_xlabel() == "|effect|"
    assert term_labels(ax) == ["C", "A", "B", "A × B", "B × C", "A × C", "A × B × C"]
    top3 = plots.pareto(table, top=3).axes[0]
    assert len(top3.patches) == 3
    assert line(top3, "ME").get_xdata()[0] == pytest.approx(res.me)  # lines still use all 7


def test_pareto_rejects_what_it_cannot_chart():
    with pytest.raises(ConfigError, match="effects: no column 'effect'"):
        plots.pareto(pd.DataFrame({"term": ["A"], "t": [1.0]}))
    with pytest.raises(ConfigError, match="top must be a positive integer"):
        table = factorial_effects(long_frame([1, 2, 3, 5], ["A", "B"]), factors=["A", "B"], response="y")
        plots.pareto(table, top=0)


@pytest.fixture
def study():
    rng = np.random.default_rng(7)
    rows = [
        {
            "vcpus": v,
            "affinity": a,
            "count": c,
            "rps": 100 * v + 20 * (a == "pinned") - 15 * c + rng.normal(0, 5),
        }
        for v in (1, 2)
        for a in ("floating", "pinned")
        for c in (1, 2, 4)
        for _ in range(4)
    ]
    return pd.DataFrame(rows)


def test_main_effects_one_panel_per_factor_with_grand_mean(study):
    fig = plots.main_effects(study, ["vcpus", "affinity", "count"], "rps")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_xlabel() for ax in axes] == ["vCPUs", "CPU affinity", "instances"]
    assert [t.get_text() for t in axes[2].get_xticklabels()] == ["1", "2", "4"]
    assert [t.get_text() for t in axes[1].get_xticklabels()] == ["floating", "pinned"]
    assert line(axes[0], "grand_mean").get_ydata()[0] == pytest.approx(study["rps"].mean())
    means = study.groupby("count")["rps"].mean().to_numpy()
    data_line = [ln for ln in axes[2].lines if ln.get_gid() != "grand_mean"][0]
    assert data_line.get_ydata() == pytest.approx(means)


def test_interactions_one_panel_per_pair(study):
    fig = plots.interactions(study, ["vcpus", "affinity", "count"], "rps")
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3
    assert [ax.get_xlabel() for ax in axes] == ["vCPUs", "vCPUs", "CPU affinity"]
    assert [ax.get_legend().get_title().get_text() for ax in axes] == [
        "CPU affinity",
        "instances",
        "instances",
    ]
    assert len(axes[1].lines) == 3  # one per count level
    with pytest.raises(ConfigError, match="at least two factors"):
        plots.interactions(study, ["vcpus"], "rps")


def test_qq_of_residuals(sv):
    data = long_frame(sv.JAIN_22R3["y"], ["A", "B"])
    d = factorial_diagnostics(data, factors=["A", "B"], response="y")
    ax = plots.qq(d).axes[0]
    points = line(ax, "points")
    (osm, osr), _ = sps.probplot(d.residuals["residual"], dist="norm")
    assert points.get_xdata() == pytest.approx(osm) and points.get_ydata() == pytest.approx(osr)
    assert "Shapiro-Wilk W = " in ax.get_title()
    with pytest.raises(ConfigError, match="at least 3 finite residuals"):
        plots.qq([0.1, 0.2])


def test_response_by_config_with_hue(study):
    ax = plots.response_by_config(study, ["vcpus", "count", "affinity"], "rps", hue="affinity").axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) == 6 and labels[0] == "vCPUs=1\ninstances=1"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["floating", "pinned"]
    assert "95% CI" in ax.get_ylabel()
    flat = plots.response_by_config(study, ["vcpus"], "rps", alpha=0.1).axes[0]
    assert [t.get_text() for t in flat.get_xticklabels()] == ["vCPUs=1", "vCPUs=2"]
    # n = 4 per configuration: every run drawn beside its mean, in its series' colour
    raw = [c for c in ax.collections if c.get_gid() == "raw"]
    assert sum(len(c.get_offsets()) for c in raw) == len(study)
    assert not [
        c
        for c in plots.response_by_config(study, ["vcpus"], "rps", points=False).axes[0].collections
        if c.get_gid() == "raw"
    ]
    with pytest.raises(ConfigError, match="hue 'nope' must be one of by"):
        plots.response_by_config(study, ["vcpus"], "rps", hue="nope")


def test_draws_into_a_given_axes(sv):
    fig = Figure()
    ax = fig.add_subplot()
    table = factorial_effects(long_frame(sv.JAIN_23["y"], list("ABC")), factors=list("ABC"), response="y")
    assert plots.pareto(table, ax=ax) is fig and len(ax.patches) == 7


def test_save_figure_writes_png_and_svg(tmp_path, sv):
    table = factorial_effects(long_frame(sv.JAIN_23["y"], list("ABC")), factors=list("ABC"), response="y")
    fig = plots.pareto(table)
    paths = plots.save_figure(fig, "pareto_jain23", tmp_path / "figures")
    assert [p.name for p in paths] == ["pareto_jain23.png", "pareto_jain23.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in paths[1].read_text()
    again = plots.save_figure(fig, "pareto_jain23", tmp_path / "figures")
    assert again[1].read_text() == paths[1].read_text()  # reproducible SVG
    with pytest.raises(ConfigError, match="bare file name"):
        plots.save_figure(fig, "../escape", tmp_path)
    with pytest.raises(ConfigError, match="formats must be among"):
        plots.save_figure(fig, "x", tmp_path, formats=["jpg"])


def test_figures_are_not_left_open_in_pyplot(study):
    import matplotlib.pyplot as plt

    before = set(plt.get_fignums())
    figs = [
        plots.main_effects(study, ["vcpus", "count"], "rps"),
        plots.interactions(study, ["vcpus", "count"], "rps"),
        plots.response_by_config(study, ["vcpus"], "rps"),
    ]
    assert set(plt.get_fignums()) == before  # nothing to show twice
    assert all(isinstance(f, Figure) for f in figs)


def overhead_table():
    rows = []
    for bench, tests in {
        "cpu": ["cpu events threads=1", "cpu events threads=2"],
        "application": ["application rps c=10"],
    }.items():
        for k, test in enumerate(tests):
            for j, plat in enumerate(["docker", "libvirt"]):
                ratio = 1.0 + 0.1 * k + j if bench == "cpu" else 16.0**j
                rows.append(
                    {
                        "benchmark": bench,
                        "test": test,
                        "platform": plat,
                        "ratio": ratio,
                        "ci_low": ratio * 0.9,
                        "ci_high": ratio * 1.2,
                    }
                )
    rows.append(
        {
            "benchmark": "cpu",
            "test": "cpu events threads=4",
            "platform": "docker",
            "ratio": np.nan,
            "ci_low": np.nan,
            "ci_high": np.nan,
        }
    )
    return pd.DataFrame(rows)


def test_overhead_ratios_on_a_log_scale_one_panel_per_benchmark():
    fig = plots.overhead(overhead_table())
    cpu, app = [ax for ax in fig.axes if ax.get_visible()]
    assert (cpu.get_title(), app.get_title()) == ("cpu", "application")
    assert cpu.get_xscale() == app.get_xscale() == "log"
    assert line(cpu, "no_overhead").get_xdata()[0] == 1
    # the benchmark's name is dropped from the front of each label; NaN rows are left out
    assert [t.get_text() for t in cpu.get_yticklabels()] == ["events threads=1", "events threads=2"]
    ends = {}
    for ax in (cpu, app):
        for c in ax.containers:
            if isinstance(c, BarContainer):
                ends.setdefault(c.get_label(), []).extend(b.get_x() + b.get_width() for b in c.patches)
    assert ends["docker"] == pytest.approx([1.0, 1.1, 1.0])
    assert ends["libvirt"] == pytest.approx([2.0, 2.1, 16.0])
    assert cpu.get_xlim()[1] < 10 < app.get_xlim()[1]  # panels do not share the x scale
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["docker", "libvirt"]
    assert "95% Fieller CI" in fig.get_suptitle()


def test_overhead_rejects_what_it_cannot_chart():
    with pytest.raises(ConfigError, match="no column 'ci_low'"):
        plots.overhead(overhead_table().drop(columns="ci_low"))
    with pytest.raises(ConfigError, match="no row has a positive ratio"):
        plots.overhead(overhead_table().assign(ratio=np.nan))


def test_main_effect_ci_uses_the_model_error(study):
    """Half-width t(df_e)·s_e/sqrt(n): s_e² is the residual mean square of the full model
    (statsmodels OLS rps ~ C(vcpus)*C(affinity)*C(count), mse_resid), not each level's spread."""
    import statsmodels.formula.api as smf

    fit = smf.ols("rps ~ C(vcpus) * C(affinity) * C(count)", data=study).fit()
    ax = plots.main_effects(study, ["vcpus", "affinity", "count"], "rps").axes[0]
    bars = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"][0]
    segs = bars.lines[2][0].get_segments()
    half = (segs[0][1][1] - segs[0][0][1]) / 2
    n_level = (study.vcpus == 1).sum()
    assert half == pytest.approx(sps.t.ppf(0.975, fit.df_resid) * np.sqrt(fit.mse_resid / n_level))


def test_pareto_caveat_when_residuals_are_not_normal():
    # every cell: three equal runs and one outlier, so residuals are -2, -2, -2, +6
    data = long_frame([[c, c, c, c + 8] for c in (1, 2, 3, 4)], ["A", "B"])
    diag = factorial_diagnostics(data, factors=["A", "B"], response="y")
    assert diag.normal is False
    ax = plots.pareto(factorial_effects(data, factors=["A", "B"], response="y"), diagnostics=diag).axes[0]
    assert "residuals not normal" in ax.get_xlabel()


def test_run_order_shows_drift():
    d = pd.DataFrame(
        {"run_order": range(30), "t": np.linspace(1, 2, 30), "affinity": ["floating", "pinned"] * 15}
    )
    ax = plots.run_order(d, "t", hue="affinity").axes[0]
    roll = line(ax, "rolling_median")
    assert roll.get_ydata()[15] == pytest.approx(d.t.rolling(3, center=True).median()[15])
    assert ax.get_xlabel() == "run order"


def test_platform_label_and_emulation_note_follow_the_domain_types():
    """A libvirt platform whose domains ran as type qemu (TCG) is labelled and caveated so; KVM
    domains, or a platform with no libvirt domains, get neither."""
    from labkit.report.labels import emulation_note, platform_label

    assert platform_label("libvirt", {"qemu"}) == "libvirt (TCG)"
    assert platform_label("kvm", {"kvm", "qemu"}) == "kvm (KVM+TCG)"
    assert platform_label("kvm", {"kvm"}) == "kvm" and platform_label("lxd", set()) == "lxd"
    assert emulation_note({"qemu"}).startswith("The libvirt guests ran under QEMU TCG")
    assert emulation_note({"kvm", "qemu"}).startswith("Some libvirt guests")
    assert emulation_note({"kvm"}) == "" and emulation_note(None) == ""


def test_labels_carry_units_of_the_hpc_metrics():
    from labkit.report.labels import label

    assert label("pingpong_bandwidth_gb_per_s") == "PingPong bandwidth (GB/s)"
    assert label("random_ring_bandwidth_gb_per_s") == "random ring bandwidth (GB/s)"
    assert label("linpack_gflops") == "linpack (Gflop/s)" and label("hpl_gflops") == "HPL (Gflop/s)"
    assert label("pingpong_bandwidth_mb_per_s") == "pingpong bandwidth (MB/s)"
