#!/usr/bin/env bash
# A single-node OpenStack for labkit's `openstack` tests, from Debian 12's own packages, as root.
# Idempotent (safe to run again) and non-interactive (debconf preseeded, every Debian question
# answered "no": the script writes the configuration itself).
#
# * keystone (fernet), glance (file store), placement, nova (api, conductor, scheduler,
#   compute with the libvirt driver, virt_type=qemu: this machine has no nested KVM, QEMU TCG),
#   neutron (ml2 + linuxbridge agent, one flat provider network "provider" whose interface is the
#   dummy lkos0 this script makes: 10.238.0.1/24 on the host, no uplink, no NAT, no router, no DHCP agent:
#   instances get their address from nova's config drive);
#   MariaDB, RabbitMQ and memcached on 127.0.0.1. Every API listens on 127.0.0.1.
# * the running libvirtd is used as it is (never restarted).
# * labkit's VM image (`labkit images build --vm`, vm-current.json in the image cache) gets an
#   OpenStack variant: the same root filesystem plus openssh-server and /sbin/labkit-os-init (reads
#   the config drive: SSH keys, address; starts sshd; then execs /sbin/labkit-init). Uploaded to
#   glance as labkit-debian-12 with its kernel and initrd (direct kernel boot, like the libvirt
#   backend does).
# * flavors labkit.small (1 vCPU, 512 MiB) and labkit.medium (2 vCPUs, 768 MiB), 4 GB disk.
# * /etc/openstack/clouds.yaml (0600): cloud `labkit` (project labkit, member role: what the
#   tests use) and `labkit-admin`.
#
# Secrets (generated once) live in /etc/labkit/openstack/secrets.env (0600, root).
# Undo: bash scripts/setup-openstack.sh --stop   (stops the OpenStack services, keeps the data)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
HERE=$(cd "$(dirname "$0")" && pwd)
BRIDGE=lkos0
HOST_IP=10.238.0.1
CIDR=10.238.0.0/24
POOL_START=10.238.0.10
POOL_END=10.238.0.250
REGION=RegionOne
KS=http://127.0.0.1:5000
STATE=/etc/labkit/openstack
IMAGE_NAME=labkit-debian-12
CACHE=${LABKIT_IMAGE_CACHE:-/var/cache/labkit/images}
SERVICES=(keystone glance-api placement-api nova-api nova-conductor nova-scheduler nova-compute
          neutron-api neutron-rpc-server neutron-linuxbridge-agent)
T0=$(date +%s)
say() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }

if [ "$(id -u)" != 0 ]; then echo "setup-openstack.sh: run as root" >&2; exit 1; fi
if [ "${1:-}" = --stop ]; then
  for s in "${SERVICES[@]}"; do [ -x "/etc/init.d/$s" ] && /etc/init.d/"$s" stop || true; done
  exit 0
fi
grep -q '^VERSION_ID="12"' /etc/os-release || { echo "setup-openstack.sh: Debian 12 only" >&2; exit 1; }

# -- the isolated provider network's "physical" interface: one end of a veth pair whose other end
# (lkos0-end) stays down and unattached: it leads nowhere --------------------------------------------
# neutron's linuxbridge agent makes the network's bridge (brq<network id>) when the first server
# is plugged, enslaves lkos0 to it and moves 10.238.0.1/24 onto it; no uplink, no NAT, no route.
# (an older layout made lkos0 a bridge itself: /sys/class/net/lkos0/bridge exists only for a bridge;
# `ip -d link` output cannot tell, a bridge port's details say "designated_bridge" too)
if [ -d "/sys/class/net/$BRIDGE/bridge" ]; then ip link del "$BRIDGE"; fi
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  # after a restart or a lost veth, neutron's bridge brq<network id> may still hold the address: ours
  routes=$(ip route show to match "$HOST_IP" | grep -v '^default' | grep -Ev " dev brq[0-9a-f-]+ " || true)
  if [ -n "$routes" ]; then
    echo "setup-openstack.sh: $CIDR is already routed on this host; refusing to overlap" >&2; exit 1
  fi
  ip link add "$BRIDGE" type veth peer name "$BRIDGE-end"
