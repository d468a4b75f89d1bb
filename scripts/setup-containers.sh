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
apt_install_missing docker.io lxd lxd-client debootstrap tar coreutils gcc libc6-dev

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
        nohup dockerd >>/var/log/labkit-dockerd.log 2>&1 </dev/null &
    fi
    for _ in $(seq "$WAIT_S"); do
        docker info >/dev/null 2>&1 && break
        sleep 1
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

# --- images ---------------------------------------------------------------------
if [ -n "${SKIP_IMAGES:-}" ]; then
    log "SKIP_IMAGES set: not building images"
    exit 0
fi
cd "$here"
if "$PYTHON" -m labkit images build --help >/dev/null 2>&1; then
    "$PYTHON" -m labkit images build --only docker,lxd
else
    "$PYTHON" -m labkit.images build --only docker,lxd
fi
log "done"
