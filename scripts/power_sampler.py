#!/usr/bin/env python3
"""Sample one device's power at 10 Hz into a CSV (``t_s,power_w,source``): see :mod:`rog.testbed.power_command`.

    python scripts/power_sampler.py --out result/run/power-w0.csv --profile jetson-xavier-nx
    python -m rog.testbed.power_command ...   # the same command (what the deployment runs on every host)
"""

import sys
from pathlib import Path

# Kept: root runs this as a plain file on a device, from the code folder the deployment syncs there,
# with the device's python, where no venv or install provides rog.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rog.testbed.power_command import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
