#!/usr/bin/env bash
# Make the libvirt backend usable on a Debian 12 machine (run as root).
# Idempotent: installs what is missing, starts the daemons if libvirt does not
# answer, builds the VM image only when its inputs changed. Re-run it any time.
#
#   bash scripts/setup-libvirt.sh              # packages, libvirt-python, daemons, VM image
#   SKIP_IMAGES=1 bash scripts/setup-libvirt.sh
#   PYTHON=/path/to/python bash scripts/setup-libvirt.sh   # used when there is no .venv
#
# Daemon logs: /var/log/labkit-libvirtd.log, /var/log/labkit-virtlogd.log
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# the project's venv (scripts/setup-core.sh) when it exists, else $PYTHON or python3
if [ -x "$here/.venv/bin/python" ]; then PYTHON="$here/.venv/bin/python"; else PYTHON="${PYTHON:-python3}"; fi
URI="${LABKIT_LIBVIRT_URI:-qemu:///system}"
WAIT_S="${LABKIT_DAEMON_WAIT:-60}"

log() { echo "[setup-libvirt] $*"; }

if [ "$(id -u)" != 0 ]; then
    echo "setup-libvirt.sh must run as root (it installs packages and starts daemons)" >&2
    exit 1
fi

# --- packages -----------------------------------------------------------------
# libvirt-dev + pkg-config + gcc: to build libvirt-python; debootstrap: the shared rootfs;
# e2fsprogs: mkfs.ext4 -d; linux-image-cloud-amd64: the guest kernel (booted directly).
. "$here/scripts/apt.sh"
apt_install_missing libvirt-daemon-system qemu-system-x86 qemu-utils linux-image-cloud-amd64 libvirt-dev \
           pkg-config gcc libc6-dev python3-dev debootstrap e2fsprogs
# virtiofsd (the backend's `mounts`): libvirt finds it through QEMU's vhost-user descriptors.
# Debian 12 ships it in qemu-system-common (/usr/lib/qemu/virtiofsd, 50-qemu-virtiofsd.json);
# from Debian 13 on it is the `virtiofsd` package (bookworm has no package of that name).
if ! grep -qs '"type": *"fs"' /usr/share/qemu/vhost-user/*.json; then
    if apt-cache show virtiofsd >/dev/null 2>&1; then
        apt_install_missing virtiofsd
    else
        log "no virtiofsd found (no vhost-user fs descriptor in /usr/share/qemu/vhost-user): libvirt mounts will fail"
    fi
fi

# --- libvirt-python -------------------------------------------------------------
if ! "$PYTHON" -c 'import libvirt, libvirt_qemu' 2>/dev/null; then
    req=$(grep -E '^libvirt-python==' "$here/requirements.txt" || echo libvirt-python)
    log "installing $req (built against the system libvirt)"
    "$PYTHON" -m pip install -q "$req"
fi

# --- daemons ------------------------------------------------------------------------
if virsh -c "$URI" version >/dev/null 2>&1; then
    log "libvirtd answers on $URI"
else
    log "starting virtlogd and libvirtd"
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl start virtlogd libvirtd || true
    fi
    if ! virsh -c "$URI" version >/dev/null 2>&1; then
        # root's daemons only: a user's session libvirtd/virtlogd (qemu:///session) is not the system one
        pgrep -u 0 -x virtlogd >/dev/null || virtlogd -d
        # a stale pid file from a killed daemon makes libvirtd refuse to start
        if ! pgrep -u 0 -x libvirtd >/dev/null; then
            rm -f /run/libvirtd.pid /var/run/libvirtd.pid
            nohup libvirtd >>/var/log/labkit-libvirtd.log 2>&1 </dev/null &
        fi
    fi
    for _ in $(seq "$WAIT_S"); do
        virsh -c "$URI" version >/dev/null 2>&1 && break
        sleep 1
    done
    if ! virsh -c "$URI" version >/dev/null 2>&1; then
        echo "libvirtd did not answer on $URI within ${WAIT_S}s; see /var/log/labkit-libvirtd.log:" >&2
        tail -n 30 /var/log/labkit-libvirtd.log >&2 || true
        exit 1
    fi
    log "libvirtd answers on $URI"
fi

# --- private run networks -----------------------------------------------------------------
# libvirt writes each isolated network's MAC list into its dnsmasq state directory even when it
# runs no dnsmasq (labkit's run networks have DHCP and DNS off); without dnsmasq installed
# nothing creates that directory and a guest on the network fails to start.
install -d -m 0755 /var/lib/libvirt/dnsmasq

# --- VM image (from the rootfs the containers use) ------------------------------------------
if [ -n "${SKIP_IMAGES:-}" ]; then
    log "SKIP_IMAGES set: not building the VM image"
else
    log "building the VM image (cached: instant when nothing changed)"
    cd "$here"
    "$PYTHON" -c '
import logging
import sys
from labkit.errors import LabkitError
from labkit.images.vm import ensure_vm_image
logging.basicConfig(level=logging.INFO, format="%(message)s")  # show the build progress lines
try:
    print(ensure_vm_image())
except LabkitError as exc:
    sys.exit(f"error: {exc}")
'
    # the `study` variant (bonnie++, MariaDB, OpenMPI, hpcc) from the rootfs variant that
    # setup-containers.sh built: seed 004's disk and OLTP tests and Apache across guests
    log "building the study VM image variant (cached)"
    "$PYTHON" -m labkit images build --only none --vm --profile study >/dev/null
    # the `systemd` variant (systemd as PID 1, the unified cgroup hierarchy): the guest of the test of
    # the local backend as a user in a delegated cgroup subtree (test_cgroup_v2_delegation.py);
    # its own debootstrap, about 2 minutes the first time, then cached
    log "building the systemd VM image variant (cached)"
    "$PYTHON" -m labkit images build --only none --vm --profile systemd >/dev/null
fi
log "done"
