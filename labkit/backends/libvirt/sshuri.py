"""The host-key policy of a libvirt URI that reaches its daemon over SSH.

libvirt's ``ssh`` transport (``qemu+ssh://``, ``xen+ssh://``) runs the ``ssh`` binary, which
otherwise checks host keys as the user's OpenSSH configuration says (``StrictHostKeyChecking
ask`` without a terminal, or ``no``). The libvirt backend's ``host_key_policy`` (strict, the
default | accept-new | insecure) and ``known_hosts`` options (:mod:`labkit.backends.hostkeys`)
apply to every such URI it opens: :func:`parse` returns the URI libvirt is given, the user's with
``command`` (a small program running ``ssh`` with the policy's options first, which OpenSSH's
first-value rule makes win over any ``~/.ssh/config``: :func:`~labkit.backends.hostkeys.libvirt_query`)
and ``no_tty=1`` added, ``keyfile`` kept. libvirt's own SSH clients (``+libssh``, ``+libssh2``) get
their ``known_hosts`` file and ``known_hosts_verify`` (``normal``, ``auto``, ``ignore``); they read
one file: ``known_hosts`` when given, else ``~/.ssh/known_hosts``. A URI parameter that would
undo the policy (``command``, ``no_verify``, ``known_hosts``, ``known_hosts_verify``) is a
ConfigError saying which option to use instead. Other transports (a local socket, ``tls``,
``tcp``) have no host key: their URI is used as given and no policy is recorded.
"""

from __future__ import annotations

import logging
import urllib.parse
from dataclasses import dataclass

from ...errors import ConfigError
from .. import hostkeys

log = logging.getLogger("labkit.backends.libvirt")

SSH_TRANSPORTS = ("ssh", "libssh", "libssh2")
#: known_hosts_verify of libvirt's libssh/libssh2 transports for each policy
LIBSSH_VERIFY = {hostkeys.STRICT: "normal", hostkeys.ACCEPT_NEW: "auto", hostkeys.INSECURE: "ignore"}
#: URI parameters labkit sets from the policy (the user gives the options instead)
OWN = {
    "command": "host_key_policy / known_hosts (labkit runs ssh with their options)",
    "no_verify": "host_key_policy: insecure",
    "known_hosts": "the known_hosts option",
    "known_hosts_verify": "host_key_policy",
}


@dataclass(frozen=True)
class SshUri:
    """A libvirt URI and what it reaches over SSH: ``open_uri`` is what libvirt opens (``uri``
    itself for a transport without SSH, whose ``policy`` is then None)."""

    uri: str
    open_uri: str
    host: str | None = None
    port: int = 22
    policy: str | None = None
    known_hosts: str | None = None


def transport(uri: str) -> str:
    """The URI's transport: what follows ``+`` in its scheme ("" for none)."""
    scheme = urllib.parse.urlsplit(uri).scheme
    return scheme.split("+", 1)[1] if "+" in scheme else ""


def parse(uri: str, policy: str | None, known_hosts: str | None) -> SshUri:
    """``uri`` with ``policy`` (None: the default, strict) and ``known_hosts`` applied (see the
    module docstring); ConfigError for a malformed URI, a parameter that contradicts the policy,
    or a policy given for a URI without SSH."""
    how = transport(uri)
    if how not in SSH_TRANSPORTS:
        if policy is not None or known_hosts is not None:
            raise ConfigError(
                f"libvirt options host_key_policy and known_hosts apply to an SSH URI "
                f"(qemu+ssh://user@host/system), not {uri!r}"
            )
        return SshUri(uri, uri)
    policy = hostkeys.check_policy(
        hostkeys.DEFAULT if policy is None else policy, "libvirt option host_key_policy"
    )
    known_hosts = hostkeys.known_hosts_path("libvirt option known_hosts", known_hosts)
    parts = urllib.parse.urlsplit(uri)
    try:
        port = parts.port or 22
    except ValueError as exc:
        raise ConfigError(f"libvirt option uri {uri!r}: {exc}") from None
    if not parts.hostname:
        raise ConfigError(
            f"libvirt option uri {uri!r}: an SSH URI names its host (qemu+ssh://user@host/system)"
        )
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    for key, _value in query:
        if key in OWN:
            raise ConfigError(
                f"libvirt option uri {uri!r}: its {key!r} parameter would bypass the host-key "
                f"policy; remove it and use {OWN[key]}"
            )
    if how == "ssh":
        own = hostkeys.libvirt_query(policy, known_hosts, None)
    else:
        own = {"known_hosts_verify": LIBSSH_VERIFY[policy]}
        if policy != hostkeys.INSECURE:
            own["known_hosts"] = hostkeys.record_file(known_hosts)
        if dict(query).get("no_tty") is None:
            own["no_tty"] = "1"
    if policy == hostkeys.INSECURE:
        log.warning(
            "libvirt %s: host_key_policy insecure: the host key of %s is not checked "
            "(a man-in-the-middle is not noticed)",
            uri,
            parts.hostname,
        )
    merged = [(k, v) for k, v in query if k not in own] + list(own.items())
    text = urllib.parse.urlencode(
        merged, safe="/", quote_via=urllib.parse.quote
    )  # libvirt reads no "+" as a space
    opened = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, text, parts.fragment))
    return SshUri(uri, opened, parts.hostname, port, policy, known_hosts)


def refusal(where: SshUri, error: object) -> str | None:
    """labkit's message for a host key the connection to ``where`` refused (``error``: libvirt's,
    which carries the ssh binary's words: :func:`labkit.backends.hostkeys.ssh_refusal`); None if
    it was something else."""
    if where.policy is None or where.host is None:
        return None
    return hostkeys.ssh_refusal(str(error), where.host, where.port, where.known_hosts)
