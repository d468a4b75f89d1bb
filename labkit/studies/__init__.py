"""Ready-made designs of the seed studies, with levels scaled to the host they run on, and the
helpers their notebooks call.

This package only gathers the public names the notebooks import from it
(``from labkit.studies import affinity_design, overhead_benchmarks``); each lives in the module
named for what it owns: :mod:`~labkit.studies.affinity` (study 002, notebook 01),
:mod:`~labkit.studies.overhead` (study 004, notebook 02), :mod:`~labkit.studies.platform_plans`
(every platform in one plan) and :mod:`~labkit.studies.stage_times` (the pipeline's timed
stages). The other studies are imported from their own modules: :mod:`~labkit.studies.seeds`,
:mod:`~labkit.studies.public_cloud`, :mod:`~labkit.studies.disk`, :mod:`~labkit.studies.verdicts`,
:mod:`~labkit.studies.pipeline_verdicts`, :mod:`~labkit.studies.interconnect_verdicts`, :mod:`~labkit.studies.sweeps`,
:mod:`~labkit.studies.manifest`.
"""

from __future__ import annotations

from .affinity import (
    AFFINITY_PAPER_TERMS,
    AFFINITY_WORKLOADS,
    affinity_best_times,
    affinity_better_level,
    affinity_campaign_id,
    affinity_count_differences,
    affinity_design,
    affinity_levels,
    affinity_reference,
    affinity_workload,
)
from .overhead import (
    OVERHEAD_LOWER_IS_BETTER,
    OVERHEAD_VARIANT,
    load_platform_campaigns,
    overhead_benchmarks,
    overhead_design,
    overhead_paper_claims,
    overhead_testbed,
)
from .platform_plans import platform_design
from .stage_times import untimed_share, with_stages_total

__all__ = [
    "AFFINITY_PAPER_TERMS",
    "AFFINITY_WORKLOADS",
    "OVERHEAD_LOWER_IS_BETTER",
    "OVERHEAD_VARIANT",
    "affinity_best_times",
    "affinity_better_level",
    "affinity_campaign_id",
    "affinity_count_differences",
    "affinity_design",
    "affinity_levels",
    "affinity_reference",
    "affinity_workload",
    "load_platform_campaigns",
    "overhead_benchmarks",
    "overhead_design",
    "overhead_paper_claims",
    "overhead_testbed",
    "platform_design",
    "untimed_share",
    "with_stages_total",
]