fi
addrs=$(ip -4 -o addr show)
[[ "$addrs" == *" inet $HOST_IP/"* ]] || ip addr add "$HOST_IP/24" dev "$BRIDGE"
ip link set "$BRIDGE" up

# -- secrets ---------------------------------------------------------------------------------------
install -d -m 700 "$STATE"
if [ ! -f "$STATE/secrets.env" ]; then
  ( umask 077
    for v in DB RABBIT ADMIN LABKIT KEYSTONE GLANCE NOVA NEUTRON PLACEMENT; do
      echo "${v}_PASS=$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 24)"
    done > "$STATE/secrets.env" )
fi
# shellcheck disable=SC1091
. "$STATE/secrets.env"

# -- packages (every debconf question "no": this script configures) ------------------------------
say "packages"
for p in keystone glance-common nova-common neutron-common placement-common glance-api nova-api \
         placement-api neutron-server neutron-api; do
  for q in configure_db register-endpoint configure_api-endpoint create-admin-tenant \
           ksat-create-service-user configure_ksat configure_rabbit; do
    echo "$p $p/$q boolean false"
  done
done | debconf-set-selections
# RabbitMQ and its epmd on loopback only, before the package first starts them.
install -d /etc/rabbitmq
RABBIT_ENV='# labkit: loopback only (node, epmd, distribution port)
NODE_IP_ADDRESS=127.0.0.1
ERL_EPMD_ADDRESS=127.0.0.1
NODENAME=rabbit@localhost
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"'
RABBIT_ACTION=start
if [ "$(cat /etc/rabbitmq/rabbitmq-env.conf 2>/dev/null)" != "$RABBIT_ENV" ]; then
  echo "$RABBIT_ENV" > /etc/rabbitmq/rabbitmq-env.conf
  RABBIT_ACTION=restart
fi
. "$HERE/apt.sh"
. "$HERE/pidfile.sh"
export APT_LISTCHANGES_FRONTEND=none
PKGS=(mariadb-server python3-pymysql rabbitmq-server memcached python3-memcache crudini
      keystone glance placement-api nova-api nova-conductor nova-scheduler nova-compute nova-compute-qemu
      neutron-server neutron-linuxbridge-agent python3-openstackclient
      genisoimage qemu-utils ebtables kmod)
need=()
for pkg in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  # The packages' maintainer scripts start nothing (policy-rc.d, only while installing): the
  # services start below, configured.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get -q -o DPkg::Lock::Timeout=600 update
  apt-get -y -q -o DPkg::Lock::Timeout=600 -o Dpkg::Options::=--force-confold \
    install --no-install-recommends "${need[@]}"
  rm -f /usr/sbin/policy-rc.d; trap - EXIT
fi

# Services through Debian's own init scripts (works with or without systemd as PID 1).
# Whether one runs: its pidfile (openstack-pkg-tools scripts: /var/run/<project>/<name>.pid). Their
# `status` asks for any process of the daemon binary, and every uwsgi API has the same one
# (/usr/bin/uwsgi_python311): with keystone up, a stopped placement-api said "running".
pidfile() {  # name: the pid file of an openstack-pkg-tools init script, or nothing
  local f=/etc/init.d/$1 proj name
  proj=$(sed -n 's/^PROJECT_NAME=//p' "$f" | head -1)
  name=$(sed -n 's/^NAME=//p' "$f" | head -1)
  if [ -n "$proj" ] && grep -q '^PIDFILE=/var/run/${PROJECT_NAME}/${NAME}.pid$' "$f"; then
    echo "/var/run/$proj/${name//\$\{PROJECT_NAME\}/$proj}.pid"
  fi
}
# The pid files of the other daemons, with the command their process runs: a file left by a killed
# session names a pid that another process may have now, and their `status` trusts any live pid.
declare -A OTHER_PIDFILES=([memcached]="/var/run/memcached/memcached.pid /var/run/memcached.pid"
                           [mariadb]="/var/run/mysqld/mysqld.pid")
