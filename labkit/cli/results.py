"""The subcommands that read stored campaigns: ``labkit status``, ``check``, ``export``, ``list``,
``show``, ``import`` and ``verify``."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import ConfigError
from .common import data_dir_of, existing_campaign, print_table

__all__ = ["cmd_check", "cmd_export", "cmd_import", "cmd_list", "cmd_show", "cmd_status", "cmd_verify"]


def cmd_status(args: argparse.Namespace) -> int:
    from ..run.status import status_text
    from ..store import Store

    cid = existing_campaign(args, args.campaign)
    with Store.for_campaign(data_dir_of(args), cid, readonly=True) as st:
        print(status_text(st, cid))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """``labkit check ID``: verify the campaign's store (:mod:`labkit.store.check`): integrity, schema,
    every row's JSON columns and types, orphan measurements; exit 1 when something is wrong."""
    from ..store.check import check_store
    from ..store.results import store_path

    cid = existing_campaign(args, args.campaign)
    result = check_store(store_path(data_dir_of(args), cid), cid)
    print(result.text())
    return 0 if result.ok else 1


def cmd_export(args: argparse.Namespace) -> int:
    from ..store import Store

    with Store.for_campaign(
        data_dir_of(args), existing_campaign(args, args.campaign_id), readonly=True
    ) as st:
        for path in st.export(args.out, formats=tuple(args.format.split(","))):
            print(path)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from ..report.catalog import campaign_catalog
    from ..report.explore import CATALOG_SHOWN

    table = campaign_catalog(data_dir_of(args))
    if table.empty:
        print(f"no campaign stored under {data_dir_of(args)}")
    else:
        print_table(table[CATALOG_SHOWN])
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from ..core.fingerprint import fingerprint_table
    from ..store import Store
    from ..store.codestate import code_state, stored_diff

    cid = existing_campaign(args, args.campaign)
    with Store.for_campaign(data_dir_of(args), cid, readonly=True) as st:
        if args.output is not None:
            return _show_output(st, cid, args.output)
        if args.diff:
            data, notes = stored_diff(st, cid)
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            for note in notes:
                print(f"labkit show --diff: {note}", file=sys.stderr)
            return 0
        code = code_state(st)
        # counts by SQL aggregates: no run's metadata JSON is parsed in Python
        meta, counts, fps = st.meta(), st.run_counts(), st.fingerprints()
        notes_md = st.measurement_metadata()
    from ..report.catalog import design_table

    design = meta.get("design", {})
    print(
        f"campaign   {cid}\ndesign     {design.get('name')}: "
        f"{design.get('replications')} replications, seed {design.get('seed')}"
    )
    for line in design_table(meta).to_string(index=False).splitlines():
        print(f"           {line}")
    print(f"backend    {meta.get('backend')} {meta.get('backend_options') or ''}")
    print(f"workload   {json.dumps(meta.get('workload'), default=str)}")
    print(code.line(cid))
    from ..report.tables import count_words

    print(f"runs       {counts['runs']}: {count_words(counts['by_status'])}")
    from ..run.telemetry import measurement_notes

    for note in measurement_notes(notes_md):  # not measured, not enforced: said beside the runs
        print(f"note       {note}")
    print("fingerprints:")
    print_table(fingerprint_table(fps))
    return 0


def _show_output(st, cid: str, run_id: str) -> int:
    """``labkit show <campaign> --output <run_id>``: the run's kept command output on stdout
    (``--output ''`` lists the runs that have one)."""
    have = st.run_outputs()
    if not run_id:
        print("\n".join(have) if have else f"campaign {cid}: no run output kept")
        return 0
    text = st.run_output(run_id)
    if text is None:
        shown = ", ".join(have[:20]) + (f" and {len(have) - 20} more" if len(have) > 20 else "")
        raise ConfigError(
            f"campaign {cid}: no output kept for run {run_id[:80]!r} (runs with output: "
            f"{shown or 'none'}; see LABKIT_RUN_OUTPUT)"
        )
    sys.stdout.write(text)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """``labkit import MANIFEST.yaml``: other tools' reports as a new campaign (docs/import.md)."""
    from ..store.imports import import_manifest

    path = import_manifest(args.manifest, data_dir_of(args))
    from ..store import Store

    with Store(path, readonly=True) as st:
        imported = st.meta().get("imported", {})
    files = imported.get("files", [])
    print(
        f"imported {imported.get('reports')} run(s) from {len(files)} file(s) with the "
        f"{imported.get('parser')} parser (version {imported.get('parser_version')}) into {path}"
    )
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """``labkit verify BUNDLE``: digests and re-computation (docs/verify.md)."""
    from ..report.verify import verify_bundle

    verdict = verify_bundle(args.bundle)
    if verdict.ok:
        print(f"labkit verify: {verdict.summary()}")
        return 0
    for line in verdict.problems:
        print(f"labkit verify: DIFFERS: {line}", file=sys.stderr)
    print(f"labkit verify: {verdict.summary()}", file=sys.stderr)
    return 1
