"""A read-only dashboard: the explorer notebook served by Voila as a web app without code cells.

``labkit dashboard`` (and ``make dashboard``) runs :func:`voila_command`: Voila renders
``notebooks/00_explorer.ipynb`` (its code cells stripped, tracebacks hidden) for colleagues who
browse and compare campaigns and never run anything: the page is served as soon as the campaign
list is read, and the first campaign's analysis fills its tab a few seconds later (computed by
the kernel after the page: :meth:`labkit.report.explore.Explorer.app`, ``defer``; measured by
``benchmarks/bench_dashboard.py``); the page names no server path. The explorer opens stores read-only, and
Voila does not let the page execute code of its own. It listens on 127.0.0.1 unless told
otherwise and asks for a token (generated per start, passed to Voila in its environment, not on
its command line where other users could read it); the kernels' channels are encrypted
(CurveZMQ, :data:`KERNEL_ENCRYPTION`).

The command owns what it starts (:func:`serve`):

* **one process group**: Voila runs in a session and process group of its own, so a terminal's
  Ctrl-C reaches ``labkit dashboard`` alone, which then stops the whole group; the kernels
  Voila starts each get a group of their own (jupyter_client's choice, for interrupts), so the
  stop also kills every process found under Voila (psutil) when it began;
* **every stop signal handled**: SIGTERM, SIGINT (even when inherited as ignored, e.g. from a
  shell's ``&``) and SIGHUP (unless inherited as ignored: ``nohup`` keeps its meaning) stop the
  dashboard: Voila gets SIGINT for SIGINT and SIGTERM otherwise (its graceful stop: kernels shut
  down, connection files removed); after :data:`STOP_GRACE` seconds (or at a second signal) its
  group and every kernel are killed (SIGKILL); Voila and its kernels are gone within
  :data:`STOP_BOUND` seconds, and the command prints one line saying so (``labkit dashboard:
  stopped on SIGTERM: Voila and 2 kernels ended in 1.2 s``);
* **children die with their parent**: Voila is started with ``PR_SET_PDEATHSIG`` = SIGTERM (if
  ``labkit dashboard`` is SIGKILLed, Voila stops), and each kernel, which Voila starts, with
  ``PR_SET_PDEATHSIG`` = SIGKILL (:class:`~labkit.voila_kernels.DashboardKernel`; ipykernel's
  own parent poller is a second line): nothing outlives ``labkit dashboard``, however it ends;
* **kernels bounded** (:class:`~labkit.voila_kernels.DashboardKernelManager`, Voila's
  ``VoilaConfiguration.multi_kernel_manager_class``): at most ``max_kernels`` at once (default
  :data:`DEFAULT_MAX_KERNELS`; a page load past it gets HTTP 503 "the dashboard is busy" and
  starts nothing); a kernel whose page never opened its websocket, or closed it, is shut down
  once idle for ``unconnected_timeout`` seconds (default :data:`DEFAULT_UNCONNECTED_TIMEOUT`);
  an open page idle for ``idle_timeout`` seconds (default :data:`DEFAULT_IDLE_TIMEOUT`) loses
  its kernel too (jupyter_server's ``MappingKernelManager.cull_idle_timeout`` with
  ``cull_connected``; the reader reloads). A kernel busy running the notebook is never culled.
  Reloading the page in a loop therefore holds at most ``max_kernels`` kernels' memory.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ..errors import ConfigError
from ..voila_kernels import DEFAULT_MAX_KERNELS, DEFAULT_UNCONNECTED_TIMEOUT, die_with_parent

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_KERNELS",
    "DEFAULT_PORT",
    "DEFAULT_UNCONNECTED_TIMEOUT",
    "KERNEL_ENCRYPTION",
    "STOP_BOUND",
    "STOP_GRACE",
    "explorer_notebook",
    "serve",
    "voila_command",
]

DEFAULT_PORT = 8866
#: jupyter_client's transport-encryption policy for the kernels the dashboard starts: "auto"
#: provisions CurveZMQ keys when the kernelspec declares support (ipykernel does)
KERNEL_ENCRYPTION = "auto"
#: seconds an open page may stay idle before its kernel is shut down (the reader reloads)
DEFAULT_IDLE_TIMEOUT = 1800
#: seconds Voila has to stop by itself after the forwarded signal; then its group and kernels are killed
STOP_GRACE = 3.0
#: seconds within which Voila and its kernels are gone after a stop signal
STOP_BOUND = 5.0
#: seconds a kernel has to exit after its shutdown request (jupyter_client's KernelManager.shutdown_wait_time)
KERNEL_SHUTDOWN_WAIT = 1.0
#: Voila's kernel manager (by name: only Voila's process imports jupyter_server)
_KERNEL_MANAGER = "labkit.voila_kernels.DashboardKernelManager"


def explorer_notebook(root: str | Path | None = None) -> Path:
    """``notebooks/00_explorer.ipynb`` of ``root`` or of the labkit checkout
    (:func:`labkit.core.paths.checkout`), else the copy that ships with labkit
    (:func:`labkit.core.paths.notebooks_dir`: no checkout needed)."""
    from ..core import paths

    base = Path(root) if root is not None else paths.checkout()
    nb = (
        base / "notebooks" / "00_explorer.ipynb"
        if base is not None
        else paths.notebooks_dir() / "00_explorer.ipynb"
    )
    if not nb.is_file():
        raise ConfigError(
            f"the explorer notebook {nb} is missing: reinstall labkit (it ships with the package) "
            "or give the root of a labkit checkout"
        )
    return nb


def _seconds(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"dashboard {name} {value!r}: give a whole number of seconds, at least 1")
    return value


def voila_command(
    *,
    port: int = DEFAULT_PORT,
    ip: str = "127.0.0.1",
    token: str | None = None,
    root: str | Path | None = None,
    data_dir: str | Path | None = None,
    max_kernels: int = DEFAULT_MAX_KERNELS,
    unconnected_timeout: int = DEFAULT_UNCONNECTED_TIMEOUT,
    idle_timeout: int = DEFAULT_IDLE_TIMEOUT,
) -> tuple[list[str], dict[str, str], str]:
    """``(argv, env, url)`` to serve the explorer with Voila: ``argv`` runs ``python -m voila``
    on :func:`explorer_notebook` (sources stripped, tracebacks hidden, no browser opened, the
    kernels' transport encrypted, kernels managed by :class:`~labkit.voila_kernels.DashboardKernelManager`: at most
    ``max_kernels`` at once, one whose page never connected shut down after
    ``unconnected_timeout`` idle seconds, any after ``idle_timeout``); ``env`` is this process's
    environment with ``JUPYTER_TOKEN`` set to ``token`` (``None``: a new random token; ``""``: no
    token, anyone who can reach the address may look; ``LABKIT_DATA_DIR`` the campaigns' folder:
    ``data_dir``, default :func:`labkit.core.paths.data_dir`; ``LABKIT_EXPLORER_DEFER`` "1" unless
    set: the explorer's page is served first and its first analysis computed after,
    :meth:`labkit.report.explore.Explorer.app`); ``url`` is where to open it. ``port`` must
    be 1-65535, ``ip`` an address, ``max_kernels`` 1-1000 and the timeouts whole seconds >= 1
    (ConfigError otherwise)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"dashboard port {port!r}: use an integer from 1 to 65535")
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ConfigError(
            f"dashboard ip {ip!r}: give an IP address, e.g. 127.0.0.1 (the default) "
            "or 0.0.0.0 to listen on every interface"
        ) from None
    if isinstance(max_kernels, bool) or not isinstance(max_kernels, int) or not 1 <= max_kernels <= 1000:
        raise ConfigError(
            f"dashboard max_kernels {max_kernels!r}: give a whole number from 1 to 1000 "
            "(kernels running at once; each holds about 0.5 GB)"
        )
    unconnected_timeout = _seconds("unconnected_timeout", unconnected_timeout)
    idle_timeout = _seconds("idle_timeout", idle_timeout)
    nb = explorer_notebook(root)
    token = secrets.token_urlsafe(24) if token is None else token
    # the culler wakes often enough to honour the shorter timeout within a quarter of it
    cull_interval = max(1, min(unconnected_timeout, idle_timeout) // 4)
    argv = [
        sys.executable,
        "-m",
        "voila",
        str(nb),
        "--no-browser",
        f"--port={port}",
        f"--Voila.ip={ip}",
        "--Voila.port_retries=0",
        "--VoilaConfiguration.strip_sources=True",
        "--VoilaConfiguration.show_tracebacks=False",
        f"--VoilaConfiguration.multi_kernel_manager_class={_KERNEL_MANAGER}",
        f"--DashboardKernelManager.max_kernels={max_kernels}",
        f"--DashboardKernelManager.unconnected_timeout={unconnected_timeout}",
        f"--MappingKernelManager.cull_idle_timeout={idle_timeout}",
        "--MappingKernelManager.cull_connected=True",
        f"--MappingKernelManager.cull_interval={cull_interval}",
        f"--KernelManager.shutdown_wait_time={KERNEL_SHUTDOWN_WAIT}",
    ]
    import zmq

    if zmq.has("curve"):  # jupyter_client refuses the policy without CurveZMQ in libzmq
        argv.append(f"--KernelManager.transport_encryption={KERNEL_ENCRYPTION}")
    env = dict(os.environ)
    env.pop("JUPYTER_TOKEN", None)
    if token:
        argv.append("--token")  # Voila.auto_token: the identity provider reads JUPYTER_TOKEN
        env["JUPYTER_TOKEN"] = token
    from ..core import paths

    # the campaigns shown: ``data_dir`` (relative: from here), else the checkout's or ./data, passed to
    # the kernels (which start beside the notebook) as an absolute path (paths.DATA_DIR_ENV)
    env[paths.DATA_DIR_ENV] = str(Path(os.path.abspath(paths.data_dir(data_dir))))
    # the page is served before the first campaign's analysis is computed (issue 46: 32 s to the
    # first page); LABKIT_EXPLORER_DEFER=0 in the environment keeps the old way (everything first)
    from .deferred import DEFER_ENV

    env.setdefault(DEFER_ENV, "1")
    host = f"[{addr}]" if addr.version == 6 else str(addr)
    shown = "127.0.0.1" if addr.is_unspecified else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    return argv, env, url


# -- running it -------------------------------------------------------------------------------------
def _say(out: TextIO, line: str) -> None:
    try:
        print(line, file=out, flush=True)
    except (OSError, ValueError):  # the terminal went away (SIGHUP): the stop goes on
        pass


def _gone(procs: list[Any]) -> list[Any]:
    """Those of ``procs`` (psutil.Process) still running (a zombie has ended)."""
    import psutil

    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            pass
    return left


def serve(
    argv: list[str], env: dict[str, str], *, grace: float = STOP_GRACE, out: TextIO | None = None
) -> int:
    """Run Voila (``argv``, ``env`` from :func:`voila_command`) until it exits or this process
    receives SIGTERM, SIGINT or SIGHUP (see the module docstring: Voila in its own process group
    with ``PR_SET_PDEATHSIG``, the signal forwarded, SIGKILL of the group and of every kernel
    after ``grace`` seconds or at a second signal). Call it from the main thread. Returns 0
    after a stop by signal with nothing left, 1 if a process of it survived (named in the
    printed line), else Voila's exit status; prints one line on ``out`` (default stdout) when
    it stops."""
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= STOP_BOUND - 0.5:
        raise ConfigError(f"dashboard stop grace {grace!r}: give seconds from 0 to {STOP_BOUND - 0.5:g}")
    out = sys.stdout if out is None else out
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)

    stops = [signal.SIGTERM, signal.SIGINT]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # nohup: hangups stay ignored
        stops.append(signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in stops}
    try:
        proc = subprocess.Popen(
            argv, env=env, start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM)
        )
        try:
            while not received:
                try:
                    rc = proc.wait(timeout=0.2)
                except subprocess.TimeoutExpired:
                    continue
                _say(out, f"labkit dashboard: Voila exited with status {rc}")
                return rc
            return _stop(proc, received, grace, out)
        finally:
            if proc.poll() is None:  # an exception on the way: nothing may outlive us
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        for s, h in previous.items():
            if h is not None:
                signal.signal(s, h)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _stop(proc: subprocess.Popen, received: list[int], grace: float, out: TextIO) -> int:
    import psutil

    t0 = time.monotonic()
    signum = received[0]
    name = signal.Signals(signum).name
    try:
        voila = psutil.Process(proc.pid)
        kernels = voila.children(recursive=True)
    except psutil.NoSuchProcess:
        voila, kernels = None, []
    # Voila stops gracefully on SIGTERM and SIGINT; it has no SIGHUP handler (it would die
    # leaving its connection files): SIGHUP is forwarded as SIGTERM
    _killpg(proc.pid, signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
    deadline = t0 + grace
    while proc.poll() is None and time.monotonic() < deadline and len(received) < 2:
        time.sleep(0.05)
    killed = proc.poll() is None or bool(_gone(kernels))
    _killpg(proc.pid, signal.SIGKILL)  # the group: Voila and anything it left in it
    for k in _gone(kernels):  # each kernel is in a session of its own
        try:
            k.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    left = _gone(kernels)
    end = t0 + STOP_BOUND
    while left and time.monotonic() < end:
        time.sleep(0.05)
        left = _gone(kernels)
    dt = time.monotonic() - t0
    n = len(kernels)
    what = f"Voila and {n} kernel{'s' if n != 1 else ''}" if voila is not None else "Voila"
    if left:
        _say(
            out,
            f"labkit dashboard: stopped on {name}, but {len(left)} of its processes still run: "
            + ", ".join(str(p.pid) for p in left),
        )
        return 1
    _say(
        out,
        f"labkit dashboard: stopped on {name}: {what} ended in {dt:.1f} s"
        + (f" (killed after {grace:g} s)" if killed else ""),
    )
    return 0
