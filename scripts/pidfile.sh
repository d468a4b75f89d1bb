# Sourced by the set-up scripts: pid files that a daemon killed with its session left behind.
# A pid is reused after such a kill, so a pid file is trusted only when its process runs the
# command it names (/proc/<pid>/comm).
pid_alive() {   # pidfile command: the pid in the file, if that process runs the command
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] && echo "$pid"
}

drop_stale_pidfile() {   # pidfile command: remove the file unless its process runs the command
  if [ -e "$1" ] && ! pid_alive "$1" "$2" >/dev/null; then
    echo "[pidfile] removing stale $1 (no running $2 has its pid)"
    rm -f "$1"
  fi
}
