"""Why label skew hurts BSP training: see :mod:`rog.papers.scadles.noniid_mechanism`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rog.papers.scadles.noniid_mechanism import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
