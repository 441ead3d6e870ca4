#!/usr/bin/env python
"""Write docs/reproduction_status.md from a result folder's summary.json (documented rows where it has none).

See :mod:`rog.analysis.reproduction_status` (``python -m rog.analysis.reproduction_status`` is the same command).
"""

import sys

from rog.analysis.reproduction_status import main

if __name__ == "__main__":
    sys.exit(main())
