"""Where a run's TensorBoard scalars live (``<run-dir>/tb/``) and the per-run scalars written after the run:
the tested checkpoints' accuracy (:mod:`rog.checkpoint_accuracy`).  The live ones come from
:mod:`rog.experiment.tensorboard_feed`; the event logs and ``accuracy.csv`` stay the source of truth."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

TB_DIR = "tb"  # <run-dir>/tb/: tensorboard --logdir result


def missing() -> str | None:
    """Why TensorBoard scalars cannot be written here (the package missing), or None."""
    if importlib.util.find_spec("tensorboard") is None:
        return "tensorboard is not installed (pip install tensorboard, in the analysis extra)"
    return None


class ScalarWriter:
    """Scalars into a TensorBoard event file with tensorboard's own writer, without torch: the feed is a process
    of every run, and importing ``torch.utils.tensorboard`` cost it about 3 s of CPU (0.4 s this way) beside the
    run it watches.  ``add_scalar`` writes what torch's ``SummaryWriter.add_scalar`` writes: one summary value
    (``simple_value``) with the step and the wall time."""

    def __init__(self, log_dir: str | Path, flush_secs: float = 120, filename_suffix: str = "") -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer = EventFileWriter(str(log_dir), flush_secs=flush_secs, filename_suffix=filename_suffix)

    def add_scalar(self, tag: str, value: float, global_step: int = 0, walltime: float | None = None) -> None:
        """One point of ``tag`` at ``global_step`` (``walltime``: unix seconds; now when None)."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
        self._writer.add_event(Event(summary=summary, step=int(global_step),
                                     wall_time=time.time() if walltime is None else float(walltime)))

    def close(self) -> None:
        """Write what is queued and close the file."""
        self._writer.close()

    def __enter__(self) -> "ScalarWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_checkpoint_accuracy(run_dir: Path, rows: list) -> None:
    """``run/checkpoint_accuracy/w<k>`` (step = the checkpoint's iteration) into the run's ``tb/``, when the
    run has one (it was not run with ``--no-tensorboard``) and tensorboard is installed."""
    if not rows or not (Path(run_dir) / TB_DIR).is_dir() or missing():
        return
    with ScalarWriter(Path(run_dir) / TB_DIR, filename_suffix=".checkpoints") as w:
        for r in rows:
            w.add_scalar(f"run/checkpoint_accuracy/w{r['worker']}", float(r["accuracy"]), global_step=int(r["iteration"]))
