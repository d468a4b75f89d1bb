"""Experimental designs: factors and levels, full factorials, replications, random run order.

A design is declared as a dict or YAML::

    factors:
      vcpus: [1, 2]
      memory_mb: [256, 512]
      affinity: [floating, pinned]     # first level is the low (-1) level
      count: [1, 2]
    replications: 3
    seed: 2017

``Design.plan()`` lists every (configuration, replicate) once, in an order
shuffled with ``seed``: the same seed always gives the same order. A design
without ``seed`` draws one (``seed_drawn`` is then True): store it, or the
plan cannot be repeated.

Optional structure (all factors two-level where a fraction or confounding is used)::

    fraction: {generators: ["D=ABC"]}     # or {p: 1}: the minimum-aberration table;
                                          # fold_over: true (all signs) or a factor name
    blocks: {by: day, count: 2}           # by: replicate | host | day | factor
    blocks: {by: factor, factor: reboot}  # a hard-to-change factor: one block per level
    replications: {target_ci: 0.02, min: 3, max: 20}   # adaptive (labkit.run.adaptive)
    runs_per_instance: 3                  # k runs per boot of a configuration's instances

With ``runs_per_instance: k`` (default 1: every run provisions fresh instances) the plan is a
restricted randomization (a split-plot): the boots (one provisioning of a configuration's
instances, holding k consecutive replicates of it) run in random order, and the k runs of a boot
run back to back on the same instances (``Run.boot``; the last boot of a configuration holds
fewer runs when k does not divide ``replications``). ``telemetry``, ``exclusive``, ``quarantine``
and ``thresholds`` say how runs are watched (:mod:`labkit.design.options`); ``practical`` and
``family`` the rules every conclusion is held to (:mod:`labkit.design.decision`, docs/conclusions.md).
``treatment_checks: false`` turns off the check, on each run, that its treatments took (the
allowed CPUs, limits, KSM merges, neighbours' CPU read during the run: :mod:`labkit.run.treatments`).
``workload: NAME`` (or ``{name: NAME, params: {...}}``) names the workload ``labkit run`` runs when
no ``--workload`` is given (:mod:`labkit.design.workload_key`).

Letters A, B, C, ... name the factors in the order they are declared (I is
skipped). ``describe()`` (and ``str(design)``) shows the defining relation,
resolution, alias structure and what is confounded with blocks. With
``blocks`` the plan runs block after block (``Run.block``, 1-based), in a
random order within each block; ``count`` blocks are whole replicates when
``count`` divides ``replications``, else each replicate is split into
``count / replications`` (a power of two) blocks by confounding interactions
(``confound: ["ABCD"]``, or chosen by :func:`labkit.design.fractional.block_generators`).

Every input is bounded (:data:`LIMITS`) and every bad one raises ConfigError
naming the file and the key: at most 16 factors of at most 64 levels, 10,000
replications and 100,000 runs; a level is one value (string, number, boolean,
null) or a flat list of them.

This package only gathers the public names; each lives in the module named for what it owns:
:mod:`~labkit.design.design` (the :class:`Design` class and the design file's keys),
:mod:`~labkit.design.factors` (:class:`Factor`, what a level may be, :data:`LIMITS`),
:mod:`~labkit.design.runs` (:class:`Run`, :func:`run_id`), :mod:`~labkit.design.workload_check`
(a design against its workload), :mod:`~labkit.design.structure` (fractions, blocks, adaptive
replication), :mod:`~labkit.design.fractional` (their arithmetic), :mod:`~labkit.design.options`
(how runs are watched), :mod:`~labkit.design.decision` (the rules of conclusions) and
:mod:`~labkit.design.problems` (every problem of a design file, with its line).
"""

from __future__ import annotations

from .design import ADAPTIVE_KEYS, BLOCK_BY, BLOCK_KEYS, DESIGN_KEYS, FRACTION_KEYS, Design
from .factors import HOST_MAX, LIMITS, NAME_CHARS, Factor, check_level
from .problems import DesignProblems
from .runs import Run, run_id
from .workload_check import OTHER_FACTORS, WorkloadSchema, workload_problems

__all__ = [
    "ADAPTIVE_KEYS",
    "BLOCK_BY",
    "BLOCK_KEYS",
    "DESIGN_KEYS",
    "FRACTION_KEYS",
    "HOST_MAX",
    "LIMITS",
    "NAME_CHARS",
    "OTHER_FACTORS",
    "Design",
    "DesignProblems",
    "Factor",
    "Run",
    "WorkloadSchema",
    "check_level",
    "run_id",
    "workload_problems",
]
