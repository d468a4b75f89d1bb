"""The structure of a :class:`labkit.design.Design` beyond a full factorial: fractions,
blocks and adaptive replication (validation, plan order, alias tables, text).

Kept apart from design.py so that the plain factorial stays small; the arithmetic of
two-level fractions and confounding lives in :mod:`labkit.design.fractional`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError
from . import fractional as fr

if TYPE_CHECKING:
    import pandas as pd

    from .design import Design


def _where(design) -> str:
    return design.source


def _two_level(design, what: str) -> None:
    multi = [f.name for f in design.factors if not f.two_level]
    if multi:
        raise ConfigError(
            f"{_where(design)}: {what} needs two-level factors; {', '.join(multi)} have more levels"
        )


def _fraction(design: Design) -> dict:
    """The design's ``fraction`` mapping; ConfigError for a full factorial."""
    if design.fraction is None:
        raise ConfigError(f"{_where(design)}: a full factorial has no fraction")
    return design.fraction


def _blocks(design: Design) -> dict:
    """The design's ``blocks`` mapping; ConfigError for a design without blocks."""
    if design.blocks is None:
        raise ConfigError(f"{_where(design)}: the design has no blocks")
    return design.blocks


def letters(design: Design) -> dict:
    """Factor name -> letter (A, B, ..., skipping I) in declaration order."""
    return {f.name: fr.LETTERS[j] for j, f in enumerate(design.factors)}


def check_fraction(design: Design, spec: object) -> dict | None:
    """The canonical ``fraction`` mapping (``generators`` in letters, ``fold_over``) or None."""
    if spec is None:
        return None
    src = _where(design)
    if not isinstance(spec, dict):
        raise ConfigError(
            f"{src}: 'fraction' must be a mapping such as {{generators: [\"D=ABC\"]}} or {{p: 1}}"
        )
    unknown = sorted(set(spec) - {"generators", "p", "fold_over"})
    if unknown:
        raise ConfigError(
            f"{src}: fraction: unknown key(s) {', '.join(unknown)}; allowed: generators, p, fold_over"
        )
    _two_level(design, "a fractional design")
    k = len(design.factors)
    if k > fr.MAX_K:
        raise ConfigError(f"{src}: fraction: at most {fr.MAX_K} factors")
    gens, p = spec.get("generators"), spec.get("p")
    try:
        if gens is None:
            if p is None:
                raise ConfigError("give 'generators' (e.g. [\"D=ABC\"]) or 'p'")
            if isinstance(p, bool) or not isinstance(p, int):
                raise ConfigError(f"'p' must be an integer, got {p!r}")
            gens = fr.standard_generators(k, p)
        elif p is not None and isinstance(gens, list) and p != len(gens):
            raise ConfigError(f"'p' = {p} but {len(gens)} generators are given")
        if isinstance(gens, str):
            gens = gens.replace(",", " ").split()
        if not isinstance(gens, list):
            raise ConfigError("'generators' must be a list such as [\"D=ABC\"]")
        table = fr.fractional_design(k, gens)
    except ConfigError as exc:
        raise ConfigError(f"{src}: fraction: {exc} (letters: {_letter_list(design)})") from None
    fold = spec.get("fold_over", False)
    if fold not in (False, True, None):
        names = letters(design)
        if not isinstance(fold, str) or (fold not in names and fold.upper() not in names.values()):
            raise ConfigError(
                f"{src}: fraction: fold_over must be true, false or a factor "
                f"({', '.join(names)}), got {fold!r}"
            )
        fold = names.get(fold, fold.upper() if isinstance(fold, str) else fold)
    return {"generators": table.attrs["generators"], "fold_over": fold or False}


def _letter_list(design) -> str:
    return ", ".join(f"{v}={k}" for k, v in letters(design).items())


def letter_table(design: Design) -> pd.DataFrame:
    """The -1/+1 table of a fractional design in letters, fold-over appended."""
    k = len(design.factors)
    fraction = _fraction(design)
    table = fr.fractional_design(k, fraction["generators"])
    fold = fraction.get("fold_over")
    if fold:
        table = fr.fold_over(table, None if fold is True else fold).drop(columns="fold")
    return table


