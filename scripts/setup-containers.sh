#!/usr/bin/env bash
# Make the docker and lxd backends usable on a Debian 12 machine (run as root).
# Idempotent: installs what is missing, starts what is not running, builds the
# images only when their inputs changed. Re-run it any time.
#
#   bash scripts/setup-containers.sh            # packages, daemons, images
#   SKIP_IMAGES=1 bash scripts/setup-containers.sh
#
# Daemon logs: /var/log/labkit-dockerd.log, /var/log/labkit-lxd.log
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# the project's venv (scripts/setup-core.sh) when there is one
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$here/.venv/bin/python" ]; then PYTHON="$here/.venv/bin/python"; else PYTHON=python3; fi
fi
WAIT_S="${LABKIT_DAEMON_WAIT:-120}"

log() { echo "[setup-containers] $*"; }

if [ "$(id -u)" != 0 ]; then
    echo "setup-containers.sh must run as root (it installs packages and starts daemons)" >&2
    exit 1
fi

# --- packages ---------------------------------------------------------------
. "$here/scripts/apt.sh"
. "$here/scripts/pidfile.sh"
apt_install_missing docker.io lxd lxd-client debootstrap tar coreutils gcc libc6-dev btrfs-progs

# --- Python SDKs ---------------------------------------------------------------
if ! "$PYTHON" -c 'import docker, pylxd' 2>/dev/null; then
    log "installing the Python SDKs (docker, pylxd) from requirements.txt"
    "$PYTHON" -m pip install -q $(grep -E '^(docker|pylxd)==' "$here/requirements.txt")
fi

# --- dockerd ------------------------------------------------------------------
if docker info >/dev/null 2>&1; then
    log "dockerd is running"
else
    log "starting dockerd (log: /var/log/labkit-dockerd.log)"
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl start docker || true
    fi
    if ! docker info >/dev/null 2>&1; then
        # pid files of a dockerd killed with its session: dockerd would take an unrelated process
        # that now has containerd's old pid for a running containerd and wait for it in vain
        if ! pgrep -x dockerd >/dev/null; then
            drop_stale_pidfile /var/run/docker/containerd/containerd.pid containerd
            drop_stale_pidfile /var/run/docker.pid dockerd
        fi
        nohup dockerd >>/var/log/labkit-dockerd.log 2>&1 </dev/null &
    fi
    for _ in $(seq "$WAIT_S"); do
        docker info >/dev/null 2>&1 && break
        sleep 1
        pgrep -x dockerd >/dev/null || break   # it exited: its log says why
    done
    if ! docker info >/dev/null 2>&1; then
        echo "dockerd did not become ready within ${WAIT_S}s; see /var/log/labkit-dockerd.log:" >&2
        tail -n 20 /var/log/labkit-dockerd.log >&2 || true
        exit 1
    fi
    log "dockerd ready"
fi

# --- LXD ----------------------------------------------------------------------
if lxc info >/dev/null 2>&1; then
    log "LXD is running"
else
    log "starting LXD (log: /var/log/labkit-lxd.log)"
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl start lxd || true
    fi
    if ! lxd waitready --timeout 2 >/dev/null 2>&1; then
        nohup lxd --group root >>/var/log/labkit-lxd.log 2>&1 </dev/null &
    fi
    if ! lxd waitready --timeout "$WAIT_S"; then
        echo "LXD did not become ready within ${WAIT_S}s; see /var/log/labkit-lxd.log:" >&2
        tail -n 20 /var/log/labkit-lxd.log >&2 || true
        exit 1
    fi
    log "LXD ready"
fi
if [ -z "$(lxc storage list --format csv 2>/dev/null)" ]; then
    log "lxd init: a dir storage pool, no network"
    lxd init --preseed <<'EOF'
config:
  images.auto_update_interval: "0"
networks: []
storage_pools:
- name: default
  driver: dir
profiles:
- name: default
  devices:
    root:
      path: /
      pool: default
      type: disk
EOF
else
    log "LXD storage pool present"
fi

# --- LXD on a copy-on-write pool ------------------------------------------------
# A dir pool copies the whole rootfs for every instance (about 9 s per start here);
# btrfs snapshots the image instead. LXD makes the loop file itself
# (/var/lib/lxd/disks/$POOL.img, sparse) and mounts it again whenever the daemon
# starts, so a reboot needs nothing from us. If btrfs cannot be had, the dir pool
# stays the default profile's root pool. LABKIT_LXD_POOL=dir skips this step.
POOL="${LABKIT_LXD_POOL:-labkit-btrfs}"
POOL_SIZE="${LABKIT_LXD_POOL_SIZE:-20GiB}"
pool_ok() {  # the pool exists and LXD can use it (a loop file gone missing makes it unavailable)
    lxc storage info "$1" >/dev/null 2>&1
}
root_pool() { lxc profile device get default root pool 2>/dev/null || true; }
if [ "$POOL" != dir ]; then
    if lxc storage show "$POOL" >/dev/null 2>&1; then
        log "LXD pool $POOL present ($(lxc storage get "$POOL" source 2>/dev/null || echo '?'))"
    else
        log "creating LXD btrfs pool $POOL on a $POOL_SIZE loop file"
        lxc storage create "$POOL" btrfs size="$POOL_SIZE" \
            || log "WARNING: btrfs pool $POOL could not be made; instances stay on the dir pool"
    fi
    if pool_ok "$POOL"; then
        if [ "$(root_pool)" != "$POOL" ]; then
            log "default profile: root disk on $POOL (was $(root_pool))"
            lxc profile device set default root pool "$POOL"
        else
            log "default profile already roots instances on $POOL"
        fi
    elif lxc storage show "$POOL" >/dev/null 2>&1; then
        fallback="$(lxc storage list --format csv | awk -F, '$2 == "dir" {print $1; exit}')"
        log "WARNING: LXD pool $POOL is unavailable (see lxc storage info $POOL);" \
            "default profile falls back to the dir pool ${fallback:-?}"
        if [ -n "$fallback" ] && [ "$(root_pool)" != "$fallback" ]; then
            lxc profile device set default root pool "$fallback"
        fi
    fi
fi

# --- images ---------------------------------------------------------------------
if [ -n "${SKIP_IMAGES:-}" ]; then
    log "SKIP_IMAGES set: not building images"
    exit 0
fi
cd "$here"
if "$PYTHON" -m labkit images build --help >/dev/null 2>&1; then
    "$PYTHON" -m labkit images build --only docker,lxd
    # the `study` variant (base + every profile: openmpi-bin, hpcc, bonnie++, mariadb-server),
    # the one extra image per engine: MPI/hpcc, bonnie++ and MariaDB/sysbench OLTP across
    # containers in tests/integration/test_network.py and notebook 02; cached by content like
    # the base (a fresh build, debootstrap + both imports: 2 min 5 s on the loaded 2-core machine)
    "$PYTHON" -m labkit images build --only docker,lxd --profile study
else
    "$PYTHON" -m labkit.images build --only docker,lxd
fi
log "done"
