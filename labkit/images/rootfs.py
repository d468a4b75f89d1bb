"""The shared Debian 12 root filesystem every container and VM image starts from.

Built once with ``debootstrap --variant=minbase bookworm`` from the machine's
configured apt mirror (read from the apt sources at run time; no mirror host is
ever written into the repository), with the benchmark tools installed. Cached
under ``/var/cache/labkit/images`` (``$LABKIT_IMAGE_CACHE`` overrides)::

    rootfs-<hash>/          the root filesystem (hash of the build inputs)
    rootfs-<hash>.stamp     written last: a rootfs without it is never reused
    rootfs-<hash>.tar       the same tree as one tarball (docker import, LXD)

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
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendError, BackendUnavailable, ConfigError, tail

log = logging.getLogger("labkit.images")

SUITE = "bookworm"
VARIANT = "minbase"
#: The benchmark tools' Debian packages: in every image, and on the host for the ``local``
#: backend (scripts/setup-tools.sh installs them there).
TOOL_PACKAGES = ("sysbench", "apache2", "apache2-utils", "stress-ng", "fio", "iperf3")
#: Debian packages installed in every image (qemu-guest-agent and kmod are for the VM image).
PACKAGES = TOOL_PACKAGES + ("procps", "coreutils", "qemu-guest-agent", "util-linux", "iproute2",
                            "kmod")
#: Extra Debian packages by profile, for workloads across instances (``mpi``, ``hpcc``): on
#: the host for the ``local`` backend (scripts/setup-tools.sh installs them; mpirun runs on the
#: host), and meant for image variants (not yet built by ``labkit images build``).
PROFILES = {"mpi": ("openmpi-bin", "hpcc")}
#: Bump when the recipe changes in a way the inputs above do not show
#: (3: no benchmark binary baked in; each benchmark copies its own into the instance).
RECIPE = 3

APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list",
               "/etc/apt/sources.list.d/*.sources")


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
    stanzas, current, last_key = [], {}, None
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
            out.append(AptSource(uri, tuple(st.get("suites", "").split()),
                                 tuple(st.get("components", "").split()), signed, origin))
    return out


def apt_sources(patterns=APT_SOURCES) -> list[AptSource]:
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


def debian_mirror(suite: str = SUITE, patterns=APT_SOURCES) -> AptSource:
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
        f"configure one, or set LABKIT_APT_MIRROR to a Debian mirror URL")


# --------------------------------------------------------------------------- build
def inputs(packages=PACKAGES, suite: str = SUITE) -> dict:
    """What determines the debootstrap result (the mirror does not: same suite, same packages)."""
    return {"suite": suite, "variant": VARIANT, "packages": sorted(packages), "recipe": RECIPE,
            "arch": _dpkg_arch()}


def _dpkg_arch() -> str:
    try:
        return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.uname().machine


def inputs_hash(inp: dict | None = None) -> str:
    inp = inp or inputs()
    return hashlib.sha256(json.dumps(inp, sort_keys=True).encode()).hexdigest()[:12]


def rootfs_path(h: str | None = None) -> Path:
    return cache_dir() / f"rootfs-{h or inputs_hash()}"


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".stamp")


def read_stamp(path: Path | None = None) -> dict | None:
    """The stamp of a finished rootfs, or None when it is absent or unfinished."""
    path = path or rootfs_path()
    try:
        return json.loads(_stamp(path).read_text())
    except (OSError, ValueError):
        return None


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    log.info("%s: %s", what, " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise BackendError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                           f"{tail(proc.stdout + proc.stderr, 30)}")
    return proc


def build_rootfs(force: bool = False, *, echo=print) -> Path:
    """Path of the finished Debian 12 rootfs, debootstrapping it if it is not cached.

    A second call with the same inputs does nothing (and says so through ``echo``).
    """
    with _build_lock():
        return _build_rootfs(force, echo)


def _build_rootfs(force: bool, echo) -> Path:
    echo = echo or (lambda *a: None)
    if os.geteuid() != 0:
        raise BackendUnavailable("building the labkit rootfs needs root (debootstrap); run as root")
    inp = inputs()
    h = inputs_hash(inp)
    path = rootfs_path(h)
    stamp = read_stamp(path) if path.is_dir() else None
    if stamp and not force:
        echo(f"rootfs {path} is up to date (inputs {h}); nothing to do")
        return path

    if not shutil.which("debootstrap"):
        raise BackendUnavailable("debootstrap is not installed; install it with: "
                                 "apt-get install debootstrap (or run scripts/setup-containers.sh)")
    mirror = debian_mirror()
    _stamp(path).unlink(missing_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["debootstrap", f"--variant={VARIANT}", "--include=" + ",".join(sorted(PACKAGES)),
           "--components=main"]
    if mirror.signed_by and Path(mirror.signed_by).exists():
        cmd.append(f"--keyring={mirror.signed_by}")
    cmd += [SUITE, str(tmp), mirror.uri]
    echo(f"debootstrap {SUITE} into {tmp} from the apt mirror in {mirror.origin} (takes minutes)")
    t0 = time.monotonic()
    _run(cmd, "debootstrap", env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    _finish_rootfs(tmp)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)
    _write_stamp(path, {**inp, "hash": h,
                        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "seconds": round(time.monotonic() - t0, 1)})
    echo(f"rootfs built at {path} in {time.monotonic() - t0:.0f}s")
    _prune_stale(path, echo)
    return path


def _prune_stale(keep: Path, echo) -> None:
    """Remove rootfs trees of older recipes or package lists (their images are rebuilt anyway)."""
    for old in keep.parent.glob("rootfs-*"):
        if old == keep or not re.fullmatch(r"rootfs-[0-9a-f]{12}(\.stamp|\.tmp)?", old.name):
            continue
        if old.name.startswith(keep.name):
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)
        echo(f"removed stale {old}")


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


def rootfs_tarball(path: Path | None = None, *, force: bool = False, echo=print) -> Path:
    """An uncompressed tarball of the rootfs beside it (``rootfs-<image hash>.tar``), cached."""
    echo = echo or (lambda *a: None)
    path = path or rootfs_path()
    with _build_lock():
        return _tarball(path, force, echo)


def _tarball(path: Path, force: bool, echo) -> Path:
    h = image_hash(path)
    out = path.parent / f"rootfs-{h}.tar"
    if out.exists() and not force:
        return out
    for old in path.parent.glob("rootfs-*.tar"):
        if old != out:
            old.unlink(missing_ok=True)
    tmp = out.with_suffix(".tar.tmp")
    echo(f"packing {path} into {out}")
    # GNU tar keeps owners, modes, devices, hard links and xattrs exactly (numeric ids)
    _run(["tar", "--numeric-owner", "--xattrs", "-C", str(path), "-cf", str(tmp), "."],
         "tar of the rootfs")
    os.replace(tmp, out)
    return out

