"""scripts/run.py writes checkpoints of the model a worker holds (rog.checkpoint), and
scripts/test_checkpoints.py tests them: the shared real loopback runs (tests/loopback_runs.py: 2 workers; one
run checkpoints at its start and end, one after every iteration), then the checkpoint tester on a folder; the last checkpoint's accuracy must equal worker 0's own final test
in metrics.csv (same model, same test set, tested by two different code paths)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rog.checkpoint import list_checkpoints, load_checkpoint
from rog.experiment import cli

ROOT = Path(__file__).resolve().parents[1]
TEST_CKPT = ROOT / "scripts" / "test_checkpoints.py"


def test_loopback_runs_write_checkpoints_that_the_tester_reads(loopback_runs):
    often = loopback_runs["BSP"].require()  # --checkpoint-every-s 1e-3, never tripling (tests/loopback_runs.py)
    run_dir, iterations = often.run_dir, often.iterations
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["checkpoint"] == dict(every_s=1e-3, triple_every=1000000, time_scale=cfg["time_scale"], workers=[0])
    infos = list_checkpoints(run_dir)
    assert {c.worker for c in infos} == {0}  # --checkpoint-workers default: worker 0 only
    its = [c.iteration for c in infos]
    assert its[0] == 0 and its[-1] == iterations and its == sorted(set(its))
    skipped = (run_dir / "w0.log").read_text().count("skipped: the previous write is still running")
    assert len(its) + skipped == iterations + 1  # one checkpoint (written or skipped) per iteration, plus the start

    ends = loopback_runs["ROG"].require()  # --checkpoint-every-s 0 --checkpoint-workers all
    run_dir, iterations, eval_every = ends.run_dir, ends.iterations, ends.eval_every
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["checkpoint"] == dict(every_s=0.0, triple_every=20, time_scale=cfg["time_scale"], workers=[0, 1])
    # every_s 0: the starting model and the last iteration's, for each worker
    for k in (0, 1):
        infos = list_checkpoints(run_dir, worker=k)
        assert [c.iteration for c in infos] == [0, iterations], k
        assert all(c.model == cfg["model"] for c in infos)
    # the worker trained between its two checkpoints
    first, _ = load_checkpoint(list_checkpoints(run_dir, worker=0)[0])
    last, _ = load_checkpoint(list_checkpoints(run_dir, worker=0)[-1])
    assert any(not bool((first[n] == last[n]).all()) for n in first if first[n].is_floating_point())

    # the tester writes accuracy.csv into the run folder: it reads a copy, so the other files see the run as made
    tested = shutil.copytree(run_dir, Path(str(run_dir) + "-tested"))
    out = subprocess.run([sys.executable, str(TEST_CKPT), str(tested)], capture_output=True, text=True,
                         cwd=str(ROOT), timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["tested"] == 2 and summary["failed"] == []
    with open(tested / "accuracy.csv") as f:
        acc = list(csv.DictReader(f))
    with open(tested / "metrics.csv") as f:
        metrics = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in acc] == [0, iterations]
    assert [int(r["iteration"]) for r in metrics] == list(range(0, iterations + 1, eval_every))
    assert all(r["worker"] == "0" for r in acc)
    assert float(acc[0]["time"]) <= float(acc[-1]["time"])
    # the same model tested twice: by worker 0 in the run and by the tester from the checkpoint
    assert float(acc[0]["accuracy"]) == pytest.approx(float(metrics[0]["test_accuracy"]), abs=1e-6)
    assert float(acc[-1]["accuracy"]) == pytest.approx(float(metrics[-1]["test_accuracy"]), abs=1e-6)


def test_checkpoint_flags_are_checked(capsys):
    a = cli.parse_args(["--workers", "3", "--checkpoint-workers", "all"])
    assert a.checkpoint_workers == [0, 1, 2] and a.checkpoint_every_s == 60.0 and a.checkpoint_triple_every == 20
    assert cli.parse_args(["--workers", "3", "--checkpoint-workers", "2, 0,2"]).checkpoint_workers == [0, 2]
    assert cli.parse_args([]).checkpoint_workers == [0]
    for args, msg in ((["--checkpoint-every-s", "-1"], "--checkpoint-every-s"),
                      (["--checkpoint-every-s", "inf"], "--checkpoint-every-s"),
                      (["--checkpoint-triple-every", "0"], "--checkpoint-triple-every"),
                      (["--checkpoint-workers", "0,x"], "--checkpoint-workers"),
                      (["--checkpoint-workers", ","], "--checkpoint-workers"),
                      (["--workers", "2", "--checkpoint-workers", "2"], "--checkpoint-workers")):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(args)
        assert e.value.code == 2 and msg in capsys.readouterr().err, args
