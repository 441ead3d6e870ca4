#!/usr/bin/env python3
"""Test every checkpoint of a run on the workload's test set and write RUN_DIR/accuracy.csv.

The command lives in :mod:`rog.checkpoint_accuracy` (``python scripts/test_checkpoints.py --help``).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rog.checkpoint_accuracy import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
