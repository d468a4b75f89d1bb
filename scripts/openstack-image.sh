#!/usr/bin/env bash
# The OpenStack variant of labkit's VM image (called by setup-openstack.sh), as root:
#   openstack-image.sh <image cache> <output dir>
# Takes the image vm-current.json names (`labkit images build --vm`), copies its root filesystem,
# installs openssh-server in it (apt in a chroot, services not started, host keys removed: each
# instance makes its own) and /sbin/labkit-os-init (labkit/images/files/labkit-os-init), and writes
# <out>/disk.qcow2, vmlinuz, initrd.img, cmdline and stamp (written last; unchanged inputs: no work).
set -euo pipefail
CACHE=$1 OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
INIT=$HERE/../labkit/images/files/labkit-os-init
cur=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$CACHE/vm-current.json") || {
  echo "openstack-image.sh: no VM image in $CACHE; run \`labkit images build --vm\` first" >&2; exit 1; }
stamp=$(cat "$cur/image.json" "$0" "$INIT" | sha256sum | cut -c1-16)
if [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$stamp" ]; then echo "[image] up to date: $OUT ($stamp)"; exit 0; fi
install -d -m 700 "$OUT"
rm -f "$OUT/stamp"
work=$(mktemp -d /var/tmp/labkit-os-image.XXXXXX)
mnt=$work/mnt
cleanup() {
  for m in dev/pts dev proc sys; do mountpoint -q "$mnt/$m" && umount "$mnt/$m"; done
  mountpoint -q "$mnt" && umount "$mnt"
  rm -rf "$work"
}
trap cleanup EXIT
echo "[image] from $cur"
qemu-img convert -O raw "$cur/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["disk"])' "$cur/image.json")" "$work/disk.raw"
mkdir "$mnt"
mount -o loop "$work/disk.raw" "$mnt"
mount -t proc proc "$mnt/proc"; mount -t sysfs sysfs "$mnt/sys"
mount --bind /dev "$mnt/dev"; mount --bind /dev/pts "$mnt/dev/pts"
cp /etc/resolv.conf "$mnt/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' > "$mnt/usr/sbin/policy-rc.d"; chmod 755 "$mnt/usr/sbin/policy-rc.d"
chroot "$mnt" apt-get -q update >/dev/null
DEBIAN_FRONTEND=noninteractive chroot "$mnt" apt-get -y -q install --no-install-recommends openssh-server >/dev/null
chroot "$mnt" apt-get clean
rm -f "$mnt/usr/sbin/policy-rc.d" "$mnt"/etc/ssh/ssh_host_*
install -m 755 "$INIT" "$mnt/sbin/labkit-os-init"
for m in dev/pts dev proc sys; do umount "$mnt/$m"; done
umount "$mnt"
qemu-img convert -O qcow2 "$work/disk.raw" "$OUT/disk.qcow2"
cp "$cur/vmlinuz" "$OUT/vmlinuz"; cp "$cur/initrd.img" "$OUT/initrd.img"
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cmdline"].replace("init=/sbin/labkit-init", "init=/sbin/labkit-os-init"))' \
  "$cur/image.json" > "$OUT/cmdline"
echo "$stamp" > "$OUT/stamp"
echo "[image] $OUT/disk.qcow2 ($stamp)"
