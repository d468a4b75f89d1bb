"""The sweeps the seed studies describe, from ``data/reference/sweeps.csv``, and their levels here.

Each row of the file names a seed, an experiment (``dedicated``, ``pingpong``, ``bonnie`` ...), a
factor (``threads``, ``message_bytes``, ``files`` ...), the levels the seed's text states and where
it states them. :func:`paper_sweep` reads one row as a :class:`Sweep`; :func:`sweep_levels` turns a
notebook parameter (``"paper"``, a list, or None) into the levels to run on this machine: the
paper's levels cut to what the machine can run (e.g. threads up to its CPUs), and one sentence
that says which of the paper's levels were left out and why.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ..core import paths
from ..errors import ConfigError

COLUMNS = ("seed", "experiment", "factor", "levels", "unit", "where", "stated")
#: the value of a notebook parameter that asks for the paper's levels
PAPER = "paper"


@dataclass(frozen=True)
class Sweep:
    """One sweep a seed describes: ``levels`` as the seed states them (empty: it gives none)."""

    seed: str
    experiment: str
    factor: str
    levels: tuple[int, ...]
    unit: str
    where: str
    stated: str

    def source(self) -> str:
        """Its citation: seed, where and the seed's words."""
        return f"seed {self.seed}, {self.where}: {self.stated}"


def reference_file(path: str | Path | None = None) -> Path:
    """``sweeps.csv`` of the reference data that ships with labkit (``data/reference/`` in the
    repository), or ``path``."""
    return Path(path) if path is not None else paths.reference_dir() / "sweeps.csv"


def load_sweeps(path: str | Path | None = None) -> list[Sweep]:
    """Every sweep of the file (see the module docstring); ConfigError naming the file and row
    when a column is missing or a level is not a positive integer."""
    path = reference_file(path)
    if not path.is_file():
        raise ConfigError(f"sweeps file {path} not found")
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    if rows and (missing := sorted(set(COLUMNS) - set(rows[0]))):
        raise ConfigError(f"{path}: columns {missing} missing")
    out = []
    for i, r in enumerate(rows, start=1):
        try:
            levels = tuple(int(x) for x in (r["levels"] or "").split())
        except ValueError:
            raise ConfigError(
                f"{path}, row {i}: levels {r['levels']!r} must be integers separated by spaces"
            ) from None
        if any(v < 1 for v in levels):
            raise ConfigError(f"{path}, row {i}: levels {r['levels']!r} must be positive")
        out.append(Sweep(r["seed"], r["experiment"], r["factor"], levels, r["unit"], r["where"], r["stated"]))
    return out


def paper_sweep(seed: str, experiment: str, factor: str, *, path: str | Path | None = None) -> Sweep:
    """The sweep of ``factor`` in seed ``seed``'s ``experiment``; ConfigError listing the known ones."""
    sweeps = load_sweeps(path)
    for s in sweeps:
        if (s.seed, s.experiment, s.factor) == (seed, experiment, factor):
            return s
    known = ", ".join(f"{s.seed}/{s.experiment}/{s.factor}" for s in sweeps)
    raise ConfigError(f"no sweep {seed}/{experiment}/{factor} in {reference_file(path)}; known: {known}")


def sweep_levels(
    value: object,
    sweep: Sweep,
    *,
    limit: int | None = None,
    what: str = "the machine",
    name: str = "parameter",
) -> tuple[list[int] | None, str]:
    """``(levels, note)`` for a notebook parameter ``name`` of value ``value``:

    * None: ``(None, "")``, the notebook's own default (no sweep);
    * ``"paper"``: the sweep's levels up to ``limit`` (what ``what`` allows, e.g. this host's
      CPUs); ConfigError when the seed gives no levels or none fits;
    * a list of positive integers: those levels (ConfigError above ``limit``).

    ``note`` says what was run beside what the seed did (with its source), and which of the
    paper's levels were left out."""
    if value is None:
        return None, ""
    paper = list(sweep.levels)
    if value == PAPER:
        if not paper:
            raise ConfigError(
                f"{name}='paper': the seed gives no levels of {sweep.factor} ({sweep.source()}); pass a list"
            )
        levels = [v for v in paper if limit is None or v <= limit]
        if not levels:
            raise ConfigError(
                f"{name}='paper': none of the seed's levels {paper} fits {what} (at most {limit})"
            )
    elif isinstance(value, (list, tuple)) and value:
        levels = []
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name}: level {v!r} is not allowed; use positive integers")
            if limit is not None and v > limit:
                raise ConfigError(f"{name}: level {v} is above what {what} allows ({limit})")
            if v not in levels:
                levels.append(v)
    else:
        raise ConfigError(
            f"{name}: {value!r} is not allowed; use None, {PAPER!r} or a list of positive integers"
        )
    left = [v for v in paper if v not in levels]
    note = (
        f"{sweep.factor}: {', '.join(map(str, levels))} {sweep.unit} here; the paper: "
        + (", ".join(map(str, paper)) if paper else "no levels in the seed text")
        + f" ({sweep.source()})"
    )
    if left:
        cut = [v for v in left if limit is not None and v > limit]
        note += f"; not run here: {', '.join(map(str, left))}"
        if cut:
            note += (
                f" (above what {what} allows, {limit})"
                if cut == left
                else f" ({', '.join(map(str, cut))} above what {what} allows, {limit})"
            )
    return levels, note
