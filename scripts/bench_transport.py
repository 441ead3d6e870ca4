#!/usr/bin/env python3
"""Benchmark the transport over real loopback sockets, shaped by the transport's own token bucket.

The command of :mod:`benchmarks.transport` (its docstring and ``--help`` give the flags and the JSON last line).
"""

import sys

from benchmarks.transport import main

if __name__ == "__main__":
    sys.exit(main())
