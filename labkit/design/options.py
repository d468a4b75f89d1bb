"""How a design's runs are carried out: instance reuse, telemetry and the quiet-host guard.

These keys of a design file (all optional) say how its runs are executed, beside what is run::

    runs_per_instance: 3      # k runs of a configuration on the same instances (default 1: fresh per run)
    telemetry: 1.0            # seconds between samples during each run, or off (default 1.0)
    exclusive: true           # refuse to run beside another campaign on this host (default false: warn)
    quarantine: true          # run again, once, at the end, the runs flagged suspect (default false)
    thresholds:               # when a run is flagged suspect (defaults shown)
      other_cpu_pct: 10       #   processes outside the campaign used more than 10 % of a CPU
      steal_pct: 5            #   the host's or an instance's steal time above 5 %
      pinned_throttled: true  #   a pinned instance was CFS-throttled

Every number that commits time is bounded: ``telemetry`` from :data:`MIN_INTERVAL` to
:data:`MAX_INTERVAL` seconds (the campaign waits on the sampler's first interval before its first
run), ``runs_per_instance`` up to :data:`MAX_RUNS_PER_INSTANCE`, adaptive replication's ``max``
up to :data:`labkit.design.structure.MAX_ADAPTIVE` runs per configuration (and the worst case is
logged before the adaptive rounds start, :func:`labkit.run.adaptive.run_adaptive`), and
``quarantine`` runs each suspect run again at most :data:`QUARANTINE_RERUNS` time(s): a re-run
flagged suspect again is kept as it is, so quarantine adds at most as many runs as the plan has.

``runs_per_instance`` changes the plan (a restricted randomization: the order of the boots is
random, a boot's k runs follow one another; :meth:`labkit.design.Design.plan`), so it is part of the
design's digest; the others are settings of the execution that a resume may change. A
:class:`~labkit.run.campaign.Campaign` argument of the same name overrides the design's value.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError

#: the keys of this module in a design file
RUN_KEYS = ("runs_per_instance", "telemetry", "exclusive", "quarantine", "thresholds")
#: keys that do not change the plan: left out of the design's digest
EXECUTION_KEYS = ("telemetry", "exclusive", "quarantine", "thresholds")
#: the default sampling interval (seconds)
DEFAULT_INTERVAL = 1.0
#: the shortest interval accepted (seconds)
MIN_INTERVAL = 0.05
#: the longest interval accepted (seconds): a campaign waits on its host sampler's first interval
#: before its first run, so a longer one commits that much dead time (issue 47: 31 years accepted)
MAX_INTERVAL = 60.0
#: the most runs one boot may hold
MAX_RUNS_PER_INSTANCE = 10_000
#: how many times quarantine runs a suspect run again (not a setting: a re-run flagged suspect again
#: stays as it is; :func:`labkit.store.forget.forget_suspect`)
QUARANTINE_RERUNS = 1
#: when a run is flagged suspect (:mod:`labkit.run.guard`)
DEFAULT_THRESHOLDS = {"other_cpu_pct": 10.0, "steal_pct": 5.0, "pinned_throttled": True}


def check_interval(value: Any, where: str = "telemetry") -> float | None:
    """A telemetry setting as an interval in seconds (from :data:`MIN_INTERVAL` to
    :data:`MAX_INTERVAL`), or None for off (None, 0, False, ``"off"``); ``"on"`` or True is
    :data:`DEFAULT_INTERVAL`. ConfigError naming ``where`` and the allowed range otherwise."""
    word = value.strip().lower() if isinstance(value, str) else None
    if value is None or value is False or word == "off":
        return None
    if value is True or word == "on":
        return DEFAULT_INTERVAL
    if isinstance(value, (int, float)) and value == 0:
        return None
    if isinstance(value, (int, float)) and math.isfinite(value) and MIN_INTERVAL <= value <= MAX_INTERVAL:
        return float(value)
    raise ConfigError(
        f"{where}: expected 'off', 'on' or an interval in seconds from {MIN_INTERVAL:g} to "
        f"{MAX_INTERVAL:g} (e.g. 1.0), got {value!r}"
    )


def check_runs_per_instance(value: Any, where: str) -> int:
    """``value`` as a whole number of runs per boot (>= 1; 3.0 is 3), else ConfigError."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUNS_PER_INSTANCE:
        raise ConfigError(
            f"{where}: 'runs_per_instance' must be a whole number from 1 to "
            f"{MAX_RUNS_PER_INSTANCE:,} (runs of a configuration on the same instances), "
            f"got {value!r}"
        )
    return value


def check_flag(value: Any, key: str, where: str) -> bool | None:
    """``value`` of a true/false option (None: not given), else ConfigError."""
    if value is None or isinstance(value, bool):
        return value
    raise ConfigError(f"{where}: {key!r} must be true or false, got {value!r}")


def check_thresholds(value: Any, where: str) -> dict | None:
    """The ``thresholds`` mapping completed with :data:`DEFAULT_THRESHOLDS` (None: not given)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError(
            f"{where}: 'thresholds' must be a mapping such as {{other_cpu_pct: 10, steal_pct: 5}}"
        )
    unknown = sorted(str(k) for k in value if k not in DEFAULT_THRESHOLDS)
    if unknown:
        raise ConfigError(
            f"{where}: thresholds: unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(DEFAULT_THRESHOLDS)}"
        )
    out = dict(DEFAULT_THRESHOLDS)
    for key in ("other_cpu_pct", "steal_pct"):
        if key in value:
            v = value[key]
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not math.isfinite(v)
                or not 0 <= v <= 100_000
            ):
                raise ConfigError(f"{where}: thresholds.{key} must be a number of per cent >= 0, got {v!r}")
            out[key] = float(v)
    if "pinned_throttled" in value:
        flag = check_flag(value["pinned_throttled"], "thresholds.pinned_throttled", where)
        out["pinned_throttled"] = True if flag is None else flag
    return out


def check_reuse(design: Any) -> None:
    """ConfigError when ``design.runs_per_instance`` > 1 cannot be honoured by its structure:
    more runs per boot than replicates, adaptive replication, or blocks a boot would straddle
    (a boot's runs must fall in one block: blocks of whole replicates, each holding a multiple
    of ``runs_per_instance`` replicates)."""
    k, src = design.runs_per_instance, design.source
    if k == 1:
        return
    if design.adaptive is not None:
        raise ConfigError(
            f"{src}: runs_per_instance > 1 cannot be combined with adaptive replication "
            "(replications: {target_ci: ...}); give a fixed number of replications"
        )
    if k > design.replications:
        raise ConfigError(
            f"{src}: runs_per_instance ({k}) is more than replications ({design.replications}): "
            "a boot holds replicates of one configuration; use runs_per_instance <= replications"
        )
    b = design.blocks
    if b is None:
        return
    if b["by"] == "factor" or b["count"] > design.replications:
        what = "by factor" if b["by"] == "factor" else "splitting replicates"
        raise ConfigError(
            f"{src}: runs_per_instance > 1 with blocks {what}: a boot's {k} runs (k replicates "
            "of one configuration) would fall in different blocks; use blocks of whole replicates"
        )
    per_block = design.replications // b["count"]
    if per_block % k:
        raise ConfigError(
            f"{src}: blocks: each of the {b['count']} blocks holds {per_block} replicate(s), not a "
            f"multiple of runs_per_instance ({k}): a boot would straddle two blocks"
        )
