# Sourced by the set-up scripts: install the Debian packages that are missing.
# apt-get update runs only when something is missing; the dpkg lock is waited for.
apt_install_missing() {
    local need=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
    done
    if [ ${#need[@]} -eq 0 ]; then
        echo "[apt] present: $*"
        return 0
    fi
    echo "[apt] installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -q -o DPkg::Lock::Timeout=600 update
    apt-get -y -q -o DPkg::Lock::Timeout=600 install --no-install-recommends "${need[@]}"
}
