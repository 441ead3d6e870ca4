#!/usr/bin/env python
"""Simulate the systems at fleet scale (rog/sim.py) and write run folders the analysis reads.

See :mod:`rog.experiment.simulate` (``python -m rog.experiment.simulate`` runs the same ``main``; the library starts it so).
"""

import sys

from rog.experiment.simulate import main

if __name__ == "__main__":
    sys.exit(main())
