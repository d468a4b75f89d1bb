"""Notebook 05a (seed 003, public cloud): analysis of the published Table 5.1 and Table 4.1.

Expected statements are the thesis's own (Maliszewski 2021, seed 003_5a06cf9dbf3f41b6.txt,
section 5.2.3, p. 58): F8 most cost-efficient for eight applications, EP on A10, largest
F8 margins for MG, IS and CG. No campaign: view mode is the only mode.
"""
from .conftest import images, markdown_outputs, outputs_text

NB = "05a_interconnect_public_cloud.ipynb"


def test_view_checks_the_thesis_conclusions(run_notebook, tmp_path):
    nb = run_notebook(NB, mode="view")
    md = markdown_outputs(nb)
    assert "agrees with the thesis for 9 of 9 applications" in md
    assert "F8 for ALYA, BT, CG, FT, IS, LU, MG, SP" in md and "EP on A10" in md
    assert "the top three are MG, IS, CG" in md
    assert "All 17 gains stated in words match Table 5.1" in md
    text = outputs_text(nb)
    assert "Table 5.1 (p. 57)" in text and "Table 4.1 (p. 46)" in text   # citations printed
    figs = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"05a_performance_cost.png", "05a_paper_vs_labkit.svg"} <= figs
    assert images(nb) == 2
