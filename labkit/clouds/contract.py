"""The provider contract run against a real account: ``labkit cloud check --provider X``.

Without a flavor and an image it checks the credentials and the endpoint only. With them it
makes one server under a fresh prefix ``labkit-cloudcheck<hex>--``, runs a command on it through
the ``ssh`` backend, finds it by its tag, deletes it through ``cleanup(prefix)`` and checks that
nothing of that prefix is left.
"""
from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from ..errors import BackendError
from ..instance import InstanceSpec
from .base import CloudProvider


def check_contract(provider: CloudProvider, flavor: str | None = None, image: str | None = None,
                   echo: Callable[[str], object] = print) -> dict:
    """Run the contract; returns {provider, checked, prefix, provisioning_s, listed, removed,
    left, seconds} (the last five only with a flavor and an image). BackendError on a breach."""
    t0 = time.monotonic()
    provider.check()
    out: dict[str, Any] = {"provider": provider.name, "checked": True}
    if not flavor or not image:
        echo(f"{provider.name}: credentials and endpoint answer (give --flavor and --image to make a server)")
        return out
    prefix = f"labkit-cloudcheck{secrets.token_hex(3)}--"
    try:
        [server] = provider.provision(flavor, image, prefix)
        echo(f"{provider.name}: {server.name} at {server.address} answered over SSH after "
             f"{server.provisioning_s:.1f}s")
        backend = server.ssh_backend(enforce_limits=False)
        try:
            [inst] = backend.provision(InstanceSpec(vcpus=1))
            try:
                res = inst.exec(["uname", "-r"], timeout=60)
                echo(f"{provider.name}: uname -r on {server.name}: {res.stdout.strip()}")
            finally:
                inst.destroy()
        finally:
            backend.close()
        listed = [s.name for s in provider.list_labkit(prefix)]
        if listed != [server.name]:
            raise BackendError(f"{provider.name}: list_labkit({prefix!r}) gave {listed}, expected [{server.name}]")
        out.update(prefix=prefix, provisioning_s=server.provisioning_s, listed=listed)
    except BaseException:
        try:
            provider.cleanup(prefix)
        except Exception as exc:   # the first error is the one to report
            echo(f"{provider.name}: cleanup({prefix!r}) after the failure failed too: {exc}")
        raise
    out["removed"] = provider.cleanup(prefix)
    out["left"] = [s.name for s in provider.list_labkit(prefix)]
    if out["left"]:
        raise BackendError(f"{provider.name}: cleanup({prefix!r}) left {out['left']}")
    out["seconds"] = time.monotonic() - t0
    echo(f"{provider.name}: contract holds ({out['seconds']:.1f}s; removed {' '.join(out['removed'])})")
    return out
