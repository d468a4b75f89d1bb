"""Platforms: a backend plus its options, the levels of a design factor named ``platform``.

A testbed declares platforms by name::

    platforms:
      kvm:    {backend: libvirt, uri: "qemu+ssh://{user}@{address}/system"}
      lxc:    {backend: lxd}
      native: {backend: ssh}

The backend names themselves (``local``, ``docker``, ``lxd``, ``libvirt``, ``ssh``, ``cloud``, ``slurm``) are
platforms without declaration. In string options, ``{address}`` (also ``{host}``), ``{port}``,
``{user}``, ``{key}`` and ``{name}`` are replaced by the host's values (plain substitution, no
format language). On a remote host every SSH path gets the host's ``host_key_policy`` (strict
unless the testbed or host says otherwise, :mod:`labkit.backends.hostkeys`) and ``known_hosts``
file: the ``ssh`` backend gets the host's address, port, user, key, ``host_key_policy`` and
``known_hosts``; ``docker`` without ``base_url`` gets ``ssh://user@address:port`` (the docker
SDK's SSH transport) and, with an ``ssh://`` URL, the host's key as ``ssh_key_filename``, its
``host_key_policy`` and its known_hosts file as ``ssh_known_hosts``; ``libvirt`` without ``uri``
gets ``qemu+ssh://user@address:port/system?keyfile=...``, and with any SSH URI (generated or the
platform's own) the host's ``host_key_policy`` and ``known_hosts``, which the backend applies to the
URI it opens (:mod:`labkit.backends.libvirt.sshuri`). ``local`` cannot run on a remote host. ``slurm``
runs only on the nodes of a Slurm testbed's allocation and gets the allocation's ``job_id`` and the
``node`` (:mod:`labkit.run.slurm_testbed`).

:class:`BackendPool` opens each (host, platform) backend once, checks it, and closes them all.
"""

from __future__ import annotations

import threading
import urllib.parse
from dataclasses import dataclass, field

from ..errors import BackendUnavailable, ConfigError, LabkitError, did_you_mean

BACKENDS = ("local", "docker", "lxd", "libvirt", "ssh", "cloud", "slurm")
FACTOR = "platform"
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")
MAX_PLATFORMS = 64


@dataclass(frozen=True)
class Platform:
    """A named platform: ``backend`` (one of :data:`BACKENDS`) and its ``options``."""

    name: str
    backend: str
    options: dict = field(default_factory=dict, hash=False)

    def describe(self) -> dict:
        return {"backend": self.backend, "options": dict(self.options)}


def check_platform_name(where: str, name) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or not set(name) <= _NAME_CHARS:
        raise ConfigError(
            f"{where}: platform name {str(name)[:80]!r}: use 1-64 lowercase letters, digits, '_' or '-'"
        )
    return name


def parse_platforms(raw, source: str = "testbed") -> dict[str, Platform]:
    """Declared platforms from a mapping ``name -> {backend: ..., <options>}``; ConfigError naming
    ``source`` and the key otherwise. Returns name -> :class:`Platform`."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{source}: 'platforms' must be a mapping of platform name to {{backend: ..., options...}}"
        )
    if len(raw) > MAX_PLATFORMS:
        raise ConfigError(f"{source}: 'platforms': at most {MAX_PLATFORMS} platforms")
    out = {}
    for name, spec in raw.items():
        where = f"{source}: platforms.{str(name)[:64]}"
        check_platform_name(f"{source}: platforms", name)
        if not isinstance(spec, dict) or "backend" not in spec:
            raise ConfigError(f"{where}: must be a mapping with a 'backend' key ({', '.join(BACKENDS)})")
        backend = spec["backend"]
        if backend not in BACKENDS:
            raise ConfigError(
                f"{where}.backend: {str(backend)[:64]!r} is not a backend"
                f"{did_you_mean(backend, BACKENDS, n=1)}; allowed: {', '.join(BACKENDS)}"
            )
        options = {k: v for k, v in spec.items() if k != "backend"}
        if any(not isinstance(k, str) for k in options):
            raise ConfigError(f"{where}: option names must be strings")
        out[name] = Platform(name, backend, options)
    return out


def resolve(name: str, declared: dict[str, Platform], where: str = "design") -> Platform:
    """The platform called ``name``: a declared one, else a backend name; ConfigError listing both."""
    if name in declared:
        return declared[name]
    if name in BACKENDS:
        return Platform(name, name, {})
    raise ConfigError(
        f"{where}: platform {str(name)[:64]!r} is neither declared in the testbed "
        f"({', '.join(declared) or 'none declared'}) nor a backend ({', '.join(BACKENDS)})"
        + did_you_mean(name, [*declared, *BACKENDS], n=1)
    )


def design_platforms(design) -> list[str] | None:
    """Levels of the design's ``platform`` factor (each a valid name), or None without that factor."""
    for f in design.factors:
        if f.name == FACTOR:
            return [check_platform_name(f"{design.source}: factor 'platform'", v) for v in f.levels]
    return None


