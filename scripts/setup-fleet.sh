#!/usr/bin/env bash
# Test hosts for the fleet tests and benchmark (Debian 12, as root). Idempotent: safe to run again.
#
#   bash scripts/setup-fleet.sh            # N hosts (default 4; LABKIT_FLEET_HOSTS=16 for the benchmark)
#   bash scripts/setup-fleet.sh teardown   # stop their sshds, remove the namespaces and the bridge
#
# Each test host is a network namespace `labkit-fleet-<i>` on a bridge this script makes
# (`lkfleet0`, 10.231.0.1/24 on the controller's side). Host i has the address 10.231.0.<10+i> on
# that bridge only: no default route, nothing routed outside the bridge. Each runs its own sshd
# (own config, host key and pid file under /etc/labkit-fleet and /run/labkit-fleet, ListenAddress
# on its namespace address, keys only) that accepts the labkit test key
# /root/.ssh/labkit_test_ed25519 made by scripts/setup-ssh.sh (run that first). Each host's key is
# recorded in /root/.ssh/known_hosts (replacing stale entries for its address), so labkit's default
# host_key_policy (strict) accepts the hosts.
#
# The sshds are started with `nsenter --net` (not `ip netns exec`, which remounts /sys and would
# hide the cgroup hierarchy): the namespace hosts share this machine's kernel, cgroups and file
# system; only the network is their own. Stop a host's sshd (and every process in its namespace)
# with `ip netns pids labkit-fleet-<i> | xargs kill -9`; cut its link with `ip link set lkf<i>h down`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

N=${LABKIT_FLEET_HOSTS:-4}
BRIDGE=lkfleet0
NET=10.231.0
KEY=/root/.ssh/labkit_test_ed25519
ETC=/etc/labkit-fleet
RUN=/run/labkit-fleet

if [ "$(id -u)" != 0 ]; then
  echo "setup-fleet.sh: run as root (it makes network namespaces and starts sshds)" >&2
  exit 1
fi
case "$N" in ''|*[!0-9]*) echo "setup-fleet.sh: LABKIT_FLEET_HOSTS must be a number (1-64), got '$N'" >&2; exit 1;; esac
if [ "$N" -lt 1 ] || [ "$N" -gt 64 ]; then
  echo "setup-fleet.sh: LABKIT_FLEET_HOSTS must be 1-64, got $N" >&2; exit 1
fi

ns() { echo "labkit-fleet-$1"; }

stop_host() {   # every process in the namespace (its sshd and whatever it started), then the namespace
  local n pids
  n=$(ns "$1")
  if [ -e "/run/netns/$n" ]; then
    pids=$(ip netns pids "$n" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
  fi
  ip link del "lkf$1h" 2>/dev/null || true
  rm -f "$RUN/sshd_$1.pid"
}

if [ "${1:-}" = teardown ]; then
  for p in /run/netns/labkit-fleet-*; do
    [ -e "$p" ] || continue
    stop_host "${p##*/labkit-fleet-}"
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment labkit-fleet -j ACCEPT 2>/dev/null || true
  echo "== fleet test hosts removed"
  exit 0
fi

. "$(dirname "$0")/apt.sh"
. "$(dirname "$0")/sshd-common.sh"
. "$(dirname "$0")/known-hosts.sh"
apt_install_missing openssh-server iproute2 util-linux procps

if [ ! -f "$KEY" ]; then
  echo "setup-fleet.sh: $KEY is missing: run scripts/setup-ssh.sh first" >&2
  exit 1
fi

# -- the bridge (controller side 10.231.0.1) ------------------------------------------------
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge
fi
ip addr replace "$NET.1/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
# host <-> host traffic crosses the bridge: with br_netfilter loaded it traverses iptables FORWARD,
# whose policy Docker sets to DROP; accept what stays on this bridge (MPI between two test hosts)
FWD=(FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment labkit-fleet -j ACCEPT)
if command -v iptables >/dev/null 2>&1 && ! iptables -C "${FWD[@]}" 2>/dev/null; then
  iptables -I "${FWD[@]}"
fi

install -d -m 700 "$ETC"
install -d -m 755 "$RUN" /run/sshd

# hosts beyond N from an earlier, larger set-up go away
for p in /run/netns/labkit-fleet-*; do
  [ -e "$p" ] || continue
  i=${p##*/labkit-fleet-}
  [ "$i" -gt "$N" ] 2>/dev/null && stop_host "$i"
done

running() {   # is host $1's sshd alive in its namespace? (a zombie, or one killed but not yet reaped, is not)
  local pid state
  pid=$(cat "$RUN/sshd_$1.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q sshd "/proc/$pid/comm" 2>/dev/null || return 1
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1) || return 1
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

start_sshd() {   # host $1's sshd, unless it runs
  running "$1" || nsenter --net="/run/netns/$(ns "$1")" /usr/sbin/sshd -f "$ETC/sshd_$1.conf"
}

for i in $(seq 1 "$N"); do
  n=$(ns "$i")
  addr="$NET.$((10 + i))"
  [ -e "/run/netns/$n" ] || ip netns add "$n"
  if ! ip link show "lkf${i}h" >/dev/null 2>&1; then
    ip link add "lkf${i}h" type veth peer name "lkf${i}n" netns "$n"
    ip -n "$n" link set "lkf${i}n" name eth0
  fi
  ip link set "lkf${i}h" master "$BRIDGE" up
  ip -n "$n" link set lo up
  ip -n "$n" link set eth0 up
  ip -n "$n" addr replace "$addr/24" dev eth0
  [ -f "$ETC/host_${i}_ed25519" ] || ssh-keygen -q -t ed25519 -N "" -C "labkit-fleet-$i" -f "$ETC/host_${i}_ed25519"
  cat > "$ETC/sshd_$i.conf" <<EOF
# labkit fleet test host $i (scripts/setup-fleet.sh): namespace $n, $addr only, keys only.
Port 22
ListenAddress $addr
PidFile $RUN/sshd_$i.pid
HostKey $ETC/host_${i}_ed25519
EOF
  sshd_common_config >> "$ETC/sshd_$i.conf"
  chmod 600 "$ETC/sshd_$i.conf"
  start_sshd "$i"
  record_host_keys "$addr" 22 "$ETC/host_${i}_ed25519.pub"
done

# -- the proof: every host answers with the test key ------------------------------------------
# A host whose sshd was killed just before this script ran may have looked alive above (killed,
# not yet gone): it is started again here once it is gone.
for i in $(seq 1 "$N"); do
  addr="$NET.$((10 + i))"
  ok=0
  for _ in $(seq 40); do
    if timeout 10 ssh -i "$KEY" -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/root/.ssh/known_hosts -o BatchMode=yes \
         -o LogLevel=ERROR -o ConnectTimeout=5 "root@$addr" true 2>/dev/null; then ok=1; break; fi
    start_sshd "$i" || true
    sleep 0.25
  done
  [ "$ok" = 1 ] || { echo "setup-fleet.sh: ssh root@$addr (host $i) failed" >&2; exit 1; }
done
echo "== $N fleet test hosts: root@$NET.11 .. root@$NET.$((10 + N)) (port 22, key $KEY)"
