"""A store's campaign records: its settings (the ``meta`` table: the design, the workload, the
options it ran with), the uncommitted diffs of the checkouts it ran from, and its hosts'
fingerprints; secrets redacted before they are written."""

from __future__ import annotations

import json
import re
from typing import Any

from ..core.clock import now_iso
from ..core.redact import redact
from ..errors import StoreError
from .rows import Malformed, json_object
from .schema import CODE_DIFF_KEY
from .sqlite import StoreFile


class CampaignMeta(StoreFile):
    """The campaign's settings and host fingerprints of :class:`labkit.store.Store`."""

    def meta(self) -> dict:
        """The campaign's settings; StoreError naming the campaign and key of a value that is not JSON
        (a damaged store: nothing of the campaign can be read safely without its design)."""
        out = {}
        for k, v in self._db.execute(
            "SELECT key, value FROM meta WHERE substr(key, 1, ?) != ?", (len(CODE_DIFF_KEY), CODE_DIFF_KEY)
        ):
            try:
                out[k] = json.loads(v)
            except (TypeError, ValueError, RecursionError) as exc:
                raise StoreError(
                    f"{self.path}: campaign {self.campaign}: meta key {str(k)[:60]!r}: column value: "
                    f"not JSON ({str(exc).splitlines()[0][:80]}): the campaign's settings cannot be "
                    f"read; restore the store from a copy (labkit check {self.campaign} lists every "
                    "problem)"
                ) from None
        return out

    def set_meta(self, **items: Any) -> None:
        """Store campaign settings (secrets redacted)."""
        items = redact(items)
        with self._tx():
            for k, v in items.items():
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (k, json.dumps(v, default=str)))

    def set_code_diff(self, record: dict) -> None:
        """Keep a checkout's uncommitted diff (:meth:`labkit.core.fingerprint.CodeDiff.record`) in the
        meta table under ``code_diff:<sha256>`` (:mod:`labkit.store.codestate`); a diff kept already
        stays as it was."""
        sha = record.get("sha256") if isinstance(record, dict) else None
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise StoreError(
                f"{self.path}: a code diff record needs its sha256 (64 hex digits), got {str(sha)[:80]!r}"
            )
        with self._tx():
            self._db.execute(
                "INSERT OR IGNORE INTO meta VALUES (?, ?)",
                (CODE_DIFF_KEY + sha, json.dumps(redact(record), default=str)),
            )

    def code_diffs(self) -> dict[str, dict]:
        """The uncommitted diffs kept (:meth:`set_code_diff`): sha256 -> record; a record that is not
        a JSON object is reported (:attr:`problems`) and left out. Kept out of :meth:`meta`."""
        out = {}
        for k, v in self._read(
            "SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?", (len(CODE_DIFF_KEY), CODE_DIFF_KEY)
        ):
            try:
                out[str(k)[len(CODE_DIFF_KEY) :]] = json_object(v, "value")
            except Malformed as exc:
                self._malformed(f"meta key {str(k)[:80]!r}", exc)
        return out

    def add_fingerprint(self, fp_id: str, data: dict) -> None:
        with self._tx():
            self._db.execute(
                "INSERT OR IGNORE INTO fingerprints VALUES (?, ?, ?)",
                (fp_id, json.dumps(redact(data), default=str), now_iso()),
            )

    def fingerprints(self) -> dict[str, dict]:
        """Host fingerprints by id (one whose data is not a JSON object is reported and left out)."""
        out = {}
        for i, d in self._db.execute("SELECT id, data FROM fingerprints"):
            try:
                out[i] = json_object(d, "data")
            except Malformed as exc:
                self._malformed(f"fingerprint {str(i)[:60]}", exc)
        return out
