"""The processes a --testbed hosts plan starts on the devices, run here on 127.0.0.1: ``run.py --child ps``
(bound to all interfaces, no token bucket: tc shapes real links) and one ``run.py --child worker
--worker-id K --ps-address A --port P`` per worker, each a separate process reading the shipped
config.yaml and layout.json from its run folder, the secret from its environment only."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rog.checkpoint import list_checkpoints
from rog.runtime import read_events
from rog.experiment import cli
from rog.experiment import config as runcfg
from rog.experiment import rundir

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "scripts" / "run.py"
CACHE = ROOT / "result" / ".cache"


def test_ps_and_single_worker_children_run_a_short_job(tmp_path):
    from rog.workloads import QuickWorkload

    QuickWorkload(seed=0, n_workers=2, cache_dir=CACHE).pretrained_state()  # warm cache: no race to pre-train
    a = cli.parse_args(["--testbed", "loopback", "--workers", "2", "--iterations", "4", "--eval-every", "2",
                        "--result-dir", str(tmp_path), "--cache-dir", str(CACHE), "--checkpoint-every-s", "0"])
    cfg = runcfg.resolve_config(a)
    cfg["testbed"] = "hosts"  # what the hosts launcher ships (the devices shape with tc)
    run_dir = rundir.prepare_run_dir(cfg, str(tmp_path), overwrite=False)
    env = {**os.environ, "ROG_SECRET": secrets.token_hex(32), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    base = [sys.executable, str(RUN), "--run-dir", str(run_dir)]
    procs = []

    def start(name, args):
        log = open(run_dir / f"{name}.log", "wb")
        procs.append((name, subprocess.Popen([*base, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                             cwd=str(ROOT))))

    try:
        start("prepare", ["--child", "prepare"])  # layout.json (the hosts launcher writes and ships it)
        start("ps", ["--child", "ps", "--port", "0"])
        end = time.monotonic() + 120
        while not (run_dir / "ps.port").exists():
            assert time.monotonic() < end and procs[1][1].poll() is None, (run_dir / "ps.log").read_text()
            time.sleep(0.05)
        port = (run_dir / "ps.port").read_text().strip()
        for k in range(2):
            start(f"worker{k}", ["--child", "worker", "--worker-id", str(k), "--ps-address", "127.0.0.1",
                                 "--port", port])
        for name, proc in procs:
            assert proc.wait(timeout=180) == 0, f"{name}: {(run_dir / f'{name}.log').read_text()[-2000:]}"
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    _, ps_recs = read_events(run_dir / "events-ps.jsonl")
    assert ps_recs[-1]["kind"] == "run_end" and ps_recs[-1]["status"] == "ok"
    for k in range(2):
        _, recs = read_events(run_dir / f"events-w{k}.jsonl")
        assert [r["iteration"] for r in recs if r["kind"] == "pull"] == [1, 2, 3, 4], k
    _, recs0 = read_events(run_dir / "events-w0.jsonl")
    assert [r["iteration"] for r in recs0 if r["kind"] == "eval" and not r.get("flushed")] == [0, 2, 4]
    assert [c.iteration for c in list_checkpoints(run_dir, worker=0)] == [0, 4]
    assert list_checkpoints(run_dir, worker=1) == []  # --checkpoint-workers default: worker 0


def test_child_worker_needs_its_addressing(capsys):
    for args in (["--child", "worker", "--run-dir", "x", "--ps-address", "10.0.0.1", "--port", "29500"],
                 ["--child", "worker", "--run-dir", "x", "--worker-id", "0", "--port", "29500"],
                 ["--child", "worker", "--run-dir", "x", "--worker-id", "0", "--ps-address", "10.0.0.1"]):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(args)
        assert e.value.code == 2 and "--child worker needs" in capsys.readouterr().err, args
