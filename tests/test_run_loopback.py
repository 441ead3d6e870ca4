"""scripts/run.py --testbed loopback as a user runs it: real processes (launcher, PS, worker host and workers) over
127.0.0.1.  One short run per policy of the default suite (2 workers, 10 iterations), all four at
once to keep the file fast (tests/loopback_runs.py), and the launcher's argument handling.  An interrupted run
(INCOMPLETE, partial results, no process left) and the full-length runs are marked slow.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rog.runtime import read_events
from rog.experiment import cli
from rog.experiment import config as runcfg
from rog.experiment import rundir

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "scripts" / "run.py"
CACHE = ROOT / "result" / ".cache"  # the quick workload's default weight cache (pre-trained once per machine)
LIBRARIES = ("BSP", "SSP", "FLOWN", "ROG")


@pytest.fixture(scope="module")
def warm_cache():
    """Pre-train the quick model once (a no-op when the cache is warm), so runs do not race to do it."""
    from rog.workloads import QuickWorkload

    QuickWorkload(seed=0, n_workers=2, cache_dir=CACHE).pretrained_state()
    return CACHE


def _start(args, tmp_path):
    env = dict(os.environ)
    env.pop("ROG_SECRET", None)  # the launcher makes its own
    cmd = [sys.executable, str(RUN), "--testbed", "loopback", "--result-dir", str(tmp_path), "--cache-dir",
           str(CACHE), *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))


def _check_run(run_dir: Path, library: str, workers: int, iterations: int, eval_every: int, summary: dict):
    assert (run_dir / "DONE").exists() and not (run_dir / "INCOMPLETE").exists()
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["library"] == library and cfg["workers"] == workers and cfg["iterations"] == iterations
    assert cfg["chunk_share"] == pytest.approx(1000 / 33307)
    assert "secret" not in " ".join(cfg)
    for path in run_dir.iterdir():  # the per-run secret (64 hex digits) was never written to a file
        if path.is_file():
            assert not re.search(r"\b[0-9a-f]{64}\b", path.read_text(errors="replace")), path.name
    header, ps_recs = read_events(run_dir / "events-ps.jsonl")
    assert header["rank"] == "ps" and header["run_id"] == cfg["run_id"]
    assert ps_recs[-1]["kind"] == "run_end" and ps_recs[-1]["status"] == "ok"
    for k in range(workers):
        _, recs = read_events(run_dir / f"events-w{k}.jsonl")
        for kind in ("compute", "push", "pull"):
            assert [r["iteration"] for r in recs if r["kind"] == kind] == list(range(1, iterations + 1)), (k, kind)
        assert {r["reason"] for r in recs if r["kind"] == "stall"} >= {"gate", "admission"}
        # chunks of --chunk-share (default: the original's 1000 of 33,307 rows, ~3 %) of the payload, on
        # both ends: a transmission planned over every row has at least ~1 / share frames (each holds at most
        # its share).  Planned, not delivered: ROG's deadline cuts a push short whenever the machine is slow
        # (on a loaded machine worker 0 delivered 460 of 1,448 rows in every push of a 60-iteration run), BSP never
        moved = [r for r in recs if r["kind"] in ("push", "pull")]
        full = [r for r in moved if r["rows_planned"] == max(x["rows_planned"] for x in moved)]
        assert {r["kind"] for r in full} >= {"push", "pull"}, k
        assert min(r["frames_planned"] for r in full) >= int(0.99 / cfg["chunk_share"]), k
        if library == "BSP":
            assert all(r["rows_delivered"] == r["rows_planned"] for r in moved), k
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == list(range(0, iterations + 1, eval_every))
    assert all(0.0 <= float(r["test_accuracy"]) <= 1.0 and float(r["wall_s"]) >= 0 for r in rows)
    assert summary["status"] == "done" and summary["iterations"] == iterations
    assert summary["start_accuracy"] == pytest.approx(float(rows[0]["test_accuracy"]), abs=1e-6)
    assert summary["final_accuracy"] == pytest.approx(float(rows[-1]["test_accuracy"]), abs=1e-6)
    # the per-iteration means, recomputed from every worker's event log: seconds of each kind / iterations
    logs = [read_events(run_dir / f"events-w{k}.jsonl")[1] for k in range(workers)]
    n_iter = sum(1 for recs in logs for r in recs if r["kind"] == "pull")
    assert n_iter == workers * iterations
    for kind in ("compute", "push", "pull", "stall"):
        total_s = sum(r["duration_s"] for recs in logs for r in recs if r["kind"] == kind)
        assert summary[f"mean_{kind}_s"] == pytest.approx(total_s / n_iter, rel=1e-9), kind
    if cfg.get("compute_s"):  # paced: an iteration's compute lasts at least its pacing target
        assert summary["mean_compute_s"] >= 0.95 * cfg["compute_s"]
    assert summary["mean_push_s"] > 0 and summary["mean_pull_s"] > 0  # every iteration moved bytes both ways


def test_one_real_run_per_policy(loopback_runs):
    """Every policy's shared run (tests/loopback_runs.py) checked end to end."""
    for lib in LIBRARIES:
        run = loopback_runs[lib].require()
        threshold = "" if lib == "BSP" else "4"
        assert run.run_dir.name == f"{lib}{threshold}-none-b1-w2-seed0-t"
        _check_run(run.run_dir, lib, 2, run.iterations, run.eval_every, run.summary)
        if lib == "ROG":
            assert "acc" in run.stderr and "stall" in run.stderr  # the live progress line


