#!/usr/bin/env bash
# A Slurm test cluster on this machine, for the `slurm` tests (Debian 12, as root). Idempotent.
#
#   bash scripts/setup-slurm.sh            # munged, MariaDB + slurmdbd, slurmctld and N slurmds (default 4)
#   bash scripts/setup-slurm.sh teardown   # stop the slurmds, slurmctld and slurmdbd (config, state stay)
#
# Debian's packages (slurmctld, slurmd, slurm-client, slurmdbd, munge, mariadb-server); no systemd
# needed: every daemon is started here. The cluster `labkit`:
#
# * munged (Debian's init script, its packaged key);
# * slurmdbd on 127.0.0.1:6819 with the accounting database `slurm_acct_db` in MariaDB (user
#   `slurm`@localhost, its password made once in /etc/labkit-slurm/db-password, 0600, written
#   into /etc/slurm/slurmdbd.conf, 0600 slurm); cluster `labkit`, account `labkit` with root in it;
# * slurmctld on 127.0.0.1:6817 (StateSaveLocation /var/lib/labkit-slurm/ctld);
# * nodes n1..nN (LABKIT_SLURM_NODES, 1-8), partition `labkit` (default): each slurmd in its own UTS
#   namespace whose hostname is its node name (`unshare --uts`), so each finds its NodeName in
#   slurm.conf as a slurmd on a real node does; all listen on 127.0.0.1, node i on port 17000+i,
#   with `%n` in their spool, pid and log paths. Every node claims this machine's CPUs
#   (SlurmdParameters=config_overrides): the nodes share them, like the fleet's namespace hosts.
#   SlurmdTimeout is 10 s and ReturnToService 2, so a stopped slurmd marks its node DOWN within
#   seconds and a restarted one returns it to service.
#
# /etc/slurm/slurm.conf is written only when it is absent or was written by this script (its first
# line says so): a real cluster's configuration is never replaced. Logs: /var/log/labkit-slurm/.
# Stop one node's slurmd: kill "$(cat /run/labkit-slurm/slurmd-n1.pid)"; this script starts it again.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

N=${LABKIT_SLURM_NODES:-4}
CONF=/etc/slurm/slurm.conf
DBDCONF=/etc/slurm/slurmdbd.conf
ETC=/etc/labkit-slurm
STATE=/var/lib/labkit-slurm
SPOOL=/var/spool/labkit-slurm
LOGS=/var/log/labkit-slurm
RUN=/run/labkit-slurm
HEADER="# labkit Slurm test cluster (scripts/setup-slurm.sh): rewritten by that script"
CLUSTER=labkit

[ "$(id -u)" = 0 ] || { echo "setup-slurm.sh: run as root (it installs Slurm and starts its daemons)" >&2; exit 1; }
case "$N" in [1-8]) ;; *) echo "setup-slurm.sh: LABKIT_SLURM_NODES must be a number of nodes from 1 to 8, got '$N'" >&2
                          exit 1;; esac
. "$(dirname "$0")/pidfile.sh"

stop() {   # pidfile command
  local pid i
  pid=$(pid_alive "$1" "$2") || { rm -f "$1"; return 0; }
  kill "$pid" 2>/dev/null || true
  for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$1"
}

ours() { [ ! -e "$CONF" ] || [ "$(head -n 1 "$CONF")" = "$HEADER" ]; }

if [ "${1:-}" = teardown ]; then
  if ! ours; then
    echo "setup-slurm.sh: $CONF was not written by this script: nothing of a real cluster is stopped" >&2
    exit 1
  fi
  for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop "$f" slurmd; done
  stop "$RUN/slurmctld.pid" slurmctld
  stop "$RUN/slurmdbd.pid" slurmdbd
  echo "== Slurm test cluster stopped (config in $CONF, state in $STATE; MariaDB and munged keep running)"
  exit 0
fi

if ! ours; then
  echo "setup-slurm.sh: $CONF exists and was not written by this script: refusing to replace a real" \
       "cluster's configuration (move it away to make the test cluster)" >&2
  exit 1
fi

. "$(dirname "$0")/apt.sh"
apt_install_missing slurmctld slurmd slurm-client slurmdbd munge mariadb-server mariadb-client util-linux procps iproute2

install -d -m 755 "$ETC" /etc/slurm "$RUN" "$SPOOL" "$LOGS"
install -d -m 700 -o slurm -g slurm "$STATE" "$STATE/ctld"
chown slurm:slurm "$LOGS"

# -- munge ------------------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  /usr/sbin/mungekey --create --force 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=128 2>/dev/null
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  /etc/init.d/munge start >/dev/null
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null || { echo "setup-slurm.sh: munged does not answer" >&2; exit 1; }

