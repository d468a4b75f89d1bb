"""Facts about fleet hosts: liveness probes and per-host fingerprints.

``reachable(host, timeout)`` says whether a host's sshd answers (TCP connect and the ``SSH-``
banner, bounded by ``timeout``); ``host_facts(host, backend)`` is the host part of a run's
fingerprint; ``identity_warnings(facts, hosts)`` lists differences between hosts that should be
identical (same labels): CPU model, kernel, governor, SMT, CPU count.
"""

from __future__ import annotations

import socket

IDENTITY = ("cpu_model", "kernel", "governor", "smt", "cpus")


def reachable(host, timeout: float) -> tuple[bool, str]:
    """(True, "") if ``host``'s sshd accepts a TCP connection and sends its banner within
    ``timeout`` seconds; else (False, why). A local host (no address) is always reachable."""
    if not host.remote:
        return True, ""
    try:
        with socket.create_connection((host.address, host.port), timeout=timeout) as s:
            s.settimeout(timeout)
            banner = s.recv(64)
    except OSError as exc:
        return False, f"{host.address}:{host.port}: {exc.strerror or exc}"
    if not banner.startswith(b"SSH-"):
        return False, f"{host.address}:{host.port}: no SSH banner (got {banner[:20]!r})"
    return True, ""


def host_facts(host, backend, fp: dict | None = None) -> dict:
    """The host part of a fingerprint: this machine's full fingerprint for the local host; for a
    remote host what its backend reports (kernel, CPU model, CPUs, and governor and SMT where the
    backend reads them: ssh, in its connection probe; ``fp``, its fingerprint when the caller has
    read it already)."""
    if not host.remote:
        from ..core.fingerprint import host_fingerprint

        return host_fingerprint()
    facts = {"name": host.name, "address": host.address, "labels": dict(host.labels)}
    if fp is None:
        try:
            fp = backend.fingerprint()
        except Exception as exc:  # a fact we cannot read is recorded as such
            fp = {"error": str(exc)[:200]}
    facts.update(
        {
            k: fp.get(k)
            for k in ("kernel", "cpu_model", "cpus", "hostname", "machine", "governor", "smt")
            if k in fp
        }
    )
    return facts


def identity_warnings(facts: dict[str, dict], hosts) -> list[str]:
    """Lines ``hosts a and b (labels {...}) differ in kernel: x vs y`` for hosts with the same labels
    whose identity facts (:data:`IDENTITY`) differ. ``facts``: host name -> host facts."""
    groups: dict[str, list] = {}
    for h in hosts:
        if h.name in facts:
            groups.setdefault(repr(sorted(h.labels.items())), []).append(h)
    out = []
    for members in groups.values():
        first = members[0]
        for other in members[1:]:
            for key in IDENTITY:
                a, b = facts[first.name].get(key), facts[other.name].get(key)
                if a is not None and b is not None and a != b:
                    out.append(
                        f"hosts {first.name} and {other.name} (labels {first.labels}) differ in "
                        f"{key}: {a!r} vs {b!r}"
                    )
    return out
