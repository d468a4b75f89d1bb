"""The shared Debian 12 root filesystem every container and VM image starts from.

Built once with ``debootstrap --variant=minbase bookworm`` from the machine's
configured apt mirror (read from the apt sources at run time; no mirror host is
ever written into the repository), with the benchmark tools installed. Cached
under ``/var/cache/labkit/images`` (``$LABKIT_IMAGE_CACHE`` overrides)::

    rootfs-<hash>/          the root filesystem (hash of the build inputs)
    rootfs-<hash>.stamp     written last: a rootfs without it is never reused
    rootfs-<hash>.tar       the same tree as one tarball (docker import, LXD)
    rootfs-<variant>-<hash>[.stamp|.tar]   a variant: the same plus extra Debian packages

A *variant* adds Debian packages to the image (``labkit images build --profile mpi`` or
``--packages hpcc,openmpi-bin``); its hash covers the whole package list, so it is cached
by content like the base, and it never replaces the base image.

>>> from labkit.images.rootfs import build_rootfs
>>> path = build_rootfs()          # minutes the first time, instant after
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.host_commands import run_host
from ..errors import BackendError, BackendUnavailable, ConfigError

log = logging.getLogger("labkit.images")

SUITE = "bookworm"
VARIANT = "minbase"
#: The benchmark tools' Debian packages: in every image, and on the host for the ``local``
#: backend (scripts/setup-tools.sh installs them there).
TOOL_PACKAGES = ("sysbench", "apache2", "apache2-utils", "stress-ng", "fio", "iperf3")
#: Debian packages installed in every image (qemu-guest-agent and kmod are for the VM image).
PACKAGES = TOOL_PACKAGES + ("procps", "coreutils", "qemu-guest-agent", "util-linux", "iproute2", "kmod")
#: Extra Debian packages by profile, for workloads across instances (``mpi``, ``hpcc``): on
#: the host for the ``local`` backend (scripts/setup-tools.sh installs them; mpirun runs on the
#: host), and in the image variant of the same name (``labkit images build --profile mpi``);
#: ``disk``: bonnie++ (the ``bonnie`` workload); ``oltp``: MariaDB (the ``oltp`` workload).
PROFILES = {"mpi": ("openmpi-bin", "hpcc"), "disk": ("bonnie++",), "oltp": ("mariadb-server",)}
#: ``study``: every profile above in one variant, the one image per container engine that the
#: set-up builds (MPI/hpcc, bonnie++ and MariaDB across instances; notebook 02's disk and OLTP tests)
PROFILES["study"] = tuple(sorted({p for pkgs in PROFILES.values() for p in pkgs}))
#: ``systemd``: a VM image that boots systemd (PID 1, the unified cgroup hierarchy, logind and
#: user managers) instead of labkit-init, for the test of the ``local`` backend as a user in a
#: cgroup subtree systemd delegates (tests/integration/test_cgroup_v2_delegation.py); python3
#: runs labkit there; udev makes the device units the guest agent's service is bound to (debootstrap
#: installs no Recommends). Not part of ``study``.
PROFILES["systemd"] = ("dbus", "libpam-systemd", "python3", "systemd-sysv", "udev")
#: Debian package names (policy 5.6.1) and variant names (lower-case, for tags and aliases).
_PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
_VARIANT_RE = re.compile(r"[a-z][a-z0-9]{0,15}")
#: Bump when the recipe changes in a way the inputs above do not show
#: (3: no benchmark binary baked in; each benchmark copies its own into the instance).
RECIPE = 3

APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources")


def cache_dir() -> Path:
    return Path(os.environ.get("LABKIT_IMAGE_CACHE", "/var/cache/labkit/images"))


@contextmanager
def _build_lock():
    """One builder at a time on this machine (another process waits, then finds the cache)."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- mirror
@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None = None
    origin: str = ""


