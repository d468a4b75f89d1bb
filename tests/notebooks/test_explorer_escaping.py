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
    assert images(nb) == 6   # the analysis' five figures and the drift check's


def test_explorer_application_shows_a_hostile_campaign_as_text(run_notebook, tmp_path):
    """The ipywidgets application (HTML widgets set their value as markup, unsanitized): every
    HTML widget value and every output captured by its Output widgets keeps the payloads as text."""
    import json

    from .conftest import widget_outputs
    payload_store(tmp_path / "data")
    nb = run_notebook(NB, campaign=CAMPAIGN, interactive=True)
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    html_values = [m["state"].get("value", "") for m in state.values() if m.get("model_name") == "HTMLModel"]
    captured = widget_outputs(nb)
    pages = html_values + [o["data"].get("text/html", "") for o in captured if "data" in o]
    md = "\n".join(o["data"]["text/markdown"] for o in captured if "text/markdown" in o.get("data", {}))
    assert any(CAMPAIGN in visible_text(p) for p in html_values)          # the catalog lists it
    assert all(markup_left(p) == [] for p in pages) and markup_left(rendered_markdown(md)) == []
    assert SCRIPT in visible_text(rendered_markdown(md)) and "<a " not in rendered_markdown(md)
    assert "Traceback" not in json.dumps(captured)
