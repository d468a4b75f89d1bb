"""The host's registry of running campaigns: which campaign id runs, from which data dir, since when.

A campaign id is unique on the host: its instances are named ``labkit-<id>--...`` on every
backend, so a second process running the same id (from another data dir, another checkout,
another user) would clean up the first one's instances at its start. :func:`register` makes
the second start fail at once instead, and :func:`running` tells ``labkit clean`` (and a
quiet-host guard) which campaigns run right now. Besides its entry in a registry directory, a
running campaign holds its id's abstract socket (:mod:`labkit.core.id_sockets`), one namespace for
every user: two users whose registries cannot read each other's still cannot run one id at once,
and the refusal names the other's pid and uid. :func:`register` also records the data dir
(:mod:`labkit.core.datadirs`), which outlives the entry.

Where: ``$LABKIT_RUN_DIR`` if set (tests), else ``/run/labkit/campaigns`` for root (or anyone
who may write there), else ``$XDG_RUNTIME_DIR/labkit/campaigns`` (a user's own runtime dir),
else ``~/.cache/labkit/campaigns``; with none, :func:`run_dir` raises StoreError saying to set
``LABKIT_RUN_DIR``. A non-root user's campaigns are thus seen by that user and by root. The
directory is made 0755 and must belong to this user, not be a symlink, and not be writable by
group or others (and no parent may be: :func:`labkit.core.paths.unsafe_dir`), else StoreError.
:func:`running` also reads root's ``/run/labkit/campaigns`` as a non-root user (when
``/run/labkit`` lets them), and as root every ``/run/user/*/labkit/campaigns`` and every user's
``~/.cache/labkit/campaigns``, so root's ``labkit clean`` sees the users' campaigns (a user's
``LABKIT_RUN_DIR`` elsewhere is not found; :func:`running` still sees that user's running ids
through their claims). Entries of registries this user does not own (root's excepted) are
:attr:`Entry.trusted` False: anyone can write a stopped entry in their own registry, so
``labkit clean`` does not take one as proof that a campaign stopped.

Another user's registry is data, read as :mod:`labkit.core.foreign` says (issue 47): its
directory must be that user's (the uid in ``/run/user/<uid>``, the owner of the home), each file a
regular file of that user's (never a link, a FIFO opened without blocking and refused) of at most
:data:`MAX_ENTRY` bytes, at most :data:`MAX_FOREIGN_ENTRIES` entries read from it; an entry is
trusted only about that user's campaigns: a ``data_dir`` that is not an existing directory of that
user (or a system directory) becomes None (logged), and a pid that is not that user's process never
makes it running.

Per campaign id, two files:

* ``<id>.lock`` (0600): the running process holds an exclusive ``flock`` on it.
  The kernel releases it when the process dies, however it dies (SIGKILL too), so liveness is
  "lock held", never a guess from a pid. A reader who may not open it (another user's registry)
  compares the entry's pid *and* that process's start time in ``/proc``. A campaign that stops
  removes it after its entry, while it still holds the lock and the id's claim
  (:mod:`labkit.core.id_sockets`), so no second process can be locking that file meanwhile (a killed
  one leaves it, used again when the id runs again): the directory does not keep a file per
  campaign id ever run, and reading it before every run stays cheap.
* ``<id>.json`` (0644): the entry (``campaign_id``, absolute ``data_dir``, ``pid``,
  ``pid_start``, ``started``, ``backend``, ``prefix``, ``testbed``, ``kind``: ``run`` or
  ``clean``, ``exclusive``: whether it refuses to share the host, :mod:`labkit.run.guard`), written to a temporary file and renamed over (readers never see half an entry),
  files opened without following symlinks. A campaign that stops removes it; one that was
  killed leaves it, seen as stopped (``Entry.running`` False) until the id runs again.

>>> with register("demo", "data", backend="local"):   # doctest: +SKIP
...     [e.campaign_id for e in running()]
['demo']
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, StoreError
from . import datadirs, id_sockets
from .clock import now_iso
from .files import atomic_write
from .foreign import owned_dir, read_regular
from .ids import check_campaign_id
from .lock import lock_state
from .paths import unsafe_dir
from .waiting import wait_until

__all__ = [
    "Entry",
    "Registration",
    "claimed",
    "dirs",
    "entries",
    "find",
    "holder_text",
    "register",
    "run_dir",
    "running",
]

log = logging.getLogger("labkit.registry")

ENV = "LABKIT_RUN_DIR"
SYSTEM_DIR = Path("/run/labkit/campaigns")
MAX_ENTRY = 65536
#: entries read at most from a registry of another user (one who plants thousands gains nothing)
MAX_FOREIGN_ENTRIES = 256


def run_dir() -> Path:
    """This user's registry directory (see the module docstring); not created here."""
    env = os.environ.get(ENV)
    if env:
        return Path(os.path.abspath(Path(env).expanduser()))
    if os.geteuid() == 0 or os.access(SYSTEM_DIR if _is_dir(SYSTEM_DIR) else SYSTEM_DIR.parent, os.W_OK):
        return SYSTEM_DIR
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg) and _is_dir(Path(xdg)):
        return Path(xdg) / "labkit" / "campaigns"
    home = Path("~").expanduser()
    if home.is_absolute() and _is_dir(home):
        return home / ".cache" / "labkit" / "campaigns"
    raise StoreError(
        f"no place for the registry of running campaigns: {SYSTEM_DIR} is not writable by "
        f"uid {os.geteuid()}, and neither XDG_RUNTIME_DIR nor a home directory is set; set {ENV} "
        "to a directory of yours (the same one for every labkit you run)"
    )


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a directory we may look into (False when e.g. ``/run/labkit`` is 0700)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _checked(path: Path, create: bool) -> Path:
    """``path`` made (0755) if ``create`` and missing, then verified safe (StoreError): ours to
    write to (``create``), or ours or root's to read from."""
    if create:
        for d in reversed([path, *path.parents]):
            if not os.path.lexists(d):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(d, 0o755)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise StoreError(f"registry of running campaigns {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise StoreError(
            f"registry of running campaigns {path} is not a plain directory (a symlink?); "
            f"remove it or set {ENV}"
        )
    if st.st_uid != os.geteuid() and (create or st.st_uid != 0):
        raise StoreError(
            f"registry of running campaigns {path} is owned by uid {st.st_uid}, not by this "
            f"user (uid {os.geteuid()}); remove it or set {ENV} to a directory of yours"
        )
    for d in (path, *path.parents):
        why = unsafe_dir(d)
        if why:
            raise StoreError(
                f"registry of running campaigns {path}: {d} is {why}; another user could "
                f"forge or hide entries: fix its owner and mode or set {ENV}"
            )
    return path


