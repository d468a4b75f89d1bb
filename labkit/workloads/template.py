"""Command templates: ``{name}`` of a declared parameter is replaced, every other brace is literal.

A workload's command line (``command``'s ``argv``, ``npb``'s ``mpirun``, ``parsec``'s
``args``) may name run values as ``{vcpus}`` or ``{threads}``. Only those exact names are
substituted; any other brace text is left as it is, so shell and tool syntax needs no
escaping: ``find . -exec cat {} \\;``, ``awk '{print $1}'``, ``${HOME}``, ``{unknown}``.
``{{`` and ``}}`` still stand for ``{`` and ``}`` (what Python's ``str.format`` templates
written before this rule used), so ``{{threads}}`` is the literal text ``{threads}``.

>>> fill("awk '{print $1}' -v n={threads} {{x}}", {"threads": 4})
"awk '{print $1}' -v n=4 {x}"
"""

from __future__ import annotations

import re


def fill(template: str, values: dict) -> str:
    """``template`` with ``{name}`` replaced by ``values[name]`` for each name in ``values``
    and ``{{``/``}}`` by ``{``/``}``; every other character is kept (see the module docstring)."""
    names = "|".join(re.escape(str(n)) for n in values)
    pattern = r"\{\{|\}\}" + (rf"|\{{({names})\}}" if names else "")
    return re.sub(pattern, lambda m: str(values[m.group(1)]) if m.group(1) else m.group(0)[0], str(template))
