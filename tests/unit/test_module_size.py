"""No module of labkit/ exceeds 600 lines (issue 46: small modules named for what they own).

The count is of the file as committed, which ``ruff format --check`` (in ``make lint`` and
``make test``) holds to the formatter's layout, so a module cannot stay under the limit by
packing its lines.
"""

from __future__ import annotations

from pathlib import Path

import labkit

LIMIT = 600
PACKAGE = Path(labkit.__file__).parent


def module_lengths(root: Path) -> dict[str, int]:
    """Lines of every ``.py`` file under ``root``, keyed by its path relative to ``root``'s parent."""
    return {
        str(p.relative_to(root.parent)): len(p.read_text().splitlines()) for p in sorted(root.rglob("*.py"))
    }


def test_no_labkit_module_exceeds_the_limit():
    lengths = module_lengths(PACKAGE)
    assert len(lengths) > 100, f"found only {len(lengths)} modules under {PACKAGE}"
    over = {path: n for path, n in lengths.items() if n > LIMIT}
    assert not over, f"modules over {LIMIT} lines (split them by what they own): {over}"


def test_the_count_sees_a_long_module(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "short.py").write_text("x = 1\n" * LIMIT)
    (pkg / "sub" / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    lengths = module_lengths(pkg)
    assert lengths == {"pkg/short.py": LIMIT, "pkg/sub/long.py": LIMIT + 1}
    assert [p for p, n in lengths.items() if n > LIMIT] == ["pkg/sub/long.py"]