def design_resolution(design: Design) -> int | None:
    """The resolution of a fractional design; None for a full factorial."""
    if design.fraction is None:
        return None
    return fr.resolution(len(design.factors), design.fraction["generators"])


def named_aliases(design: Design, order: int = 2) -> pd.DataFrame:
    """:func:`labkit.design.fractional.aliases` in factor names (empty for a full factorial)."""
    import pandas as pd

    if design.fraction is None:
        return pd.DataFrame(columns=["term", "aliases", "short"])
    names = {v: k for k, v in letters(design).items()}
    table = fr.aliases(len(design.factors), design.fraction["generators"], order=order)

    def named(chain: str) -> str:
        return " + ".join(":".join(names[c] for c in word) for word in chain.split(" + "))

    return table.assign(
        term=table["term"].map(named), aliases=table["aliases"].map(named), short=table["short"].map(named)
    )


#: the most runs adaptive replication may give one configuration (``replications: {max: ...}``): a
#: ``target_ci`` that is never met runs every configuration this many times (issue 47: 10,000 was
#: accepted, with no word of the time it commits to)
MAX_ADAPTIVE = 1000


def check_adaptive(design: Design, spec: dict | None) -> dict | None:
    """The canonical adaptive-replication mapping (``replications: {target_ci, min, max}``); ``max``
    from ``min`` to :data:`MAX_ADAPTIVE`."""
    if spec is None:
        return None
    src = _where(design)
    unknown = sorted(
        set(spec) - {"target_ci", "max", "relative", "confidence", "metric", "batch", "balanced"}
    )
    if unknown:
        raise ConfigError(
            f"{src}: replications: unknown key(s) {', '.join(unknown)}; allowed: "
            "target_ci, min, max, relative, confidence, metric, batch, balanced"
        )
    t = spec.get("target_ci")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not (math.isfinite(t) and t > 0):
        raise ConfigError(
            f"{src}: replications: target_ci must be a positive number "
            f"(relative half-width, e.g. 0.02 = 2 %), got {t!r}"
        )
    mx = spec.get("max")
    if isinstance(mx, bool) or not isinstance(mx, int) or not design.replications <= mx <= MAX_ADAPTIVE:
        raise ConfigError(
            f"{src}: replications: max must be an integer from min ({design.replications}) to "
            f"{MAX_ADAPTIVE} (runs of one configuration at most, the campaign's worst case: "
            f"configurations x max), got {mx!r}"
        )
    if design.replications < 2:
        raise ConfigError(f"{src}: replications: min must be at least 2 to estimate a CI")
    relative = spec.get("relative", True)
    conf = spec.get("confidence", 0.95)
    if not isinstance(relative, bool):
        raise ConfigError(f"{src}: replications: relative must be true or false")
    if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0.5 <= conf < 1:
        raise ConfigError(f"{src}: replications: confidence must be in [0.5, 1), got {conf!r}")
    metric = spec.get("metric")
    if metric is not None and (not isinstance(metric, str) or not metric or len(metric) > 128):
        raise ConfigError(f"{src}: replications: metric must be a metric name")
    batch = spec.get("batch", 1)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 100:
        raise ConfigError(f"{src}: replications: batch must be an integer from 1 to 100")
    balanced = spec.get("balanced", False)
    if not isinstance(balanced, bool):
        raise ConfigError(f"{src}: replications: balanced must be true or false, got {balanced!r}")
    if design.blocks is not None:
        raise ConfigError(
            f"{src}: adaptive replication and blocks cannot be combined "
            "(added replicates would belong to no block)"
        )
    out = {
        "target_ci": float(t),
        "max": mx,
        "relative": relative,
        "confidence": float(conf),
        "metric": metric,
        "batch": batch,
    }
    if balanced:  # absent when false: a design of before keeps its digest
        out["balanced"] = True
    return out


