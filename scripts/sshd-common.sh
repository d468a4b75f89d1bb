# shellcheck shell=bash
# The sshd settings every labkit test sshd shares (scripts/setup-ssh.sh, scripts/setup-fleet.sh):
# keys only, root only, no forwarding, many channels per connection. Sourced, prints the lines.
sshd_common_config() {
  cat <<'EOF_SSHD'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
UsePAM no
AllowUsers root
X11Forwarding no
AllowTcpForwarding no
AllowAgentForwarding no
PermitTunnel no
PrintMotd no
# one connection carries every instance's commands: allow many channels at once
MaxSessions 100
MaxStartups 50:30:100
Subsystem sftp internal-sftp
EOF_SSHD
}
