"""Host directories in libvirt guests (the ``mounts`` option, :mod:`labkit.core.mounts`) over virtiofs.

Debian's cloud guest kernel has no 9p but has virtiofs (``CONFIG_VIRTIO_FS=m``; the VM
image carries its ``fuse`` and ``virtiofs`` modules, see :data:`labkit.images.vm.GUEST_MODULES`).
Each mount is a virtiofs ``<filesystem>`` with tag ``labkit<i>``
(:func:`~labkit.backends.libvirt.xml.domain_xml`); libvirt starts one virtiofsd per share
with the domain and stops it with the domain.

Read-only, on two sides: libvirt 9.0 refuses ``<readonly/>`` for virtiofs and Debian 12's
virtiofsd (QEMU 7.2's, ``/usr/lib/qemu/virtiofsd``) has no read-only option, so

* host: :func:`prepare` shares a read-only mount through a read-only bind mount of its
  source at ``<runtime dir>/virtiofs/<domain>/<i>`` (:func:`ro_root`: root's
  ``/run/labkit/virtiofs``; a bind mount needs root) (checked with ``statvfs``): virtiofsd
  itself cannot write there, whatever the guest does (a guest root that remounts its
  share read-write still gets EROFS);
* guest: :func:`mount_in_guest` mounts it with ``-o ro`` (writes fail at once, in the guest).

:func:`release` unmounts and removes a domain's bind mounts (at teardown);
:func:`leftovers` lists those of domains named ``prefix*`` (``cleanup(prefix)`` after a
SIGKILL: bind mounts, unlike AUTODESTROY domains, outlive the controller).
A read-write mount is shared as its source directory itself. Only the source's own
file system is shared (a plain ``--bind``: file systems mounted below it are not).
"""

from __future__ import annotations

import os
from pathlib import Path

from ...core.host_commands import run_host
from ...core.mounts import Mount
from ...core.paths import SYSTEM_RUNTIME_DIR, runtime_dir
from ...errors import BackendError, ConfigError, tail
from ..base import Instance
from .xml import Share, mount_tag

#: where root's read-only shares' bind mounts live (one directory per domain, root-only)
RO_ROOT = SYSTEM_RUNTIME_DIR / "virtiofs"
#: exit code of :data:`GUEST_SCRIPT` when the guest kernel cannot load virtiofs
NO_MODULE = 3

#: run in the guest as ``sh -c GUEST_SCRIPT sh TAG TARGET OPTS [TAG TARGET OPTS ...]``:
#: loads fuse + virtiofs from the image's /lib/modules (no modules.dep there: insmod in
#: dependency order; virtio and virtio_ring are already loaded by the initrd), then mounts
#: each tag at its target. Values arrive as arguments, never inside the script text.
GUEST_SCRIPT = r"""
mods=/lib/modules/$(uname -r)/kernel/fs/fuse
if ! grep -qw virtiofs /proc/filesystems; then
    for m in fuse virtiofs; do
        [ -d "/sys/module/$m" ] && continue
        ko=$(ls "$mods/$m".ko* 2>/dev/null | head -n1)
        if [ -z "$ko" ] || ! insmod "$ko"; then
            echo "no loadable $m module for kernel $(uname -r) in $mods" >&2
            exit 3
        fi
    done
fi
while [ $# -ge 3 ]; do
    mkdir -p -- "$2" || exit 4
    mount -t virtiofs -o "$3" -- "$1" "$2" || exit 4
    shift 3
done
"""


def ro_root(create: bool = False) -> Path:
    """Where this user's read-only shares' bind mounts live: ``virtiofs`` in the user's runtime
    directory (:func:`labkit.core.paths.runtime_dir`; root's: :data:`RO_ROOT`), never another
    user's. ConfigError naming it and the fix when it cannot be made or reached."""
    return runtime_dir("virtiofs", create=create)


