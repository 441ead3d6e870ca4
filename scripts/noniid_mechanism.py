"""Why label skew hurts BSP training: see :mod:`rog.papers.scadles.noniid_mechanism`."""

import sys

from rog.papers.scadles.noniid_mechanism import main

if __name__ == "__main__":
    sys.exit(main())
