"""The code state a campaign ran with, and the uncommitted diff that rebuilds it.

A store's fingerprints name the labkit commit each start of the campaign ran from
(``labkit_commit``: ``abc123``, ``abc123+dirty`` with uncommitted changes, ``abc123 (installed)``
for a wheel, ``n/a``). When the checkout was dirty, :func:`record_code_diff` keeps the diff
(:func:`labkit.core.fingerprint.code_diff`) in the store's meta table (``code_diff:<sha256>``,
:meth:`labkit.store.Store.set_code_diff`), and the fingerprint names its digest
(``labkit_diff_sha256``), so the code is rebuilt with::

    git checkout abc123 && labkit show CAMPAIGN --diff | git apply

:func:`code_state` says which of :data:`KINDS` a store is in, and :meth:`CodeState.line` says it
in one line (``labkit show``). The diff is the user's own code: it is kept in the store (private,
0600) as git printed it. :func:`labkit.core.redact.redact` redacts values by their key's name and
has nothing for free text, so a secret written into tracked code is kept as the code holds it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.fingerprint import CodeDiff, code_diff

if TYPE_CHECKING:
    from .store import Store

#: what :func:`code_state` says, from best to worst: every start from a clean commit; dirty, with
#: every start's diff kept; dirty with a diff not kept (a campaign from before labkit kept diffs);
#: an installed labkit (the commit it was built from, no checkout to diff); nothing recorded
KINDS = ("clean", "dirty with diff", "dirty, not recorded", "installed", "unknown")
DIRTY = "+dirty"
INSTALLED = " (installed)"


def record_code_diff(store: Store, diff: CodeDiff | None = None) -> CodeDiff | None:
    """Keep ``diff`` (default: this process's :func:`~labkit.core.fingerprint.code_diff`) in
    ``store``'s meta; nothing for a clean checkout or an installed labkit. Returns what was kept."""
    diff = code_diff() if diff is None else diff
    if diff is not None:
        store.set_code_diff(diff.record())
    return diff


@dataclass(frozen=True)
class CodeState:
    """A store's code state: ``kind`` (one of :data:`KINDS`), ``commits`` (the distinct
    ``labkit_commit`` values of its fingerprints, in order), ``diffs`` (the kept diffs' records
    without their text: sha256 -> commit, bytes, lines, truncated) and ``missing`` (the
    ``+dirty`` commits whose diff is not kept)."""

    kind: str
    commits: tuple[str, ...] = ()
    diffs: dict = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    def line(self, campaign: str = "CAMPAIGN") -> str:
        """One line for ``labkit show``: ``code: abc123 (clean)``, ``code: abc123 with uncommitted
        changes, diff stored (sha256 1a2b3c4d5e6f, 12 lines; ...)``, ``code: abc123+dirty,
        uncommitted changes NOT recorded (...)``, ``code: abc123 (installed)`` or ``code: not
        recorded``."""
        shown = ", ".join(self.commits)
        if self.kind == "clean":
            return f"code: {shown} (clean)"
        if self.kind == "dirty with diff":
            bare = ", ".join(dict.fromkeys(c.removesuffix(DIRTY) for c in self.commits))
            each = "; ".join(
                f"sha256 {sha[:12]}, {d.get('lines')} lines"
                + (
                    f", truncated to its first {d.get('kept_bytes')} of {d.get('bytes')} bytes"
                    if d.get("truncated")
                    else ""
                )
                for sha, d in self.diffs.items()
            )
            several = "diffs" if len(self.diffs) > 1 else "diff"
            return (
                f"code: {bare} with uncommitted changes, {several} stored ({each}; "
                f"`labkit show --diff {campaign}` prints it)"
            )
        if self.kind == "dirty, not recorded":
            return (
                f"code: {', '.join(self.missing)}, uncommitted changes NOT recorded (campaign from "
                "before labkit recorded diffs)"
            )
        if self.kind == "installed":
            return f"code: {shown}"
        return "code: not recorded" + (f" ({shown})" if shown else "")


def commits_of(fingerprints: dict) -> list[tuple[str, str | None]]:
    """(labkit_commit, labkit_diff_sha256 or None) of each stored fingerprint (``host`` part, or the
    fingerprint itself for an old flat one), distinct, in order; fingerprints without a commit
    (remote hosts, imported campaigns) are left out."""
    out: dict[tuple[str, str | None], None] = {}
    for fp in fingerprints.values():
        host = fp.get("host") if isinstance(fp.get("host"), dict) else fp
        commit = host.get("labkit_commit")
        if isinstance(commit, str) and commit and commit != "n/a":
            sha = host.get("labkit_diff_sha256")
            out[(commit, sha if isinstance(sha, str) else None)] = None
    return list(out)


def code_state_of(fingerprints: dict, diffs: dict) -> CodeState:
    """:func:`code_state` from a store's fingerprints and kept diffs (sha256 -> record)."""
    pairs = commits_of(fingerprints)
    commits = tuple(dict.fromkeys(c for c, _ in pairs))
    kept = {sha: {k: v for k, v in d.items() if k != "diff"} for sha, d in diffs.items()}
    if not commits:
        return CodeState("unknown", diffs=kept)
    dirty = [(c, sha) for c, sha in pairs if c.endswith(DIRTY)]
    missing = tuple(dict.fromkeys(c for c, sha in dirty if sha is None or sha not in kept))
    if missing:
        return CodeState("dirty, not recorded", commits, kept, missing)
    if dirty:
        used = {sha for _, sha in dirty}
        return CodeState("dirty with diff", commits, {s: d for s, d in kept.items() if s in used})
    if all(c.endswith(INSTALLED) for c in commits):
        return CodeState("installed", commits, kept)
    if all(len(c) >= 7 and all(ch in "0123456789abcdef" for ch in c) for c in commits):
        return CodeState("clean", commits, kept)
    return CodeState("unknown", commits, kept)


def code_state(store: Store) -> CodeState:
    """The code state of the campaign in ``store``: ``clean`` (every start from a clean commit),
    ``dirty with diff`` (some start was ``+dirty`` and every such start's diff is kept),
    ``dirty, not recorded`` (a ``+dirty`` start without its diff), ``installed`` (an installed
    labkit: the commit its wheel was built from) or ``unknown`` (no commit recorded: an imported
    campaign, or a mix of the above with an installed labkit). ``.kind`` is the word."""
    return code_state_of(store.fingerprints(), store.code_diffs())


def diff_problems(diffs: dict) -> list[str]:
    """What is wrong with kept diff records (sha256 -> record): a record that is not one, or a
    whole (not truncated) diff whose digest is not its key. Empty when all are sound."""
    out = []
    for sha, d in diffs.items():
        text = d.get("diff")
        if not isinstance(text, str) or not isinstance(d.get("truncated"), bool):
            out.append(
                f"meta key 'code_diff:{sha[:16]}...': not a code diff record (no diff text or no "
                "truncated flag)"
            )
        elif (
            not d["truncated"] and hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest() != sha
        ):
            out.append(
                f"meta key 'code_diff:{sha[:16]}...': the diff's SHA-256 is not the one it is kept "
                "under: it was altered"
            )
    return out


def stored_diff(store: Store, campaign: str = "") -> tuple[bytes, list[str]]:
    """What ``labkit show --diff`` prints: the kept diff as git printed it (``git apply`` takes it),
    and notes for stderr (a truncated diff; several diffs, each then headed by a ``# code_diff``
    line that ``git apply`` skips). ConfigError saying the code state when no diff is kept."""
    from ..errors import ConfigError

    diffs = store.code_diffs()
    if not diffs:
        raise ConfigError(
            f"campaign {campaign or store.campaign}: no uncommitted diff stored "
            f"({code_state(store).line(campaign or store.campaign)})"
        )
    out, notes = b"", []
    for sha, d in diffs.items():
        text = d.get("diff")
        text = text if isinstance(text, str) else ""
        if len(diffs) > 1:
            out += f"# code_diff sha256 {sha} of commit {d.get('commit')}\n".encode()
        out += text.encode("utf-8", "surrogateescape")
        if d.get("truncated"):
            notes.append(
                f"diff {sha[:12]}: truncated to its first {d.get('kept_bytes')} of {d.get('bytes')} "
                "bytes: it does not rebuild the code by itself"
            )
    if len(diffs) > 1:
        notes.append(
            f"{len(diffs)} diffs: the campaign was started from {len(diffs)} different uncommitted "
            "states; apply the one of the start you rebuild"
        )
    return out, notes
