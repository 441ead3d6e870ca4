"""The Top-k and non-IID half of the ``scadles`` evaluation item: ScaDLES's Fig. 8/9 and Table V here.

Steps (each one ``scripts/run.py`` run in ``<result>/scadles/topk/<step>/<run id>/``; a step whose run
folder holds ``DONE`` is skipped):

* non-IID collapse and recovery (Fig. 8/9): BSP, 10 workers with one label each (ScaDLES's CIFAR-10
  setting: 10 devices, 1 label per device), dense float32 gradients (ScaDLES sends dense unless its
  gate opens), the quick workload's data with a BatchNorm CNN trained from scratch
  (``--quick-model cnn_bn_wide_quick``: ScaDLES's VGG19-BN and ResNet152 are BatchNorm networks trained
  from scratch; this one's gradient puts the injection at 0.70 % of the gradient bytes) at ScaDLES's
  ResNet152 learning rate 0.1 for :data:`NONIID_ITERATIONS` iterations (the skewed runs saturate
  later than IID; the paper's claims are about saturated accuracy):
  ``iid``, ``labels:1``, then ``labels:1`` with injection (0.25, 0.25) over the links (``network``) and
  with the released code's ``local`` shortcut.  The pre-trained ConvMLP does not collapse under label
  skew (its BatchNorm sits in the first layers only and it is adapted, not trained):
  :mod:`rog.papers.scadles.noniid_mechanism` shows why;
* adaptive compression (Table V): BSP, 4 workers, ``--compression topk`` at CR 0.1 and 0.01, the gate
  on at the paper's delta 0.1, 0.2, 0.3, 0.4 under both readings of its statistic (``energy``: the
  paper's formula; ``norm``: the released code's summed tensor norms, :mod:`rog.codecs.codecs_topk`), plus the
  static Top-k (gate off) per CR.  These run on the unshaped loopback (``-c none``): under BSP the
  gate's decisions depend on the gradients only, not on the links.

Every run replays the outdoors trace on the default testbed (``-c outdoors``), so injected samples
and gradients share the shaped links.  ``markdown`` and ``plot`` read the folders
(:mod:`rog.papers.scadles.topk`).

Run alone: ``python -m rog.papers.scadles.topk_steps --result-dir R --figure-dir F [--dry-run]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rog.experiment.config import RUN_MODULE
from rog.experiment.module_item import item_main, step_item

__all__ = ["ESTIMATE_S", "steps", "markdown", "plot", "main"]

NONIID_ITERATIONS = 300
NONIID_MODEL = "cnn_bn_wide_quick"
NONIID_LR = "0.1"  # ScaDLES's ResNet152 rate
NONIID_WORKERS = 10
GATE_ITERATIONS = 30
GATE_WORKERS = 4
RATIOS = (0.1, 0.01)
DELTAS = (0.1, 0.2, 0.3, 0.4)  # the paper's Table V
STATISTICS = ("energy", "norm")  # the paper's formula, the released code's
NONIID_RUNS = (  # (note, extra flags)
    ("ni-iid", ["--partition", "iid"]),
    ("ni-labels1", ["--partition", "labels:1"]),
    ("ni-labels1-inject-network", ["--partition", "labels:1", "--inject-alpha", "0.25", "--inject-beta", "0.25",
                                   "--inject-mode", "network"]),
    ("ni-labels1-inject-local", ["--partition", "labels:1", "--inject-alpha", "0.25", "--inject-beta", "0.25",
                                 "--inject-mode", "local"]),
)
# Measured on this 2-core machine: a 10-worker 300-iteration non-IID step of cnn_bn_wide_quick on the emulated
# testbed (outdoors trace) took 812-825 s from start to end (about 2.6 s an iteration, 1.6 s of it at the BSP
# gate); a 4-worker 30-iteration step, about 150 s.
# a 4-worker 30-iteration gate step on the unshaped loopback: about 60 s (measured, load 4-5)
ESTIMATE_S = len(NONIID_RUNS) * 840 + len(RATIOS) * (len(DELTAS) * len(STATISTICS) + 1) * 60


def steps(result_dir: Path) -> list[tuple[str, list[str]]]:
    """``(output folder, argv)`` of every step: ``python`` + argv from the repository root writes one run folder
    (``<folder>/<run id>/``, complete when it holds ``DONE``) into the step's folder."""
    base = Path(result_dir) / "scadles" / "topk"
    common = ["-m", RUN_MODULE, "--library", "BSP", "-c", "outdoors", "--item", "scadles", "--no-progress"]
    out = []
    for note, flags in NONIID_RUNS:
        out.append((str(base / note),
                    [*common, "--result-dir", str(base / note), "--workers", str(NONIID_WORKERS), "--iterations",
                     str(NONIID_ITERATIONS), "--eval-every", "10", "--lr", NONIID_LR, "--quick-model", NONIID_MODEL,
                     "--compression", "none", *flags,
                     "-n", note]))
    gate_common = [a if a != "outdoors" else "none" for a in common] + ["--testbed", "loopback"]
    for cr in RATIOS:
        gates = [("on", d, st) for st in STATISTICS for d in DELTAS] + [("off", None, None)]
        for gate, delta, stat in gates:
            note = f"gate-cr{cr:g}-" + (f"d{delta:g}-{stat}" if gate == "on" else "static")
            flags = ["--compression", "topk", "--topk-ratio", f"{cr:g}", "--topk-gate", gate]
            if delta is not None:
                flags += ["--topk-gate-delta", f"{delta:g}", "--topk-gate-statistic", stat]
            out.append((str(base / note),
                        [*gate_common, "--result-dir", str(base / note), "--workers", str(GATE_WORKERS), "--iterations",
                         str(GATE_ITERATIONS), "--eval-every", "10", "--lr", "1e-3", *flags, "-n", note]))
    return out


def markdown(result_dir: Path) -> str:
    """``summary.md`` rows: Fig. 8/9 non-IID accuracy and Table V CNC next to the paper's claims."""
    from .topk import scadles_topk_markdown

    return scadles_topk_markdown(result_dir)


def plot(result_dir: Path, figure_dir: Path) -> list[Path]:
    """``figure/scadles_noniid.png`` and ``figure/scadles_cnc.png``."""
    from .topk import plot_scadles_topk

    return plot_scadles_topk(result_dir, figure_dir)


def main(argv=None) -> int:
    """Run the steps not yet done, then write ``<result>/scadles/topk/summary.md`` and the figures."""
    return item_main(step_item(sys.modules[__name__], "scadles", "scadles/topk", "python -m rog.papers.scadles.topk_steps"), argv)


if __name__ == "__main__":
    sys.exit(main())
