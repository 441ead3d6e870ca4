#!/usr/bin/env python3
"""Benchmark tc trace replay on the emulated testbed: does a bulk TCP transfer follow the trace?

The command of :mod:`benchmarks.replay` (its docstring and ``--help`` give the flags and the JSON last line).
"""

import sys

from benchmarks.replay import main

if __name__ == "__main__":
    sys.exit(main())
