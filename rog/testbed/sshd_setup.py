"""Make sure an OpenSSH server binary (sshd) is installed, for the emulated testbed's per-namespace sshd.

    python -m rog.testbed.sshd_setup      # idempotent: does nothing when sshd is already installed
    bash scripts/setup_sshd.sh            # the same command

Installs Debian/Ubuntu's ``openssh-server`` with apt-get, as root (``apt-get update`` and a second try
when the first install fails).  It does NOT start or enable the system's own ssh service:
:mod:`rog.testbed.sshd` starts private sshd processes inside the testbed's namespaces and stops them
again.  While installing, a temporary ``/usr/sbin/policy-rc.d`` (exit 101) keeps the package's
post-install script from starting a system-wide sshd on port 22, unless such a file is already there.

Exit status: 0 sshd available (path printed), 1 cannot install (the reason on stderr).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rog.testbed.sshd import find_sshd

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")  # Debian's hook: exit 101 = "do not start services now"
PACKAGE = "openssh-server"
LOG_TAIL_LINES = 15  # apt-get's last lines shown when the install fails


def _apt(args: list[str], log: list[str]) -> bool:
    """Run ``apt-get args`` non-interactively; its output goes into ``log``; True on success."""
    p = subprocess.run(["apt-get", *args], capture_output=True, text=True, check=False,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    log.extend((p.stdout + p.stderr).splitlines())
    return p.returncode == 0


def install_sshd() -> tuple[bool, str]:
    """``(True, "sshd: PATH (...)")`` once sshd is installed, else ``(False, why)``."""
    found = find_sshd()
    if found:
        return True, f"sshd: {found} (already installed)"
    if os.geteuid() != 0:
        return False, f"sshd is not installed and this is not root; run: sudo apt-get install -y {PACKAGE}"
    if shutil.which("apt-get") is None:
        return False, ("sshd is not installed and apt-get is not available; install OpenSSH's server with your "
                       "package manager")
    made_policy = not POLICY_RC_D.exists()
    if made_policy:  # keep the package from starting the system's sshd service
        POLICY_RC_D.write_text("#!/bin/sh\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
    log: list[str] = []
    try:
        install = ["install", "-y", "--no-install-recommends", PACKAGE]
        if not _apt(install, log):
            print("setup_sshd: first install attempt failed; running apt-get update and retrying", flush=True)
            if not (_apt(["update"], log) and _apt(install, log)):
                return False, (f"apt-get could not install {PACKAGE}; last lines of its output:\n"
                               + "\n".join(log[-LOG_TAIL_LINES:]))
    finally:
        if made_policy:
            POLICY_RC_D.unlink(missing_ok=True)
    found = find_sshd()
    if not found:
        return False, f"{PACKAGE} installed but no sshd binary found"
    return True, f"sshd: {found} (installed {PACKAGE})"


def main(argv=None) -> int:
    """Install sshd when missing; 0 when it is available, 1 (reason on stderr) when it cannot be."""
    ok, message = install_sshd()
    print(message if ok else f"setup_sshd: {message}", file=sys.stdout if ok else sys.stderr, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
