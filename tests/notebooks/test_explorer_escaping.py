"""Notebook 00 (explorer) on a campaign whose names, levels and texts carry markup (issue 28):
its Markdown outputs, rendered as JupyterLab renders them, show every payload as text."""
from tests.support.payloads import (
    CAMPAIGN,
    IMG,
    LINK,
    SCRIPT,
    markup_left,
    payload_store,
    rendered_markdown,
    visible_text,
)

from .conftest import images, markdown_outputs

NB = "00_explorer.ipynb"


def test_explorer_shows_a_hostile_campaign_as_text(run_notebook, tmp_path):
    payload_store(tmp_path / "data")
    nb = run_notebook(NB, campaign=CAMPAIGN)
    md = markdown_outputs(nb)
    page = rendered_markdown(md)
    assert markup_left(page) == [] and "<a " not in page
    text = visible_text(page)
    assert CAMPAIGN in text and f"going from {IMG} to {LINK}" in text and SCRIPT in text
    html_outputs = [o["data"]["text/html"] for c in nb.cells for o in c.get("outputs", [])
                    if "text/html" in o.get("data", {})]
    assert html_outputs and all(markup_left(h) == [] for h in html_outputs)    # tables (pandas)
    assert images(nb) == 5
