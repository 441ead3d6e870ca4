"""run.py's summary splits compute into the work and the device profile's pacing sleep: the numbers come
from hand-written event logs, so the expected means are computed here by hand."""

from __future__ import annotations

import pytest

from rog.experiment.finalize import summarise
from rog.runtime.events import EventLog, events_file_name, worker_rank


def _transfer(it: int, duration_s: float) -> dict:
    return dict(iteration=it, rows_planned=4, rows_delivered=4, bytes=100, deadline_s=None, delivered_share=1.0,
                duration_s=duration_s, mandatory_s=None)


def test_compute_work_is_compute_less_the_pacing_sleep(tmp_path, run_config):
    # worker 0: compute 0.30 s with 0.20 s of it pacing sleep; worker 1: 0.50 s with 0.10 s sleep; 2 iterations each
    plan = {0: (0.30, 0.20), 1: (0.50, 0.10)}
    for k, (compute_s, sleep_s) in plan.items():
        with EventLog(tmp_path / events_file_name(worker_rank(k)), worker_rank(k), "r") as log:
            log.write("run_start", t_s=0.0, worker=k)
            for it in (1, 2):
                log.write("compute", t_s=float(it), iteration=it, duration_s=compute_s, sleep_s=sleep_s, worker=k)
                log.write("push", t_s=float(it) + 0.5, worker=k, **_transfer(it, 0.05))
                log.write("pull", t_s=float(it) + 0.6, worker=k, **_transfer(it, 0.02))
    s = summarise(tmp_path, run_config(["--workers", "2", "--library", "BSP"]), wall_s=3.0)
    # 4 iterations in all: compute (0.3 + 0.3 + 0.5 + 0.5) / 4 = 0.4; sleep (0.2 + 0.2 + 0.1 + 0.1) / 4 = 0.15
    assert s["mean_compute_s"] == pytest.approx(0.40)
    assert s["mean_compute_work_s"] == pytest.approx(0.25)
    assert s["mean_comm_s"] == pytest.approx(0.07)


def test_compute_work_equals_compute_without_sleep_fields(tmp_path, run_config):
    with EventLog(tmp_path / events_file_name(worker_rank(0)), worker_rank(0), "r") as log:
        log.write("run_start", t_s=0.0, worker=0)
        log.write("compute", t_s=1.0, iteration=1, duration_s=0.7, worker=0)
        log.write("pull", t_s=2.0, worker=0, **_transfer(1, 0.1))
    s = summarise(tmp_path, run_config(["--workers", "1", "--library", "BSP"]), wall_s=3.0)
    assert s["mean_compute_work_s"] == pytest.approx(s["mean_compute_s"]) == pytest.approx(0.7)
