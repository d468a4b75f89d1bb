#!/usr/bin/env bash
# Put `labkit` on PATH: $LABKIT_BIN_DIR/labkit (default /usr/local/bin/labkit) -> this clone's
# .venv/bin/labkit, so the README's `labkit ...` commands work as printed after `make setup`.
# An existing labkit there that is not a link (another install) is left alone; a directory that
# someone else owns or can write to is refused. Without write access: activate the venv instead
# (`. .venv/bin/activate`). Idempotent; run by scripts/setup-core.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN_DIR=${LABKIT_BIN_DIR:-/usr/local/bin}
target="$PWD/.venv/bin/labkit"
link="$BIN_DIR/labkit"
if [ ! -x "$target" ]; then
  echo "link-cli: $target missing: run scripts/setup-core.sh first" >&2
  exit 1
fi
mkdir -p "$BIN_DIR"
owner=$(stat -c %u "$BIN_DIR")
mode=$(stat -c %a "$BIN_DIR")
if [ "$owner" != 0 ] && [ "$owner" != "$(id -u)" ]; then
  echo "link-cli: $BIN_DIR belongs to uid $owner: no link made (use $target or . .venv/bin/activate)" >&2
  exit 0
fi
if [ $(( 8#$mode & 8#022 )) -ne 0 ] && [ $(( 8#$mode & 8#1000 )) -eq 0 ]; then
  echo "link-cli: $BIN_DIR is writable by others (mode $mode): no link made" >&2
  exit 0
fi
if [ ! -w "$BIN_DIR" ]; then
  echo "link-cli: $BIN_DIR is not writable: no link made (use $target or . .venv/bin/activate)" >&2
  exit 0
fi
if [ -e "$link" ] && [ ! -L "$link" ]; then
  echo "link-cli: $link exists and is not a link (another labkit install): left alone" >&2
  exit 0
fi
ln -sfn "$target" "$link"
echo "== labkit on PATH: $link -> $target"