def _parse_one_line(text: str, origin: str) -> list[AptSource]:
    """``deb [opt=val ...] URI suite [component ...]`` lines (sources.list format)."""
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        options = {}
        m = re.match(r"^(deb)\s+\[([^\]]*)\]\s+(.*)$", line)
        if m:
            for opt in m.group(2).split():
                if "=" in opt:
                    k, v = opt.split("=", 1)
                    options[k.strip()] = v.strip()
            rest = m.group(3).split()
        else:
            fields = line.split()
            if fields[0] != "deb":
                continue  # deb-src and anything else
            rest = fields[1:]
        if len(rest) < 2:
            continue
        out.append(AptSource(rest[0], (rest[1],), tuple(rest[2:]), options.get("signed-by"), origin))
    return out


def _parse_deb822(text: str, origin: str) -> list[AptSource]:
    """deb822 ``.sources`` stanzas (``Types:``, ``URIs:``, ``Suites:``, ``Components:``)."""
    out = []
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last_key: str | None = None
    for raw in text.splitlines() + [""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, last_key = {}, None
            continue
        if raw[0] in " \t" and last_key:  # continuation line
            current[last_key] += "\n" + raw.strip()
            continue
        if ":" in raw:
            key, value = raw.split(":", 1)
            last_key = key.strip().lower()
            current[last_key] = value.strip()
    for st in stanzas:
        if st.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in st.get("types", "").split():
            continue
        signed = st.get("signed-by")
        if signed and "\n" in signed:  # an inline key, not a path
            signed = None
        for uri in st.get("uris", "").split():
            out.append(
                AptSource(
                    uri,
                    tuple(st.get("suites", "").split()),
                    tuple(st.get("components", "").split()),
                    signed,
                    origin,
                )
            )
    return out


def apt_sources(patterns: Sequence[str] = APT_SOURCES) -> list[AptSource]:
    """Every ``deb`` source configured on this machine, in apt's reading order."""
    found = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                text = Path(path).read_text(errors="replace")
            except OSError:
                continue
            parse = _parse_deb822 if path.endswith(".sources") else _parse_one_line
            found.extend(parse(text, path))
    return found


def debian_mirror(suite: str = SUITE, patterns: Sequence[str] = APT_SOURCES) -> AptSource:
    """The configured Debian source that serves ``suite`` (e.g. bookworm, not bookworm-security).

    ``$LABKIT_APT_MIRROR`` overrides it. Raises ConfigError naming the files read.
    """
    override = os.environ.get("LABKIT_APT_MIRROR")
    if override:
        return AptSource(override, (suite,), ("main",), None, "$LABKIT_APT_MIRROR")
    sources = apt_sources(patterns)
    for src in sources:
        if suite in src.suites and (not src.components or "main" in src.components):
            return src
    read = sorted({s.origin for s in sources}) or list(patterns)
    raise ConfigError(
        f"no apt source for Debian {suite!r} with component 'main' found in {', '.join(read)}; "
        f"configure one, or set LABKIT_APT_MIRROR to a Debian mirror URL"
    )


# --------------------------------------------------------------------------- variants
@dataclass(frozen=True)
class Variant:
    """An image variant: a name (``None`` for the base image) and its extra Debian packages."""

    name: str | None = None
    extra: tuple[str, ...] = ()

    @property
    def packages(self) -> tuple[str, ...]:
        return tuple(sorted(set(PACKAGES) | set(self.extra)))

    def dirname(self, h: str) -> str:
        return f"rootfs-{self.name}-{h}" if self.name else f"rootfs-{h}"


BASE = Variant()


def variant(
    profile: str | None = None, packages: str | Sequence[str] | None = None, name: str | None = None
) -> Variant:
    """The variant a profile and/or a package list (sequence or comma-separated string) ask for.

    Its name is ``name``, else the profile's, else ``x`` + 8 hex digits of the package list.
    Neither profile nor packages: the base image. Raises ConfigError naming the bad value.
    """
    if isinstance(packages, str):
        packages = [p for p in packages.replace(" ", ",").split(",") if p]
    extra = set(packages or ())
    for pkg in sorted(extra):
        if not isinstance(pkg, str) or not _PACKAGE_RE.fullmatch(pkg):
            raise ConfigError(
                f"images build --packages: {pkg!r} is not a Debian package name "
                "(lower-case letters, digits, + - .)"
            )
    if profile is not None:
        if profile not in PROFILES:
            raise ConfigError(
                f"images build --profile: unknown profile {profile!r}; allowed: {', '.join(sorted(PROFILES))}"
            )
        extra |= set(PROFILES[profile])
    extra -= set(PACKAGES)
    if not extra:
        if name:
            raise ConfigError(
                f"images build --variant {name!r}: no extra packages (give --profile or --packages)"
            )
        return BASE
    name = name or profile or "x" + hashlib.sha256(",".join(sorted(extra)).encode()).hexdigest()[:8]
    if not _VARIANT_RE.fullmatch(name):
        raise ConfigError(
            f"images build --variant: {name!r} must be 1-16 lower-case letters "
            "and digits, starting with a letter"
        )
    return Variant(name, tuple(sorted(extra)))


# --------------------------------------------------------------------------- build
def inputs(packages: Iterable[str] = PACKAGES, suite: str = SUITE) -> dict:
    """What determines the debootstrap result (the mirror does not: same suite, same packages)."""
    return {
        "suite": suite,
        "variant": VARIANT,
        "packages": sorted(packages),
        "recipe": RECIPE,
        "arch": _dpkg_arch(),
    }


def _dpkg_arch() -> str:
    try:
        return run_host(
            ["dpkg", "--print-architecture"], what="reading this host's Debian architecture", timeout=30
        ).stdout.strip()
    except BackendError:
        return os.uname().machine


def inputs_hash(inp: dict | None = None) -> str:
    inp = inp or inputs()
    return hashlib.sha256(json.dumps(inp, sort_keys=True).encode()).hexdigest()[:12]


def rootfs_path(h: str | None = None, var: Variant = BASE) -> Path:
    return cache_dir() / var.dirname(h or inputs_hash(inputs(var.packages)))


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".stamp")


