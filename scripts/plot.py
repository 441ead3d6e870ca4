#!/usr/bin/env python
"""Draw the paper's figures (PDF and PNG) from the run folders under --result-dir into --figure-dir.

See :mod:`rog.analysis.plot_command` (``python -m rog.analysis.plot_command`` is the same command).
"""

import sys

from rog.analysis.plot_command import main

if __name__ == "__main__":
    sys.exit(main())