def _entries(root: Path) -> list[Path]:
    """The entries of directory ``root`` ([] when it does not exist); ConfigError naming it and the
    fix when this user may not read it (e.g. root's 0700 ``/run/labkit/virtiofs``)."""
    try:
        return sorted(root.iterdir()) if root.is_dir() else []
    except OSError as exc:
        raise ConfigError(
            f"cannot read {root}, where labkit keeps libvirt shares' bind mounts: "
            f"{exc.strerror or exc} (it or its parent is uid {_owner(root)}'s; this is uid "
            f"{os.geteuid()}); each user's are in their own runtime directory "
            "($XDG_RUNTIME_DIR/labkit, else /run/user/<uid>/labkit, else ~/.cache/labkit): "
            "unset XDG_RUNTIME_DIR or set it to a directory of yours"
        ) from None


def _owner(path: Path) -> str:
    try:
        return str(path.stat().st_uid)
    except OSError:
        try:
            return str(path.parent.stat().st_uid)
        except OSError:
            return "?"


#: the longest a bind mount or an unmount on this host may take
MOUNT_TIMEOUT_S = 60


def prepare(name: str, mounts: tuple[Mount, ...], root: Path | None = None) -> tuple[Share, ...]:
    """The virtiofs shares of domain ``name``: mount ``i`` has tag ``labkit<i>``; a read-only
    one is shared through a read-only bind mount of its source at ``root/name/i`` (default
    :func:`ro_root`), a read-write one as its source. On any failure what was made is released
    and BackendError raised."""
    if not any(m.readonly for m in mounts):
        return tuple(Share(m.source, mount_tag(i)) for i, m in enumerate(mounts))
    root = ro_root(create=True) if root is None else root
    shares = []
    try:
        for i, m in enumerate(mounts):
            source = m.source
            if m.readonly:
                os.makedirs(root, mode=0o700, exist_ok=True)
                os.chmod(root, 0o700)
                target = root / name / str(i)
                target.mkdir(parents=True, exist_ok=True)
                run_host(
                    ["mount", "--bind", "-o", "ro", m.source, target],
                    what=f"read-only bind mount of {m.source} for {name}",
                    timeout=MOUNT_TIMEOUT_S,
                )
                if not os.statvfs(target).f_flag & os.ST_RDONLY:
                    raise BackendError(f"the bind mount of {m.source} at {target} is not read-only")
                source = str(target)
            shares.append(Share(source, mount_tag(i)))
    except BaseException:
        release(name, root)
        raise
    return tuple(shares)


def _mounted(path: Path) -> bool:
    text = Path("/proc/self/mounts").read_text()
    return any(line.split()[1] == str(path) for line in text.splitlines() if line.strip())


def release(name: str, root: Path | None = None) -> None:
    """Unmount and remove domain ``name``'s bind mounts under ``root`` (default :func:`ro_root`;
    nothing to do when it has none). ConfigError naming the directory when it cannot be read."""
    base = (ro_root() if root is None else root) / name
    entries = _entries(base)
    if not entries and not base.is_dir():
        return
    for d in entries:
        if _mounted(d):
            run_host(["umount", d], what=f"unmounting {d}", timeout=MOUNT_TIMEOUT_S)
        d.rmdir()
    base.rmdir()


def leftovers(prefix: str, root: Path | None = None) -> list[str]:
    """Names of the domains starting with ``prefix`` that still have bind mounts under ``root``
    (default :func:`ro_root`: this user's); ConfigError naming it when it cannot be read."""
    return sorted(d.name for d in _entries(ro_root() if root is None else root) if d.name.startswith(prefix))


def mount_in_guest(inst: Instance, mounts: tuple[Mount, ...], timeout: float = 60) -> None:
    """Mount each of ``mounts`` at its target in the running guest ``inst`` (read-only ones
    with ``-o ro``). BackendError saying what to do when the image lacks the module."""
    args = []
    for i, m in enumerate(mounts):
        args += [mount_tag(i), m.target, "ro" if m.readonly else "rw"]
    res = inst.exec(["sh", "-c", GUEST_SCRIPT, "sh", *args], timeout=timeout, check=False)
    if res.exit_code == NO_MODULE:
        raise BackendError(
            f"{inst.name}: the VM image has no virtiofs module ({res.stderr.strip()}); "
            "rebuild it: labkit images build --vm"
        )
    if not res.ok:
        raise BackendError(
            f"{inst.name}: mounting the host directories failed (exit "
            f"{res.exit_code}): {tail(res.stderr + res.stdout, 10)}"
        )
