#!/usr/bin/env bash
# The benchmark tools on this machine, for the `local` backend (and for the `ssh` backend's
# test host, which is this machine): sysbench, apache2 + ab, stress-ng, fio, iperf3.
# The same Debian packages go into the container and VM images (labkit.images.rootfs.TOOL_PACKAGES
# is the one list). N-queens needs only the C compiler from setup-core.sh.
#
# Installing apache2 or iperf3 would start their system services (apache on port 80): no
# service is started here; the workloads run their own servers on loopback ports.
# Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "setup-tools.sh must run as root (it installs Debian packages)" >&2
  exit 1
fi
PY=${PYTHON:-.venv/bin/python}
pkgs=$("$PY" -c 'from labkit.images.rootfs import TOOL_PACKAGES; print(" ".join(TOOL_PACKAGES))')

. scripts/apt.sh
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  # Debian's way to keep maintainer scripts from starting services; removed again on exit
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
# shellcheck disable=SC2086
apt_install_missing $pkgs
# The `study` profile, what the image variant of that name adds for containers: OpenMPI and
# hpcc (mpirun runs on the host, local instances use them), bonnie++ (the `bonnie` workload) and
# mariadb-server (the `oltp` workload's server, started per run on a fresh data directory)
# shellcheck disable=SC2046
apt_install_missing $("$PY" -c 'from labkit.images.rootfs import PROFILES; print(" ".join(PROFILES["study"]))')
# libopenmpi-dev: mpicc, with which the tests build their MPI programs on this host (the ping-pong,
# tests/support/npb_like.c for the `npb` workload); the binaries run on the instances' OpenMPI
apt_install_missing libopenmpi-dev
# hyperfine: the host reference of benchmarks/bench_noise.py
apt_install_missing hyperfine
for tool in sysbench ab /usr/sbin/apache2 stress-ng fio iperf3; do
  command -v "$tool" >/dev/null || { echo "setup-tools.sh: $tool missing after install" >&2; exit 1; }
done
echo "== benchmark tools on this host: $pkgs"
