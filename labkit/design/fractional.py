"""Two-level fractional factorial designs 2^(k-p): generators, aliases, resolution, fold-over.

Pure arithmetic on -1/+1 columns (no Design integration here). Factors are
the letters A, B, C, ... (I is skipped, as in the tables); the first k - p
are the base factors of a full 2^(k-p) design in standard order (A fastest),
each generated factor is a product of base factors, e.g. ``"D=ABC"``.

Reference: D. C. Montgomery, *Design and Analysis of Experiments*, ch. 8
(Table 8.14, "Selected 2^(k-p) fractional factorial designs"); Box, Hunter &
Hunter, *Statistics for Experimenters* (2nd ed.), Table 6.22. The tabulated
generators were checked against Minitab's published table "Design generators
for 2-level designs" (support.minitab.com, Minitab 19 help, Factorial and
screening designs), which lists the same generators and resolutions, and the
block generators with the resolution of each blocked design.

Blocking (Montgomery ch. 7): a full or fractional 2^k design run in 2^b
blocks confounds b independent interaction words (and their products) with
blocks; :func:`block_generators` picks words that keep the blocked design's
resolution as high as possible, :func:`block_index` gives each run's block.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from functools import reduce
from itertools import combinations

import numpy as np
import pandas as pd

from ..errors import ConfigError

#: generators of a fraction: a sequence of words such as ``"D=ABC"``, or one string of them
Generators = str | Sequence[str]

__all__ = [
    "MINIMUM_ABERRATION",
    "aliases",
    "block_generators",
    "block_index",
    "blocked_resolution",
    "defining_relation",
    "fold_over",
    "fractional_design",
    "fractional_effects",
    "resolution",
    "standard_generators",
]

LETTERS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"  # no I: it names the identity
MAX_K = len(LETTERS)

# Montgomery, Table 8.14 (minimum aberration designs, resolution in the key's comment); checked
# entry by entry against Minitab's "Design generators for 2-level designs" (same generators)
MINIMUM_ABERRATION = {
    (3, 1): ["C=AB"],  # III
    (4, 1): ["D=ABC"],  # IV
    (5, 1): ["E=ABCD"],  # V
    (5, 2): ["D=AB", "E=AC"],  # III
    (6, 1): ["F=ABCDE"],  # VI
    (6, 2): ["E=ABC", "F=BCD"],  # IV
    (6, 3): ["D=AB", "E=AC", "F=BC"],  # III
    (7, 1): ["G=ABCDEF"],  # VII
    (7, 2): ["F=ABCD", "G=ABDE"],  # IV
    (7, 3): ["E=ABC", "F=BCD", "G=ACD"],  # IV
    (7, 4): ["D=AB", "E=AC", "F=BC", "G=ABC"],  # III
    (8, 2): ["G=ABCD", "H=ABEF"],  # V
    (8, 3): ["F=ABC", "G=ABD", "H=BCDE"],  # IV
    (8, 4): ["E=BCD", "F=ACD", "G=ABC", "H=ABD"],  # IV
    (8, 1): ["H=ABCDEFG"],  # VIII (Minitab's table)
}


def standard_generators(k: int, p: int) -> list[str]:
    """The minimum-aberration generators of Montgomery's Table 8.14 for a 2^(k-p) design."""
    try:
        return list(MINIMUM_ABERRATION[(k, p)])
    except KeyError:
        raise ConfigError(
            f"no tabulated 2^({k}-{p}) design; tabulated (k, p): "
            f"{', '.join(map(str, sorted(MINIMUM_ABERRATION)))}"
        ) from None


def _parse(k: int, generators: Generators) -> list[tuple[int, frozenset[int]]]:
    """[(generated factor index, frozenset of base factor indices)], validated."""
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= MAX_K:
        raise ConfigError(f"k must be an integer from 2 to {MAX_K}, got {k!r}")
    if isinstance(generators, str):
        generators = generators.replace(",", " ").split()
    gens = list(generators)
    p = len(gens)
    if not 1 <= p < k:
        raise ConfigError(f"a 2^(k-p) design needs 1 <= p < k generators, got {p} for k = {k}")
    base = k - p
    out, seen = [], set()
    for g in gens:
        if not isinstance(g, str) or g.count("=") != 1:
            raise ConfigError(f"generator {g!r} must look like 'D=ABC'")
        lhs, rhs = (s.strip().upper() for s in g.split("="))
        rhs = rhs.lstrip("+")
        if len(lhs) != 1 or lhs not in LETTERS[base:k]:
            raise ConfigError(
                f"generator {g!r}: the left side must be one of the generated "
                f"factors {', '.join(LETTERS[base:k])} (k = {k}, p = {p})"
            )
        if lhs in seen:
            raise ConfigError(f"factor {lhs} is generated twice")
        word: set[int] = set()
        for ch in rhs:
            if ch not in LETTERS[:base]:
                raise ConfigError(
                    f"generator {g!r}: {ch!r} is not a base factor ({', '.join(LETTERS[:base])})"
                )
            word ^= {LETTERS.index(ch)}
        if len(word) < 2:
            raise ConfigError(f"generator {g!r} must be a product of at least two base factors")
        seen.add(lhs)
        out.append((LETTERS.index(lhs), frozenset(word)))
    return out


