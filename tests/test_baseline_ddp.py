"""The DDP (torch.distributed gloo) reference baseline: ``scripts/run.py --library DDP``.

The end-to-end loopback run is checked against an independent single-process reference: the same
pre-trained model, each worker's batches and per-worker torch seed, the gradients of every worker
averaged by hand, and the update computed with ROG's own DEFSGDM kernel (numpy), not torch's SGD.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from ddp_fakes import FakeBucket

from rog.baselines.ddp import DDPConfigError, check_ddp_config
from rog.baselines.netpath import interface_for, route_argv
from rog.checkpoint import list_checkpoints, load_checkpoint
from rog.runtime import read_events
from rog.experiment import cli
from rog.experiment import config as runcfg
from rog.experiment import rundir

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "scripts" / "run.py"
CACHE = ROOT / "result" / ".cache"
LR = 0.05  # large enough that averaging mistakes move parameters far beyond float tolerance


def _run(args: list[str], timeout_s: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(RUN), *args], capture_output=True, text=True, cwd=str(ROOT), env=env,
                          timeout=timeout_s)


def _run_logs(result_dir: Path, chars: int = 1500) -> str:
    """The end of every log and INCOMPLETE file of the runs under ``result_dir`` (the workers' stage
    messages and watchdog stack dumps), for a failure message."""
    out = []
    for f in sorted(result_dir.rglob("*")):
        if f.is_file() and (f.suffix == ".log" or f.name == "INCOMPLETE"):
            out.append(f"\n--- {f.relative_to(result_dir)}:\n{f.read_text(errors='replace')[-chars:]}")
    return "".join(out)


def _reference(cfg: dict, iterations: int, average: bool = True) -> dict[str, np.ndarray]:
    """Parameters after ``iterations`` BSP iterations computed in one process (independent of DDP and SGD)."""
    import torch
    import torch.nn.functional as F

    from rog.local_update import defsgdm_update
    from rog.workloads.registry import make_workload

    torch.set_num_threads(1)
    wl = make_workload(cfg)
    W, E = cfg["workers"], cfg["batch_multiple"]
    rng, batches = [], []
    model = None
    for k in range(W):  # what worker k does before training: seed, build the pre-trained model
        torch.manual_seed(cfg["seed"] * 1000 + k)
        m = wl.pretrained_model(cfg["model"])
        model = m if model is None else model
        rng.append(torch.get_rng_state())
        batches.append(wl.worker_batches(k, cfg["base_batch"], seed=cfg["seed"]))
    params = dict(model.named_parameters())
    mom = {n: np.zeros(p.numel(), dtype=np.float32) for n, p in params.items()}
    for _ in range(iterations):
        grads = []
        for k in range(W):
            torch.set_rng_state(rng[k])
            model.zero_grad(set_to_none=True)
            for _ in range(E):
                x, y = next(batches[k])
                (F.cross_entropy(model(x), y) / E).backward()
            rng[k] = torch.get_rng_state()
            grads.append({n: p.grad.detach().reshape(-1).numpy().copy() for n, p in params.items()})
        with torch.no_grad():
            for n, p in params.items():
                g = (sum(gr[n] for gr in grads) / W) if average else grads[0][n]
                flat = p.detach().reshape(-1).numpy()
                u = defsgdm_update(g, flat, mom[n], lr=cfg["lr"], momentum=cfg["momentum"],
                                   weight_decay=cfg["weight_decay"], nesterov=True)
                p -= torch.from_numpy(u).view(p.shape)
    return {n: p.detach().numpy().copy() for n, p in params.items()}


def _iteration_records(recs: list[dict], n: int) -> list[dict]:
    return [r for r in recs if r.get("iteration") == n and r["kind"] in ("compute", "stall", "push", "pull")]


def test_two_worker_loopback_run_equals_averaged_gradient_reference(tmp_path):
    from rog.workloads import QuickWorkload

    QuickWorkload(seed=0, n_workers=2, cache_dir=CACHE).pretrained_state()  # warm cache
    iters = 3
    p = _run(["--testbed", "loopback", "-c", "none", "--library", "DDP", "--workers", "2", "--iterations", str(iters),
              "-b", "2", "--lr", str(LR), "--eval-every", "2", "--checkpoint-workers", "all", "--checkpoint-every-s", "0",
              "--result-dir", str(tmp_path), "--cache-dir", str(CACHE), "--no-progress"])
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    run_dir = Path(summary["run_dir"])
    assert summary["status"] == "done" and summary["iterations"] == iters and (run_dir / "DONE").exists()
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["library"] == "DDP" and cfg["threshold"] == 0 and run_dir.name.startswith("DDP-")

    # parameters: both workers hold the same model, equal to the reference within float tolerance
    ref = _reference(cfg, iters)
    wrong = _reference(cfg, iters, average=False)  # worker 0's gradient only: what a missing all-reduce gives
    held = []
    for k in range(2):
        ck = [c for c in list_checkpoints(run_dir, worker=k) if c.iteration == iters]
        assert len(ck) == 1, f"worker {k}: no checkpoint at iteration {iters}"
        held.append(load_checkpoint(ck[0])[0])
    for name, want in ref.items():
        for k in range(2):
            got = held[k][name].numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-6, err_msg=f"worker {k} {name}")
        np.testing.assert_array_equal(held[0][name].numpy(), held[1][name].numpy())
    gap = max(float(np.abs(ref[n] - wrong[n]).max()) for n in ref)
    assert gap > 1e-3, "the reference cannot tell averaged from unaveraged gradients: the test would not fail"

    # events: schema (read_events validates), one compute, one gate stall, one pull per iteration, tiling it
    for k in range(2):
        _, recs = read_events(run_dir / f"events-w{k}.jsonl")
        assert recs[0]["kind"] == "run_start" and recs[0]["policy"] == "DDP" and recs[-1]["kind"] == "run_end"
        for n in range(1, iters + 1):
            c, s, pl = _iteration_records(recs, n)
            assert (c["kind"], s["kind"], s["reason"], pl["kind"]) == ("compute", "stall", "gate", "pull")
            assert abs(c["t_s"] + c["duration_s"] - s["t_s"]) < 1e-6  # compute ends where the barrier starts
            assert abs(s["t_s"] + s["duration_s"] - pl["t_s"]) < 1e-6  # the barrier ends where the all-reduce starts
            assert pl["bytes"] == 4 * sum(v.size for v in ref.values())  # float32 gradient payload
            assert pl["rows_delivered"] == pl["rows_planned"] and pl["deadline_s"] is None
    _, recs0 = read_events(run_dir / "events-w0.jsonl")
    assert [r["iteration"] for r in recs0 if r["kind"] == "eval" and not r["flushed"]] == [0, 2, 3]
    assert [r["iteration"] for r in read_events(run_dir / "events-w1.jsonl")[1] if r["kind"] == "eval"] == []
    assert (run_dir / "metrics.csv").read_text().count("\n") == 1 + 3

    # the analysis reads the run unchanged
    from rog.analysis.load import load_run
    from rog.analysis.metrics import composition

    run = load_run(run_dir)
    comp = composition(run)
    assert run.system == "DDP" and comp["iterations"] == iters
    assert comp["comm_s"] > 0 and comp["stall_s"] >= 0 and comp["compute_s"] > 0


@pytest.mark.slow  # three separate processes importing torch: ~30 s idle, minutes on a loaded machine
def test_time_budget_stops_every_worker_together_through_child_processes(tmp_path):
    """``--child ps`` + one ``--child worker`` per worker (the Fabric launcher's processes); budget 0:
    worker 0 decides at the first barrier and every worker stops after iteration 1."""
    from rog.workloads import QuickWorkload

    QuickWorkload(seed=0, n_workers=2, cache_dir=CACHE).pretrained_state()
    a = cli.parse_args(["--testbed", "loopback", "-c", "none", "--library", "DDP", "--workers", "2", "--iterations",
                        "50", "--result-dir", str(tmp_path), "--cache-dir", str(CACHE), "--checkpoint-every-s", "0"])
    cfg = runcfg.resolve_config(a)
    cfg["time_budget_s"] = 0.0
    run_dir = rundir.prepare_run_dir(cfg, str(tmp_path), overwrite=False)
    env = {**os.environ, "ROG_SECRET": secrets.token_hex(32), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    base = [sys.executable, str(RUN), "--run-dir", str(run_dir)]
    procs = []

    def start(name, args):
        log = open(run_dir / f"{name}.log", "wb")
        procs.append((name, subprocess.Popen([*base, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                             cwd=str(ROOT))))

    try:
        start("ps", ["--child", "ps", "--port", "0"])
        end = time.monotonic() + 600
        while not (run_dir / "ps.port").exists():
            assert time.monotonic() < end and procs[0][1].poll() is None, (run_dir / "ps.log").read_text()
            time.sleep(0.05)
        port = (run_dir / "ps.port").read_text().strip()
        for k in range(2):
            start(f"worker{k}", ["--child", "worker", "--worker-id", str(k), "--ps-address", "127.0.0.1",
                                 "--port", port])
        for name, proc in procs:
            assert proc.wait(timeout=900) == 0, f"{name}: {(run_dir / f'{name}.log').read_text()[-2000:]}"
    finally:
        for _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert read_events(run_dir / "events-ps.jsonl")[1][-1]["kind"] == "run_end"
    for k in range(2):
        _, recs = read_events(run_dir / f"events-w{k}.jsonl")
        assert [r["iteration"] for r in recs if r["kind"] == "pull"] == [1], k
        assert recs[-1]["kind"] == "run_end" and recs[-1]["iterations"] == 1 and recs[-1]["reason"] == "time budget"
    _, recs0 = read_events(run_dir / "events-w0.jsonl")
    assert [r["iteration"] for r in recs0 if r["kind"] == "eval"] == [0, 1, 1]  # start, the last iteration, flushed
    assert [c.iteration for c in list_checkpoints(run_dir, worker=0)] == [0, 1]


def test_iteration_sync_averages_deferred_buckets_and_agrees_on_worker0s_stop(tmp_path):
    """Two workers as threads over a real gloo group: the first bucket waits for the last, every bucket
    is averaged, the records tile the iteration, and worker 0's stop decision reaches worker 1."""
    import threading
    from datetime import timedelta

    import torch.distributed as dist

    from rog.baselines.ddp import IterationSync
    from rog.runtime import EventLog

    store = dist.HashStore()
    asked = {0: 0, 1: 0}
    out, errors = {}, []

    def worker(k):
        try:
            pg = dist.ProcessGroupGloo(dist.PrefixStore("ddp-test", store), k, 2, timedelta(seconds=30))
            with EventLog(tmp_path / f"events-w{k}.jsonl", f"w{k}", "t") as ev:
                def decide():
                    asked[k] += 1
                    return k == 0  # only worker 0 is asked; worker 1 would never stop by itself
                sync = IterationSync(2, ev, k, 0.05, decide, allreduce=lambda t: pg.allreduce([t]))
                sync.begin(1, time.monotonic())
                f1 = sync.hook(None, FakeBucket([1.0 + 10 * k, 2.0], last=False))
                pending = not f1.done()
                f2 = sync.hook(None, FakeBucket([4.0 * k], last=True))
                out[k] = dict(pending=pending, b1=f1.value().tolist(), b2=f2.value().tolist(), stop=sync.stop,
                              synced=sync.synced, buckets=sync.buckets, comm=sync.comm_started)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for k in range(2):
        o = out[k]
        assert o["pending"] and o["b1"] == [6.0, 2.0] and o["b2"] == [2.0]  # (1+11)/2, (2+2)/2, (0+4)/2
        assert o["stop"] and o["synced"] == 1 and o["buckets"] == 2
        _, recs = read_events(tmp_path / f"events-w{k}.jsonl")
        c, s = recs
        assert (c["kind"], s["kind"], s["reason"]) == ("compute", "stall", "gate")
        assert c["duration_s"] >= 0.05 and c["sleep_s"] > 0  # paced to compute_s
        assert abs(c["t_s"] + c["duration_s"] - s["t_s"]) < 1e-9
    assert asked == {0: 1, 1: 0}


@pytest.mark.parametrize("args, needle", [
    (["--rate-mbit", "10"], "cannot be shaped"),
    (["-c", "outdoors"], "cannot be shaped"),
    (["-c", "none", "--threshold", "4"], "DDP is synchronous"),
])
def test_refuses_what_it_cannot_honour(tmp_path, args, needle):
    a = cli.parse_args(["--testbed", "loopback", "--library", "DDP", "--workers", "2", "--iterations", "1",
                        "--result-dir", str(tmp_path), "--cache-dir", str(CACHE), *args])
    with pytest.raises(runcfg.ConfigError) as e:
        runcfg.resolve_config(a)  # before any run folder exists
    assert needle in str(e.value), str(e.value)
    assert not any(tmp_path.iterdir())  # nothing written


def test_check_config_names_the_fix(run_config):
    base = run_config(["--library", "DDP"]).replace(fallback_reason="not root (euid 1000)")
    check_ddp_config(base)  # unshaped loopback runs
    check_ddp_config(base.replace(testbed="emulated", rate_mbit=10.0))  # tc shapes the emulated links
    with pytest.raises(DDPConfigError, match="not root.*Run as root.*-c none"):
        check_ddp_config(base.replace(trace={"path": "x"}))


def test_netpath_route_and_interface():
    assert route_argv("10.213.0.0/16", "10.213.3.1", "rgdv3w") == [
        "ip", "route", "replace", "10.213.0.0/16", "via", "10.213.3.1", "dev", "rgdv3w"]
    with pytest.raises(ValueError):
        route_argv("10.213.0.0/16", "not-an-address", "x")
    assert interface_for("127.0.0.1") == "lo"


@pytest.mark.slow  # the emulated testbed: namespaces, tc, four processes importing torch (~1 min)
def test_emulated_ring_crosses_the_shaped_links(tmp_path):
    """Workers reach each other only through the PS namespace (forwarding + routes), so every all-reduce
    must push S bytes (N = 2: the ring sends 2(N-1)/N x S = S per worker) through a 20 Mbit/s tbf:
    no iteration's communication can be shorter than that (a physical lower bound, not a timing guess)."""
    from rog.testbed.netns import have_root_netns

    if not have_root_netns():
        pytest.skip("needs root and ip netns (the emulated testbed)")
    rate_mbit = 20.0
    try:
        p = _run(["--testbed", "emulated", "-c", "none", "--rate-mbit", str(rate_mbit), "--library", "DDP",
                  "--workers", "2", "--iterations", "4", "--result-dir", str(tmp_path), "--cache-dir", str(CACHE),
                  "--no-progress"], timeout_s=600)
    except subprocess.TimeoutExpired as e:  # the workers' stage limits should have ended it long before
        pytest.fail(f"the run did not end within 600 s; stdout: {(e.stdout or b'')[-1000:]!r}{_run_logs(tmp_path)}")
    assert p.returncode == 0, p.stderr[-3000:] + p.stdout[-1000:] + _run_logs(tmp_path)
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["status"] == "done" and summary["testbed"] == "emulated" and "leftovers" not in summary
    run_dir = Path(summary["run_dir"])
    for k in range(2):
        _, recs = read_events(run_dir / f"events-w{k}.jsonl")
        pulls = [r for r in recs if r["kind"] == "pull"]
        assert [r["iteration"] for r in pulls] == [1, 2, 3, 4]
        S = pulls[0]["bytes"]
        floor_s = (S - 64 * 1024) * 8 / (rate_mbit * 1e6)  # minus a generous allowance for the tbf bucket
        assert all(r["duration_s"] >= floor_s for r in pulls), ([r["duration_s"] for r in pulls], floor_s)
