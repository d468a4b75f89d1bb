"""The VM image: a bootable disk made from the shared Debian rootfs, for the libvirt backend.

The same rootfs the containers use (:func:`labkit.images.rootfs.build_rootfs`)
becomes an ext4 filesystem in a qcow2 base disk, booted directly with the
host's Debian cloud kernel (``linux-image-cloud-amd64``) and its initrd. PID 1
is ``/sbin/labkit-init`` (``labkit/images/files/labkit-init``): it mounts the
kernel filesystems, loads ``virtio_console`` and runs the QEMU guest agent, so
commands reach the guest through ``guest-exec`` and it needs no network.
``image.json`` is the image description the libvirt backend reads (its
``image`` option names the directory; by default ``vm-current.json`` does).

A rootfs whose init is systemd (``/sbin/init`` links to it: the ``systemd`` variant,
``labkit images build --vm --profile systemd``) boots ``/lib/systemd/systemd`` instead
(:data:`SYSTEMD_INIT`, the unified cgroup hierarchy, logind and user managers): the image then
also carries the module index of the kernel modules it holds (``depmod``), so udev loads
``virtio_console`` and the guest agent's service starts on its port as Debian's package has it
(:data:`SYSTEMD_UNITS` add the instance's host name and ``/tmp/labkit``, as labkit-init does; the
daemons and timers the packages enable are masked, :data:`SYSTEMD_MASKED`).
Cached under ``/var/cache/labkit/images`` (``$LABKIT_IMAGE_CACHE``)::

    vm-<hash>/base.qcow2     the root disk (each VM boots a copy-on-write overlay of it)
    vm-<hash>/vmlinuz        the host's cloud kernel, copied
    vm-<hash>/initrd.img     its initrd, copied
    vm-<hash>/image.json     paths, kernel version, command line, modules carried, inputs
    vm-<hash>.stamp          written last: an image without it is never used
    vm-current.json          {"image": "<the last built vm-<hash> directory>"}

>>> from labkit.images.vm import build_vm_image
>>> build_vm_image(build_rootfs())     # about a minute the first time, instant after
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import re
import shutil
import time
from importlib import resources
from pathlib import Path

from ..core.host_commands import run_host
from ..errors import BackendError, BackendUnavailable

log = logging.getLogger("labkit.images")

#: Bump when the recipe changes in a way the hashed inputs do not show (2: virtiofs modules,
#: 3: sch_netem, 4: tls and bonding).
RECIPE = 4
GUEST_INIT = "/sbin/labkit-init"
#: PID 1 of an image made from a rootfs whose /sbin/init is systemd (:func:`boots_systemd`)
SYSTEMD_INIT = "/lib/systemd/systemd"
#: what an image booting systemd adds to the kernel command line (the unified hierarchy only)
SYSTEMD_ARGS = "systemd.unified_cgroup_hierarchy=1 systemd.show_status=0"
#: units added to an image booting systemd: what labkit-init does besides the agent (the host name
#: the backend gives on the command line, /tmp/labkit); the agent is Debian's qemu-guest-agent.service
SYSTEMD_UNITS = {
    "labkit-guest.service": """[Unit]
Description=labkit guest set-up (host name from labkit.hostname=, /tmp/labkit)
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'mkdir -p /tmp/labkit; for a in $$(cat /proc/cmdline); do case "$$a" in \
labkit.hostname=*) hostname "$${a#labkit.hostname=}" ;; esac; done'

