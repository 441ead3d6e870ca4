#!/usr/bin/env python
"""Intra-DP distributed inference on the emulated testbed: plan tables, the Fig. 1 sweep, Table 6.

    python scripts/run_inference.py plan  --model vgg19                      # plan tables only (no testbed)
    python scripts/run_inference.py sweep --model vgg19 --rates 20,50,100    # Fig. 1: latency/energy per cut
    python scripts/run_inference.py trace --model vgg19 --trace configs/traces/indoors-synth.csv --duration-s 30

Needs root for the namespace testbed (sweep, trace).  Writes ``<out>/result.json`` (the last line
printed is the same JSON) and the robot's per-inference ``records.jsonl``.  The logic lives in
:mod:`rog.inference` (runner, planners, live); this is a thin command over
:func:`rog.inference.experiment.main` (``python -m rog.inference.experiment`` is the same command).
"""

from __future__ import annotations

import sys

from rog.inference.experiment import main


if __name__ == "__main__":
    sys.exit(main())