declare -A OTHER_COMMANDS=([memcached]=memcached [mariadb]=mariadbd)
running() {
  local pf proj user pid f
  pf=$(pidfile "$1")
  if [ -n "$pf" ]; then
    # --user and the project's config in its command line: a pid file left by a killed session may
    # name a pid that another process now has (nova-compute runs as root, as the CI's processes do)
    proj=$(sed -n 's/^PROJECT_NAME=//p' "/etc/init.d/$1" | head -1)
    user=$proj
    grep -qs '^STARTDAEMON_CHUID=""' "/etc/default/$1" && user=root   # nova-compute (below)
    start-stop-daemon --status --user "$user" --pidfile "$pf" || return 1
    pid=$(cat "$pf" 2>/dev/null) || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "/etc/$proj/"
  else
    for f in ${OTHER_PIDFILES[$1]:-}; do drop_stale_pidfile "$f" "${OTHER_COMMANDS[$1]}"; done
    /etc/init.d/"$1" status >/dev/null 2>&1
  fi
}
svc() {  # start|restart name...
  local a=$1 s pf; shift
  for s in "$@"; do
    [ -x "/etc/init.d/$s" ] || { echo "setup-openstack.sh: no /etc/init.d/$s" >&2; exit 1; }
    if [ "$a" = start ] && running "$s"; then continue; fi
    # a stale pid file would make `restart` SIGTERM whatever process now has that pid
    pf=$(pidfile "$s"); if [ -n "$pf" ] && [ -e "$pf" ] && ! running "$s"; then rm -f "$pf"; fi
    /etc/init.d/"$s" "$a" >/dev/null
  done
}

# Restart only what a changed configuration needs (a re-run with nothing changed restarts nothing).
svc_conf() {  # service config-files...: restart when their digest changed since the last run, else start
  local s=$1 sum; shift
  sum=$({ cat "$@"; cat "/etc/default/$s" 2>/dev/null || true; } | sha256sum | cut -c1-32)
  if [ "$(cat "$STATE/$s.conf-sum" 2>/dev/null)" = "$sum" ]; then svc start "$s"; else svc restart "$s"; fi
  echo "$sum" > "$STATE/$s.conf-sum"
}

# An API started by svc/svc_conf answers only once its uwsgi workers have loaded (tens of seconds on
# 2 loaded cores); a service started before the APIs it needs answer exits (nova-conductor and
# nova-scheduler do without placement: "exists but does not have any supported versions").
wait_api() {  # name url [seconds]: until the URL answers (any status below 400)
  local name=$1 url=$2 t=${3:-180} i
  for i in $(seq "$t"); do curl -fsS -m 5 -o /dev/null "$url" 2>/dev/null && return 0; sleep 1; done
  echo "setup-openstack.sh: $name does not answer on $url after ${t}s (see /var/log/${name%%-*}/)" >&2; exit 1
}

# -- database, queue -------------------------------------------------------------------------------
say "mariadb, rabbitmq"
svc start mariadb memcached
dbuser() { case $1 in nova*) echo os_nova ;; *) echo "os_$1" ;; esac; }   # nova: api, cells, cell0
for db in keystone glance placement nova_api nova nova_cell0 neutron; do   # SQL on stdin: no secret in argv
  u=$(dbuser $db)
  mysql <<SQL
CREATE DATABASE IF NOT EXISTS $db;
CREATE USER IF NOT EXISTS '$u'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER '$u'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON $db.* TO '$u'@'localhost';
SQL
done
dburl() { echo "mysql+pymysql://$(dbuser $1):$DB_PASS@127.0.0.1/$1"; }
svc "$RABBIT_ACTION" rabbitmq-server
[[ "$(rabbitmqctl list_users -q)" == *openstack* ]] || rabbitmqctl add_user openstack <<<"$RABBIT_PASS" >/dev/null
rabbitmqctl change_password openstack <<<"$RABBIT_PASS" >/dev/null
rabbitmqctl set_permissions openstack '.*' '.*' '.*' >/dev/null
RABBIT="rabbit://openstack:$RABBIT_PASS@127.0.0.1:5672/"

