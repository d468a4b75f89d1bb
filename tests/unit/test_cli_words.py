"""What the command line says in words (issue 46's frictions): ``--help`` in plain text, run counts
by status as "96 ok" (a ``labkit run`` without a workload: tests/unit/test_cli_workload.py)."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.cli import main, parser, plain_text
from labkit.report.tables import count_words
from labkit.store import load_results

REPO = Path(__file__).resolve().parents[2]
MARKUP = re.compile(r"``|:(?:func|class|mod|meth|data|attr|exc|obj):`|`_")


def _commands(p: argparse.ArgumentParser, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    for action in p._actions:  # argparse keeps its subparsers here only
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += _commands(sub, (*prefix, name))
    return out


def test_every_help_is_plain_text():
    commands = _commands(parser())
    assert ("run",) in commands and ("images", "build") in commands and len(commands) > 20
    for cmd in commands:
        r = subprocess.run(
            [sys.executable, "-m", "labkit", *cmd, "--help"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        assert r.returncode == 0, (cmd, r.stderr)
        assert r.stdout.startswith("usage: labkit"), cmd
        found = MARKUP.findall(r.stdout)
        assert not found, f"labkit {' '.join(cmd)} --help shows markup {found}"


def test_plain_text_strips_the_roles_literals_and_links():
    assert plain_text("``labkit run`` (see :mod:`labkit.core.paths`)") == "labkit run (see labkit.core.paths)"
    assert plain_text(":class:`~labkit.run.campaign.Campaign` and :func:`f`") == "Campaign and f"
    assert (
        plain_text("`MkDocs <https://www.mkdocs.org>`_, `ref`_ and `x`")
        == "MkDocs (https://www.mkdocs.org), ref and x"
    )


def test_count_words():
    assert count_words({"failed": 2, "ok": 96, "timeout": 2}) == "96 ok, 2 failed, 2 timeout"
    assert count_words({"ok": 12000}) == "12,000 ok"
    assert count_words({}) == "none"


@pytest.fixture
def data(tmp_path):
    """A copy of one committed store (the committed files are never opened for writing)."""
    import shutil

    shutil.copytree(REPO / "data" / "affinity-local", tmp_path / "data" / "affinity-local")
    return tmp_path / "data"


def test_show_and_analyze_count_runs_in_words(data, capsys):
    tidy = load_results(data, "affinity-local").drop_duplicates("run_id")
    words = count_words(tidy.status.value_counts().to_dict())
    assert re.fullmatch(r"[0-9,]+ ok(, [0-9,]+ [a-z-]+)*", words)
    assert main(["show", "affinity-local", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert f"\nruns       {len(tidy)}: {words}\n" in out and "{'" not in out
    assert main(["analyze", "affinity-local", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert f"(levels); runs: {words}\n" in out and "{'" not in out
