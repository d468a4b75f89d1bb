"""A read-only dashboard: the explorer notebook served by Voila as a web app without code cells.

``labkit dashboard`` (and ``make dashboard``) runs :func:`voila_command`: Voila renders
``notebooks/00_explorer.ipynb`` (its code cells stripped, tracebacks hidden) for colleagues who
browse and compare campaigns and never run anything: the explorer opens stores read-only, and
Voila does not let the page execute code of its own. It listens on 127.0.0.1 unless told
otherwise and asks for a token (generated per start, passed to Voila in its environment, not on
its command line where other users could read it); the kernels' channels are encrypted
(CurveZMQ, :data:`KERNEL_ENCRYPTION`).
"""
from __future__ import annotations

import ipaddress
import os
import secrets
import sys
from pathlib import Path

from ..errors import ConfigError

__all__ = ["DEFAULT_PORT", "KERNEL_ENCRYPTION", "explorer_notebook", "voila_command"]

DEFAULT_PORT = 8866
#: jupyter_client's transport-encryption policy for the kernels the dashboard starts: "auto"
#: provisions CurveZMQ keys when the kernelspec declares support (ipykernel does)
KERNEL_ENCRYPTION = "auto"


def explorer_notebook(root: str | Path | None = None) -> Path:
    """``notebooks/00_explorer.ipynb`` of the labkit checkout (:func:`labkit.core.paths.repo_root`)."""
    from ..core import paths
    nb = Path(root) if root is not None else paths.repo_root()
    nb = nb / "notebooks" / "00_explorer.ipynb"
    if not nb.is_file():
        raise ConfigError(f"the explorer notebook {nb} is missing: run from a labkit checkout or set LABKIT_ROOT")
    return nb


def voila_command(*, port: int = DEFAULT_PORT, ip: str = "127.0.0.1", token: str | None = None,
                  root: str | Path | None = None) -> tuple[list[str], dict[str, str], str]:
    """``(argv, env, url)`` to serve the explorer with Voila: ``argv`` runs ``python -m voila``
    on :func:`explorer_notebook` (sources stripped, tracebacks hidden, no browser opened, the
    kernels' transport encrypted); ``env`` is this process's environment with ``JUPYTER_TOKEN``
    set to ``token`` (``None``: a new random token; ``""``: no token, anyone who can reach the
    address may look); ``url`` is where to open it. ``port`` must be 1-65535 and ``ip`` an
    address (ConfigError otherwise)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"dashboard port {port!r}: use an integer from 1 to 65535")
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise ConfigError(f"dashboard ip {ip!r}: give an IP address, e.g. 127.0.0.1 (the default) "
                          "or 0.0.0.0 to listen on every interface") from None
    nb = explorer_notebook(root)
    token = secrets.token_urlsafe(24) if token is None else token
    argv = [sys.executable, "-m", "voila", str(nb), "--no-browser", f"--port={port}",
            f"--Voila.ip={ip}", "--Voila.port_retries=0",
            "--VoilaConfiguration.strip_sources=True", "--VoilaConfiguration.show_tracebacks=False"]
    import zmq
    if zmq.has("curve"):          # jupyter_client refuses the policy without CurveZMQ in libzmq
        argv.append(f"--KernelManager.transport_encryption={KERNEL_ENCRYPTION}")
    env = dict(os.environ)
    env.pop("JUPYTER_TOKEN", None)
    if token:
        argv.append("--token")            # Voila.auto_token: the identity provider reads JUPYTER_TOKEN
        env["JUPYTER_TOKEN"] = token
    env.setdefault("LABKIT_ROOT", str(nb.parents[1]))
    host = f"[{addr}]" if addr.version == 6 else str(addr)
    shown = "127.0.0.1" if addr.is_unspecified else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    return argv, env, url