# file section key value; the value goes through stdin (crudini --merge), never into argv
set_ini() { printf '[%s]\n%s = %s\n' "$2" "$3" "$4" | crudini --merge "$1"; }
authtoken() {  # file user password [section]
  local f=$1 u=$2 p=$3 s=${4:-keystone_authtoken}
  set_ini "$f" "$s" www_authenticate_uri "$KS"
  set_ini "$f" "$s" auth_url "$KS"
  set_ini "$f" "$s" memcached_servers 127.0.0.1:11211
  set_ini "$f" "$s" auth_type password
  set_ini "$f" "$s" project_domain_name Default
  set_ini "$f" "$s" user_domain_name Default
  set_ini "$f" "$s" project_name service
  set_ini "$f" "$s" username "$u"
  set_ini "$f" "$s" password "$p"
  set_ini "$f" "$s" region_name "$REGION"
}
# Debian runs the APIs under uwsgi from openstack-pkg-tools' init scripts, which source
# /etc/default/<service> after building the uwsgi arguments: loopback only, 2 worker processes, and
# "Connection: close" on every response: uwsgi's http-socket closes each connection after its
# response without saying so, and a client that reuses it from its pool (keystoneauth, the
# services' own clients) meets "Connection reset by peer" when the close races its next request.
# (glance-api is not under uwsgi in Debian 12: bind_host and workers in glance-api.conf)
rm -f /etc/default/glance-api
# (the file is named after the init script's NAME: neutron-api's is neutron-server)
for s in keystone placement-api nova-api neutron-server; do
  cat > "/etc/default/$s" <<'EOF'
# labkit (scripts/setup-openstack.sh): the API on 127.0.0.1 only, 2 uwsgi processes, no keep-alive
DAEMON_ARGS="$(echo "$DAEMON_ARGS" | sed 's/--http-socket [^ ]*:\([0-9]*\)/--http-socket 127.0.0.1:\1/') --processes 2 --add-header Connection:close"
EOF
done
# neutron-api in one process, whose first request must not be GET /ports: Port.port_forwardings is
# a SQLAlchemy backref that exists only once the mappers are configured (by the process's first
# query), and get_ports reads it as a class attribute before querying: a fresh worker answers that
# first GET /ports with a 500 "type object 'Port' has no attribute 'port_forwardings'" (seen here,
# nova's boot then fails). One process, warmed by a network list below, has it configured.
# And one thread: neutron-api monkey-patches the process with eventlet, and Debian's uwsgi ini gives
# it 32 threads. A greenthread woken from another thread dies with "greenlet.error: cannot switch
# to a different thread" and its request never answers: nova-compute, whose neutron calls have no
# timeout, then waits forever for a port (a boot stuck after "Creating image(s)", a delete that
# never ends; seen here about once per 6 minutes of boots). Debian runs nova-api, the other
# eventlet API, with one thread per process already.
sed -i 's/--processes 2/--processes 1 --threads 1/' /etc/default/neutron-server

# -- keystone --------------------------------------------------------------------------------------
say "keystone"
set_ini /etc/keystone/keystone.conf database connection "$(dburl keystone)"
set_ini /etc/keystone/keystone.conf token provider fernet
set_ini /etc/keystone/keystone.conf cache enabled true
set_ini /etc/keystone/keystone.conf cache backend dogpile.cache.memcached
set_ini /etc/keystone/keystone.conf cache memcache_servers 127.0.0.1:11211
su -s /bin/sh -c "keystone-manage db_sync" keystone
keystone-manage fernet_setup --keystone-user keystone --keystone-group keystone
keystone-manage credential_setup --keystone-user keystone --keystone-group keystone
OS_BOOTSTRAP_PASSWORD=$ADMIN_PASS keystone-manage bootstrap --bootstrap-admin-url "$KS/v3/" \
  --bootstrap-internal-url "$KS/v3/" --bootstrap-public-url "$KS/v3/" --bootstrap-region-id "$REGION" >/dev/null
svc_conf keystone /etc/keystone/keystone.conf
wait_api keystone "$KS/v3"

install -d -m 755 /etc/openstack
( umask 077; cat > /etc/openstack/clouds.yaml <<EOF
# Written by labkit's scripts/setup-openstack.sh: the single-node test cloud.
clouds:
  labkit:
    auth: {auth_url: "$KS/v3", username: labkit, password: "$LABKIT_PASS", project_name: labkit,
           user_domain_name: Default, project_domain_name: Default}
    region_name: $REGION
    interface: public
    identity_api_version: 3
  labkit-admin:
    auth: {auth_url: "$KS/v3", username: admin, password: "$ADMIN_PASS", project_name: admin,
           user_domain_name: Default, project_domain_name: Default}
    region_name: $REGION
    interface: public
    identity_api_version: 3
EOF
)
export OS_CLOUD=labkit-admin
# Projects, users (passwords reset), roles, services and endpoints: one Python process, no secret in argv.
/usr/bin/python3 "$HERE/openstack-bootstrap.py" identity "$STATE/secrets.env"

