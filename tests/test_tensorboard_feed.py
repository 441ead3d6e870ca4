"""TensorBoard scalars of a run (rog.experiment.tensorboard_feed), read back with tensorboard's own reader
(event_accumulator): one point per iteration of every per-worker scalar, with the values of the event logs
(sums computed here by hand), the link rate of a constant-rate run, and a real loopback run (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # the analysis extra: imported plainly

from rog.experiment.tensorboard_feed import TB_DIR, feed

ROOT = Path(__file__).resolve().parents[1]
PER_WORKER = ("time/compute_s", "time/push_s", "time/pull_s", "time/stall_s", "time/iteration_s", "bytes/pushed",
              "bytes/pulled", "staleness/max", "staleness/mean", "link/planned_rate_mbit")


def _scalars(run_dir: Path) -> dict[str, list]:
    ea = EventAccumulator(str(run_dir / TB_DIR), size_guidance={"scalars": 0})
    ea.Reload()
    return {t: ea.Scalars(t) for t in ea.Tags()["scalars"]}


def _fake_run(tmp_path: Path, workers: int, iterations: int) -> Path:
    from rog.experiment.cli import parse_args
    from rog.experiment.config import resolve
    from rog.experiment.rundir import write_config

    cfg = resolve(parse_args(["--testbed", "loopback", "--workers", str(workers), "--rate-mbit", "25",
                              "--result-dir", str(tmp_path)]))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_config(run_dir, cfg)
    (run_dir / "links.ready").write_text(json.dumps({"t_s": 1.0, "monotonic_s": 1.0}))
    for k in range(workers):
        recs = [{"kind": "header", "origin_unix_s": 1000.0}, {"kind": "run_start", "t_s": 1.0}]
        for it in range(1, iterations + 1):
            t = 1.0 + it
            recs += [{"kind": "compute", "t_s": t, "iteration": it, "duration_s": 0.1 * k + 0.01 * it},
                     {"kind": "stall", "t_s": t, "iteration": it, "duration_s": 0.002},
                     {"kind": "push", "t_s": t, "iteration": it, "duration_s": 0.05, "bytes": 1000 + it},
                     {"kind": "staleness", "t_s": t, "iteration": it, "max": it % 3, "mean": 0.5},
                     {"kind": "stall", "t_s": t, "iteration": it, "duration_s": 0.003},
                     {"kind": "pull", "t_s": t, "iteration": it, "duration_s": 0.04, "bytes": 500 * it}]
            if k == 0 and it % 2 == 0:
                recs.append({"kind": "eval", "t_s": t, "iteration": it, "accuracy": 0.5 + it / 100, "loss": 1.0,
                             "worker": 0, "flushed": False})
        (run_dir / f"events-w{k}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return run_dir


def test_every_worker_scalar_has_one_point_per_iteration_with_the_logs_values(tmp_path):
    import threading

    run_dir = _fake_run(tmp_path, workers=2, iterations=7)
    stop = threading.Event()
    stop.set()  # one pass: read the logs to their end, then stop
    feed(run_dir, stop)
    got = _scalars(run_dir)
    for k in range(2):
        for name in PER_WORKER:
            pts = got[f"w{k}/{name}"]
            assert [p.step for p in pts] == list(range(1, 8)), name
    it = 3
    at = {name: [p.value for p in got[f"w1/{name}"] if p.step == it][0] for name in PER_WORKER}
    assert at["time/compute_s"] == pytest.approx(0.1 + 0.01 * it)
    assert at["time/stall_s"] == pytest.approx(0.005)  # both stalls of the iteration
    assert at["time/iteration_s"] == pytest.approx(0.1 + 0.01 * it + 0.005 + 0.05 + 0.04)
    assert at["bytes/pushed"] == 1000 + it and at["bytes/pulled"] == 500 * it
    assert at["staleness/max"] == it % 3 and at["link/planned_rate_mbit"] == 25.0
    assert [p.step for p in got["run/eval_accuracy"]] == [2, 4, 6]
    assert got["run/eval_accuracy"][0].value == pytest.approx(0.52)
    assert got["w0/time/compute_s"][0].wall_time == pytest.approx(1000.0 + 2.0 + 0.04)  # the event clock


@pytest.mark.slow
def test_a_loopback_run_writes_tb_scalars_as_it_goes(tmp_path):
    n = 6
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), "--testbed", "loopback", "--library", "ROG",
                        "--threshold", "4", "--workers", "2", "--iterations", str(n), "--rate-mbit", "200",
                        "--result-dir", str(tmp_path), "--no-progress"], capture_output=True, text=True, cwd=str(ROOT),
                       timeout=600, env={k: v for k, v in os.environ.items() if k != "ROG_NO_TENSORBOARD"})
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = Path(json.loads(p.stdout.strip().splitlines()[-1])["run_dir"])
    got = _scalars(run_dir)
    for k in range(2):
        for name in PER_WORKER:
            assert len(got[f"w{k}/{name}"]) == n, name
    assert p.stderr.strip().splitlines()[-1].startswith(f"done: {run_dir.name} DONE, {n} iterations in ")
    q = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), "--testbed", "loopback", "--workers", "1",
                        "--iterations", "2", "--result-dir", str(tmp_path / "off"), "--no-progress", "--no-tensorboard"],
                       capture_output=True, text=True, cwd=str(ROOT), timeout=600)
    assert q.returncode == 0 and not list((tmp_path / "off").glob(f"*/{TB_DIR}"))


def test_tested_checkpoints_add_their_accuracy_where_the_run_has_tb(tmp_path):
    from rog.tb_scalars import write_checkpoint_accuracy

    rows = [{"worker": 0, "iteration": 0, "accuracy": 0.4}, {"worker": 0, "iteration": 9, "accuracy": 0.6},
            {"worker": 1, "iteration": 9, "accuracy": 0.55}]
    write_checkpoint_accuracy(tmp_path, rows)  # no tb/: the run had --no-tensorboard, nothing is written
    assert not (tmp_path / TB_DIR).exists()
    (tmp_path / TB_DIR).mkdir()
    write_checkpoint_accuracy(tmp_path, rows)
    got = _scalars(tmp_path)
    assert [(p.step, round(p.value, 3)) for p in got["run/checkpoint_accuracy/w0"]] == [(0, 0.4), (9, 0.6)]
    assert [p.step for p in got["run/checkpoint_accuracy/w1"]] == [9]


def test_scalar_writer_writes_what_torchs_summary_writer_writes(tmp_path):
    """The same points through torch's SummaryWriter (the reference) and ScalarWriter read back equal."""
    from torch.utils.tensorboard import SummaryWriter

    from rog.tb_scalars import ScalarWriter

    points = [("w0/time/compute_s", 0.125, 1, 1000.5), ("w0/time/compute_s", 0.25, 2, 1001.5),
              ("run/eval_accuracy", 0.625, 2, 1001.75), ("w1/bytes/pushed", 33307.0, 1, 1000.25)]
    for name, cls in (("torch", SummaryWriter), ("rog", ScalarWriter)):
        w = cls(log_dir=str(tmp_path / name / TB_DIR))
        for tag, value, step, wall in points:
            w.add_scalar(tag, value, global_step=step, walltime=wall)
        w.close()
    want, got = _scalars(tmp_path / "torch"), _scalars(tmp_path / "rog")
    assert set(got) == {p[0] for p in points}
    assert {t: [(p.step, p.value, p.wall_time) for p in v] for t, v in got.items()} == \
        {t: [(p.step, p.value, p.wall_time) for p in v] for t, v in want.items()}


def test_the_feed_process_does_not_import_torch(tmp_path):
    run_dir = _fake_run(tmp_path, workers=1, iterations=2)
    code = ("import sys, threading\nfrom rog.experiment.tensorboard_feed import feed\ns = threading.Event()\n"
            f"s.set()\nn = feed({str(run_dir)!r}, s)\nprint(n, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert out.returncode == 0, out.stderr
    n, has_torch = out.stdout.split()
    assert int(n) > 0 and has_torch == "False"