@dataclass
class Entry:
    """One registered campaign; ``running`` is whether its process is alive right now."""

    campaign_id: str
    data_dir: str | None
    pid: int
    started: str
    running: bool
    kind: str = "run"
    backend: str | None = None
    prefix: str | None = None
    testbed: str | None = None
    registry: str = ""
    extra: dict = field(default_factory=dict)
    #: from this user's own registry or root's (see the module docstring)
    trusted: bool = True

    def describe(self) -> str:
        what = "`labkit clean`" if self.kind == "clean" else f"data dir {self.data_dir}"
        return f"{what}, pid {self.pid}, started {self.started}"


def _proc_start(pid: int) -> int | None:
    """The start time (clock ticks after boot) of process ``pid``, or None if there is none."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _proc_uid(pid: int) -> int | None:
    """The uid owning process ``pid`` (its ``/proc`` directory's owner), or None if there is none."""
    try:
        return os.stat(f"/proc/{int(pid)}").st_uid
    except (OSError, ValueError):
        return None


def _lock_held(lock: Path, info: dict, owner: int | None = None) -> bool:
    """Whether a live process holds ``lock`` (pid + process start time when it cannot be opened);
    with ``owner``, the lock must be that user's file and the pid that user's process."""
    held = lock_state(lock, owner)
    if held is None:  # not ours to open: the pid and its start time identify the process
        pid, start = info.get("pid"), info.get("pid_start")
        return (
            isinstance(pid, int)
            and start is not None
            and _proc_start(pid) == start
            and (owner is None or _proc_uid(pid) == owner)
        )
    return held


def _read(path: Path, owner: int | None = None) -> dict | None:
    """The entry at ``path``, or None if absent, not ours to read, not a regular file of at most
    :data:`MAX_ENTRY` bytes (of ``owner``'s, unless None), malformed or for a campaign id that is not
    valid (:func:`~labkit.core.ids.check_campaign_id`)."""
    raw = read_regular(path, owner=owner, max_bytes=MAX_ENTRY, what="registry entry")
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("campaign_id"), str):
        return None
    try:
        check_campaign_id(data["campaign_id"])
    except ConfigError:
        return None
    return data