@pytest.mark.slow  # a run of its own (about 25 s of a loaded machine); the slow tier's signal scenarios interrupt
# run.py too (tests/test_signals.py), this one checks that no child process outlives the launcher
def test_a_run_interrupted_by_ctrl_c_is_incomplete_keeps_its_results_and_leaves_no_process(tmp_path, warm_cache):
    doomed = _start(["--library", "ROG", "--workers", "2", "--iterations", "100000", "-n", "doomed", "--no-progress"],
                    tmp_path)
    doomed_dir = tmp_path / "ROG4-none-b1-w2-seed0-doomed"
    end = time.monotonic() + 120
    while not (doomed_dir / "events-w0.jsonl").exists() or "compute" not in (doomed_dir / "events-w0.jsonl").read_text():
        assert doomed.poll() is None and time.monotonic() < end, "the run to interrupt never started training"
        time.sleep(0.1)
    doomed.send_signal(signal.SIGINT)  # Ctrl-C
    out, err = doomed.communicate(timeout=60)
    assert doomed.returncode == 1
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "incomplete" and "interrupted" in summary["reason"]
    assert "interrupted" in (doomed_dir / "INCOMPLETE").read_text() and not (doomed_dir / "DONE").exists()
    assert (doomed_dir / "metrics.csv").exists()  # partial results kept
    read_events(doomed_dir / "events-w0.jsonl", allow_partial_last_line=True)
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_mentions(p, str(doomed_dir))]
    assert not leftovers, "child processes outlived the interrupted run"


def _cmdline_mentions(proc_dir: Path, text: str) -> bool:
    try:
        return text in (proc_dir / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_run_id_and_argument_checks(tmp_path):
    a = cli.parse_args(["--library", "ssp", "--threshold", "3", "-b", "2", "--workers", "5", "--seed", "7", "-n", "x y"])
    cfg = runcfg.resolve_config(a)
    assert cfg["run_id"] == "SSP3-outdoors-recorded-b2-w5-seed7-x_y"
    assert cfg["iterations"] == runcfg.DEFAULT_ITERATIONS and cfg["batch_multiple"] == 2 and cfg["rate_mbit"] is None
    cfg = runcfg.resolve_config(cli.parse_args(["--library", "BSP"]))
    assert cfg["run_id"] == "BSP-outdoors-recorded-b1-w4-seed0" and cfg["threshold"] == 0
    with pytest.raises(runcfg.ConfigError):
        runcfg.resolve_config(cli.parse_args(["--library", "BSP", "--threshold", "2"]))  # BSP is SSP(0)
    for bad in (["--workers", "0"], ["--rate-mbit", "-1"], ["-b", "0"], ["--library", "XYZ"], ["--eval-every", "0"]):
        with pytest.raises(SystemExit):
            cli.parse_args(bad)
    # a completed run is not overwritten by accident
    done = tmp_path / cfg["run_id"]
    done.mkdir()
    (done / "DONE").write_text("{}")
    with pytest.raises(runcfg.ConfigError, match="--overwrite"):
        rundir.prepare_run_dir(cfg, str(tmp_path), overwrite=False)
    assert rundir.prepare_run_dir(cfg, str(tmp_path), overwrite=True) == done and not (done / "DONE").exists()


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory, warm_cache):
    """Each policy's default quick run (300 iterations), all four started at once: their compute is paced, so
    most of each run is waiting, and one after another they took four times the wall time of one."""
    result_dir = tmp_path_factory.mktemp("quick-runs")
    procs = {lib: _start(["--library", lib, "--iterations", "300", "--no-progress"], result_dir) for lib in LIBRARIES}
    return {lib: proc.communicate(timeout=900) + (proc.returncode,) for lib, proc in procs.items()}


@pytest.mark.slow
@pytest.mark.parametrize("library", LIBRARIES)
def test_default_quick_run_gains_five_points(quick_runs, library):
    out, err, returncode = quick_runs[library]
    assert returncode == 0, err[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["final_accuracy"] >= summary["start_accuracy"] + 0.05
