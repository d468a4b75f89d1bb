"""Reference pages generated from the code, so they cannot drift from it.

The site's hook (``docs/gen/hooks.py``) replaces each marker ``<!-- gen:NAME -->`` of a page with
``GENERATORS[NAME]()``; ``python docs/gen/reference.py NAME`` prints the same text. Sources:

* ``cli``: ``labkit --help`` and every subcommand's ``--help`` (the argparse parser of
  :func:`labkit.cli.parser`, formatted at 100 columns as the command prints it);
* ``workloads``: every class of :data:`labkit.workloads.REGISTRY` (its ``defaults``, ``schema``,
  ``response``, ``min_memory_mb``, the metric names its module stores and its docstring);
* ``backends``: :data:`labkit.backends.REGISTRY` (module, class, pip extra), each class's
  ``OPTIONS`` and module docstring, and :data:`labkit.backends.needs.NEEDS` (what the host must give);
* ``design-keys``: :data:`labkit.design.DESIGN_KEYS` and the nested keys' sets, each with the
  description below (a key of the code without one stops the build);
* ``seed-table``: :func:`labkit.studies.manifest.table` over ``data/reference/reproduction.yaml``
  (every item of every seed, with its status), after its counts per seed and status;
* ``seed-statuses``: :func:`labkit.studies.manifest.status_docs`, what each status of the manifest says.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def rst_to_md(text: str) -> str:
    """Docstring text (reStructuredText roles and literals) as Markdown."""
    text = re.sub(r":(?:mod|func|class|meth|data|attr|exc|obj):`~?([^`]+)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    return text


def _escape_cell(text: str) -> str:
    """``text`` shown literally in a Markdown table cell (a regex stays a regex, not a link)."""
    text = str(text).replace("\n", " ").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", text)


# -- the command line ----------------------------------------------------------------------------

def _subcommands(p: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for action in p._actions:                       # argparse keeps its subparsers here only
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    out.append((name, sub))
    return out


def cli() -> str:
    os.environ["COLUMNS"] = "100"                   # argparse wraps help at $COLUMNS
    from labkit.cli import parser

    root = parser()
    parts = ["### `labkit`", "", "```text", root.format_help().rstrip(), "```", ""]

    def walk(prefix: str, p: argparse.ArgumentParser) -> None:
        for name, sub in _subcommands(p):
            cmd = f"{prefix} {name}"
            parts.extend([f"### `{cmd}`", "", "```text", sub.format_help().rstrip(), "```", ""])
            walk(cmd, sub)

    walk("labkit", root)
    return "\n".join(parts)


# -- workloads -----------------------------------------------------------------------------------

def _metric_literals(module_src: str, cls_name: str) -> list[str]:
    """The metric names written as string literals in ``Measurement("name", ...)`` calls of the
    class's body or, when it has none, of its whole module (which may hold another workload's
    parsers too), in order of appearance."""
    tree = ast.parse(module_src)

    def calls(node) -> list[str]:
        names = []
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "Measurement" \
                    and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                names.append(n.args[0].value)
        return names

    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name), None)
    names = calls(cls) if cls is not None else []
    if not names:
        names = calls(tree)
    return list(dict.fromkeys(names))


def workloads() -> str:
    from labkit.workloads import REGISTRY, workload_class

    parts = ["| workload | class | response | parameters |", "|---|---|---|---|"]
    for name in REGISTRY:
        cls = workload_class(name)
        parts.append(f"| [`{name}`](#{name}) | `{cls.__module__}.{cls.__name__}` | `{cls.response}` | "
                     f"{len(cls.defaults)} |")
    parts.append("")
    for name in REGISTRY:
        cls = workload_class(name)
        module = importlib.import_module(cls.__module__)
        src = inspect.getsource(module)
        parts += [f"## `{name}` {{#{name}}}", "",
                  f"`{cls.__module__}.{cls.__name__}`. Response (the metric analysed by default): "
                  f"`{cls.response}`. The least `memory_mb` a design may give its instances "
                  f"(`min_memory_mb`): {cls.min_memory_mb} MB.", "",
                  f"Run length (`min_measured_s`): at least {cls.min_measured_s:g} s of measured work per run, "
                  f"counted as " + (" else ".join(f"`{m}`" for m in cls.timed_metrics) + " (its own timing)"
                                    if cls.timed_metrics else "the seconds its run took (`workload_s`)")
                  + (f"; raise `{cls.length_param}` to make runs longer" if cls.length_param
                     else "; no parameter makes a run longer") + f". Why: {cls.min_measured_why}.", ""]
        parts += ["| parameter | default | allowed |", "|---|---|---|"]
        for key, default in cls.defaults.items():
            spec = cls.schema.get(key)
            allowed = spec.describe() if spec is not None else "a scalar (no schema)"
            parts.append(f"| `{key}` | `{default!r}` | {_escape_cell(allowed)} |")
        if not cls.defaults:
            parts.append("| (none) | | |")
        metrics = _metric_literals(src, cls.__name__)
        where = "its class" if _metric_literals(src, cls.__name__) and any(
            isinstance(n, ast.ClassDef) and n.name == cls.__name__ and "Measurement(" in ast.unparse(n)
            for n in ast.parse(src).body) else f"its module `{cls.__module__}`"
        parts += ["", (f"Metrics named in {where}: " + ", ".join(f"`{m}`" for m in metrics) + "."
                       if metrics else "Its metric names are built at run time: see the docstring below."), ""]
        doc = inspect.getdoc(cls) or ""
        mdoc = inspect.getdoc(module) or ""
        text = "\n\n".join(t for t in (mdoc, doc) if t)
        if text:
            parts += ['??? note "From the docstrings"', ""]
            parts += ["    " + line if line else "" for line in rst_to_md(text).splitlines()]
            parts.append("")
    return "\n".join(parts)


# -- backends ------------------------------------------------------------------------------------

def backends() -> str:
    from labkit.backends import REGISTRY, backend_class
    from labkit.backends.needs import NEEDS

    needs = {n.backend: n for n in NEEDS}
    parts = ["| backend | class | pip extra | options |", "|---|---|---|---|"]
    classes = {}
    for name, (module, cls_name, extra) in REGISTRY.items():
        cls = backend_class(name)
        classes[name] = cls
        opts = ", ".join(f"`{o}`" for o in cls.OPTIONS) or "(none)"
        parts.append(f"| [`{name}`](#{name}) | `{module}.{cls_name}` | "
                     f"{f'`labkit[{extra}]`' if extra else '(base)'} | {opts} |")
    parts.append("")
    for name, cls in classes.items():
        parts += [f"## `{name}` {{#{name}}}", ""]
        need = needs.get(name)
        if need is not None:
            parts += [f"**What it needs from the host** (as a user who is not root; root has it): {need.host}.", "",
                      f"**How to get it:** {need.fix}", ""]
        else:
            parts += ["What it needs from the host: see its docstring below (not in "
                      "`labkit.backends.needs.NEEDS`, so `labkit doctor` does not check it).", ""]
        mdoc = inspect.getdoc(importlib.import_module(cls.__module__)) or ""
        if mdoc:
            parts += ['??? note "From the docstring"', ""]
            parts += ["    " + line if line else "" for line in rst_to_md(mdoc).splitlines()]
            parts.append("")
    return "\n".join(parts)


# -- the design file -----------------------------------------------------------------------------

#: what each key of a design file means; every key of labkit.design's key sets must be here
DESIGN_KEY_DOCS = {
    "factors": "mapping of factor name to its list of levels (required). The first level of a two-level "
               "factor is its low (-1) level. Host factors: `vcpus`, `memory_mb`, `affinity`, `count`; "
               "also `noise`, `network`, `link`, `nics`, `platform`, and any parameter of the workload",
    "replications": "runs per configuration (default 1), or a mapping for adaptive replication "
                    "(keys below)",
    "seed": "seed of the random run order; drawn, stored and reported when absent",
    "name": "the design's name (default `design`), shown by `labkit show` and in reports",
    "description": "free text, shown with the design",
    "fraction": "a fractional factorial: `{generators: [\"D=ABC\"]}` or `{p: 1}`, optional `fold_over`",
    "blocks": "blocking: `{by: replicate | host | day | factor, count: N, factor: NAME, confound: [...]}`",
    "treatment_checks": "`false` turns off the per-run check that each treatment took (docs: treatments)",
    "workload": "the workload `labkit run` runs when no `--workload` is given: a name, or "
                "`{name: NAME, params: {...}}` checked by the workload's schema; `--workload` wins over it",
    "runs_per_instance": "k runs of a configuration on the same instances (default 1: fresh instances per run)",
    "telemetry": "seconds between telemetry samples, or `off` (default 1.0)",
    "exclusive": "`true`: refuse to run beside another campaign on this host (default: warn)",
    "quarantine": "`true`: run the runs flagged suspect once more at the end",
    "thresholds": "when a run is flagged suspect (keys below)",
    "practical": "the smallest effect that matters: a fraction of the response's mean (0.05 = 5 %) or "
                 "`{share_of_variation: P}` (percent)",
    "family": "the multiple-testing correction over the terms of one analysis: `holm` (default), "
              "`bonferroni`, `bh` or `none`",
}
FRACTION_KEY_DOCS = {"generators": "defining words such as `D=ABC`",
                     "p": "the number of generators, taken from the minimum-aberration table",
                     "fold_over": "`true` (all signs) or a factor name"}
BLOCK_KEY_DOCS = {"by": "`replicate`, `host`, `day` or `factor`", "count": "number of blocks",
                  "factor": "with `by: factor`: the hard-to-change factor, one block per level",
                  "confound": "interactions confounded with blocks, e.g. `[\"ABCD\"]`"}
ADAPTIVE_KEY_DOCS = {"target_ci": "the 95 % CI half-width to reach, relative to the mean (0.02 = ±2 %)",
                     "min": "runs of every configuration before the first round (default 3)",
                     "max": "the most runs of a configuration",
                     "relative": "whether `target_ci` is relative to the mean",
                     "confidence": "the interval's confidence level",
                     "metric": "the metric whose interval is watched",
                     "batch": "runs added to a configuration per round"}


def _key_table(keys, docs: dict, where: str) -> list[str]:
    missing = sorted(set(keys) - set(docs))
    stale = sorted(set(docs) - set(keys))
    if missing or stale:
        raise RuntimeError(f"docs/gen/reference.py: {where}: keys of the code without a description "
                           f"{missing}, described keys the code does not have {stale}")
    return ["| key | meaning |", "|---|---|", *(f"| `{k}` | {docs[k]} |" for k in sorted(keys)), ""]


def design_keys() -> str:
    from labkit import design
    from labkit.core.instance import HOST_FACTORS, InstanceSpec
    from labkit.design.noise_kinds import NOISE_KINDS
    from labkit.design.options import DEFAULT_INTERVAL, DEFAULT_THRESHOLDS, MAX_INTERVAL, MIN_INTERVAL

    spec = InstanceSpec()
    parts = ["### Top-level keys", "", *_key_table(design.DESIGN_KEYS, DESIGN_KEY_DOCS, "DESIGN_KEYS"),
             "### `fraction:`", "", *_key_table(design.FRACTION_KEYS, FRACTION_KEY_DOCS, "FRACTION_KEYS"),
             "### `blocks:`", "", *_key_table(design.BLOCK_KEYS, BLOCK_KEY_DOCS, "BLOCK_KEYS"),
             f"`by:` one of {', '.join(f'`{b}`' for b in design.BLOCK_BY)}.", "",
             "### `replications:` as a mapping (adaptive)", "",
             *_key_table(design.ADAPTIVE_KEYS, ADAPTIVE_KEY_DOCS, "ADAPTIVE_KEYS"),
             "### `thresholds:` (defaults)", "", "| key | default |", "|---|---|",
             *(f"| `{k}` | `{v!r}` |" for k, v in DEFAULT_THRESHOLDS.items()), "",
             f"`telemetry:` from {MIN_INTERVAL} to {MAX_INTERVAL} seconds, default {DEFAULT_INTERVAL}.", "",
             "### Host factors and their defaults", "",
             "A host factor the design does not vary takes this value for every run:", "",
             "| factor | default when not varied |", "|---|---|",
             *(f"| `{k}` | `{getattr(spec, k)!r}` |" for k in HOST_FACTORS), "",
             f"`noise` levels: {', '.join(f'`{k}`' for k in NOISE_KINDS)}.", "",
             "### Limits", "", "| limit | value |", "|---|---|",
             *(f"| {k} | {v:,} |" for k, v in design.LIMITS.items()), ""]
    return "\n".join(parts)


# -- the seed studies ----------------------------------------------------------------------------

def seed_table() -> str:
    from labkit.studies.manifest import counts_table, load_additions, load_manifest, table
    items = load_manifest()
    adds = [f"- seed {a['seed']}: {a['name']} ({', '.join(f'`{c}`' for c in a['campaigns'])})"
            + (f"; {a['note']}" if a["note"] else "") for a in load_additions()]
    return "\n".join([counts_table(items), "", table(items), "",
                      *(["labkit's additions, campaigns with no counterpart in a seed (they have no status):", "",
                         *adds] if adds else [])])


def seed_statuses() -> str:
    from labkit.studies.manifest import status_docs
    return status_docs()


GENERATORS = {"cli": cli, "workloads": workloads, "backends": backends, "design-keys": design_keys,
              "seed-table": seed_table, "seed-statuses": seed_statuses}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="print a generated reference section")
    ap.add_argument("name", choices=sorted(GENERATORS))
    print(GENERATORS[ap.parse_args(argv).name]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
