"""Issue 28: data from a store is shown as text (Markdown, HTML, figures), and files labkit writes
go through labkit.core.files.atomic_write (no write through a planted link, declared modes)."""

import io
import os
import stat
import zipfile

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from labkit.cli import main  # noqa: E402
from labkit.core.files import atomic_write  # noqa: E402
from labkit.errors import ConfigError  # noqa: E402
from labkit.report import (  # noqa: E402
    Conclusions,
    analyze,
    escape_html,
    escape_md,
    plots,  # noqa: E402
    write_report,
)
from labkit.store import Store  # noqa: E402
from tests.support.payloads import (  # noqa: E402
    BAD_MATH,
    CAMPAIGN,
    IMG,
    LINK,
    MATH,
    PAYLOADS,
    SCRIPT,
    markup_left,
    payload_store,
    rendered_markdown,
    visible_text,
)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def hostile(tmp_path):
    """Payloads everywhere; the campaign id "hostile" is one the CLI accepts."""
    data = tmp_path / "data"
    payload_store(data)
    payload_store(data, "hostile")
    return data


# -- Markdown and HTML --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        *PAYLOADS,
        "# heading",
        "1. item",
        "- item",
        "**bold** _em_ `code`",
        "a | b",
        "x\n\n<script>y</script>",
        "[x](https://example.org)",
        "&amp; \\ ~~s~~ ![i](x)",
    ],
)
def test_escape_md_renders_as_the_text_itself(text):
    page = rendered_markdown(escape_md(text))
    assert markup_left(page) == [] and "<a " not in page and "<em>" not in page
    assert visible_text(page).strip() == " ".join(text.splitlines()).strip()
    assert "$" not in escape_md(text).replace("\\$", "")  # no "$" left for MathJax
    assert escape_md("wall_time_s on vcpus, memory_mb") == "wall_time_s on vcpus, memory_mb"


def test_escape_html():
    assert escape_html(f"{IMG}\"'") == "&lt;img src=x onerror=alert(1)&gt;&quot;&#x27;"


def test_conclusions_markdown_shows_names_and_levels_as_text():
    c = Conclusions(headline=f"Does {SCRIPT} matter?", findings=[f"{IMG}: going from {LINK} to {MATH}"])
    page = rendered_markdown(c.markdown())
    assert markup_left(page) == [] and "<a " not in page
    assert all(p in visible_text(page) for p in (SCRIPT, IMG, LINK, MATH))
    assert str(c).startswith(f"Does {SCRIPT} matter?") and f"- {IMG}: going from {LINK}" in str(c)


def test_explorer_markdown_of_a_hostile_store(hostile):
    """What notebook 00 displays (Analysis.markdown) keeps every payload as text."""
    a = analyze(hostile, CAMPAIGN)
    md = a.markdown()
    assert set(md) == {"title", "design", "effects", "conclusions"}
    for part in md.values():
        page = rendered_markdown(part)
        assert markup_left(page) == [] and "<a " not in page, part
    title = visible_text(rendered_markdown(md["title"]))
    assert CAMPAIGN in title and SCRIPT in title
    assert SCRIPT in visible_text(rendered_markdown(md["design"]))
    concl = visible_text(rendered_markdown(md["conclusions"]))
    assert f"going from {IMG} to {LINK}" in concl


def test_html_report_of_a_hostile_store(hostile, tmp_path):
    """Every payload (also "$x^$", which made matplotlib raise) ends up as text in the report."""
    page = write_report(hostile, CAMPAIGN, tmp_path / "r.html").read_text()
    assert markup_left(page) == []
    text = visible_text(page)
    assert all(p in text for p in (SCRIPT, IMG, LINK, BAD_MATH, CAMPAIGN))
    # pareto, main effects, interactions, run order, Q-Q, and the drift check (issue 32)
    assert page.count('src="data:image/png;base64,') == 6


