"""The provider contract run against a real account: ``labkit cloud check --provider X``.

Without a flavor and an image it checks the credentials and the endpoint only. With them it
makes one server under a fresh prefix ``labkit-cloudcheck<hex>--``, runs a command on it through
the ``ssh`` backend, finds it by its tag, deletes it through ``cleanup(prefix)`` and checks that
nothing of that prefix is left.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from ...core.instance import InstanceSpec
from ...errors import BackendError
from .base import CloudProvider

log = logging.getLogger("labkit.backends.clouds")


def check_contract(provider: CloudProvider, flavor: str | None = None, image: str | None = None) -> dict:
    """Run the contract; returns {provider, checked, prefix, provisioning_s, listed, removed,
    left, seconds} (the last five only with a flavor and an image). BackendError on a breach.
    Progress: INFO lines on the ``labkit.backends.clouds`` logger."""
    t0 = time.monotonic()
    provider.check()
    out: dict[str, Any] = {"provider": provider.name, "checked": True}
    if not flavor or not image:
        log.info(
            "%s: credentials and endpoint answer (give --flavor and --image to make a server)", provider.name
        )
        return out
    prefix = f"labkit-cloudcheck{secrets.token_hex(3)}--"
    try:
        [server] = provider.provision(flavor, image, prefix)
        log.info(
            "%s: %s at %s answered over SSH after %.1fs",
            provider.name,
            server.name,
            server.address,
            server.provisioning_s,
        )
        backend = server.ssh_backend(enforce_limits=False)
        try:
            [inst] = backend.provision(InstanceSpec(vcpus=1))
            try:
                res = inst.exec(["uname", "-r"], timeout=60)
                log.info("%s: uname -r on %s: %s", provider.name, server.name, res.stdout.strip())
            finally:
                inst.destroy()
        finally:
            backend.close()
        listed = [s.name for s in provider.list_labkit(prefix)]
        if listed != [server.name]:
            raise BackendError(
                f"{provider.name}: list_labkit({prefix!r}) gave {listed}, expected [{server.name}]"
            )
        out.update(prefix=prefix, provisioning_s=server.provisioning_s, listed=listed)
    except BaseException:
        try:
            provider.cleanup(prefix)
        except Exception as exc:  # the first error is the one to report
            log.warning("%s: cleanup(%r) after the failure failed too: %s", provider.name, prefix, exc)
        raise
    out["removed"] = provider.cleanup(prefix)
    out["left"] = [s.name for s in provider.list_labkit(prefix)]
    if out["left"]:
        raise BackendError(f"{provider.name}: cleanup({prefix!r}) left {out['left']}")
    out["seconds"] = time.monotonic() - t0
    log.info(
        "%s: contract holds (%.1fs; removed %s)", provider.name, out["seconds"], " ".join(out["removed"])
    )
    return out