def _text(value) -> str | None:
    """An entry's field as printable text (an entry from another user's registry is data, and it
    reaches a terminal): control characters become ``?``, at most 500 characters."""
    if value is None:
        return None
    return "".join(c if c.isprintable() else "?" for c in str(value)[:500])


def _label(value, default: str) -> str:
    """:func:`_text` of a field that always has a value: ``default`` when it is missing or null."""
    text = _text(value)
    return default if text is None else text


def _entry(directory: Path, info: dict, trusted: bool = True, owner: int | None = None) -> Entry:
    """The :class:`Entry` of ``info`` read in ``directory``; from another user's registry (not
    ``trusted``, written by ``owner``), its data dir only if it is that user's (else None, logged)
    and running only if the lock is that user's file or the pid that user's process."""
    cid = info["campaign_id"]
    known = {"campaign_id", "data_dir", "pid", "started", "kind", "backend", "prefix", "testbed"}
    pid = info.get("pid")
    data_dir = info.get("data_dir")
    if not trusted and data_dir is not None:
        what = f"registry entry {directory / cid}.json"
        data_dir = owned_dir(data_dir, owner, what=what)
        if data_dir is None:
            log.warning(
                "%s: its data dir %s is ignored (not a directory of uid %s)",
                what,
                _text(info.get("data_dir")),
                owner,
            )
    return Entry(
        campaign_id=cid,
        data_dir=_text(data_dir),
        pid=pid if isinstance(pid, int) else -1,
        started=_label(info.get("started"), "?"),
        kind=_label(info.get("kind"), "run"),
        running=_lock_held(directory / f"{cid}.lock", info, None if trusted else owner),
        backend=_text(info.get("backend")),
        prefix=_text(info.get("prefix")),
        testbed=_text(info.get("testbed")),
        registry=str(directory),
        extra={k: v for k, v in info.items() if k not in known},
        trusted=trusted,
    )


def dirs() -> list[Path]:
    """Registry directories to read: this user's, root's ``/run/labkit``, and as root every user's."""
    return [d for d, _ in _sources()]


def _sources() -> list[tuple[Path, int | None]]:
    """:func:`dirs`, each with the uid whose registry it is (None: this user's own, whoever owns it)."""
    mine = run_dir()
    out: list[tuple[Path, int | None]] = [(mine, None)]
    if os.environ.get(ENV):
        return out
    if mine != SYSTEM_DIR:
        out.append((SYSTEM_DIR, 0))
    if os.geteuid() == 0:  # read before every run (the quiet-host guard): os.scandir, not Path.glob
        with contextlib.suppress(OSError), os.scandir("/run/user") as users:
            out += [
                (Path(p), int(name))
                for name, p in sorted(
                    (u.name, os.path.join(u.path, "labkit", "campaigns")) for u in users if u.name.isdigit()
                )
                if os.path.lexists(p)
            ]
        with contextlib.suppress(OSError):
            out += sorted(
                {
                    (Path(pw.pw_dir) / ".cache" / "labkit" / "campaigns", pw.pw_uid)
                    for pw in pwd.getpwall()
                    if pw.pw_uid != 0 and os.path.isabs(pw.pw_dir or "")
                }
            )
    first = dict(reversed(out))  # a directory listed twice keeps its first owner
    return [(d, first[d]) for d in dict.fromkeys(d for d, _ in out)]


