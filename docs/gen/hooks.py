"""The documentation site's MkDocs hook (mkdocs.yml ``hooks:``).

* Each ``<!-- gen:NAME -->`` line of a page becomes ``docs/gen/reference.py``'s ``GENERATORS[NAME]()``
  (the CLI's help, the workloads, the backends, the design file's keys, the seed-study table),
  at build time, from the code; an unknown NAME stops the build.
* The seed notebooks and the explorer, executed in view mode on the committed data by
  ``docs/gen/notebooks.py`` into ``build/docs-notebooks/studies/``, are added as the pages
  ``studies/*.ipynb`` (mkdocs-jupyter renders them read-only); when one is missing the build stops
  and says to run that script (``make docs`` does).
* The committed figures (``figures/*.png``) are added under ``figures/``, so pages can show them.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

GEN = Path(__file__).resolve().parent
REPO = GEN.parents[1]
if str(GEN) not in sys.path:
    sys.path.insert(0, str(GEN))

import reference  # noqa: E402  (docs/gen/reference.py)

import notebooks  # noqa: E402  (docs/gen/notebooks.py)

MARKER = re.compile(r"^<!-- gen:([a-z-]+) -->$", re.M)


@event_priority(100)          # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files: Files, config) -> Files:
    studies = notebooks.OUT
    missing = [n for n in notebooks.NOTEBOOK_PARAMETERS if not (studies / n).is_file()]
    if missing:
        raise PluginError(f"executed notebooks missing in {studies}: {', '.join(missing)}; "
                          "run `.venv/bin/python docs/gen/notebooks.py` (make docs does)")
    for name in notebooks.NOTEBOOK_PARAMETERS:
        files.append(File(f"studies/{name}", src_dir=str(studies.parent), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    for png in sorted((REPO / "figures").glob("*.png")):
        files.append(File(f"figures/{png.name}", src_dir=str(REPO), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    def generate(m: re.Match) -> str:
        name = m.group(1)
        if name not in reference.GENERATORS:
            raise PluginError(f"{page.file.src_uri}: unknown marker gen:{name}; known: {sorted(reference.GENERATORS)}")
        return reference.GENERATORS[name]()
    return MARKER.sub(generate, markdown)