def read_stamp(path: Path | None = None) -> dict | None:
    """The stamp of a finished rootfs, or None when it is absent or unfinished."""
    path = path or rootfs_path()
    try:
        return json.loads(_stamp(path).read_text())
    except (OSError, ValueError):
        return None


#: the longest the debootstrap of an image may take (minutes are usual; a slow mirror takes longer)
DEBOOTSTRAP_TIMEOUT_S = 3600
#: the longest packing a rootfs into its tarball may take
TAR_TIMEOUT_S = 1800


def build_rootfs(force: bool = False, *, var: Variant = BASE) -> Path:
    """Path of the finished Debian 12 rootfs (of variant ``var``), debootstrapping it if it is
    not cached.

    A second call with the same inputs does nothing (and says so: INFO on the ``labkit.images``
    logger, like the other progress lines).
    """
    with _build_lock():
        return _build_rootfs(force, var)


def _build_rootfs(force: bool, var: Variant = BASE) -> Path:
    if os.geteuid() != 0:
        raise BackendUnavailable("building the labkit rootfs needs root (debootstrap); run as root")
    inp = inputs(var.packages)
    h = inputs_hash(inp)
    path = rootfs_path(h, var)
    stamp = read_stamp(path) if path.is_dir() else None
    if stamp and not force:
        log.info("rootfs %s is up to date (inputs %s); nothing to do", path, h)
        return path

    if not shutil.which("debootstrap"):
        raise BackendUnavailable(
            "debootstrap is not installed; install it with: "
            "apt-get install debootstrap (or run scripts/setup-containers.sh)"
        )
    mirror = debian_mirror()
    _stamp(path).unlink(missing_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["debootstrap", f"--variant={VARIANT}", "--include=" + ",".join(var.packages), "--components=main"]
    if mirror.signed_by and Path(mirror.signed_by).exists():
        cmd.append(f"--keyring={mirror.signed_by}")
    cmd += [SUITE, str(tmp), mirror.uri]
    log.info("debootstrap %s into %s from the apt mirror in %s (takes minutes)", SUITE, tmp, mirror.origin)
    t0 = time.monotonic()
    run_host(
        cmd,
        what="debootstrap",
        timeout=DEBOOTSTRAP_TIMEOUT_S,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    _finish_rootfs(tmp)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    _write_stamp(
        path,
        {
            **inp,
            "hash": h,
            "variant": var.name,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.monotonic() - t0, 1),
        },
    )
    log.info("rootfs built at %s in %.0fs", path, time.monotonic() - t0)
    _prune_stale(path, var)
    return path


def _family(var: Variant) -> str:
    """Regex of the cache entries of ``var``'s older builds (never another variant's)."""
    stem = f"rootfs-{var.name}-" if var.name else "rootfs-"
    return re.escape(stem) + r"[0-9a-f]{12}"


def _prune_stale(keep: Path, var: Variant = BASE) -> None:
    """Remove rootfs trees of older recipes or package lists of the same variant (their images
    are rebuilt anyway)."""
    for old in keep.parent.glob("rootfs-*"):
        if old == keep or not re.fullmatch(_family(var) + r"(\.stamp|\.tmp)?", old.name):
            continue
        if old.name.startswith(keep.name):
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
        log.info("removed stale %s", old)


def _write_stamp(path: Path, data: dict) -> None:
    st = _stamp(path)
    tmp = st.with_name(st.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, st)


def _finish_rootfs(root: Path) -> None:
    """Make the tree small and neutral: no apt caches, no host identity, no services enabled."""
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        d = root / sub
        if d.is_dir():
            for entry in d.iterdir():
                if entry.is_file() and entry.name != "lock":
                    entry.unlink()
    # documentation and translations are a fifth of the tree and nothing reads them;
    # licences (copyright files) stay
    share = root / "usr/share"
    for sub in ("man", "info", "locale", "doc"):
        d = share / sub
        if not d.is_dir():
            continue
        for entry in d.iterdir():
            if sub == "doc" and entry.is_dir():
                for f in entry.iterdir():
                    if f.name != "copyright":
                        shutil.rmtree(f) if f.is_dir() and not f.is_symlink() else f.unlink()
            elif entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
    (root / "etc/hostname").write_text("labkit\n")
    (root / "tmp/labkit").mkdir(parents=True, exist_ok=True)
    machine_id = root / "etc/machine-id"
    if machine_id.exists():
        machine_id.write_text("")
    # the debootstrap-time sources point at this machine's mirror: keep them out of images
    sources = root / "etc/apt/sources.list"
    if sources.exists():
        sources.write_text("# labkit image: no apt sources configured\n")


def image_hash(path: Path | None = None) -> str:
    """Identity of the finished image content: the hash of its build inputs."""
    path = path or rootfs_path()
    stamp = read_stamp(path)
    if stamp is None:
        raise BackendError(f"rootfs {path} is not built; run: labkit images build")
    return stamp["hash"]


def rootfs_tarball(path: Path | None = None, *, force: bool = False) -> Path:
    """An uncompressed tarball of the rootfs beside it (``rootfs-<image hash>.tar``), cached."""
    path = path or rootfs_path()
    with _build_lock():
        return _tarball(path, force)


def _tarball(path: Path, force: bool) -> Path:
    h = image_hash(path)
    var = Variant((read_stamp(path) or {}).get("variant"))
    out = path.parent / (var.dirname(h) + ".tar")
    if out.exists() and not force:
        return out
    for old in path.parent.glob("rootfs-*.tar"):
        if old != out and re.fullmatch(_family(var) + r"\.tar", old.name):
            old.unlink(missing_ok=True)
    tmp = out.with_suffix(".tar.tmp")
    log.info("packing %s into %s", path, out)
    # GNU tar keeps owners, modes, devices, hard links and xattrs exactly (numeric ids)
    run_host(
        ["tar", "--numeric-owner", "--xattrs", "-C", str(path), "-cf", str(tmp), "."],
        what="tar of the rootfs",
        timeout=TAR_TIMEOUT_S,
    )
    os.replace(tmp, out)
    return out
