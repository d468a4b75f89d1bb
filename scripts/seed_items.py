#!/usr/bin/env python3
"""Write ``data/reference/seed_items.csv``: every numbered Table and Figure each seed study's text names.

The seed studies (the lab's shared ``seeds/`` folder beside this repository) are not part of the
repository, and CI has no copy of them; the identifiers are copied in once, with each seed file's
SHA-256, so that ``tests/unit/test_manifest.py`` can check that ``data/reference/reproduction.yaml``
lists every one of them. Run again (and commit the result) whenever a seed file changes::

    python scripts/seed_items.py --seeds DIR          # DIR: the lab's seed files (NNN_<hex>.txt)
    python scripts/seed_items.py --seeds DIR --out -  # print instead of writing

An identifier is "Table N" or "Fig. N" with N as the seed writes it (``3.1``, ``2``, ``03``), from
the seed's words Tabela/Table and Figura/Figure/Fig. (singular or plural); a sub-figure's letter,
``Figure 5.2(a)``, belongs to ``Fig. 5.2``.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "data" / "reference" / "seed_items.csv"
ITEM = re.compile(r"\b(Tabelas?|Tables?|Figuras?|Figures?|Figs?\.)\s+(\d+(?:\.\d+)?)")
SEED_FILE = re.compile(r"^(\d{3})_[0-9a-f]+\.txt$")


def ref_of(word: str, number: str) -> str:
    """``("Figura", "3.1")`` -> ``"Fig. 3.1"``; ``("Tabela", "2")`` -> ``"Table 2"``."""
    return ("Table " if word.lower().startswith("tab") else "Fig. ") + number


def seed_items(text: str) -> list[tuple[str, str, int]]:
    """``(ref, as first written, occurrences)`` for every Table and Figure ``text`` names, in the order
    of first appearance."""
    found: dict[str, list] = {}
    for m in ITEM.finditer(text):
        ref = ref_of(m.group(1), m.group(2))
        if ref in found:
            found[ref][1] += 1
        else:
            found[ref] = [f"{m.group(1)} {m.group(2)}", 1]
    return [(ref, first, n) for ref, (first, n) in found.items()]


def render(seeds: Path) -> str:
    files = sorted(p for p in seeds.iterdir() if SEED_FILE.match(p.name))
    if not files:
        raise SystemExit(f"{seeds}: no seed file (NNN_<hex>.txt)")
    out = io.StringIO()
    out.write("# Every numbered Table and Figure each seed study's text names (regex over the seed file: "
              "Tabela/Table N, Figura/Figure/Fig. N); written by scripts/seed_items.py, do not edit by hand.\n")
    out.write("# tests/unit/test_manifest.py checks that data/reference/reproduction.yaml lists each one.\n")
    for p in files:
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        out.write(f"# seed {SEED_FILE.match(p.name).group(1)}: {p.name}, sha256 {digest}\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["seed", "file", "ref", "as_written", "occurrences"])
    for p in files:
        for ref, first, n in seed_items(p.read_text(encoding="utf-8")):
            w.writerow([SEED_FILE.match(p.name).group(1), p.name, ref, first, n])
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=Path, required=True, help="folder of the seed files (NNN_<hex>.txt)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the CSV to write; '-' prints it")
    args = ap.parse_args(argv)
    if not args.seeds.is_dir():
        print(f"{args.seeds}: no such folder (the seed studies)", file=sys.stderr)
        return 2
    text = render(args.seeds)
    if str(args.out) == "-":
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
