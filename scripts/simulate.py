#!/usr/bin/env python
"""Simulate the systems at fleet scale (rog/sim.py) and write run folders the analysis reads.

See :mod:`rog.experiment.simulate` (``python -m rog.experiment.simulate`` runs the same ``main``; the library starts it so).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rog.experiment.simulate import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
