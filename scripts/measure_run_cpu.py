#!/usr/bin/env python
"""Measure one emulated run's CPU use as run_items.py --parallel's rule reads it; JSON on the last line.

    python scripts/measure_run_cpu.py --library ROG --threshold 4 --budget-s 40

Runs scripts/run.py for the quick profile's outdoors setting (artifact mode, 4 workers) into
--result-dir and prints the run's CPU seconds, wall seconds, busy cores (peak and 90th percentile
over 1 s intervals) and the machine's busy share meanwhile (rog.experiment.parallel.measure_run).
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from rog.experiment import items as I
from rog.experiment.parallel import measure_run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--library", default="ROG")
    p.add_argument("--threshold", type=int, default=None)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--budget-s", type=float, default=40.0)
    p.add_argument("--result-dir", default="/tmp/rog-measure-cpu")
    a = p.parse_args()
    spec = I.RunSpec(a.library, a.threshold, workers=a.workers)
    args = I.run_args(spec, I.PROFILES["quick"], a.budget_s, a.result_dir, "outdoors")
    out = measure_run([sys.executable, str(ROOT / "scripts" / "run.py"), *args], str(ROOT))
    print(json.dumps(dict(run_id=I.run_id(spec), budget_s=a.budget_s, **out)))
    return 0 if out["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