def test_figures_draw_dollar_levels_literally():
    data = pd.DataFrame(
        {"f": [MATH, MATH, BAD_MATH, BAD_MATH], "y": [1.0, 1.2, 2.0, 2.1], "run_order": [0, 1, 2, 3]}
    )
    for fig in (plots.main_effects(data, ["f"], "y"), plots.run_order(data, "y", hue="f")):
        fig.savefig(io.BytesIO(), format="png")  # raised ValueError on "$x^$" before
        texts = [t for t in fig.findobj(matplotlib.text.Text) if "$" in t.get_text()]
        assert texts and not any(t.get_parse_math() for t in texts)


# -- files --------------------------------------------------------------------------------------
@pytest.fixture
def planted(tmp_path):
    """A directory owned by 'someone else' with a link to a file of ours."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    other = tmp_path / "other"
    other.mkdir()
    return victim, other


@pytest.mark.parametrize("flag", ["-o", "--bundle"])
def test_report_refuses_a_planted_link(hostile, planted, flag, capsys):
    victim, other = planted
    link = other / "out"
    link.symlink_to(victim)
    assert main(["report", "hostile", "--data-dir", str(hostile), flag, str(link)]) == 2
    assert f"{link} is a symbolic link" in capsys.readouterr().err
    assert victim.read_text() == "precious\n" and link.is_symlink()
    assert sorted(p.name for p in other.iterdir()) == ["out"]  # no temporary file left


def test_report_rewritten_private_and_bundle_names_plain(hostile, tmp_path):
    out, bundle = tmp_path / "r.html", tmp_path / "b.zip"
    out.write_text("old")
    os.chmod(out, 0o644)
    assert (
        main(["report", "hostile", "--data-dir", str(hostile), "-o", str(out), "--bundle", str(bundle)]) == 0
    )
    assert mode(out) == 0o600 and mode(bundle) == 0o600 and out.read_text().startswith("<!DOCTYPE html>")
    names = zipfile.ZipFile(bundle).namelist()
    assert {"results.csv", "store.sqlite", "campaign.json", "environment.json"} <= set(names)
    assert all("/" not in n and "\\" not in n and not n.startswith(".") for n in names)


def test_report_of_one_factor_without_replications(tmp_path):
    for factors in ({"size": [1, 2, 3]}, {"size": ["small", "large"]}):
        data = tmp_path / str(len(factors["size"]))
        payload_store(data, "one", factors, replications=1)
        page = write_report(data, "one", tmp_path / "one.html").read_text()
        assert "No test of significance or share of variation can be computed" in page
        assert analyze(data, "one").conclusions.significant == []


def test_export_and_figures_refuse_planted_links(hostile, planted):
    victim, other = planted
    (other / "results.csv").symlink_to(victim)
    with (
        Store(hostile / CAMPAIGN / "store.sqlite", readonly=True) as st,
        pytest.raises(ConfigError, match="results.csv is a symbolic link"),
    ):
        st.export(other, formats=("csv",))
    (other / "fig.png").symlink_to(victim)
    fig = plots.run_order(pd.DataFrame({"run_order": [0, 1], "y": [1.0, 2.0]}), "y")
    with pytest.raises(ConfigError, match="fig.png is a symbolic link"):
        plots.save_figure(fig, "fig", other, formats=("png",))
    assert victim.read_text() == "precious\n"
    written = plots.save_figure(fig, "fig2", other)
    assert [mode(p) for p in written] == [0o600, 0o600]


def test_atomic_write_modes_and_failures(tmp_path):
    target = tmp_path / "sub" / "f"
    assert atomic_write(target, "one") == target and mode(target) == 0o600 and mode(target.parent) == 0o700
    os.chmod(target, 0o666)
    atomic_write(target, b"two", mode=0o640)
    assert target.read_bytes() == b"two" and mode(target) == 0o640

    def broken(fh):
        fh.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(target, broken)
    assert target.read_bytes() == b"two" and os.listdir(target.parent) == ["f"]
    with pytest.raises(ConfigError, match="not a regular file"):
        atomic_write(tmp_path / "sub", "x")
    with pytest.raises(ConfigError, match="mode"):
        atomic_write(target, "x", mode="0600")
