#!/usr/bin/env python3
"""Benchmark the GPU path of one ConvMLP-M worker against the CPU path and the memory limit, and check frames agree.

The command of :mod:`benchmarks.gpu` (its docstring and ``--help`` give the flags and the JSON last line).
"""

import sys

from benchmarks.gpu import main

if __name__ == "__main__":
    sys.exit(main())