def _foreign_dir(directory: Path, owner: int) -> bool:
    """Whether ``directory`` may be read as ``owner``'s registry: a directory (not a link) of theirs."""
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != owner:
        log.warning(
            "registry of running campaigns %s ignored: not a directory of uid %d (%s, uid %d)",
            directory,
            owner,
            stat.filemode(st.st_mode),
            st.st_uid,
        )
        return False
    return True


def entries() -> list[Entry]:
    """Every registered campaign, running or stopped (killed without removing its entry)."""
    out = []
    mine = run_dir()
    for directory, owner in _sources():
        if not _is_dir(directory):
            continue
        trusted = directory == mine
        if trusted:
            _checked(directory, create=False)
            with contextlib.suppress(OSError):
                owner = os.lstat(directory).st_uid  # this user's, or root's (shared by LABKIT_RUN_DIR)
        elif directory == SYSTEM_DIR:
            try:
                _checked(directory, create=False)  # root's, and nobody else may write there
                trusted = True
            except StoreError:
                pass
        if owner is None or (not trusted and not _foreign_dir(directory, owner)):
            continue
        names: list[str] = []
        with (
            contextlib.suppress(OSError),
            os.scandir(directory) as listing,
        ):  # beside one .lock per id ever run
            names = sorted(e.name for e in listing if e.name.endswith(".json") and not e.name.startswith("."))
        if not trusted and len(names) > MAX_FOREIGN_ENTRIES:
            log.warning(
                "registry of running campaigns %s holds %d entries: only the first %d are read",
                directory,
                len(names),
                MAX_FOREIGN_ENTRIES,
            )
            names = names[:MAX_FOREIGN_ENTRIES]
        for path in (directory / name for name in names):
            info = _read(path, owner)
            if info is not None and path.name == f"{info['campaign_id']}.json":
                out.append(_entry(directory, info, trusted, owner))
    return out


def running() -> list[Entry]:
    """The campaigns running on this host now (any data dir, any user whose registry is readable);
    also the campaign ids a ``labkit clean`` holds while it removes their leftovers."""
    return [e for e in entries() if e.running]


def claimed() -> set[str]:
    """The campaign ids any process of any user holds on this host now (:func:`labkit.core.id_sockets.bound`):
    also those whose registries this user cannot read."""
    return id_sockets.bound()


def find(campaign_id: str) -> Entry | None:
    """The running entry of ``campaign_id``, or None."""
    return next((e for e in running() if e.campaign_id == campaign_id), None)


