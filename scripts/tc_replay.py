#!/usr/bin/env python3
"""Replay a bandwidth trace on a network interface with tc (egress, ingress via ifb, or both).

The command lives in :mod:`rog.testbed.replay_command` (``python scripts/tc_replay.py --help``).
"""

import sys
from pathlib import Path

# Kept: root runs this as a plain file on a device, from the code folder the deployment syncs there,
# with the device's python, where no venv or install provides rog.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rog.testbed.replay_command import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
