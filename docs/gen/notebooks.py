"""Execute the seed notebooks and the explorer in view mode for the documentation site.

Run by ``make docs`` before ``mkdocs build``: each notebook of ``notebooks/`` is executed with
papermill (``--engine labkit``, ``-p mode view -p interactive False``) on the committed stores
under ``data/``, into ``build/docs-notebooks/studies/`` (git-ignored, as all of ``build/``); the site's hook
(``docs/gen/hooks.py``) hands the executed copies to mkdocs-jupyter, which renders them
read-only. Figures go to ``build/docs-notebooks/figures/``, never to the committed ``figures/``.

A notebook whose executed copy is newer than the notebook, every committed store and reference
table, and labkit's code is not executed again (``--force`` executes all). A notebook that fails to execute stops the
build: the site never shows a stale or half-executed study as if it were current.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
OUT = REPO / "build" / "docs-notebooks" / "studies"

#: notebook -> extra papermill parameters (besides mode=view, interactive=False, figures_dir)
NOTEBOOK_PARAMETERS: dict[str, dict] = {
    "00_explorer.ipynb": {"campaign": "affinity-local"},
    "01_affinity_factorial.ipynb": {},
    "02_virtualization_overhead.ipynb": {},
    "03_deployment_scenarios.ipynb": {},
    "04_pipeline_kvm_lxc.ipynb": {},
    "05a_interconnect_public_cloud.ipynb": {},
    "05b_interconnect_private_cloud.ipynb": {},
}


def parameters(name: str) -> dict:
    params: dict = {"interactive": False}
    if name != "00_explorer.ipynb":          # the explorer has no mode (it only views) and writes no figures
        params.update(mode="view", figures_dir=str(OUT.parent / "figures" / Path(name).stem))
    return {**params, **NOTEBOOK_PARAMETERS[name]}


def newest_input(nb: Path) -> float:
    """The newest of what an executed copy depends on: the notebook, every committed store (and
    reference table), and labkit's code."""
    inputs = [*(REPO / "data").glob("*/store.sqlite"), *(REPO / "data" / "reference").glob("*"),
              *(REPO / "labkit").rglob("*.py")]
    return max([nb.stat().st_mtime, *(p.stat().st_mtime for p in inputs)])


def execute(names: list[str], force: bool = False) -> list[Path]:
    import papermill as pm

    OUT.mkdir(parents=True, exist_ok=True)
    done = []
    for name in names:
        src, dst = NOTEBOOKS / name, OUT / name
        if not force and dst.exists() and dst.stat().st_mtime > newest_input(src):
            print(f"docs: {name} is up to date", flush=True)
            done.append(dst)
            continue
        t0 = time.monotonic()
        tmp = dst.with_suffix(".partial.ipynb")
        pm.execute_notebook(str(src), str(tmp), parameters=parameters(name), cwd=str(REPO),
                            kernel_name="python3", progress_bar=False, engine_name="labkit",
                            start_timeout=300)
        tmp.replace(dst)
        print(f"docs: executed {name} in view mode in {time.monotonic() - t0:.0f} s", flush=True)
        done.append(dst)
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="notebooks to execute (default: all of NOTEBOOK_PARAMETERS)")
    ap.add_argument("--force", action="store_true", help="execute even when the executed copy is current")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in NOTEBOOK_PARAMETERS]
    if unknown:
        ap.error(f"unknown notebook(s) {unknown}; known: {sorted(NOTEBOOK_PARAMETERS)}")
    execute(args.names or list(NOTEBOOK_PARAMETERS), force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