[Install]
WantedBy=sysinit.target
""",
}
#: the device unit of the guest agent's port: the image enables Debian's qemu-guest-agent.service for it
#: (``<device>.wants/``; the package's udev rule asks for the same, this keeps it without the rule)
SYSTEMD_AGENT_DEVICE = r"dev-virtio\x2dports-org.qemu.guest_agent.0.device"
#: units masked in an image booting systemd: the daemons and timers the packages enable (a benchmark
#: starts its own servers; a guest runs nothing else, as under labkit-init)
SYSTEMD_MASKED = (
    "apache2.service",
    "apache-htcacheclean.service",
    "iperf3.service",
    "getty@tty1.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
)
#: Free space added to the rootfs size in the guest's root filesystem (benchmarks write there).
HEADROOM_MB = 1536
KERNEL_FLAVOUR = "cloud-amd64"
CURRENT = "vm-current.json"
#: Modules of the host's cloud kernel copied into the image (under /lib/modules/<version>/),
#: neither built in nor in its initrd: the guest agent's port (loaded by labkit-init) and
#: virtiofs with fuse, which it needs (loaded when a run mounts a host directory; see
#: :mod:`labkit.backends.libvirt.mounts`), and netem for a link's delay (loaded when a run's link
#: has one; see :mod:`labkit.backends.libvirt.net`), and bonding with tls, which it needs (loaded
#: when a run bonds NICs: the ``nics`` factor). Debian 12's cloud kernel: CONFIG_VIRTIO_FS=m,
#: CONFIG_NET_SCH_NETEM=m, CONFIG_BONDING=m.
GUEST_MODULES = (
    "kernel/drivers/char/virtio_console",
    "kernel/fs/fuse/fuse",
    "kernel/fs/fuse/virtiofs",
    "kernel/net/sched/sch_netem",
    "kernel/net/tls/tls",
    "kernel/drivers/net/bonding/bonding",
)


def cache_dir() -> Path:
    return Path(os.environ.get("LABKIT_IMAGE_CACHE", "/var/cache/labkit/images"))


def _files(name: str) -> bytes:
    return resources.files("labkit").joinpath("images", "files", name).read_bytes()


def host_kernel(boot: str = "/boot") -> tuple[str, Path, Path]:
    """(version, vmlinuz, initrd) of the newest installed Debian cloud kernel with its modules.

    Raises BackendUnavailable naming the package to install.
    """
    found: list[tuple[list[int | str], str, Path, Path]] = []
    for vmlinuz in glob.glob(f"{boot}/vmlinuz-*-{KERNEL_FLAVOUR}"):
        version = Path(vmlinuz).name[len("vmlinuz-") :]
        initrd = Path(boot) / f"initrd.img-{version}"
        if initrd.exists() and Path(f"/lib/modules/{version}").is_dir():
            found.append((_version_key(version), version, Path(vmlinuz), initrd))
    if not found:
        raise BackendUnavailable(
            f"no Debian cloud kernel (vmlinuz-*-{KERNEL_FLAVOUR} with initrd and modules) in {boot}; "
            "install it with: apt-get install linux-image-cloud-amd64"
        )
    found.sort()
    _, version, kernel, initrd = found[-1]
    return version, kernel, initrd


def _version_key(version: str) -> list[int | str]:
    return [int(x) if x.isdigit() else x for x in re.split(r"[.-]", version)]


def _digest(path: Path, h=None) -> str:
    h = h or hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _rootfs_identity(rootfs: Path) -> str:
    """What the rootfs content is: its stamp when labkit built it, else dpkg's status file."""
    stamp = rootfs.with_name(rootfs.name + ".stamp")
    if stamp.exists():
        return hashlib.sha256(stamp.read_bytes()).hexdigest()[:16]
    status = rootfs / "var/lib/dpkg/status"
    if not status.exists():
        raise BackendError(f"{rootfs} is not a Debian root filesystem (no var/lib/dpkg/status)")
    st = status.stat()
    return f"dpkg-{st.st_size}-{st.st_mtime_ns}"


def boots_systemd(rootfs: Path) -> bool:
    """Whether ``rootfs``'s init is systemd (Debian's systemd-sysv: ``/sbin/init`` links to it)."""
    init = Path(rootfs) / "sbin/init"
    return init.is_symlink() and Path(os.readlink(init)).name == "systemd"


def inputs(rootfs: Path) -> dict:
    version, vmlinuz, initrd = host_kernel()
    units = json.dumps([SYSTEMD_UNITS, SYSTEMD_MASKED, SYSTEMD_AGENT_DEVICE], sort_keys=True).encode()
    systemd = (
        {"boot": "systemd", "units": hashlib.sha256(units).hexdigest()[:16]}
        if boots_systemd(Path(rootfs))
        else {}
    )  # none: the base's hash as before
    return {
        **systemd,
        "recipe": RECIPE,
        "rootfs": str(Path(rootfs).resolve()),
        "rootfs_identity": _rootfs_identity(Path(rootfs)),
        "kernel_version": version,
        "vmlinuz": _digest(vmlinuz),
        "initrd": _digest(initrd),
        "init": hashlib.sha256(_files("labkit-init")).hexdigest()[:16],
        "headroom_mb": HEADROOM_MB,
    }


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".stamp")


#: the longest one step of the image build (a copy, mkfs.ext4, qemu-img convert) may take
STEP_TIMEOUT_S = 1800
#: what to do when a program the build needs is missing
SETUP_HINT = "run scripts/setup-libvirt.sh"


