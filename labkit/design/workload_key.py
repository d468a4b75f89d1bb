"""The ``workload:`` key of a design file: the workload its runs measure, when the file names one.

A design says what is varied; the workload may be given beside it (``labkit run design.yaml
--workload NAME``) or named in the file, by name alone or with parameters for the whole campaign::

    workload: nqueens
    workload: {name: stream, params: {array_mb: 64, ntimes: 5}}

The name must be one of :data:`labkit.workloads.REGISTRY` (a misspelt one gets the closest) and
the parameters must pass that workload's own schema (the error names the parameter and what the
schema allows). ``labkit run`` runs the design's workload when no ``--workload`` is given, and the
command line wins when both are (it says so when they differ). The key is left out of the
design's digest: the campaign compares its workload and parameters on a resume itself.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, did_you_mean

#: the keys of ``workload:`` written as a mapping
WORKLOAD_KEYS = ("name", "params")
#: the mapping form, as the errors show it
EXAMPLE = "{name: nqueens, params: {board: 12}}"


def check_workload_key(value: Any) -> dict:
    """``value`` of a design's ``workload:`` key as ``{"name": NAME, "params": {...}}`` (the given
    parameters in their canonical form), or ConfigError saying what is wrong: a name not in the
    registry (with the list and a did-you-mean), a mapping with other keys than :data:`WORKLOAD_KEYS`,
    a parameter the workload does not have or a value its schema refuses. A parameter the workload
    requires may be left to ``--param``: the workload itself says it is missing when it is made."""
    from ..workloads import workload_class

    if isinstance(value, dict):
        unknown = sorted(str(k)[:40] for k in value if k not in WORKLOAD_KEYS)
        if unknown:
            raise ConfigError(
                f"'workload': unknown key(s) {', '.join(unknown)}"
                f"{did_you_mean(unknown[0], WORKLOAD_KEYS, n=1)}; "
                f"allowed: {', '.join(WORKLOAD_KEYS)} (e.g. {EXAMPLE})"
            )
        if "name" not in value:
            raise ConfigError(f"'workload': a mapping needs 'name' (e.g. {EXAMPLE})")
        name, params = value["name"], value.get("params") or {}
        if not isinstance(params, dict) or any(not isinstance(k, str) for k in params):
            got = (
                "a mapping with a key that is not a name"
                if isinstance(params, dict)
                else type(params).__name__
            )
            raise ConfigError(f"'workload': 'params' must be a mapping of parameter name to value, got {got}")
    else:
        name, params = value, {}
    try:
        cls = workload_class(name)
        unknown = sorted(set(params) - set(cls.defaults))
        if unknown:
            raise ConfigError(
                f"workload {name!r}: unknown parameter(s) {', '.join(unknown)[:400]}"
                f"{did_you_mean(unknown[0], list(cls.defaults), n=1)}; "
                f"allowed: {', '.join(sorted(cls.defaults)) or '(none)'}"
            )
        # the workload's own schema: its error names the parameter and what is allowed
        checked = {k: cls.check_param(k, v) for k, v in params.items()}
    except ConfigError as exc:
        raise ConfigError(f"'workload': {exc}") from None
    return {"name": name, "params": checked}
