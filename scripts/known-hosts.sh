# shellcheck shell=bash
# Record a test sshd's host keys in root's ~/.ssh/known_hosts (scripts/setup-ssh.sh,
# scripts/setup-fleet.sh), so labkit's default host_key_policy (strict) accepts the test hosts.
# Sourced. Idempotent: the entries for host:port are replaced only when they differ from the keys.
#
#   record_host_keys HOST PORT PUBKEY...    # PUBKEY: an OpenSSH host_*_key.pub file
record_host_keys() {
  local host=$1 port=$2 name kh=/root/.ssh/known_hosts want have
  shift 2
  if [ "$port" = 22 ]; then name=$host; else name="[$host]:$port"; fi
  install -d -m 700 /root/.ssh
  [ -f "$kh" ] || install -m 600 /dev/null "$kh"
  want=$(for pub in "$@"; do printf '%s %s\n' "$name" "$(cut -d' ' -f1,2 "$pub")"; done | sort)
  # what the file holds for name now (plain or hashed), as "name type key" lines
  have=$(ssh-keygen -F "$name" -f "$kh" 2>/dev/null | grep -v '^#' | awk -v n="$name" '{print n, $2, $3}' | sort || true)
  [ "$want" = "$have" ] && return 0
  echo "== recording the host keys of $name in $kh"
  ssh-keygen -R "$name" -f "$kh" >/dev/null 2>&1 || true
  rm -f "$kh.old"
  printf '%s\n' "$want" >> "$kh"
  chmod 600 "$kh"
}
