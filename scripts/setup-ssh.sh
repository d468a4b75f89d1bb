#!/usr/bin/env bash
# sshd for the `ssh` backend's tests, on Debian 12, as root. Idempotent: safe to run again.
#
# * installs openssh-server (the client comes with it);
# * makes a dedicated key /root/.ssh/labkit_test_ed25519 and authorizes it once for root;
# * starts a separate sshd that listens on 127.0.0.1:2222 only (its own config, pid file and
#   no passwords), unless it is already listening; no systemd needed;
# * records the sshd's host keys as [127.0.0.1]:2222 in /root/.ssh/known_hosts (replacing stale
#   entries for it), so labkit's default host_key_policy (strict) accepts it;
# * checks that `ssh -p 2222 root@127.0.0.1 true` works with that key and strict host-key checking.
#
# Nothing but 127.0.0.1 is ever contacted. Point the tests at it with:
#   export LABKIT_SSH_HOST=127.0.0.1 LABKIT_SSH_PORT=2222 LABKIT_SSH_USER=root \
#          LABKIT_SSH_KEY=/root/.ssh/labkit_test_ed25519
# Stop it with: kill "$(cat /run/labkit_sshd.pid)"
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

PORT=${LABKIT_SSHD_PORT:-2222}
KEY=/root/.ssh/labkit_test_ed25519
CONF=/etc/ssh/labkit_sshd_config
PIDFILE=/run/labkit_sshd.pid

if [ "$(id -u)" != 0 ]; then
  echo "setup-ssh.sh: run as root (it installs openssh-server and authorizes a key for root)" >&2
  exit 1
fi

. "$(dirname "$0")/apt.sh"
. "$(dirname "$0")/sshd-common.sh"
. "$(dirname "$0")/known-hosts.sh"
apt_install_missing openssh-server openssh-client procps iproute2

# -- the test key, authorized once ------------------------------------------------------
install -d -m 700 /root/.ssh
if [ ! -f "$KEY" ]; then
  echo "== generating $KEY"
  ssh-keygen -q -t ed25519 -N "" -C "labkit-test" -f "$KEY"
fi
[ -f "$KEY.pub" ] || ssh-keygen -y -f "$KEY" > "$KEY.pub"
touch /root/.ssh/authorized_keys
chmod 600 /root/.ssh/authorized_keys "$KEY"
pub=$(cut -d' ' -f1,2 "$KEY.pub")
if ! grep -qF "$pub" /root/.ssh/authorized_keys; then
  echo "== authorizing $KEY.pub for root"
  cat "$KEY.pub" >> /root/.ssh/authorized_keys
fi

# -- host keys and the test sshd's own config -------------------------------------------
ssh-keygen -A >/dev/null
mkdir -p /run/sshd
chmod 755 /run/sshd
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
cat > "$tmp" <<EOF
# labkit test sshd (scripts/setup-ssh.sh): loopback only, keys only.
Port $PORT
ListenAddress 127.0.0.1
PidFile $PIDFILE
HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_ecdsa_key
HostKey /etc/ssh/ssh_host_rsa_key
EOF
sshd_common_config >> "$tmp"
changed=0
if ! cmp -s "$tmp" "$CONF"; then
  install -m 644 "$tmp" "$CONF"
  changed=1
fi
/usr/sbin/sshd -t -f "$CONF"

running_pid() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q sshd "/proc/$pid/comm" 2>/dev/null && echo "$pid"
}
listening() { ss -Hltn "sport = :$PORT" 2>/dev/null | grep -q "127.0.0.1:$PORT"; }

if pid=$(running_pid); then
  if [ "$changed" = 1 ]; then
    echo "== reloading the test sshd (pid $pid): config changed"
    kill -HUP "$pid"
    sleep 1
  else
    echo "== test sshd already running (pid $pid) on 127.0.0.1:$PORT"
  fi
elif listening; then
  echo "setup-ssh.sh: something else listens on 127.0.0.1:$PORT (not the sshd of $PIDFILE);" \
       "stop it or set LABKIT_SSHD_PORT" >&2
  exit 1
else
  echo "== starting /usr/sbin/sshd -f $CONF (127.0.0.1:$PORT)"
  /usr/sbin/sshd -f "$CONF"
fi
for _ in $(seq 50); do listening && break; sleep 0.2; done
listening || { echo "setup-ssh.sh: sshd did not start listening on 127.0.0.1:$PORT" >&2; exit 1; }

record_host_keys 127.0.0.1 "$PORT" /etc/ssh/ssh_host_ed25519_key.pub /etc/ssh/ssh_host_ecdsa_key.pub \
  /etc/ssh/ssh_host_rsa_key.pub

# -- the proof ----------------------------------------------------------------------------
if ssh -i "$KEY" -p "$PORT" -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/root/.ssh/known_hosts \
       -o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=10 root@127.0.0.1 true; then
  echo "== ssh set-up done: root@127.0.0.1:$PORT with $KEY"
  echo "   export LABKIT_SSH_HOST=127.0.0.1 LABKIT_SSH_PORT=$PORT LABKIT_SSH_USER=root LABKIT_SSH_KEY=$KEY"
else
  echo "setup-ssh.sh: ssh -i $KEY -p $PORT root@127.0.0.1 true failed" >&2
  exit 1
fi
