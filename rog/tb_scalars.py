"""Where a run's TensorBoard scalars live (``<run-dir>/tb/``) and the per-run scalars written after the run:
the tested checkpoints' accuracy (:mod:`rog.checkpoint_accuracy`).  The live ones come from
:mod:`rog.experiment.tensorboard_feed`; the event logs and ``accuracy.csv`` stay the source of truth."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TB_DIR = "tb"  # <run-dir>/tb/: tensorboard --logdir result


def missing() -> str | None:
    """Why TensorBoard scalars cannot be written here (a package missing), or None."""
    for mod, hint in (("tensorboard", "pip install tensorboard (in the analysis extra)"), ("torch", "pip install torch")):
        if importlib.util.find_spec(mod) is None:
            return f"{mod} is not installed ({hint})"
    return None


def write_checkpoint_accuracy(run_dir: Path, rows: list) -> None:
    """``run/checkpoint_accuracy/w<k>`` (step = the checkpoint's iteration) into the run's ``tb/``, when the
    run has one (it was not run with ``--no-tensorboard``) and tensorboard is installed."""
    if not rows or not (Path(run_dir) / TB_DIR).is_dir() or missing():
        return
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(Path(run_dir) / TB_DIR), filename_suffix=".checkpoints") as w:
        for r in rows:
            w.add_scalar(f"run/checkpoint_accuracy/w{r['worker']}", float(r["accuracy"]), global_step=int(r["iteration"]))
