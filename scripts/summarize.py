#!/usr/bin/env python
"""Write result/summary.json and result/summary.md from the run folders under --result-dir.

See :mod:`rog.analysis.summarize_command` (``python -m rog.analysis.summarize_command`` is the same command).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rog.analysis.summarize_command import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
