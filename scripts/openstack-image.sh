#!/usr/bin/env bash
# The OpenStack variant of labkit's VM image (called by setup-openstack.sh), as root:
#   openstack-image.sh <image cache> <output dir>
# Takes the image vm-current.json names (`labkit images build --vm`), copies its root filesystem,
# installs openssh-server in it (apt in a chroot, services not started, host keys removed: each
# instance makes its own), /sbin/labkit-os-init (labkit/images/files/labkit-os-init) and the
# kernel's modules, and writes
# <out>/disk.qcow2, vmlinuz, initrd.img, cmdline and stamp (written last; unchanged inputs: no work).
set -euo pipefail
# Mounts in a private mount namespace: no other namespace keeps a copy of the image mounted (and
# its journal unflushed) after the umount below.
if [ -z "${LABKIT_IMAGE_UNSHARED:-}" ]; then
  exec env LABKIT_IMAGE_UNSHARED=1 unshare --mount --propagation private bash "$0" "$@"
fi
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
# the host's Debian sources while installing (the image's own may name a build-time mirror), then back
mv "$mnt/etc/apt/sources.list" "$work/sources.list.image" 2>/dev/null || true
mkdir -p "$work/sources.list.d.image" && cp -a "$mnt/etc/apt/sources.list.d/." "$work/sources.list.d.image/" 2>/dev/null || true
[ -f /etc/apt/sources.list ] && cp /etc/apt/sources.list "$mnt/etc/apt/sources.list"
cp -a /etc/apt/sources.list.d/. "$mnt/etc/apt/sources.list.d/" 2>/dev/null || true
chroot "$mnt" apt-get -q update >/dev/null
DEBIAN_FRONTEND=noninteractive chroot "$mnt" apt-get -y -q install --no-install-recommends openssh-server >/dev/null
chroot "$mnt" apt-get clean
rm -rf "$mnt/var/lib/apt/lists/"* "$mnt/etc/apt/sources.list" "$mnt/etc/apt/sources.list.d/"*
[ -f "$work/sources.list.image" ] && mv "$work/sources.list.image" "$mnt/etc/apt/sources.list"
cp -a "$work/sources.list.d.image/." "$mnt/etc/apt/sources.list.d/" 2>/dev/null || true
rm -f "$mnt/usr/sbin/policy-rc.d" "$mnt"/etc/ssh/ssh_host_*
install -m 755 "$INIT" "$mnt/sbin/labkit-os-init"
# the kernel's modules (the libvirt image carries virtio_console only): virtio_net, the IDE CD-ROM
# (ata_piix, sr_mod) and isofs that nova's config drive needs
kver=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kernel_version"])' "$cur/image.json")
[ -d "/lib/modules/$kver" ] || { echo "openstack-image.sh: no /lib/modules/$kver on this host" >&2; exit 1; }
rm -rf "$mnt/lib/modules/$kver"; mkdir -p "$mnt/lib/modules"
cp -a "/lib/modules/$kver" "$mnt/lib/modules/$kver"
depmod -b "$mnt" "$kver"
for m in dev/pts dev proc sys; do umount "$mnt/$m"; done
sync -f "$mnt/sbin/labkit-os-init"
umount "$mnt"
e2fsck -fy "$work/disk.raw" >/dev/null || [ $? -le 1 ]    # clean, journal replayed (0: clean, 1: fixed)
qemu-img convert -O qcow2 "$work/disk.raw" "$OUT/disk.qcow2"
cp "$cur/vmlinuz" "$OUT/vmlinuz"; cp "$cur/initrd.img" "$OUT/initrd.img"
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cmdline"].replace("init=/sbin/labkit-init", "init=/sbin/labkit-os-init"))' \
  "$cur/image.json" > "$OUT/cmdline"
echo "$stamp" > "$OUT/stamp"
echo "[image] $OUT/disk.qcow2 ($stamp)"