def _du_bytes(path: Path) -> int:
    out = run_host(
        ["du", "-sb", "--apparent-size", path], what="measuring the rootfs", timeout=STEP_TIMEOUT_S
    ).stdout
    return int(out.split()[0])


def pointer(variant: str | None = None) -> Path:
    """The file naming the last VM image built: ``vm-current.json``, or ``vm-<variant>.json``
    for a variant (the libvirt backend's ``image`` option accepts either file)."""
    return cache_dir() / (f"vm-{variant}.json" if variant else CURRENT)


def build_vm_image(rootfs: Path, force: bool = False, *, variant: str | None = None) -> Path:
    """Directory of the VM image made from ``rootfs``, building it if not cached.

    Steps: hard-link copy of the rootfs (the shared tree is never modified), add
    ``/sbin/labkit-init`` and the kernel's :data:`GUEST_MODULES`, ``mkfs.ext4 -d`` into a
    sparse raw file (no loop mount), ``qemu-img convert`` to qcow2, copy kernel and initrd, write ``image.json``, then the stamp.
    """
    if os.geteuid() != 0:
        raise BackendUnavailable("building the VM image needs root (to read the whole rootfs)")
    rootfs = Path(rootfs)
    if not rootfs.is_dir():
        raise BackendError(f"rootfs {rootfs} does not exist; run: labkit images build")
    for tool, pkg in (("mkfs.ext4", "e2fsprogs"), ("qemu-img", "qemu-utils")):
        if not shutil.which(tool):
            raise BackendUnavailable(f"{tool} is missing; install it with: apt-get install {pkg}")
    inp = inputs(rootfs)
    h = hashlib.sha256(json.dumps(inp, sort_keys=True).encode()).hexdigest()[:12]
    out = cache_dir() / f"vm-{h}"
    if _stamp(out).exists() and not force:
        log.info("VM image %s is up to date (inputs %s); nothing to do", out, h)
        _point_current(out, variant)
        return out

    t0 = time.monotonic()
    _stamp(out).unlink(missing_ok=True)
    work = out.with_name(out.name + ".tmp")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    staging = work / "root"
    log.info("making the VM image from %s into %s", rootfs, out)
    try:
        run_host(["cp", "-al", rootfs, staging], what="hard-link copy of the rootfs", timeout=STEP_TIMEOUT_S)
    except BackendError:  # another filesystem: a real copy
        shutil.rmtree(staging, ignore_errors=True)
        run_host(["cp", "-a", rootfs, staging], what="copy of the rootfs", timeout=STEP_TIMEOUT_S)

    version, vmlinuz, initrd = host_kernel()
    # new files only (or unlink first): the hard links must never write through to the rootfs
    init = staging / GUEST_INIT.lstrip("/")
    init.unlink(missing_ok=True)
    init.write_bytes(_files("labkit-init"))
    init.chmod(0o755)
    carried = []
    for module in GUEST_MODULES:
        found = glob.glob(f"/lib/modules/{version}/{module}.ko*")
        if not found:
            log.warning(
                "kernel %s has no module %s.ko* in /lib/modules: the image goes without", version, module
            )
            continue
        carried.append(Path(module).name)
        mod_dir = (staging / f"lib/modules/{version}/{module}").parent
        mod_dir.mkdir(parents=True, exist_ok=True)
        for ko in found:
            (mod_dir / Path(ko).name).unlink(missing_ok=True)  # never write through a hard link
            shutil.copy2(ko, mod_dir / Path(ko).name)
    systemd = boots_systemd(rootfs)
    if systemd:
        _add_systemd_boot(staging, version, carried)
    for name in ("etc/fstab",):
        p = staging / name
        p.unlink(missing_ok=True)
        p.write_text("# labkit VM: / is /dev/vda, mounted by the initrd (rw on the command line)\n")
    (staging / "tmp/labkit").mkdir(parents=True, exist_ok=True)

    size_mb = (_du_bytes(staging) * 12 // 10 >> 20) + HEADROOM_MB
    size_mb = (size_mb + 255) // 256 * 256
    raw = work / "root.raw"
    with open(raw, "wb") as f:
        f.truncate(size_mb << 20)
    run_host(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-L",
            "labkit-root",
            "-m",
            "0",
            "-E",
            "lazy_itable_init=0",
            "-d",
            staging,
            raw,
        ],
        what="mkfs.ext4 of the VM root filesystem",
        timeout=STEP_TIMEOUT_S,
        missing=BackendUnavailable,
        hint=SETUP_HINT,
    )
    run_host(
        ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, work / "base.qcow2"],
        what="qemu-img convert to qcow2",
        timeout=STEP_TIMEOUT_S,
        missing=BackendUnavailable,
        hint=SETUP_HINT,
    )
    raw.unlink()
    shutil.rmtree(staging)
    shutil.copyfile(vmlinuz, work / "vmlinuz")
    shutil.copyfile(initrd, work / "initrd.img")
    info = {
        "disk": "base.qcow2",
        "format": "qcow2",
        "kernel": "vmlinuz",
        "initrd": "initrd.img",
        "kernel_version": version,
        "root": "/dev/vda",
        "init": SYSTEMD_INIT if systemd else GUEST_INIT,
        "cmdline": (
            f"root=/dev/vda rw console=ttyS0 init={SYSTEMD_INIT} {SYSTEMD_ARGS} quiet"
            if systemd
            else f"root=/dev/vda rw console=ttyS0 init={GUEST_INIT} quiet"
        ),
        "size_mb": size_mb,
        "inputs": inp,
        "hash": h,
        "modules": carried,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.monotonic() - t0, 1),
    }
    (work / "image.json").write_text(json.dumps(info, indent=1, sort_keys=True))
    for p in [work, *work.iterdir()]:  # qemu runs as libvirt-qemu: everything world-readable
        p.chmod(0o755 if p.is_dir() else 0o644)
    if out.exists():
        shutil.rmtree(out)
    os.replace(work, out)
    _stamp(out).write_text(json.dumps({"hash": h, "built": info["built"]}))
    _point_current(out, variant)
    log.info(
        "VM image built at %s in %.0fs (%s MB disk, kernel %s)", out, time.monotonic() - t0, size_mb, version
    )
    return out


