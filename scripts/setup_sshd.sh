#!/usr/bin/env bash
# Make sure an OpenSSH server binary (sshd) is installed, for the emulated testbed's per-namespace sshd.
#
#   bash scripts/setup_sshd.sh          # idempotent: does nothing when sshd is already installed
#
# Called by tests/test_deploy_fabric.py (before it would skip) and by the emulated testbed's commands on a
# fresh machine.  The logic (apt-get install of openssh-server as root, without starting the system's ssh
# service) is rog.testbed.sshd_setup; this runs it with the project's .venv, else python3.
#
# Exit status: 0 sshd available (path printed), 1 cannot install (reason printed on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."
py=python3
if [ -x .venv/bin/python ]; then py=.venv/bin/python; fi
exec "$py" -m rog.testbed.sshd_setup "$@"
