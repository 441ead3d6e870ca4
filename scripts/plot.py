#!/usr/bin/env python
"""Draw the paper's figures (PDF and PNG) from the run folders under --result-dir into --figure-dir.

See :mod:`rog.analysis.plot_command` (``python -m rog.analysis.plot_command`` is the same command).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rog.analysis.plot_command import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
