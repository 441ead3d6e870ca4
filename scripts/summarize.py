#!/usr/bin/env python
"""Write result/summary.json and result/summary.md from the run folders under --result-dir.

See :mod:`rog.analysis.summarize_command` (``python -m rog.analysis.summarize_command`` is the same command).
"""

import sys

from rog.analysis.summarize_command import main

if __name__ == "__main__":
    sys.exit(main())