def _add_systemd_boot(staging: Path, version: str, carried: list[str]) -> None:
    """What an image booting systemd needs besides the rootfs: the index of the modules carried
    (``depmod`` over the kernel's lists of built-in modules, so that udev and ``modprobe`` find
    them by name and alias), :data:`SYSTEMD_UNITS` and the guest agent's service enabled and
    :data:`SYSTEMD_MASKED` masked. New files only (the rootfs is hard-linked)."""
    mods = staging / f"lib/modules/{version}"
    mods.mkdir(parents=True, exist_ok=True)
    for name in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
        src = Path(f"/lib/modules/{version}/{name}")
        if src.exists():
            (mods / name).unlink(missing_ok=True)
            shutil.copyfile(src, mods / name)
    run_host(
        ["depmod", "-b", staging, version],
        what=f"depmod of the {len(carried)} modules in the VM image",
        timeout=STEP_TIMEOUT_S,
        missing=BackendUnavailable,
        hint="apt-get install kmod",
    )
    units = staging / "etc/systemd/system"
    wants = units / "sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    for name, text in SYSTEMD_UNITS.items():
        (units / name).unlink(missing_ok=True)
        (units / name).write_text(text)
        (wants / name).unlink(missing_ok=True)
        (wants / name).symlink_to(f"/etc/systemd/system/{name}")
    agent = units / f"{SYSTEMD_AGENT_DEVICE}.wants"
    agent.mkdir(exist_ok=True)
    (agent / "qemu-guest-agent.service").unlink(missing_ok=True)
    (agent / "qemu-guest-agent.service").symlink_to("/lib/systemd/system/qemu-guest-agent.service")
    for name in SYSTEMD_MASKED:
        (units / name).unlink(missing_ok=True)
        (units / name).symlink_to("/dev/null")


def _point_current(out: Path, variant: str | None = None) -> None:
    current = pointer(variant)
    tmp = current.with_suffix(".tmp")
    tmp.write_text(json.dumps({"image": str(out)}))
    os.replace(tmp, current)


def current_image() -> Path | None:
    """The directory ``vm-current.json`` names (the last image built), or None."""
    try:
        return Path(json.loads((cache_dir() / CURRENT).read_text())["image"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ensure_vm_image(force: bool = False) -> Path:
    """Build the shared rootfs (if needed), then the VM image from it."""
    from .rootfs import build_rootfs

    return build_vm_image(build_rootfs(), force=force)


def remove_stale(keep: Path | None = None) -> list[Path]:
    """Delete VM images other than ``keep`` (default: the current one); returns what went."""
    keep = keep or current_image()
    gone = []
    for d in cache_dir().glob("vm-*"):
        if d.is_dir() and d != keep:
            shutil.rmtree(d, ignore_errors=True)
            _stamp(d).unlink(missing_ok=True)
            gone.append(d)
    return gone