def _word(indices: Iterable[int]) -> str:
    return "".join(LETTERS[i] for i in sorted(indices)) or "I"


def fractional_design(k: int, generators: Generators | None = None, *, p: int | None = None) -> pd.DataFrame:
    """The 2^(k-p) design matrix, -1/+1, one column per factor A, B, ..., in standard order.

    ``generators``: e.g. ``["D=ABC"]`` or ``"E=ABC F=BCD"``; or None with
    ``p`` to take Montgomery's Table 8.14 design. Runs are in standard order
    of the base factors (A fastest). ``attrs``: ``generators``,
    ``defining_relation``, ``resolution``.
    """
    if generators is None:
        if p is None:
            raise ConfigError("give generators (e.g. ['D=ABC']) or p for the tabulated design")
        generators = standard_generators(k, p)
    gens = _parse(k, generators)
    base = k - len(gens)
    i = np.arange(2**base)
    cols = {LETTERS[j]: np.where(i >> j & 1, 1, -1) for j in range(base)}
    for j, word in sorted(gens):
        cols[LETTERS[j]] = reduce(np.multiply, (cols[LETTERS[b]] for b in word))
    out = pd.DataFrame({LETTERS[j]: cols[LETTERS[j]] for j in range(k)})
    words = defining_relation(k, generators)
    out.attrs.update(
        {
            "generators": [f"{LETTERS[j]}={_word(w)}" for j, w in gens],
            "defining_relation": words,
            "resolution": min(map(len, words)),
        }
    )
    return out


def defining_relation(k: int, generators: Generators) -> list[str]:
    """Every word of the defining relation I = ... (2^p - 1 words), shortest first."""
    gens = _parse(k, generators)
    basic = [w | {j} for j, w in gens]
    words: set[frozenset[int]] = set()
    for r in range(1, len(basic) + 1):
        for combo in combinations(basic, r):
            words.add(frozenset(reduce(operator.xor, combo)))
    return sorted((_word(w) for w in words), key=lambda s: (len(s), s))


def resolution(k: int, generators: Generators) -> int:
    """The design's resolution: the length of the shortest word of the defining relation."""
    return min(map(len, defining_relation(k, generators)))


def _set(word: str) -> frozenset:
    return frozenset(LETTERS.index(c) for c in word if c != "I")


def aliases(k: int, generators: Generators, *, order: int = 2) -> pd.DataFrame:
    """The alias structure: each effect of up to ``order`` factors with its aliases.

    Returns one row per alias set that contains an effect of at most
    ``order`` factors, in Yates order of the base term: ``term`` (the
    base-factor effect the design estimates), ``aliases`` (the whole chain,
    e.g. ``"A + BCD"``, effects of at most ``order`` factors first, then the
    rest) and ``short`` (the chain keeping effects of at most ``order`` factors).
    """
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ConfigError(f"order must be a positive integer, got {order!r}")
    gens = _parse(k, generators)
    base = k - len(gens)
    words = [_set(w) for w in defining_relation(k, generators)]
    rows = []
    for mask in range(1, 2**base):
        term = frozenset(j for j in range(base) if mask >> j & 1)
        chain = sorted({term} | {term ^ w for w in words}, key=lambda s: (len(s), _word(s)))
        short = [c for c in chain if len(c) <= order]
        if short:
            rows.append(
                {
                    "term": _word(term),
                    "aliases": " + ".join(_word(c) for c in chain),
                    "short": " + ".join(_word(c) for c in short),
                }
            )
    return pd.DataFrame(rows, columns=["term", "aliases", "short"])