class Registration:
    """A held registry entry: call :meth:`release` (or use as a context manager) when the campaign
    stops. Made by :func:`register`."""

    def __init__(self, directory: Path, campaign_id: str, fd: int, claim: socket.socket | None = None):
        self.directory, self.campaign_id = directory, campaign_id
        self._fd: int | None = fd
        # the claim's bare fd, as the lock's: held until release, even if this object is dropped
        self._claim: int | None = None if claim is None else claim.detach()

    @property
    def path(self) -> Path:
        return self.directory / f"{self.campaign_id}.json"

    def release(self) -> None:
        """Remove the entry and drop the lock (idempotent)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with contextlib.suppress(FileNotFoundError):  # locked and claimed still: nobody else has it open
            os.unlink(self.directory / f"{self.campaign_id}.lock")
        os.close(fd)
        if self._claim is not None:  # last: the id stays claimed until the entry is gone
            claim, self._claim = self._claim, None
            os.close(claim)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def _busy(campaign_id: str, other: Entry | dict | str | None) -> StoreError:
    if isinstance(other, dict):
        other = _entry(Path("."), other)
    who = (
        other
        if isinstance(other, str)
        else other.describe()
        if other
        else "another process (entry not written yet)"
    )
    doing = (
        "is being cleaned by"
        if isinstance(other, Entry) and other.kind == "clean"
        else "is already running on this host:"
    )
    return StoreError(
        f"campaign {campaign_id!r} {doing} {who}; a campaign id runs once per host (its "
        "instances are named after it): wait for it, stop it, or use another campaign id"
    )


#: a lock probed by a reader (:func:`running`: a shared lock held for an instant) is tried again
#: this many times, this many seconds apart, before it counts as held
LOCK_TRIES, LOCK_PAUSE_S = 10, 0.02


def register(
    campaign_id: str,
    data_dir: str | Path | None,
    *,
    backend: str | None = None,
    prefix: str | None = None,
    testbed: str | None = None,
    kind: str = "run",
    exclusive: bool = False,
) -> Registration:
    """Register ``campaign_id`` as running in this process (``kind`` ``clean`` for ``labkit clean``).

    Raises StoreError naming the other data dir, pid and start time when the id is running
    already (in this registry, or in another one :func:`running` reads), or when the registry
    directory is unsafe (see the module docstring).
    """
    check_campaign_id(campaign_id)
    directory = _checked(run_dir(), create=True)
    try:
        claim = id_sockets.claim(campaign_id)
    except OSError as exc:
        raise StoreError(
            f"campaign {campaign_id!r}: cannot claim its id on this host (an abstract Unix "
            f"socket): {exc.strerror or exc}"
        ) from None
    if claim is None:  # held by another process, any user's: name it as well as we can
        other = wait_until(
            lambda: find(campaign_id),
            timeout=1.0,
            interval=0.05,
            error=None,
            what=f"the holder of campaign {campaign_id!r} to write its entry",
        )
        raise _busy(campaign_id, other or holder_text(campaign_id))
    lock = directory / f"{campaign_id}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        claim.close()
        raise StoreError(f"{lock}: cannot create the registry lock: {exc.strerror or exc}") from None
    for attempt in range(LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if attempt + 1 < LOCK_TRIES:  # a reader's probe holds it for an instant
                time.sleep(LOCK_PAUSE_S)
                continue
            os.close(fd)
            claim.close()
            raise _busy(campaign_id, _wait_entry(directory / f"{campaign_id}.json")) from None
    reg = Registration(directory, campaign_id, fd, claim)
    try:
        elsewhere = next(
            (e for e in running() if e.campaign_id == campaign_id and Path(e.registry) != directory), None
        )
        if elsewhere is not None:
            raise _busy(campaign_id, elsewhere)
        info = {
            "campaign_id": campaign_id,
            "kind": kind,
            "pid": os.getpid(),
            "pid_start": _proc_start(os.getpid()),
            "started": now_iso(),
            "data_dir": None if data_dir is None else os.path.abspath(data_dir),
            "backend": backend,
            "prefix": prefix,
            "testbed": testbed,
            "exclusive": bool(exclusive),
        }
        with contextlib.suppress(FileNotFoundError):  # a stale entry (its holder was killed); never followed
            os.unlink(reg.path)
        atomic_write(reg.path, json.dumps(info), mode=0o644)
    except BaseException:
        os.close(fd)
        reg._fd = None
        if reg._claim is not None:
            os.close(reg._claim)
            reg._claim = None
        raise
    if data_dir is not None:
        datadirs.remember(data_dir)
    return reg


def holder_text(campaign_id: str) -> str:
    """Who holds ``campaign_id``'s claim, from the kernel (pid, uid, user name) when no readable
    registry names it."""
    held = id_sockets.holder(campaign_id)
    if held is None:
        return "another process (it does not say which)"
    pid, uid = held
    try:
        name = f"{pwd.getpwuid(uid).pw_name}, "
    except KeyError:
        name = ""
    who = "another user" if uid != os.geteuid() else "this user"
    return f"pid {pid} of {who} ({name}uid {uid}; its registry is not readable here)"


def _wait_entry(path: Path) -> dict | None:
    # the holder writes its entry just after locking: give it a moment
    return (
        wait_until(
            lambda: _read(path),
            timeout=1.0,
            interval=0.05,
            error=None,
            what=f"the holder of {path} to write its entry",
        )
        or None
    )
