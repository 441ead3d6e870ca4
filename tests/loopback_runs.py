"""One set of real loopback runs that the default tier's end-to-end files share (issue 49: a run starts four
Python processes that each import torch, about 10 s of CPU before its first iteration, so each file starting
its own costs more than the iterations it checks).

The ``loopback_runs`` session fixture (tests/conftest.py) starts every run below at once with
``scripts/run.py --testbed loopback`` and waits for all of them; the files that use it run on one xdist worker
(``xdist_group("loopback-runs")``), so the set runs once per tier.  Who reads which run:

- ``tests/test_run_loopback.py``: every policy's run (events, metrics, summary, chunking, no secret on disk);
- ``tests/test_run_checkpoints.py``: ``ROG`` (``--checkpoint-every-s 0 --checkpoint-workers all``: the start
  and the end, both workers, then tested by scripts/test_checkpoints.py) and ``BSP`` (``--checkpoint-every-s
  1e-3``, never tripling: one checkpoint written or skipped per iteration, worker 0 only);
- ``tests/test_training_learns.py``: ``ROG`` (60 iterations, learning) against ``frozen`` (the same run with a
  learning rate of 1e-12).

A run that failed is reported by the test that reads it (``LoopbackRun.require``), with its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_PY = ROOT / "scripts" / "run.py"

LEARN_ITERATIONS = 60  # enough for the quick workload's accuracy to rise beyond its test-to-test swing
LEARN_EVAL_EVERY = 10
SHORT_ITERATIONS = 10  # the other policies: events and accounting, not learning
SHORT_EVAL_EVERY = 5

_COMMON = ("--workers", "2", "-c", "none")
# name -> (flags, iterations, eval_every); the run folder is <library><threshold>-none-b1-w2-seed0-t (frozen: -frozen)
RUN_FLAGS = {
    "ROG": (["--library", "ROG", "--threshold", "4", "--checkpoint-every-s", "0", "--checkpoint-workers", "all"],
            LEARN_ITERATIONS, LEARN_EVAL_EVERY),
    "frozen": (["--library", "ROG", "--threshold", "4", "--lr", "1e-12", "--no-progress"],
               LEARN_ITERATIONS, LEARN_EVAL_EVERY),
    # a period far below an iteration that never triples: a checkpoint is due after every iteration
    "BSP": (["--library", "BSP", "--no-progress", "--checkpoint-every-s", "1e-3", "--checkpoint-triple-every",
             "1000000"], SHORT_ITERATIONS, SHORT_EVAL_EVERY),
    "SSP": (["--library", "SSP", "--threshold", "4", "--no-progress"], SHORT_ITERATIONS, SHORT_EVAL_EVERY),
    "FLOWN": (["--library", "FLOWN", "--threshold", "4", "--no-progress"], SHORT_ITERATIONS, SHORT_EVAL_EVERY),
}


@dataclass
class LoopbackRun:
    """One finished run: its exit status, output, summary (the JSON last line) and folder."""

    name: str
    iterations: int
    eval_every: int
    returncode: int
    stdout: str
    stderr: str
    summary: dict = field(default_factory=dict)
    run_dir: Path | None = None

    def require(self) -> "LoopbackRun":
        """This run, after asserting it ended with status 0 and a summary (naming its stderr otherwise)."""
        assert self.returncode == 0 and self.run_dir is not None, f"{self.name}: exit {self.returncode}\n{self.stderr[-3000:]}"
        return self


def start_loopback_runs(result_dir: Path, cache_dir: Path) -> dict[str, LoopbackRun]:
    """Start every run of :data:`RUN_FLAGS` at once under ``result_dir`` and wait for all of them."""
    env = {k: v for k, v in os.environ.items() if k != "ROG_SECRET"}  # the launcher makes its own
    procs = {}
    for name, (flags, iterations, eval_every) in RUN_FLAGS.items():
        note = ["-n", "frozen" if name == "frozen" else "t"]
        cmd = [sys.executable, str(RUN_PY), "--testbed", "loopback", "--result-dir", str(result_dir), "--cache-dir",
               str(cache_dir), *_COMMON, *note, *flags, "--iterations", str(iterations), "--eval-every",
               str(eval_every)]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                       cwd=str(ROOT))
    runs = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += "\n(killed after 600 s)"
        _, iterations, eval_every = RUN_FLAGS[name]
        run = LoopbackRun(name, iterations, eval_every, proc.returncode, out, err)
        lines = out.strip().splitlines()
        if proc.returncode == 0 and lines:
            run.summary = json.loads(lines[-1])
            run.run_dir = Path(run.summary["run_dir"])
        runs[name] = run
    return runs