def _substitute(value, values: dict):
    if isinstance(value, str):
        for key, v in values.items():
            value = value.replace("{" + key + "}", "" if v is None else str(v))
        return value
    if isinstance(value, dict):
        return {k: _substitute(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    return value


def options_for(platform: Platform, host) -> dict:
    """The backend options of ``platform`` on ``host`` (a :class:`labkit.run.testbed.Host`): templates
    filled in, the host's connection added for remote hosts. ConfigError if it cannot run there."""
    values = {
        "address": host.address,
        "host": host.address,
        "port": host.port,
        "user": host.user,
        "key": host.key,
        "name": host.name,
    }
    opts = _substitute(dict(platform.options), values)
    if platform.backend == "slurm":  # job steps on a node of the testbed's allocation
        job = getattr(host, "slurm_job", None)
        if job is None:
            raise ConfigError(
                f"platform {platform.name!r} (backend slurm) runs on the nodes of a Slurm testbed's "
                f"allocation; host {host.name!r} is not one (declare a 'slurm' section in the testbed)"
            )
        return {**opts, "job_id": job, "node": host.name}
    if not host.remote:
        return opts
    if platform.backend == "local":
        raise ConfigError(
            f"platform {platform.name!r} (backend local) runs on the controller only; "
            f"host {host.name!r} is remote: offer it the 'ssh' platform instead"
        )
    keys = {
        "host_key_policy": host.host_key_policy,
        **({"known_hosts": host.known_hosts} if host.known_hosts else {}),
    }
    if platform.backend == "ssh":
        opts = {
            "host": host.address,
            "port": host.port,
            "user": host.user,
            **({"key_filename": host.key} if host.key else {}),
            **keys,
            **opts,
        }
    elif platform.backend == "docker":
        opts.setdefault("base_url", f"ssh://{host.user}@{host.address}:{host.port}")
        if str(opts["base_url"]).startswith("ssh://"):
            if host.key:
                opts.setdefault("ssh_key_filename", host.key)
            if "ssh_verify_host" not in opts:  # its deprecated form, given by the platform
                opts.setdefault("host_key_policy", host.host_key_policy)
            if host.known_hosts:
                opts.setdefault("ssh_known_hosts", host.known_hosts)
    elif platform.backend == "libvirt":
        if "uri" not in opts:
            query = f"?keyfile={urllib.parse.quote(host.key, safe='/')}" if host.key else ""
            opts["uri"] = f"qemu+ssh://{host.user}@{host.address}:{host.port}/system{query}"
        scheme = urllib.parse.urlsplit(str(opts["uri"])).scheme
        if scheme.partition("+")[2] in ("ssh", "libssh", "libssh2"):  # the backend applies the policy
            opts.setdefault("host_key_policy", host.host_key_policy)
            if host.known_hosts:
                opts.setdefault("known_hosts", host.known_hosts)
    return opts


#: the backends with image variants, and the ``labkit images build`` options that build one
VARIANT_BUILD = {"docker": "--only docker", "lxd": "--only lxd", "libvirt": "--only none --vm"}


def variant_image(backend: str, variant: str) -> str:
    """The ``image`` option of a platform on an image variant: ``labkit/debian:12-<variant>``
    (docker), ``labkit-debian-12-<variant>`` (lxd), the variant's name (libvirt's VM image);
    ConfigError for a backend without image variants."""
    if backend == "docker":
        from ..images.docker_image import REPOSITORY, tag

        return f"{REPOSITORY}:{tag(variant)}"
    if backend == "lxd":
        from ..images.lxd_image import alias

        return alias(variant)
    if backend == "libvirt":
        return variant
    raise ConfigError(f"variant_image: {backend!r} has no image variants ({', '.join(VARIANT_BUILD)})")


def check_image(backend: str, image: str) -> None:
    """BackendUnavailable (saying how to fix it) unless ``backend`` can run ``image`` on this
    machine: the backend's own check, made with that image."""
    from ..backends import get_backend

    be = get_backend(backend, image=image)
    try:
        be.check()
    finally:
        be.close()


def disk_formats(formats=None, where: str = "disk_formats") -> list[str]:
    """``formats`` (default: every ``disk_format`` a libvirt platform takes, qcow2 and raw), each
    checked: ConfigError naming ``where`` and the allowed formats."""
    from ..backends.libvirt.xml import DISK_FORMATS, check_disk_format

    return [check_disk_format(f, where) for f in (DISK_FORMATS if formats is None else formats)]


class BackendPool:
    """Backends by (host name, platform name), each opened and checked once; thread-safe.

    ``open(host, platform)`` returns the backend (BackendUnavailable naming host and platform when it
    cannot run there); ``drop(host)`` closes a host's backends (a lost host); ``close()`` closes all.
    """

    def __init__(self, opener=None):
        from ..backends import get_backend

        self._opener = opener or (lambda p, opts: get_backend(p.backend, **opts))
        self._backends: dict[tuple[str, str], object] = {}
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._lock = threading.Lock()

    def open(self, host, platform: Platform):
        key = (host.name, platform.name)
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key in self._backends:
                return self._backends[key]
            try:
                backend = self._opener(platform, options_for(platform, host))
            except ConfigError as exc:
                raise ConfigError(f"host {host.name!r}, platform {platform.name!r}: {exc}") from None
            except LabkitError as exc:
                raise BackendUnavailable(
                    f"host {host.name!r} cannot offer platform {platform.name!r} "
                    f"(backend {platform.backend}): {exc}"
                ) from exc
            with self._lock:
                self._backends[key] = backend
            return backend

    def adopt(self, host, platform: Platform, backend) -> None:
        """Hold ``backend``, opened by the caller, as ``host``'s ``platform`` (a campaign on one
        backend: the engine's one slot); :meth:`close` closes it."""
        with self._lock:
            self._backends[(host.name, platform.name)] = backend

    def opened(self, host_name: str | None = None) -> list[tuple[str, str, object]]:
        with self._lock:
            return [(h, p, b) for (h, p), b in self._backends.items() if host_name in (None, h)]

    def drop(self, host_name: str) -> None:
        for h, p, b in self.opened(host_name):
            with self._lock:
                self._backends.pop((h, p), None)
            _close(b)

    def close(self) -> None:
        for h, _p, _b in self.opened():
            self.drop(h)


def _close(backend) -> None:
    try:
        backend.close()
    except Exception:  # closing a backend of a dead host must not stop the others closing
        pass
