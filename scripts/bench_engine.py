#!/usr/bin/env python3
"""Benchmark the data path of one full ConvMLP-M push and pull on one CPU thread.

The command of :mod:`benchmarks.engine` (its docstring and ``--help`` give the flags and the JSON last line).
"""

import sys

from benchmarks.engine import main

if __name__ == "__main__":
    sys.exit(main())