# -- glance ----------------------------------------------------------------------------------------
say "glance"
G=/etc/glance/glance-api.conf
set_ini $G DEFAULT bind_host 127.0.0.1
set_ini $G DEFAULT workers 2
set_ini $G database connection "$(dburl glance)"
authtoken $G glance "$GLANCE_PASS"
set_ini $G paste_deploy flavor keystone
set_ini $G DEFAULT enabled_backends "file:file"
set_ini $G glance_store default_backend file
set_ini $G file filesystem_store_datadir /var/lib/glance/images/
su -s /bin/sh -c "glance-manage db_sync" glance >/dev/null 2>&1
svc_conf glance-api $G
wait_api glance-api http://127.0.0.1:9292/

# -- placement -------------------------------------------------------------------------------------
say "placement"
P=/etc/placement/placement.conf
set_ini $P placement_database connection "$(dburl placement)"
set_ini $P api auth_strategy keystone
authtoken $P placement "$PLACEMENT_PASS"
su -s /bin/sh -c "placement-manage db sync" placement
svc_conf placement-api $P
wait_api placement-api http://127.0.0.1:8778/

# -- neutron ---------------------------------------------------------------------------------------
say "neutron"
N=/etc/neutron/neutron.conf
set_ini $N DEFAULT bind_host 127.0.0.1
set_ini $N DEFAULT core_plugin ml2
set_ini $N DEFAULT service_plugins ""
set_ini $N DEFAULT transport_url "$RABBIT"
set_ini $N DEFAULT auth_strategy keystone
set_ini $N DEFAULT notify_nova_on_port_status_changes true
set_ini $N DEFAULT notify_nova_on_port_data_changes true
set_ini $N database connection "$(dburl neutron)"
authtoken $N neutron "$NEUTRON_PASS"
authtoken $N nova "$NOVA_PASS" nova
set_ini $N oslo_concurrency lock_path /var/lib/neutron/tmp
set_ini $N experimental linuxbridge true     # Debian's neutron 21 flags the linuxbridge driver experimental
M=/etc/neutron/plugins/ml2/ml2_conf.ini
set_ini $M ml2 type_drivers flat
set_ini $M ml2 tenant_network_types ""
set_ini $M ml2 mechanism_drivers linuxbridge
set_ini $M ml2 extension_drivers port_security
set_ini $M ml2_type_flat flat_networks provider
L=/etc/neutron/plugins/ml2/linuxbridge_agent.ini
set_ini $L linux_bridge physical_interface_mappings "provider:$BRIDGE"
set_ini $L linux_bridge bridge_mappings ""
set_ini $L vxlan enable_vxlan false
set_ini $L securitygroup enable_security_group true
set_ini $L securitygroup firewall_driver noop
su -s /bin/sh -c "neutron-db-manage --config-file $N --config-file $M upgrade head" neutron >/dev/null 2>&1
svc_conf neutron-api $N $M $L /etc/default/neutron-server
for s in neutron-rpc-server neutron-linuxbridge-agent; do svc_conf "$s" $N $M $L; done
wait_api neutron-api http://127.0.0.1:9696/
openstack network list -f value -c ID >/dev/null   # the warm-up query (see /etc/default/neutron-server)

