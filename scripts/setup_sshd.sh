#!/usr/bin/env bash
# Make sure an OpenSSH server binary (sshd) is installed, for the emulated testbed's per-namespace sshd.
#
#   bash scripts/setup_sshd.sh          # idempotent: does nothing when sshd is already installed
#
# Called by tests/test_deploy_fabric.py (before it would skip) and by scripts/run_all.sh / scripts/run.py
# --testbed emulated on a fresh machine.  Installs Debian/Ubuntu's openssh-server with apt-get, as root.
# It does NOT start or enable the system's own ssh service: rog.testbed.sshd starts private sshd
# processes inside the testbed's namespaces (own config, per-run keys, no password login) and stops
# them again.  While installing, a temporary /usr/sbin/policy-rc.d (exit 101) keeps the package's
# post-install script from starting a system-wide sshd on port 22, unless one is already there.
#
# Exit status: 0 sshd available (path printed), 1 cannot install (reason printed on stderr).
set -euo pipefail

find_sshd() {
    local p
    for p in "$(command -v sshd 2>/dev/null || true)" /usr/sbin/sshd /usr/local/sbin/sshd; do
        if [ -n "$p" ] && [ -x "$p" ]; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

if p=$(find_sshd); then
    echo "sshd: $p (already installed)"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "setup_sshd: sshd is not installed and this is not root; run: sudo apt-get install -y openssh-server" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup_sshd: sshd is not installed and apt-get is not available; install OpenSSH's server with your package manager" >&2
    exit 1
fi

policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then  # keep the package from starting the system's sshd service
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    made_policy=1
fi
cleanup() { if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
install() { apt-get install -y --no-install-recommends openssh-server >/tmp/setup_sshd.$$.log 2>&1; }
if ! install; then
    echo "setup_sshd: first install attempt failed; running apt-get update and retrying"
    if ! apt-get update >>/tmp/setup_sshd.$$.log 2>&1 || ! install; then
        echo "setup_sshd: apt-get could not install openssh-server; last lines of its output:" >&2
        tail -n 15 /tmp/setup_sshd.$$.log >&2
        rm -f /tmp/setup_sshd.$$.log
        exit 1
    fi
fi
rm -f /tmp/setup_sshd.$$.log
if ! p=$(find_sshd); then
    echo "setup_sshd: openssh-server installed but no sshd binary found" >&2
    exit 1
fi
echo "sshd: $p (installed openssh-server)"
