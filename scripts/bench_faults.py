#!/usr/bin/env python3
"""Run the fault-injection scenarios and print one JSON object per scenario, then a summary.

The command of :mod:`benchmarks.faults.bench` (its docstring and ``--help`` give the flags and the JSON last line).
"""

import sys

from benchmarks.faults.bench import main

if __name__ == "__main__":
    sys.exit(main())
