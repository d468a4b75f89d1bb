"""Issue 28, escaping and written files: real attack trials against labkit's renderers and writers.

``rows()`` returns (section, row, count, must-be) for reliability/run.py. Markup payloads
(``<script>``, ``<img onerror>``, ``[x](javascript:...)``, ``$...$``, headings, lists) go
through every renderer of data (``escape_md``, ``Conclusions.markdown``, the explorer's
``Analysis.markdown``, the HTML report) on a campaign store that carries them everywhere;
the Markdown is rendered as JupyterLab does (CommonMark, raw HTML allowed) and what
became markup is counted. Every writer (report, bundle, export, figures, atomic_write)
is pointed at a symbolic link planted in another directory and at a file left 0644.

Issue 47: stores of a newer labkit and with tampered rows through status, show, report, export
and resume (tracebacks counted), ``labkit check`` on injected faults, export and report into a
directory link another user planted in a sticky directory, bundle member modes, campaigns under
``umask 000``, a data dir whose path holds ``?`` and ``#``.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXTRA = [
    "# heading",
    "1. item",
    "- item",
    "**b** _e_ `c`",
    "a | b",
    "x\n\n<script>y</script>",
    "<iframe src=javascript:alert(1)>",
    '<a href="javascript:alert(1)">x</a>',
    "![i](javascript:alert(1))",
    "[x](https://example.org)",
    "<https://example.org>",
    "&lt;script&gt;",
    "\\<script>",
]
SECTION_MARKUP = "escaping (markup from data)"
SECTION_FILES = "written files"


def _markup_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    import matplotlib

    matplotlib.use("Agg")
    from labkit.report import Conclusions, analyze, escape_md, write_report
    from tests.support.payloads import CAMPAIGN, PAYLOADS, markup_left, payload_store, rendered_markdown

    texts = list(PAYLOADS) + EXTRA
    pages = [rendered_markdown(escape_md(t)) for t in texts]
    pages += [rendered_markdown(Conclusions(headline=t, findings=[t, f"{t}: {t}"]).markdown()) for t in texts]
    data = tmp / "data"
    payload_store(data)
    crashed = 0
    try:
        a = analyze(data, CAMPAIGN)
        pages += [rendered_markdown(m) for m in a.markdown().values()]
        pages.append(write_report(data, CAMPAIGN, tmp / "report.html").read_text())
    except Exception:  # a crash is a finding too ("$x^$" in a figure raised before)
        crashed += 1
    # a link the data made; the report's own table of contents (<a href="#anchor">, its headings
    # escaped) is not one (counted here before: 11 of the 11 "left" at d2bc4ab were its entries)
    left = sum(len(markup_left(p)) + len(re.findall(r'<a (?!href="#[a-z0-9-]+">)', p)) for p in pages)
    return [
        (SECTION_MARKUP, f"{len(pages)} renderings of {len(texts)} payloads: markup left", left, "0"),
        (SECTION_MARKUP, "hostile campaign: explorer Markdown or HTML report failed", crashed, "0"),
    ]


def _writers(data: Path, campaign: str):
    """name -> write(path) for every writer of a user-chosen path."""
    import pandas as pd

    from labkit.core.files import atomic_write
    from labkit.report import plots, write_bundle, write_report
    from labkit.store import Store

    def export(path):
        with Store(data / campaign / "store.sqlite", readonly=True) as st:
            # export writes fixed names into a directory: plant there
            st.export(path.parent, formats=("csv",))

    def figure(path):
        fig = plots.run_order(pd.DataFrame({"run_order": [0, 1], "y": [1.0, 2.0]}), "y")
        plots.save_figure(fig, path.stem, path.parent, formats=("png",))

    return {
        "report": (lambda p: write_report(data, campaign, p), "report.html", 0o600),
        "bundle": (lambda p: write_bundle(data, campaign, p), "bundle.zip", 0o600),
        "export": (export, "results.csv", 0o600),
        "figure": (figure, "fig.png", 0o600),
        "atomic_write": (lambda p: atomic_write(p, "x"), "file", 0o600),
    }


def _file_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    from labkit.errors import ConfigError
    from tests.support.payloads import payload_store

    data = tmp / "data"
    payload_store(data, "files")
    through = refused = wrong_mode = 0
    writers = _writers(data, "files")
    for name, (write, target, declared) in writers.items():
        victim = tmp / f"victim-{name}"
        victim.write_text("precious\n")
        planted = tmp / f"other-{name}"
        planted.mkdir()
        (planted / target).symlink_to(victim)
        try:
            write(planted / target)
        except ConfigError as exc:
            refused += str(planted / target) in str(exc)
        through += victim.read_text() != "precious\n"
        fresh = tmp / f"old-{name}"
        fresh.mkdir()
        (fresh / target).write_text("old")
        os.chmod(fresh / target, 0o644)
        write(fresh / target)
        wrong_mode += stat.S_IMODE(os.lstat(fresh / target).st_mode) != declared
    names = zipfile.ZipFile(tmp / "old-bundle" / "bundle.zip").namelist()
    bad_names = sum("/" in n or "\\" in n or n.startswith(".") for n in names)
    return [
        (SECTION_FILES, f"writes through a planted link ({len(writers)} writers)", through, "0"),
        (SECTION_FILES, "planted links refused naming the path", refused, ""),
        (SECTION_FILES, "files left with a mode other than declared (was 0644)", wrong_mode, "0"),
        (SECTION_FILES, "bundle members with a path component", bad_names, "0"),
    ]


def _one_factor_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    from labkit.report import write_report
    from tests.support.payloads import payload_store

    failed = 0
    for i, factors in enumerate(({"size": [1, 2, 3]}, {"size": ["a", "b"]})):
        data = tmp / f"one-{i}"
        payload_store(data, "one", factors, replications=1)
        try:
            write_report(data, "one", tmp / f"one-{i}.html")
        except Exception:
            failed += 1
    return [(SECTION_FILES, "one-factor unreplicated campaigns without a report", failed, "0")]


SECTION_STORES = "stores of other versions, tampered rows (issue 47)"
SECTION_SHARED = "files on a shared machine (issue 47)"


def _labkit(*argv: str):
    """The CLI in its own process, as a user runs it (a traceback shows on its stderr)."""
    import subprocess

    return subprocess.run(
        [sys.executable, "-m", "labkit", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)},
    )


def _sql(path: Path, *statements: str, args=()) -> None:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as db, db:
        for st in statements:
            db.execute(st, args)


def _tiny_campaign(data: Path, cid: str):
    """A two-run campaign of the ``command`` workload (``echo 1``) on this machine."""
    from labkit.design import Design
    from labkit.run.campaign import Campaign

    return Campaign(
        Design.from_dict({"factors": {"vcpus": [1, 2]}, "seed": 1}),
        workload="command",
        workload_params={"argv": ["sh", "-c", "echo 1"]},
        campaign_id=cid,
        data_dir=data,
        progress=False,
    )


def _store_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    import dataclasses
    import json

    from labkit.design import Design, Run
    from labkit.errors import StoreError
    from labkit.run.adaptive import run_adaptive
    from labkit.store import Store
    from labkit.store.check import check_store
    from tests.support.stores import BAD_RUN, CID, make_store

    out = []
    # a store written by a newer labkit: one more column in runs, schema 99
    data = tmp / "newer"
    path = make_store(data)
    _sql(
        path,
        "ALTER TABLE runs ADD COLUMN newer TEXT",
        "PRAGMA user_version = 99",
        "INSERT OR REPLACE INTO store_info VALUES ('labkit_version', '9.9.0')",
    )
    tracebacks = refused = 0
    for argv in (
        ["status", CID],
        ["show", CID],
        ["report", CID, "-o", str(tmp / "newer.html")],
        ["export", CID],
    ):
        res = _labkit(*argv, "--data-dir", str(data))
        tracebacks += "Traceback" in res.stderr
        refused += res.returncode == 2 and "written by labkit 9.9.0 (schema 99)" in res.stderr
    try:  # resume
        from labkit.run.campaign import Campaign
        from tests.support.stores import FACTORS

        Campaign(
            Design.from_dict({"factors": FACTORS, "replications": 2, "seed": 1}),
            workload="command",
            workload_params={"argv": ["sh", "-c", "echo 1"]},
            campaign_id=CID,
            data_dir=data,
            progress=False,
        ).run()
    except StoreError as exc:
        refused += "written by labkit 9.9.0 (schema 99)" in str(exc)
    except Exception:
        tracebacks += 1
    out += [
        (
            SECTION_STORES,
            "newer store (schema 99): status, show, report, export, resume with a traceback",
            tracebacks,
            "0",
        ),
        (
            SECTION_STORES,
            "newer store: of those 5, not refused naming both labkits' versions",
            5 - refused,
            "0",
        ),
    ]

    # a runs row whose metadata is not JSON: the others still read, the row named
    data = tmp / "malformed"
    path = make_store(data)
    _sql(path, "UPDATE runs SET metadata = '{not json' WHERE run_id = ?", args=(BAD_RUN,))
    tracebacks = named = 0
    for argv in (
        ["status", CID],
        ["show", CID],
        ["report", CID, "-o", str(tmp / "m.html")],
        ["export", CID, "--out", str(tmp / "m-export")],
    ):
        res = _labkit(*argv, "--data-dir", str(data))
        tracebacks += "Traceback" in res.stderr or res.returncode != 0
        named += (
            sum(f"campaign {CID}: run {BAD_RUN}: column metadata" in ln for ln in res.stderr.splitlines())
            == 1
        )
    import logging

    quiet = logging.getLogger("labkit.store")
    level, quiet.level = quiet.level, logging.ERROR  # its warning is counted, not printed here
    try:
        with Store(path, readonly=True) as st:
            read = st.tidy().run_id.nunique()
    finally:
        quiet.setLevel(level)
    out += [
        (
            SECTION_STORES,
            "malformed metadata of 1 run: status, show, report, export failing",
            tracebacks,
            "0",
        ),
        (
            SECTION_STORES,
            "malformed metadata: of those 4, not naming campaign, run and column in one line",
            4 - named,
            "0",
        ),
        (SECTION_STORES, "malformed metadata: runs not read besides the malformed one (of 7)", 7 - read, "0"),
    ]

    # a tampered pending adaptive round
    design = Design.from_dict(
        {"factors": {"vcpus": [1, 2]}, "seed": 5, "replications": {"target_ci": 1e-9, "min": 2, "max": 4}}
    )
    bad = {"run_id": "c0000r003", "run_order": 4, "config": 0, "replicate": 3, "levels": {"vcpus": 1}}
    forged = dataclasses.asdict(Run("c0000r003", 4, 0, 3, {"vcpus": 64}))
    other = 0
    for pending in ([bad], [forged]):
        with Store(tmp / "adaptive" / f"{len(out)}-{pending[0]['levels']['vcpus']}" / "store.sqlite") as st:
            st.set_meta(
                campaign_id="adaptive", design=design.to_dict(), adaptive_round=1, adaptive_pending=pending
            )
            for run in design.plan():
                st.record_run(run, status="ok", started="2026-01-01T00:00:00+00:00", duration_s=1.0)
            try:
                run_adaptive(design, st, lambda runs: None, response="y")
                other += 1  # a forged run accepted
            except StoreError:
                pass
            except Exception:
                other += 1
    out.append(
        (
            SECTION_STORES,
            "tampered adaptive_pending (unknown field, forged levels): not refused with a StoreError",
            other,
            "0",
        )
    )

    # labkit check: each injected fault found, a good store passes
    faults = [
        ("UPDATE runs SET metadata = '{x' WHERE run_id = ?", (BAD_RUN,)),
        ("UPDATE runs SET levels = '3' WHERE run_id = ?", (BAD_RUN,)),
        ("UPDATE runs SET replicate = 'two' WHERE run_id = ?", (BAD_RUN,)),
        ("UPDATE measurements SET value = 'fast' WHERE run_id = ?", (BAD_RUN,)),
        ("INSERT INTO measurements VALUES ('c0009r009', 0, 't_s', 1.0, 's', 0)", ()),
        ("UPDATE meta SET value = '{' WHERE key = 'workload'", ()),
        ("UPDATE fingerprints SET data = 'x' WHERE id = 'fp1'", ()),
        ("INSERT OR REPLACE INTO meta VALUES ('adaptive_pending', ?)", (json.dumps([{"run_order": 1}]),)),
        ("ALTER TABLE runs ADD COLUMN surprise TEXT", ()),
        ("PRAGMA user_version = 99", ()),
    ]
    missed = 0
    for i, (statement, args) in enumerate(faults):
        p = make_store(tmp / "check", f"f{i}")
        _sql(p, statement, args=args)
        missed += check_store(p, f"f{i}").ok
    good = check_store(make_store(tmp / "check", "good"), "good").ok
    out += [
        (SECTION_STORES, f"labkit check: injected faults not found (of {len(faults)})", missed, "0"),
        (SECTION_STORES, "labkit check: a good store reported as faulty", int(not good), "0"),
    ]
    return out


def _shared_rows(tmp: Path) -> list[tuple[str, str, object, str]]:
    import shutil

    from tests.support.stores import CID, make_store

    out = []
    # export / report into a directory link planted by another user in a sticky 1777 directory
    if os.geteuid() == 0 and shutil.which("setpriv"):
        from tests.support.other_users import planted_dir_link

        base = Path(tempfile.mkdtemp(prefix="labkit-rel-shared-"))
        try:
            data = base / "data"
            make_store(data)
            target, link, _ = planted_dir_link(base, 4245)
            refused = 0
            for argv in (["export", CID, "--out", str(link)], ["report", CID, "-o", str(link / "r.html")]):
                res = _labkit(*argv, "--data-dir", str(data))
                refused += res.returncode == 2 and f"{link} is a symbolic link" in res.stderr
            out += [
                (
                    SECTION_SHARED,
                    "export/report into another user's planted dir link: files written in its target",
                    len(list(target.iterdir())),
                    "0",
                ),
                (
                    SECTION_SHARED,
                    "export/report into the planted dir link: of 2, not refused naming it",
                    2 - refused,
                    "0",
                ),
            ]
        finally:
            shutil.rmtree(base)
    else:
        out.append(
            (SECTION_SHARED, "export into a planted dir link: skipped (needs root and setpriv)", "-", "")
        )

    # bundle members
    from tests.support.stores import bundle_member_modes

    modes = bundle_member_modes(tmp / "bundle", tmp / "b.zip")
    wrong = sum(m != stat.S_IFREG | 0o600 for m in modes.values())
    out.append((SECTION_SHARED, f"bundle members not 0600 (of {len(modes)})", wrong, "0"))

    # umask 000: two campaigns and a resume in a new data dir
    data = tmp / "umask" / "data"
    old = os.umask(0)
    failed = 0
    try:
        for cid in ("u-a", "u-b", "u-a"):
            try:
                _tiny_campaign(data, cid).run().close()
            except Exception:
                failed += 1
    finally:
        os.umask(old)
    dirs = (data, data / "u-a", data / "u-b")
    wrong = sum(not p.is_dir() or stat.S_IMODE(os.stat(p).st_mode) != 0o700 for p in dirs)
    out += [
        (SECTION_SHARED, "umask 000: campaigns failing (2 campaigns, 1 resume)", failed, "0"),
        (SECTION_SHARED, "umask 000: data dir and campaign dirs not 0700 (of 3)", wrong, "0"),
    ]

    # a data dir whose path holds ? and #
    root = tmp / "uri"
    root.mkdir()
    data = root / "we?ird#data%20dir"
    failed = 0
    try:
        make_store(data)
        _tiny_campaign(data, "t-uri").run().close()
    except Exception:
        failed += 1
    for argv in (["status", CID], ["export", CID], ["report", CID, "--bundle", str(root / "b.zip")]):
        failed += _labkit(*argv, "--data-dir", str(data)).returncode != 0
    stray = sorted(set(p.name for p in root.iterdir()) - {"we?ird#data%20dir", "b.zip"})
    out += [
        (
            SECTION_SHARED,
            "data dir 'we?ird#data%20dir': campaign, status, export, bundle failing",
            failed,
            "0",
        ),
        (SECTION_SHARED, "data dir 'we?ird#data%20dir': stray files beside it", len(stray), "0"),
    ]
    return out


def rows() -> list[tuple[str, str, object, str]]:
    with tempfile.TemporaryDirectory(prefix="labkit-rel-sec-") as d:
        tmp = Path(d)
        out = []
        for part, make in (
            ("m", _markup_rows),
            ("f", _file_rows),
            ("o", _one_factor_rows),
            ("s", _store_rows),
            ("h", _shared_rows),
        ):
            (tmp / part).mkdir()
            out += make(tmp / part)
        return out


if __name__ == "__main__":
    for row in rows():
        print(*row, sep=" | ")
