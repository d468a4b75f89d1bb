"""Every problem of a design file in one error, each with where it is (factor, level, line).

A design with two bad levels used to be refused one level per attempt. Validation now collects a
:class:`Problem` per bad key, factor or level and raises one :class:`DesignProblems` (a
:class:`~labkit.errors.ConfigError`) naming them all; with the file's line numbers when the design
was read from YAML (:func:`yaml_lines`)::

    d.yaml: 2 problems:
      factor 'affinity': level 'pinnd' not allowed; use one of floating, pinned (did you mean 'pinned'?) (line 4)
      factor 'noise': level(s) ['cpuu'] not allowed; use none, cpu, memory, io, network (did you mean 'cpu'?) (line 6)

One problem alone reads as before: ``d.yaml: <problem> (line N)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

#: where a line number is known: a top-level key ``(key,)``, a factor ``("factors", name)``, a level
#: ``("factors", name, index)`` (0-based)
Where = tuple


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a design: ``text`` says what (naming the key, factor and level) and
    ``where`` locates it for the line number (see :data:`Where`; ``()`` when not one place)."""

    text: str
    where: Where = ()


class DesignProblems(ConfigError):
    """Every :class:`Problem` of a design at once; ``problems`` holds them, ``source`` the file."""

    def __init__(self, source: str | None, problems: Iterable[Problem], lines: dict | None = None):
        self.source = source
        self.problems = list(problems)
        self.lines = dict(lines or {})
        shown = [self.located(p) for p in self.problems]
        prefix = f"{source}: " if source else ""
        if len(shown) == 1:
            text = prefix + shown[0]
        else:
            text = f"{prefix}{len(shown)} problems:\n" + "\n".join("  " + s for s in shown)
        super().__init__(text)

    def located(self, problem: Problem) -> str:
        """``problem``'s text with its line, the nearest known one (a level's, else its factor's)."""
        where = problem.where
        while where:
            if where in self.lines:
                return f"{problem.text} (line {self.lines[where]})"
            where = where[:-1]
        return problem.text


def raise_problems(source: str | None, problems: list[Problem], lines: dict | None = None) -> None:
    """Raise :class:`DesignProblems` when ``problems`` is not empty."""
    if problems:
        raise DesignProblems(source, problems, lines)


def problems_of(exc: ConfigError, where: Where = ()) -> list[Problem]:
    """The problems an error carries: its own list (a :class:`DesignProblems`), else one problem
    with its message at ``where``."""
    if isinstance(exc, DesignProblems):
        return list(exc.problems)
    return [Problem(str(exc), where)]


def yaml_lines(path: str | Path) -> dict:
    """1-based line numbers of a design file's top-level keys, factors and levels, keyed as
    :data:`Where`; {} when the file cannot be composed (its loader said why already). Call it
    only on a file :func:`labkit.core.yamlsafe.load_yaml` read: composing does not expand
    aliases, so it stays within the size that loader allowed."""
    import yaml

    from ..core.yamlsafe import MAX_BYTES

    try:
        with open(path, "rb") as fh:
            node = yaml.compose(fh.read(MAX_BYTES + 1).decode("utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return {}
    lines: dict = {}
    if not isinstance(node, yaml.MappingNode):
        return lines
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        lines[(key.value,)] = key.start_mark.line + 1
        if key.value != "factors" or not isinstance(value, yaml.MappingNode):
            continue
        for fkey, levels in value.value:
            if not isinstance(fkey, yaml.ScalarNode):
                continue
            lines[("factors", fkey.value)] = fkey.start_mark.line + 1
            if isinstance(levels, yaml.SequenceNode):
                for i, level in enumerate(levels.value):
                    lines[("factors", fkey.value, i)] = level.start_mark.line + 1
    return lines