def check_blocks(design: Design, spec: object) -> dict | None:
    """The canonical ``blocks`` mapping or None."""
    if spec is None:
        return None
    src = _where(design)
    if not isinstance(spec, dict):
        raise ConfigError(f"{src}: 'blocks' must be a mapping such as {{by: day, count: 2}}")
    unknown = sorted(set(spec) - {"by", "count", "factor", "confound"})
    if unknown:
        raise ConfigError(
            f"{src}: blocks: unknown key(s) {', '.join(unknown)}; allowed: by, count, factor, confound"
        )
    by = spec.get("by", "replicate")
    if by not in ("replicate", "host", "day", "factor"):
        raise ConfigError(f"{src}: blocks: by must be one of replicate, host, day, factor; got {by!r}")
    if design.adaptive is not None:
        raise ConfigError(f"{src}: adaptive replication and blocks cannot be combined")
    r = design.replications
    if by == "factor":
        name = spec.get("factor")
        if name not in design.factor_names:
            raise ConfigError(
                f"{src}: blocks: factor must name a factor of the design "
                f"({', '.join(design.factor_names)}), got {name!r}"
            )
        if spec.get("count") is not None or spec.get("confound") is not None:
            raise ConfigError(
                f"{src}: blocks by factor: one block per level and replicate; count and confound do not apply"
            )
        return {"by": by, "factor": name}
    if spec.get("factor") is not None:
        raise ConfigError(f"{src}: blocks: 'factor' is only for by: factor")
    count = spec.get("count", r)
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        raise ConfigError(f"{src}: blocks: count must be an integer >= 2, got {count!r}")
    if count <= r:
        if r % count or spec.get("confound") is not None:
            raise ConfigError(
                f"{src}: blocks: {count} blocks of whole replicates need replications "
                f"({r}) to be a multiple of count; confound applies only when "
                "count exceeds replications"
            )
        return {"by": by, "count": count}
    per = count // r
    if count % r or per & (per - 1):
        raise ConfigError(
            f"{src}: blocks: count ({count}) must be replications ({r}) times a "
            "power of two to split each replicate by confounding"
        )
    _two_level(design, "splitting a replicate into blocks")
    k = len(design.factors)
    gens = design.fraction["generators"] if design.fraction else None
    if design.fraction and design.fraction.get("fold_over"):
        raise ConfigError(
            f"{src}: blocks: a folded-over fraction is blocked by its fold; "
            "use blocks with count <= replications"
        )
    words = spec.get("confound")
    try:
        if words is None:
            words = fr.block_generators(k, gens, per)
        if isinstance(words, str):
            words = words.replace(",", " ").split()
        if not isinstance(words, list) or len(words) != per.bit_length() - 1:
            raise ConfigError(
                f"confound must list {per.bit_length() - 1} word(s) for {per} blocks per replicate"
            )
        if fr.blocked_resolution(k, gens, words) < 3:
            raise ConfigError(f"confound {words} confounds a main effect with blocks")
    except ConfigError as exc:
        raise ConfigError(f"{src}: blocks: {exc} (letters: {_letter_list(design)})") from None
    return {"by": by, "count": count, "confound": [w.strip().upper() for w in words]}


def _design_letters(design):
    """-1/+1 table (letters) of every configuration, for confounding."""
    import pandas as pd

    if design.fraction is not None:
        return letter_table(design)
    coded = design.coded()
    return pd.DataFrame([{fr.LETTERS[j]: row[f.name] for j, f in enumerate(design.factors)} for row in coded])


