#!/usr/bin/env python3
"""Create, inspect, shape and destroy the emulated testbed (network namespaces + shaped veths). Needs root.

The command lives in :mod:`rog.testbed.testbed_command` (``python scripts/testbed.py --help``).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rog.testbed.testbed_command import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