# -- the accounting database (MariaDB) and slurmdbd ---------------------------------------------
/etc/init.d/mariadb status >/dev/null 2>&1 || /etc/init.d/mariadb start >/dev/null
for _ in $(seq 100); do mysqladmin ping >/dev/null 2>&1 && break; sleep 0.2; done
mysqladmin ping >/dev/null 2>&1 || { echo "setup-slurm.sh: MariaDB does not answer" >&2; exit 1; }
if [ ! -s "$ETC/db-password" ]; then
  (umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$ETC/db-password")
fi
chmod 600 "$ETC/db-password"
DB_PASS=$(cat "$ETC/db-password")
mysql <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL

write_if_changed() {   # file mode owner: stdin -> file; prints "changed" when it did change
  local tmp
  tmp=$(mktemp)
  cat > "$tmp"
  if cmp -s "$tmp" "$1"; then rm -f "$tmp"; return 0; fi
  install -m "$2" -o "$3" -g "$3" "$tmp" "$1"
  rm -f "$tmp"
  echo changed
}

dbd_changed=$(write_if_changed "$DBDCONF" 600 slurm <<EOF
$HEADER
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=slurm
PidFile=$RUN/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$DB_PASS
EOF
)

NODES=""
for i in $(seq 1 "$N"); do NODES="$NODES
NodeName=n$i NodeAddr=127.0.0.1 NodeHostname=n$i Port=$((17000 + i)) CPUs=$(nproc) RealMemory=1024 State=UNKNOWN"; done
conf_changed=$(write_if_changed "$CONF" 644 root <<EOF
$HEADER
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=6817
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdSpoolDir=$SPOOL/%n
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdTimeout=10
SlurmctldTimeout=30
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=30
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=5
JobCompType=jobcomp/none
$NODES
PartitionName=labkit Nodes=n[1-$N] Default=YES MaxTime=INFINITE State=UP
EOF
)

if [ -n "$dbd_changed" ]; then stop "$RUN/slurmdbd.pid" slurmdbd; fi
if ! pid_alive "$RUN/slurmdbd.pid" slurmdbd >/dev/null; then
  echo "== starting slurmdbd"
  /usr/sbin/slurmdbd
fi
# sacctmgr: -i (no questions) and stdin closed, always: a question on a closed stdin loops forever
sam() { timeout 60 sacctmgr -i -n -P "$@" </dev/null; }
for _ in $(seq 100); do sam list cluster >/dev/null 2>&1 && break; sleep 0.2; done
sam list cluster >/dev/null || { echo "setup-slurm.sh: slurmdbd does not answer (see $LOGS/slurmdbd.log)" >&2; exit 1; }
[ -n "$(sam list cluster "$CLUSTER" format=cluster)" ] || sam add cluster "$CLUSTER" >/dev/null
[ -n "$(sam list account labkit format=account)" ] || \
  sam add account labkit cluster="$CLUSTER" description="labkit tests" organization=labkit >/dev/null
[ -n "$(sam list assoc cluster="$CLUSTER" account=labkit user=root format=user)" ] || \
  sam add user root account=labkit cluster="$CLUSTER" >/dev/null

# -- slurmctld and the slurmds ----------------------------------------------------------------
if [ -n "$conf_changed" ]; then
  for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop "$f" slurmd; done
  stop "$RUN/slurmctld.pid" slurmctld
fi
if ! pid_alive "$RUN/slurmctld.pid" slurmctld >/dev/null; then
  echo "== starting slurmctld"
  /usr/sbin/slurmctld
fi
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
scontrol ping | grep -q UP || { echo "setup-slurm.sh: slurmctld does not answer (see $LOGS/slurmctld.log)" >&2; exit 1; }

for f in "$RUN"/slurmd-*.pid; do   # nodes beyond N from an earlier, larger set-up
  [ -e "$f" ] || continue
  i=${f##*/slurmd-n}; i=${i%.pid}
  [ "$i" -gt "$N" ] 2>/dev/null && stop "$f" slurmd
done
for i in $(seq 1 "$N"); do
  if ! pid_alive "$RUN/slurmd-n$i.pid" slurmd >/dev/null; then
    install -d -m 755 "$SPOOL/n$i"
    echo "== starting slurmd n$i (own UTS namespace, hostname n$i, 127.0.0.1:$((17000 + i)))"
    unshare --uts /bin/sh -c 'hostname "$1" && exec /usr/sbin/slurmd' sh "n$i"
  fi
done

# -- the proof: every node idle (or in use) and a step runs on each -------------------------------
for i in $(seq 1 "$N"); do
  for _ in $(seq 150); do
    state=$(sinfo -h -n "n$i" -o %T 2>/dev/null || true)
    case "$state" in idle|allocated|mixed|completing) break;; esac
    case "$state" in down*|drain*) scontrol update nodename="n$i" state=resume 2>/dev/null || true;; esac
    sleep 0.2
  done
  case "$state" in idle|allocated|mixed|completing) ;; *)
    echo "setup-slurm.sh: node n$i is '$state' (see $LOGS/slurmd-n$i.log and $LOGS/slurmctld.log)" >&2; exit 1;; esac
done
out=$(srun -p labkit -N "$N" -n "$N" --ntasks-per-node=1 -t 1 -J labkit-setup-check hostname | sort | tr '\n' ' ')
want=$(for i in $(seq 1 "$N"); do echo "n$i"; done | sort | tr '\n' ' ')
[ "$out" = "$want" ] || { echo "setup-slurm.sh: srun on every node printed '$out', expected '$want'" >&2; exit 1; }
echo "== Slurm test cluster '$CLUSTER': nodes n1..n$N in partition labkit, accounting in slurmdbd (sacct)"
