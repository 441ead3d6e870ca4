#!/usr/bin/env python3
"""The emulated run with GPU workers: the outdoors item's ROG-4 and BSP with --device cuda, both launchers,
checkpoints tested, seconds per iteration split into compute / communication / stall (JSON on the last line).

    python scripts/run_gpu_emulated.py                                  # cuda, local + fabric
    python scripts/run_gpu_emulated.py --devices cuda,cpu               # and the same runs on CPU workers
    python scripts/run_gpu_emulated.py --iproute2-debs DIR              # a host without ip/tc
    python scripts/run_gpu_emulated.py --devices cpu --dry-run          # the commands only

The command lives in :mod:`rog.experiment.gpu_emulated` (``--help``).
"""

import sys

from rog.experiment.gpu_emulated import main

if __name__ == "__main__":
    sys.exit(main())