def block_of_slots(design: Design, slots: Sequence[tuple[int, int]]) -> list[int]:
    """1-based block of each (config, replicate) slot."""
    b, r = _blocks(design), design.replications
    if b["by"] == "factor":
        f = design.factor_names.index(b["factor"])
        levels = design.factors[f].levels
        configs = design.configurations()
        n = len(levels)
        return [(rep - 1) * n + levels.index(configs[c][b["factor"]]) + 1 for c, rep in slots]
    if b["count"] <= r:
        per_block = r // b["count"]
        return [(rep - 1) // per_block + 1 for _, rep in slots]
    per = b["count"] // r
    sub = fr.block_index(_design_letters(design), b["confound"])
    return [(rep - 1) * per + int(sub[c]) + 1 for c, rep in slots]


def block_sequence(
    design: Design, slots: Sequence[tuple[int, int]], rng: random.Random
) -> list[tuple[int, int, int]]:
    """(config, replicate, block) in run order: blocks in order (by factor: the levels of each
    replicate in random order), runs shuffled within each block."""
    blocks = block_of_slots(design, slots)
    by_block: dict[int, list] = {}
    for (c, rep), blk in zip(slots, blocks):
        by_block.setdefault(blk, []).append((c, rep, blk))
    order = sorted(by_block)
    b = _blocks(design)
    if b["by"] == "factor":
        n = len(design.factors[design.factor_names.index(b["factor"])].levels)
        order = []
        for rep in range(design.replications):
            group = [rep * n + i + 1 for i in range(n)]
            rng.shuffle(group)
            order += group
    out = []
    for blk in order:
        runs = by_block.get(blk, [])
        rng.shuffle(runs)
        out += runs
    return out


def boot_sequence(design: Design, rng: random.Random) -> list[tuple[int, int, int, int]]:
    """(config, replicate, block, boot) in run order for ``runs_per_instance`` k > 1: boot b of a
    configuration holds its replicates (b-1)k+1 .. bk (the last one fewer when k does not divide
    the replications); the boots are shuffled (within each block, blocks in order), and each is
    followed by its runs in replicate order."""
    k, r = design.runs_per_instance, design.replications
    boots = [(c, b) for b in range(1, -(-r // k) + 1) for c in range(design.n_configurations)]
    if design.blocks is None:
        rng.shuffle(boots)
        ordered = [(c, b, 0) for c, b in boots]
    else:  # blocks of whole replicates holding whole boots (labkit.design.options.check_reuse)
        firsts = block_of_slots(design, [(c, (b - 1) * k + 1) for c, b in boots])
        by_block: dict[int, list] = {}
        for (c, b), blk in zip(boots, firsts):
            by_block.setdefault(blk, []).append((c, b, blk))
        ordered = []
        for blk in sorted(by_block):
            rng.shuffle(by_block[blk])
            ordered += by_block[blk]
    return [(c, rep, blk, b) for c, b, blk in ordered for rep in range((b - 1) * k + 1, min(b * k, r) + 1)]


def describe(design: Design) -> str:
    """The text of :meth:`Design.describe`."""
    lines = [
        f"design {design.name!r}: {len(design.factors)} factors, "
        f"{design.n_configurations} configurations x {design.replications} replicates"
        + (
            f" (adaptive up to {design.adaptive['max']}, target CI half-width "
            f"{design.adaptive['target_ci']:g}{' relative' if design.adaptive['relative'] else ''})"
            if design.adaptive
            else ""
        )
        + f", seed {design.seed}"
    ]
    for j, f in enumerate(design.factors):
        lines.append(f"  {fr.LETTERS[j]} = {f.name}: {', '.join(map(str, f.levels))}")
    k = len(design.factors)
    if design.fraction is not None:
        gens = design.fraction["generators"]
        lines.append(
            f"fraction 2^({k}-{len(gens)}), generators {', '.join(gens)}; "
            f"I = {' = '.join(fr.defining_relation(k, gens))}; "
            f"resolution {_roman(design.resolution)}"
        )
        if design.fraction.get("fold_over"):
            fold = design.fraction["fold_over"]
            lines.append(
                "  followed by its fold-over"
                + ("" if fold is True else f" on {fold}")
                + " (aliases below are those of the first fraction)"
            )
        lines.append("aliases (to two-factor interactions):")
        lines += [f"  {row.short}" for row in design.aliases(2).itertuples()]
    per = design.runs_per_instance
    if per > 1:
        short = (
            ""
            if design.replications % per == 0
            else f"; the last boot of each configuration holds {design.replications % per}"
        )
        lines.append(
            f"runs per instance: {per} (boots in random order, a boot's runs back to back on the same "
            f"instances: a split-plot randomization{short})"
        )
    if design.blocks is not None:
        b = design.blocks
        what = (
            f"by {b['factor']} (hard to change): one block per level and replicate"
            if b["by"] == "factor"
            else f"{b['count']} blocks by {b['by']}"
        )
        lines.append(f"blocks: {what}; runs randomized within blocks")
        if b.get("confound"):
            gens = design.fraction["generators"] if design.fraction else None
            conf = fr.confounded(k, gens, b["confound"])
            lines.append(
                f"  confounded with blocks: {'; '.join(conf)} "
                f"(blocked resolution {_roman(fr.blocked_resolution(k, gens, b['confound']))})"
            )
    return "\n".join(lines)


def _roman(n) -> str:
    table = {1: "I", 2: "II", 3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII", 8: "VIII", 9: "IX", 10: "X"}
    return table.get(n, str(n))
