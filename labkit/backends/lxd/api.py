"""LXD's daemon through pylxd for the ``lxd`` backend (:mod:`labkit.backends.lxd`): the SDK
(:func:`sdk`), its socket (:func:`default_socket`, and why this user cannot reach it:
:func:`socket_hint`), the errors that say an instance is busy or an exec never started, and an
exec tried again when its websockets could not be connected (:func:`execute`)."""

from __future__ import annotations

import os
import stat
from typing import Any

from ...core.waiting import retry
from ...errors import BackendError, BackendUnavailable
from ..output import CappedOutput

START_HINT = (
    "start it with `lxd --group root > /var/log/labkit-lxd.log 2>&1 &` then "
    "`lxd waitready` and, the first time, `lxd init --preseed` (a dir pool, no network); "
    "or `systemctl start lxd`; or run `bash scripts/setup-containers.sh`"
)


def socket_hint(socket: str) -> str:
    """Why this user cannot reach LXD's ``socket`` and the fix: a socket it may not open is a
    matter of groups (``--group root`` makes it root:root, and no group membership helps), not
    of a daemon to start (issue 44); else :data:`START_HINT`."""
    if os.path.exists(socket) and not os.access(socket, os.R_OK | os.W_OK):
        st = os.stat(socket)
        owner = f"uid {st.st_uid}, gid {st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o}"
        if st.st_gid == 0:
            return (
                f"LXD is running but its socket is root's ({owner}): it was started with `--group root`, "
                "so membership of the lxd group cannot help; restart it with `--group lxd` (or "
                "`systemctl start lxd`, whose socket is lxd's) and add this user to the lxd group "
                "(`usermod -aG lxd USER`, then log in again)"
            )
        return (
            f"LXD is running but this user may not open its socket ({owner}): add the user to "
            "that group (`usermod -aG GROUP USER`, then log in again)"
        )
    return START_HINT


def sdk():
    try:
        import pylxd
    except ImportError as exc:
        raise BackendUnavailable(
            "the lxd backend needs pylxd, which is not installed; install it with: pip install pylxd"
        ) from exc
    return pylxd


def default_socket() -> str:
    if os.environ.get("LXD_DIR"):
        return os.path.join(os.environ["LXD_DIR"], "unix.socket")
    for path in ("/var/snap/lxd/common/lxd/unix.socket", "/var/lib/lxd/unix.socket"):
        if os.path.exists(path):
            return path
    return "/var/lib/lxd/unix.socket"


#: how often an exec whose websockets could not be connected is tried in all
EXEC_ATTEMPTS = 3


def instance_busy(exc: BaseException) -> bool:
    """Whether LXD refused an operation on an instance because another one holds it ("Instance
    is busy running a "start" operation", a failed start winding down). LXD reports that only
    in the text of a failed operation (the operation's status code is the generic 400
    "Failure", the HTTP status 200), so this is the one place where the text decides."""
    pylxd = sdk()
    return (
        isinstance(exc, pylxd.exceptions.LXDAPIException)
        and not isinstance(exc, pylxd.exceptions.NotFound)
        and "busy" in str(exc).lower()
    )


def in_websocket_connect(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while an exec's websockets were being connected (ws4py's
    client ``connect``): LXD starts the command only once all of them are, so it never ran."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "connect" and str(frame.f_globals.get("__name__", "")).startswith("ws4py"):
            return True
        tb = tb.tb_next
    return False


def execute(
    model: Any, argv: list[str], env: dict, out: CappedOutput | None = None, err: CappedOutput | None = None
) -> Any:
    """pylxd's ``Instance.execute`` (its output fed to ``out`` and ``err`` as it comes, as bytes,
    when they are given: pylxd then keeps none of it), tried again (up to :data:`EXEC_ATTEMPTS` in all) when
    connecting its websockets fails (a BrokenPipeError or a refused handshake when LXD is
    slow to answer on a loaded host: LXD gives the client 5 s to connect them): the command had
    not started, so it cannot run twice. Any other error, or the last attempt's, propagates; a
    socket or ws4py error as BackendError."""

    def once() -> Any:
        if out is None or err is None:
            return model.execute(argv, environment=env)
        return model.execute(
            argv, environment=env, decode=False, stdout_handler=out.write, stderr_handler=err.write
        )

    try:
        return retry(
            once,
            transient=in_websocket_connect,
            what=f"LXD exec in {model.name} (connecting its websockets)",
            attempts=EXEC_ATTEMPTS,
            interval=0.2,
        )
    except Exception as exc:
        if isinstance(exc, OSError) or type(exc).__module__.startswith("ws4py"):
            raise BackendError(
                f"LXD exec of {argv[:1]} in {model.name} failed: {type(exc).__name__}: {exc}"
            ) from exc
        raise
