#!/usr/bin/env bash
# Core set-up on Debian 12, as root: C compiler, Python venv in .venv, pinned requirements, labkit itself.
# Idempotent: safe to run again. Daemon set-up lives in setup-containers.sh and setup-libvirt.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/apt.sh
apt_install_missing gcc libc6-dev make python3 python3-venv python3-dev pkg-config libvirt-dev util-linux procps

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $($PY --version)"
  $PY -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
echo "== pip install -r requirements.txt"
.venv/bin/python -m pip install -q -r requirements.txt
.venv/bin/python -m pip install -q --no-deps -e .
# papermill and JupyterLab run notebooks with this environment's Python
.venv/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (labkit)" >/dev/null
# JupyterLab (and any Jupyter server) started from .venv encrypts its kernels' channels (CurveZMQ),
# so no "Kernel is running over TCP without encryption"; only where pyzmq has CurveZMQ
if .venv/bin/python -c 'import sys, zmq; sys.exit(0 if zmq.has("curve") else 1)'; then
  mkdir -p .venv/etc/jupyter/jupyter_server_config.d
  echo '{"KernelManager": {"transport_encryption": "auto"}}' > .venv/etc/jupyter/jupyter_server_config.d/labkit.json
fi
# `labkit` on PATH (/usr/local/bin/labkit -> .venv/bin/labkit; README: the commands work as printed)
bash scripts/link-cli.sh
echo "== core set-up done: $(.venv/bin/python -c 'import labkit; print("labkit", labkit.__version__)')"
