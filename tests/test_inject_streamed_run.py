"""End to end (slow tier): ScaDLES's data injection on streamed batches (issue 31).  Two streamed workers with
rate-proportional batches (150 and 450 samples a window) inject (0.5, 0.5) over loopback through the relay; every
send carries floor(beta b) samples of the sender's own batch of that iteration, b read from its ``data_wait`` record,
every receive arrives at the other worker, and the bytes are at least the image bytes (3,072 B a sample)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SAMPLE_BYTES = 3 * 32 * 32  # one quick-workload image as sent (uint8)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_injection_on_streamed_batches_sends_beta_of_each_own_batch(tmp_path, quick_cache):
    env = {k: v for k, v in os.environ.items() if k != "ROG_SECRET"}
    cmd = [sys.executable, str(ROOT / "scripts" / "run.py"), "--testbed", "loopback", "-c", "none", "--library", "BSP",
           "--workers", "2", "--stream-rate", "150,450", "--batch-policy", "rate_proportional", "--inject-alpha", "0.5",
           "--inject-beta", "0.5", "--iterations", "6", "--eval-every", "3", "--no-progress", "-n", "si",
           "--result-dir", str(tmp_path), "--cache-dir", str(quick_cache)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    run_dir = Path(json.loads(p.stdout.strip().splitlines()[-1])["run_dir"])
    assert (run_dir / "DONE").exists()
    sends, recvs, batch = [], [], {}
    for k in (0, 1):
        for r in _records(run_dir / f"events-w{k}.jsonl"):
            if r.get("kind") == "data_wait":
                batch[(k, r["iteration"])] = r["batch"]
            elif r.get("kind") == "inject":
                (sends if r["direction"] == "send" else recvs).append((k, r))
    assert {b for (k, _), b in batch.items() if k == 0} == {150} and {b for (k, _), b in batch.items() if k == 1} == {450}
    assert len(sends) == 6  # ceil(0.5 x 2) = 1 sender per iteration, 6 iterations
    for k, r in sends:
        assert r["samples"] == batch[(k, r["iteration"])] // 2 and r["peer"] == 1 - k
        assert r["bytes"] >= r["samples"] * SAMPLE_BYTES
    assert recvs and all(r["peer"] == 1 - k for k, r in recvs)
    assert {r["samples"] for _, r in recvs} <= {75, 225}
