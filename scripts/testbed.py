#!/usr/bin/env python3
"""Create, inspect, shape and destroy the emulated testbed (network namespaces + shaped veths). Needs root.

The command lives in :mod:`rog.testbed.testbed_command` (``python scripts/testbed.py --help``).
"""

import sys

from rog.testbed.testbed_command import main

if __name__ == "__main__":
    sys.exit(main())