# -- nova ------------------------------------------------------------------------------------------
say "nova"
V=/etc/nova/nova.conf
set_ini $V DEFAULT my_ip 127.0.0.1
set_ini $V DEFAULT transport_url "$RABBIT"
set_ini $V DEFAULT osapi_compute_listen 127.0.0.1
set_ini $V DEFAULT metadata_listen 127.0.0.1
set_ini $V DEFAULT enabled_apis osapi_compute
set_ini $V DEFAULT compute_driver libvirt.LibvirtDriver
set_ini $V DEFAULT force_config_drive true
set_ini $V DEFAULT config_drive_format iso9660    # vfat would need the host kernel's vfat (absent here)
set_ini $V DEFAULT reserved_host_memory_mb 2048
set_ini $V DEFAULT instance_name_template "nova-%08x"
set_ini $V api auth_strategy keystone
set_ini $V api_database connection "$(dburl nova_api)"
set_ini $V database connection "$(dburl nova)"
authtoken $V nova "$NOVA_PASS"
authtoken $V nova "$NOVA_PASS" service_user
set_ini $V service_user send_service_user_token true
authtoken $V placement "$PLACEMENT_PASS" placement
authtoken $V neutron "$NEUTRON_PASS" neutron
set_ini $V neutron service_metadata_proxy false
set_ini $V libvirt virt_type qemu
set_ini $V libvirt cpu_mode none
set_ini $V libvirt connection_uri qemu:///system
set_ini $V vnc enabled false
set_ini $V spice enabled false
set_ini $V scheduler discover_hosts_in_cells_interval 30
set_ini $V oslo_concurrency lock_path /var/lib/nova/tmp
# nova-compute as root: libvirtd's read-write socket wants polkit (over the system D-Bus, absent
# here) for anyone but root, and libvirtd must not be reconfigured or restarted for it.
cat > /etc/default/nova-compute <<'EOF'
# labkit (scripts/setup-openstack.sh): run as root (libvirtd's socket needs polkit for others)
STARTDAEMON_CHUID=""
EOF
su -s /bin/sh -c "nova-manage api_db sync" nova
su -s /bin/sh -c "nova-manage cell_v2 map_cell0" nova >/dev/null
[[ "$(su -s /bin/sh -c "nova-manage cell_v2 list_cells" nova)" == *" cell1 "* ]] || \
  su -s /bin/sh -c "nova-manage cell_v2 create_cell --name=cell1" nova >/dev/null
su -s /bin/sh -c "nova-manage db sync" nova
for s in nova-api nova-conductor nova-scheduler nova-compute; do svc_conf "$s" $V; done
wait_api nova-api http://127.0.0.1:8774/
up=""
for i in $(seq 90); do
  svc start nova-conductor nova-scheduler   # again if one exited at start-up (a dependency not yet up)
  [[ "$(openstack compute service list --service nova-compute -f value -c State 2>/dev/null)" == *up* ]] && { up=1; break; }
  sleep 2
done
[ -n "$up" ] || { echo "setup-openstack.sh: nova-compute is not up after 3 minutes (see /var/log/nova/)" >&2; exit 1; }
su -s /bin/sh -c "nova-manage cell_v2 discover_hosts" nova >/dev/null

# -- the image; network, flavors, quotas ----------------------------------------------------------
say "image"
"$HERE/openstack-image.sh" "$CACHE" "$STATE/image"
say "network, flavors, image upload"
/usr/bin/python3 "$HERE/openstack-bootstrap.py" resources "$STATE/image" "$IMAGE_NAME" "$CIDR" "$POOL_START" "$POOL_END"
# The provider network's bridge is brq<its id's first 11 characters>. A bridge left by a network this
# cloud no longer has (a cloud reinstalled over the old interfaces, a reset database) may still hold
# $HOST_IP: the new network's bridge then gets no address, and no server answers. Remove it, and put
# the address back where the agent expects it (lkos0, or the bridge lkos0 is already a port of).
net_id=$(openstack network show provider -f value -c id)
for dev in $(ip -4 -o addr show to "$HOST_IP/32" | awk '{print $2}'); do
  if [[ "$dev" == brq* && "$dev" != "brq${net_id:0:11}" ]]; then
    echo "setup-openstack.sh: removing $dev, a stale bridge of a network this cloud no longer has" >&2
    ip link del "$dev"
  fi
done
if ! ip -4 -o addr show to "$HOST_IP/32" | grep -q .; then
  holder=$BRIDGE
  [ -e "/sys/class/net/$BRIDGE/master" ] && holder=$(basename "$(readlink "/sys/class/net/$BRIDGE/master")")
  ip addr add "$HOST_IP/24" dev "$holder"
fi
say "done: OS_CLOUD=labkit (clouds.yaml in /etc/openstack), image $IMAGE_NAME, flavors labkit.small labkit.medium, network provider on $BRIDGE"
