#!/usr/bin/env python3
"""Test every checkpoint of a run on the workload's test set and write RUN_DIR/accuracy.csv.

The command lives in :mod:`rog.checkpoint_accuracy` (``python scripts/test_checkpoints.py --help``).
"""

import sys

from rog.checkpoint_accuracy import main

if __name__ == "__main__":
    sys.exit(main())
