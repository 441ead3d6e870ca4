#!/usr/bin/env python3
"""Run the paper's evaluation items, then test checkpoints, summarise and draw the figures (bash scripts/run_all.sh).

The command lives in :mod:`rog.experiment.driver` (``python scripts/run_items.py --help``).
"""

import sys

from rog.experiment.driver import main

if __name__ == "__main__":
    sys.exit(main())