def fold_over(design: pd.DataFrame, factor: str | None = None) -> pd.DataFrame:
    """The design followed by its fold-over (Montgomery sec. 8.6).

    ``factor=None``: full fold-over, every sign reversed (a resolution III
    design becomes resolution IV: main effects free of two-factor
    interactions); ``factor="A"``: only that column reversed (frees A and
    its two-factor interactions). Adds a ``fold`` column (0 original, 1 fold).
    """
    if not isinstance(design, pd.DataFrame) or design.empty:
        raise ConfigError("design must be the DataFrame fractional_design() returned")
    cols = [c for c in design.columns if c != "fold"]
    second = design[cols].copy()
    if factor is None:
        second = -second
    elif factor not in cols:
        raise ConfigError(f"factor {factor!r} is not a column of the design ({', '.join(cols)})")
    else:
        second[factor] = -second[factor]
    return pd.concat([design[cols].assign(fold=0), second.assign(fold=1)], ignore_index=True)


def fractional_effects(
    effects_or_data: pd.DataFrame,
    generators: Generators,
    *,
    k: int | None = None,
    factors: Sequence[str] | None = None,
    response: str | None = None,
    order: int = 2,
) -> pd.DataFrame:
    """Effects of a 2^(k-p) design reported with their aliases, so aliased effects read together.

    Either a ``labkit.stats.factorial_effects`` table of the base factors
    (``k`` then required), or a long-format DataFrame with ``factors`` (all k
    columns, in letter order A, B, ...) and ``response``: the base factors'
    full factorial is then analysed with ``factorial_effects``.

    Returns the factorial_effects table (without ``I`` and ``error``) with
    two columns in front: ``term`` (the estimated effect, in factor names)
    and ``aliases`` (its alias chain to ``order`` factors, e.g.
    ``"A:B + C:D"``); ``attrs`` adds ``defining_relation`` and ``resolution``.
    """
    from ..stats import factorial_effects

    if response is not None:
        factors = list(factors or [])
        k = len(factors)
        gens = _parse(k, generators)
        table = factorial_effects(effects_or_data, factors=factors[: k - len(gens)], response=response)
    else:
        if k is None:
            raise ConfigError("k is required when a factorial_effects table is given")
        table = effects_or_data
        if not isinstance(table, pd.DataFrame) or "term" not in table.columns:
            raise ConfigError(
                "effects must be a factorial_effects() table or give factors= and response= with the data"
            )
        base_names = table.attrs.get("factors")
        factors = list(base_names or LETTERS[: k - len(_parse(k, generators))]) + [
            LETTERS[j] for j, _ in _parse(k, generators)
        ]
    names = list(factors) + list(LETTERS[len(factors) : k])
    al = aliases(k, generators, order=order).set_index("term")
    rows = table[~table["term"].isin(["I", "error"])].copy()

    def letters(term: str) -> str:
        parts = term.split(":")
        return _word(names.index(p) for p in parts)

    def named(word: str) -> str:
        return ":".join(names[i] for i in sorted(_set(word)))

    chains = []
    for term in rows["term"]:
        w = letters(term)
        chains.append(
            " + ".join(named(x) for x in al.loc[w, "short"].split(" + ")) if w in al.index else term
        )
    rows.insert(1, "aliases", chains)
    rows.attrs.update(table.attrs)
    rows.attrs.update(
        {"defining_relation": defining_relation(k, generators), "resolution": resolution(k, generators)}
    )
    return rows.reset_index(drop=True)


# -- blocking --------------------------------------------------------------------------
MAX_BLOCK_SEARCH = 2**21  # candidate generator sets examined at most (bounded time)


def _basic(k: int, generators: Generators | None) -> tuple[int, list[int]]:
    """(number of base factors, defining-relation words as k-bit masks) of a full or fractional design."""
    if not generators:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise ConfigError(f"k must be an integer from 1 to {MAX_K}, got {k!r}")
        return k, []
    gens = _parse(k, generators)
    words = [sum(1 << i for i in _set(w)) for w in defining_relation(k, generators)]
    return k - len(gens), words


def _chain_length(masks: np.ndarray, words: list[int]) -> np.ndarray:
    """Length of the shortest effect in the alias chain of each base-factor word (bit masks)."""
    masks = np.asarray(masks, dtype=np.int64)
    best = np.bitwise_count(masks).astype(np.int64)
    for w in words:
        best = np.minimum(best, np.bitwise_count(masks ^ w).astype(np.int64))
    return best


def _parse_word(word: str, base: int) -> int:
    if not isinstance(word, str) or not word.strip():
        raise ConfigError(f"block word {word!r} must be letters such as 'ABCD'")
    mask = 0
    for ch in word.strip().upper():
        if ch not in LETTERS[:base]:
            raise ConfigError(
                f"block word {word!r}: {ch!r} is not a base factor ({', '.join(LETTERS[:base])})"
            )
        mask ^= 1 << LETTERS.index(ch)
    if not mask:
        raise ConfigError(f"block word {word!r} is the identity")
    return mask


