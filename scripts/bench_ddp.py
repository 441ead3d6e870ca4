#!/usr/bin/env python3
"""The DDP (gloo) reference baseline next to BSP on the emulated testbed, bytes measured on the wire.

The command of :mod:`benchmarks.ddp` (its docstring and ``--help`` give the flags and the JSON last line).
"""

import sys

from benchmarks.ddp import main

if __name__ == "__main__":
    sys.exit(main())
