"""End to end, in the default tier: distributed training over the real transport learns.

Two workers and a parameter server run ROG-4 on loopback for 60 iterations (the shared runs of
tests/loopback_runs.py, which also checkpoint it), and beside it a negative control: the same run with a learning rate of 1e-12.  Worker 0's test accuracy
must rise from the first test to the last by more than twice the run's own test-to-test swing (the median
absolute change between consecutive tests: the rule the summary uses to call an accuracy difference
undecided), and must end above the control's by more than twice the larger of the two swings.

The second condition was added after the first try: the control alone passed the first rule (61.0 ->
63.6 %, swing 0.52 points), since the forward passes re-estimate the pre-trained model's BatchNorm
statistics on the workers' data without any gradient step.  So a rise alone does not show learning; a
rise beyond the frozen run does (8.5 points over it on that try, against a swing of 1.85).
"""

from __future__ import annotations

import csv

import numpy as np
from loopback_runs import LoopbackRun

SWING_FACTOR = 2.0  # decided before the first run: "more than the test-to-test swing", with the summary's 2x


def _accuracies(run: LoopbackRun) -> list[float]:
    run.require()
    assert (run.run_dir / "DONE").exists()
    with open(run.run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == list(range(0, run.iterations + 1, run.eval_every))
    return [100.0 * float(r["test_accuracy"]) for r in rows]


def _rise_and_swing(acc: list[float]) -> tuple[float, float]:
    return acc[-1] - acc[0], float(np.median(np.abs(np.diff(acc))))


def test_accuracy_rises_beyond_the_test_to_test_swing(loopback_runs):
    acc = _accuracies(loopback_runs["ROG"])
    rise, swing = _rise_and_swing(acc)
    assert rise > SWING_FACTOR * swing and rise > 0, f"accuracy (%) {acc}: rise {rise:.2f}, swing {swing:.2f}"
    control = _accuracies(loopback_runs["frozen"])
    _, c_swing = _rise_and_swing(control)
    beyond = acc[-1] - control[-1]
    assert beyond > SWING_FACTOR * max(swing, c_swing), f"learning {acc} vs lr 1e-12 {control}"
