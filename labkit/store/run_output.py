"""Each run's command output, kept beside the store as ``output/<run_id>.log`` (private,
its first and last MiB with the total size stated), and which runs' output a campaign keeps
(:func:`run_output_policy`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..core.files import atomic_write
from ..errors import StoreError
from .sqlite import StoreFile, storage_error

#: bytes of a run's output (write_run_output) kept at most: its first and its last MiB
OUTPUT_HEAD = OUTPUT_TAIL = 1 << 20
OUTPUT_CAP = OUTPUT_HEAD + OUTPUT_TAIL
#: which runs' command output a campaign keeps (:func:`run_output_policy`): ``all`` (the default),
#: ``failed`` (the runs that did not end ok) or ``off``
RUN_OUTPUT_ENV = "LABKIT_RUN_OUTPUT"
RUN_OUTPUT_CHOICES = ("all", "failed", "off")


def run_output_policy() -> str:
    """``$LABKIT_RUN_OUTPUT`` (``all`` when unset: every run's output is kept); ConfigError
    naming the choices for another value."""
    from ..errors import ConfigError

    value = os.environ.get(RUN_OUTPUT_ENV) or "all"
    if value not in RUN_OUTPUT_CHOICES:
        raise ConfigError(f"{RUN_OUTPUT_ENV}={value[:40]!r}: use one of {', '.join(RUN_OUTPUT_CHOICES)}")
    return value


_RUN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


class RunOutputs(StoreFile):
    """The command output of the runs of :class:`labkit.store.Store`."""

    def write_run_output(self, run_id: str, text: str, status: str | None = None) -> Path:
        """Keep ``text`` (a run's command output, e.g. :func:`labkit.backends.base.exec_log_text`)
        as ``output/<run_id>.log`` beside the store: a first line stating the run (and its
        ``status``) and the size of ``text`` in bytes, then its first :data:`OUTPUT_HEAD` and last
        :data:`OUTPUT_TAIL` bytes around a marker saying how many were left out; private (0600,
        the directory 0700), written atomically; returns its path. A run that runs again
        overwrites its file.

        Written without ``fsync`` (:func:`~labkit.core.files.atomic_write` ``sync=False``): the
        run's row is committed in WAL mode with ``synchronous=NORMAL`` (durable against a crash of
        any process, not against a power loss until the next checkpoint), and its output has the
        same durability, for a tenth of the time two fsyncs took (15.7 -> 1-2 ms per run,
        issue 45)."""
        if self.readonly:
            raise StoreError(
                f"{self.path}: the store is open read-only; the run output of {run_id!r} was not written"
            )
        if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
            raise StoreError(
                f"{self.path}: run output: {run_id!r} is not a run id ([A-Za-z0-9_.-], "
                "not starting with a dot)"
            )
        from ..backends.output import CappedOutput

        path = self.path.parent / "output" / f"{run_id}.log"
        kept = CappedOutput(OUTPUT_HEAD, OUTPUT_TAIL)
        kept.write(text)
        how = f" ({status})" if status else ""
        first = (
            f"# labkit: command output of run {run_id}{how}: {kept.total} bytes; "
            + (
                "all kept"
                if not kept.truncated
                else f"the first {OUTPUT_HEAD >> 20} MiB and the last {OUTPUT_TAIL >> 20} MiB kept"
            )
            + "\n"
        )
        try:
            return atomic_write(path, first + kept.text(), mode=0o600, dir_mode=0o700, sync=False)
        except OSError as exc:
            raise storage_error(path, exc, "write the run's output") from None

    def run_output(self, run_id: str) -> str | None:
        """The output kept for ``run_id`` by :meth:`write_run_output`, None if there is none."""
        path = self.path.parent / "output" / f"{run_id}.log"
        if not _RUN_ID.fullmatch(str(run_id)) or not path.is_file():
            return None
        return path.read_text(errors="replace")

    def run_outputs(self) -> list[str]:
        """The run ids whose output :meth:`write_run_output` kept, sorted."""
        folder = self.path.parent / "output"
        if not folder.is_dir():
            return []
        return sorted(p.stem for p in folder.glob("*.log") if _RUN_ID.fullmatch(p.stem) and p.is_file())