def _group(masks) -> list[int]:
    out = {0}
    for m in masks:
        out |= {x ^ m for x in out}
    out.discard(0)
    return sorted(out)


def block_generators(k: int, generators: Generators | None = None, n_blocks: int = 2) -> list[str]:
    """Words of the base factors to confound with ``n_blocks`` (2, 4, 8, ...) blocks.

    Searches every set of log2(n_blocks) independent words and keeps the one whose
    confounded effects (each word's shortest alias) are longest, then with fewest
    effects of that length, then the first in letter order. ``generators``: those of
    the fraction, or None for the full 2^k. ConfigError when no set keeps main effects
    free of blocks or the search would be too large (give the words then).
    """
    base, words = _basic(k, generators)
    b = _log2(n_blocks)
    cand = np.arange(1, 2**base, dtype=np.int64)
    length = np.zeros(2**base, dtype=np.int64)
    length[1:] = _chain_length(cand, words)
    if float(len(cand)) ** b > MAX_BLOCK_SEARCH:
        raise ConfigError(
            f"{n_blocks} blocks of a design with {base} base factors: too many "
            "generator sets to search; give the confounded words (blocks: confound: [...])"
        )
    best, best_key = None, None
    for combo in combinations(cand.tolist(), b):
        grp = _group(combo)
        if len(grp) != 2**b - 1:
            continue  # not independent
        ls = length[grp]
        if (ls == 0).any():
            continue  # confounded with the identity (in the defining relation)
        key = (-int(ls.min()), int((ls == ls.min()).sum()), sorted(grp))
        if best_key is None or key < best_key:
            best, best_key = combo, key
    if best is None or best_key is None or -best_key[0] < 2:
        raise ConfigError(
            f"no way to run this design in {n_blocks} blocks without confounding a main "
            "effect with blocks; use fewer blocks or a larger fraction"
        )
    return [_word(j for j in range(base) if m >> j & 1) for m in best]


def _log2(n_blocks) -> int:
    if (
        isinstance(n_blocks, bool)
        or not isinstance(n_blocks, int)
        or n_blocks < 2
        or n_blocks & (n_blocks - 1)
    ):
        raise ConfigError(
            f"blocks of a two-level design come in powers of two (2, 4, 8, ...), got {n_blocks!r}"
        )
    return n_blocks.bit_length() - 1


def confounded(k: int, generators: Generators | None, block_words: Sequence[str]) -> list[str]:
    """Every effect (alias chain, shortest member first) confounded with blocks."""
    base, words = _basic(k, generators)
    masks = [_parse_word(w, base) for w in block_words]
    out = []
    for m in _group(masks):
        chain = sorted({m} | {m ^ w for w in words}, key=lambda x: (bin(x).count("1"), x))
        out.append(" + ".join(_word(j for j in range(k) if c >> j & 1) for c in chain))
    return out


def blocked_resolution(k: int, generators: Generators | None, block_words: Sequence[str]) -> int:
    """Resolution of the blocked design: the block factor counts as one more letter in each
    confounded word (Minitab's convention), and the fraction's own words count as they are."""
    base, words = _basic(k, generators)
    masks = [_parse_word(w, base) for w in block_words]
    grp = np.array(_group(masks), dtype=np.int64)
    if len(grp) != 2 ** len(masks) - 1:
        raise ConfigError(f"block words {list(block_words)} are not independent")
    ls = _chain_length(grp, words)
    if (ls == 0).any():
        raise ConfigError(f"block words {list(block_words)}: one is in the defining relation")
    res = int(ls.min()) + 1
    return min(res, min(bin(w).count("1") for w in words)) if words else res


def block_index(design: pd.DataFrame, block_words: Sequence[str]) -> np.ndarray:
    """Block (0-based) of each row of a -1/+1 design: bit j is set when word j is -1 there, so
    block 0 holds the runs where every word is +1 (Montgomery's principal block)."""
    cols = [c for c in design.columns if c in LETTERS]
    out = np.zeros(len(design), dtype=np.int64)
    for j, w in enumerate(block_words):
        sign = np.ones(len(design), dtype=np.int64)
        for ch in w.strip().upper():
            if ch not in cols:
                raise ConfigError(f"block word {w!r}: {ch!r} is not a column ({', '.join(cols)})")
            sign = sign * design[ch].to_numpy()
        out |= (sign < 0).astype(np.int64) << j
    return out
