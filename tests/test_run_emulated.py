"""scripts/run.py on the emulated testbed (namespaces + tc replay), and the pieces it is built from.

Without root: the bandwidth-tracking check, the regime arithmetic, trace choice, the fallback's
trace-following rate and planned replay logs (all against hand-computed values).  As root: short
real runs (2 workers, 10 iterations: BSP and ROG inside namespaces, and the loopback fallback's
trace shaping), checking the result folder and that nothing with the run's prefix is left, also
after a worker is killed mid-run and after the launcher gets SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rog.experiment import traceplan as TP
from rog.experiment.emulated import LOCK_DIR, ScheduleRate, leftovers, reap_stale_runs, write_planned_log
from rog.experiment.tracking import (bandwidth_tracking, correlations, read_replay_log, replay_log_name,
                                     transfer_time_s)
from rog.runtime import EventLog, read_events
from rog.testbed.netns import list_netns, root_netns_status
from rog.testbed.replay import Schedule
from rog.traces import Trace

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "scripts" / "run.py"
CACHE = ROOT / "result" / ".cache"
ROOT_OK, WHY = root_netns_status()
needs_root = pytest.mark.skipif(not ROOT_OK, reason=f"needs root and working 'ip netns' ({WHY}); CI runs as root")


# ----------------------------------------------------------------------------- tracking check
def test_transfer_time_is_the_exact_integral():
    t, r = [0.0, 1.0, 3.0], [8.0, 1.0, 0.0]  # 8 Mbit/s, then 1, then an outage (floored at 0.01)
    got = transfer_time_s(t, r, [0.0, 0.9, 0.5, 2.5, -0.1, 3.0], [1.0, 1.0, 8.0, 1.0, 1.0, 0.01])
    # 1/8; 0.1 s at 8 (0.8 Mbit) + 0.2 s at 1; 0.5 s at 8 (4) + 2 s at 1 (2) + 2 Mbit at 0.01;
    # 0.5 s at 1 + 0.5 Mbit at 0.01; before the first change: unknown; 0.01 Mbit at 0.01 Mbit/s
    want = [0.125, 0.3, 0.5 + 2.0 + 200.0, 0.5 + 50.0, np.nan, 1.0]
    np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)


def test_correlations_by_hand():
    c = correlations([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 9.0])
    m, i = np.array([1, 2, 3, 4.0]), np.array([2, 4, 6, 9.0])
    pearson = np.sum((m - m.mean()) * (i - i.mean())) / np.sqrt(np.sum((m - m.mean()) ** 2) * np.sum((i - i.mean()) ** 2))
    assert c["n"] == 4 and c["pearson"] == pytest.approx(pearson) and c["spearman"] == pytest.approx(1.0)
    assert c["median_ratio"] == pytest.approx(np.median(m / i))  # (0.5 + 0.5) / 2 = 0.5
    # ties share their mean rank: ranks (1, 2.5, 2.5, 4) vs (4, 3, 2, 1) -> rho = -0.9486832981
    assert correlations([1, 2, 2, 3], [4, 3, 2, 1])["spearman"] == pytest.approx(-0.9486832980505138)
    assert correlations([1, 1, 1], [1, 2, 3])["pearson"] is None  # constant: undefined, not 0


def _write_events(path: Path, rank: str, records: list[dict], origin: float) -> None:
    with EventLog(path, rank, "t", origin) as ev:
        for rec in records:
            ev.write(rec.pop("kind"), rec.pop("t_s"), **rec)


def _push(it: int, t_s: float, dur: float, nbytes: int, cut: bool = False) -> dict:
    return dict(kind="push", t_s=t_s, iteration=it, rows_planned=10, rows_delivered=10 if nbytes else 0, bytes=nbytes,
                deadline_s=None, delivered_share=1.0 if nbytes else 0.0, duration_s=dur, mandatory_s=None, cut=cut)


def test_bandwidth_tracking_on_a_synthetic_run(tmp_path):
    # worker 0's uplink: 8 Mbit/s from t=1, 2 Mbit/s from t=3, 4 Mbit/s from t=5 (event clock)
    (tmp_path / replay_log_name(0, "up")).write_text("t_s,wall_time,rate_mbit\n1,101,8\n3,103,2\n5,105,4\n")
    bits = 0.5e6 / 8  # 0.5 Mbit with wire_factor 1
    pushes = [_push(1, 1.0, 0.07, int(bits)), _push(2, 3.5, 0.3, int(bits)), _push(3, 4.9, 0.2, int(bits)),
              _push(4, 6.0, 0.25, int(bits)),
              _push(5, 0.5, 9.0, int(bits)),  # before the first replayed rate: left out
              _push(6, 7.0, 5.0, int(bits), cut=True),  # cut by a deadline: left out
              _push(7, 8.0, 0.01, 0)]  # nothing delivered: left out
    _write_events(tmp_path / "events-w0.jsonl", "w0", pushes, origin=time.monotonic())
    res = bandwidth_tracking(tmp_path, "up", wire_factor=1.0)
    # ideal: 0.5/8; 0.5/2; 0.1 s at 2 (0.2 Mbit) + 0.3/4; 0.5/4
    ideal = np.array([0.0625, 0.25, 0.1 + 0.075, 0.125])
    measured = np.array([0.07, 0.3, 0.2, 0.25])
    assert res.n == 4
    assert res.pearson == pytest.approx(np.corrcoef(measured, ideal)[0, 1])
    assert res.spearman == pytest.approx(0.8)  # ranks (1,4,2,3) vs (1,4,3,2): 1 - 6 * 2 / (4 * 15)
    assert res.median_ratio == pytest.approx(np.median(measured / ideal))
    assert res.excluded == {"cut by a deadline": 1, "nothing delivered": 1, "started before the first replayed rate": 1}
    assert res.mean_ideal_s == pytest.approx(ideal.mean())


def test_replay_log_reader_names_the_line(tmp_path):
    p = tmp_path / "replay-w0-up.csv"
    p.write_text("t_s,wall_time,rate_mbit\n1,2,3\nx,2,3\n")
    with pytest.raises(ValueError, match=r"replay-w0-up.csv:3"):
        read_replay_log(p)
    p.write_text("t,rate\n")
    with pytest.raises(ValueError, match=r":1: expected the header"):
        read_replay_log(p)


# ----------------------------------------------------------------------------- regime and traces
def test_regime_scales_by_hand():
    tr = Trace([0.0, 1.0], [10.0, 30.0], hold_after_s=1.0)  # mean 20 Mbit/s, sample interval 1 s
    reg = TP.regime(trace=tr, compute_s=0.56, payload_bytes=10_000, wire_factor=1.0, ratio=0.5)
    assert reg["time_scale"] == pytest.approx(0.5)  # 0.56 / 1.12
    # 0.08 Mbit must take 0.5 * 0.56 = 0.28 s at the mean: mean 0.2857 Mbit/s = 20 * scale
    assert reg["rate_scale"] == pytest.approx(0.08 / 0.28 / 20)
    assert reg["transfer_over_compute"] == pytest.approx(0.5)
    assert reg["sample_interval_s"] == pytest.approx(0.5) and reg["sample_over_compute"] == pytest.approx(0.5 / 0.56, abs=1e-4)
    user = TP.regime(trace=tr, compute_s=0.56, payload_bytes=10_000, wire_factor=1.0, time_scale=2.0, rate_scale=0.1)
    assert user["time_scale"] == 2.0 and user["rate_scale"] == 0.1 and user["rate_scale_source"] == "user"
    assert user["transfer_over_compute"] == pytest.approx(0.08 / 2.0 / 0.56, abs=1e-4)
    flat = TP.regime(trace=None, compute_s=None, payload_bytes=0, wire_factor=1.0)
    assert flat["time_scale"] == 1.0 and flat["rate_scale"] == 1.0
    assert TP.PAPER["transfer_over_compute"] == pytest.approx(2.09 * 8 * 1.048576 / 50 / 1.12)


def test_default_trace_order_and_offsets(tmp_path):
    repo = tmp_path / "repo"
    (repo / "configs" / "traces").mkdir(parents=True)
    synth = repo / "configs" / "traces" / "indoors-synth.csv"
    synth.write_text("t_s,mbps\n0,1\n1,2\n")
    data = tmp_path / "data"
    assert TP.default_trace("indoors", repo, data) == (synth.resolve(), "synthetic")
    (data / "bw_records").mkdir(parents=True)
    rec = data / "bw_records" / "indoors.txt"
    rec.write_text("0 1\n1 2\n")
    assert TP.default_trace("indoors", repo, data) == (rec.resolve(), "record")
    with pytest.raises(ValueError, match="--trace FILE"):
        TP.default_trace("outdoors", repo, tmp_path / "nodata")
    assert TP.parse_offsets(None, 4, 100.0) == [0.0, 25.0, 50.0, 75.0]
    assert TP.parse_offsets("0, 10,20", 3, 100.0) == [0.0, 10.0, 20.0]
    for bad in ("1,2", "a,b,c", "-1,0,0"):
        with pytest.raises(ValueError, match="--worker-offsets"):
            TP.parse_offsets(bad, 3, 100.0)


def test_fallback_rate_and_planned_log(tmp_path):
    sched = Schedule(((0.0, 5.0), (1.0, 0.0), (2.0, 7.0)), end_s=float("inf"), period_s=3.0)
    rate = ScheduleRate(sched, start_monotonic_s=100.0)
    assert [rate.at(t) for t in (0.0, 0.99, 1.0, 2.5, 3.2, 4.5)] == [5.0, 5.0, 0.01, 7.0, 5.0, 0.01]
    n = write_planned_log(tmp_path / "replay-w1-up.csv", sched, 10.0, 16.5, 1000.0)
    t, r = read_replay_log(tmp_path / "replay-w1-up.csv")
    np.testing.assert_allclose(t, [10, 11, 12, 13, 14, 15, 16])
    np.testing.assert_allclose(r, [5, 0, 7, 5, 0, 7, 5])
    assert n == 7
    rows = (tmp_path / "replay-w1-up.csv").read_text().splitlines()
    assert rows[1] == "10.000000,1010.000000,5.000000"


# ----------------------------------------------------------------------------- real runs (root)
def _start(args, result_dir: Path):
    env = dict(os.environ)
    env.pop("ROG_SECRET", None)
    cmd = [sys.executable, str(RUN), "--result-dir", str(result_dir), "--cache-dir", str(CACHE), "--no-progress", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))


@pytest.fixture(scope="module")
def warm_cache():
    from rog.workloads import QuickWorkload

    QuickWorkload(seed=0, n_workers=2, cache_dir=CACHE).pretrained_state()
    return CACHE


def _wait_training(run_dir: Path, proc, timeout_s: float = 180.0) -> None:
    end = time.monotonic() + timeout_s
    ev = run_dir / "events-w0.jsonl"
    while not (ev.exists() and '"push"' in ev.read_text()):
        assert proc.poll() is None and time.monotonic() < end, "the run never started training"
        time.sleep(0.1)


def _prefix_left(prefix: str) -> list[str]:
    return leftovers(prefix) + [n for n in list_netns() if n.startswith(prefix)]


def _check_replay_on_event_clock(run_dir: Path, k: int, direction: str) -> None:
    header, recs = read_events(run_dir / f"events-w{k}.jsonl")
    t, r = read_replay_log(run_dir / replay_log_name(k, direction))
    assert t.size >= 2 and np.all(r >= 0)
    transfers = [x for x in recs if x["kind"] == ("push" if direction == "up" else "pull")]
    assert t[0] <= transfers[0]["t_s"]  # the replay ran before the first transfer, on the same clock
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["replay_start_t_s"] <= t[0] + 1e-6  # the replay started when the workers were ready (log: 6 decimals)
    assert t[-1] <= man["end"]["unix_s"] - header["origin_unix_s"]  # and stopped before the launcher finished
    wall = np.loadtxt(run_dir / replay_log_name(k, direction), delimiter=",", skiprows=1, ndmin=2)[:, 1]
    np.testing.assert_allclose(wall - t, header["origin_unix_s"], atol=0.05)  # both clocks say the same moment


BASE = ["--workers", "2", "--iterations", "10", "--eval-every", "5", "-c", "outdoors"]


@needs_root
def test_emulated_run_of_rog(tmp_path, warm_cache):
    """ROG started locally inside the namespaces (the default tier's emulated end-to-end run)."""
    procs = {"ROG": _start(["--testbed", "emulated", "--library", "ROG", "--launcher", "local", *BASE, "-n", "t"],
                           tmp_path)}
    _check_runs(procs, {"ROG": tmp_path / "ROG4-outdoors-recorded-b1-w2-seed0-t"})


# BSP through the default launcher (Fabric over one sshd per namespace) is test_run_fabric_emulated.py's complete run
# (slow); tests/test_deploy_fabric.py runs commands in every namespace in the default tier


@pytest.mark.slow
def test_loopback_follows_the_same_traces(tmp_path, warm_cache):
    """The fallback without root: loopback, token buckets following the per-worker schedules."""
    procs = {"loopback": _start(["--testbed", "loopback", "--library", "BSP", *BASE, "-n", "lo"], tmp_path)}
    _check_runs(procs, {"loopback": tmp_path / "BSP-outdoors-recorded-b1-w2-seed0-lo"})


def _check_runs(procs: dict, dirs: dict) -> None:
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"{name}: {err[-3000:]}"
        summary = json.loads(out.strip().splitlines()[-1])
        run_dir = dirs[name]
        assert (run_dir / "DONE").exists() and summary["status"] == "done" and summary["iterations"] == 10
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        for key in ("control", "replay_mode", "item", "trace", "time_scale", "rate_scale", "worker_offsets_s", "shape",
                    "profile", "cap_mbit", "testbed", "regime"):
            assert key in cfg, key
        assert cfg["control"] == "outdoors" and cfg["replay_mode"] == "recorded" and cfg["shape"] == "both"
        assert cfg["trace"]["sha256"] == TP.sha256_file(cfg["trace"]["path"])
        assert cfg["regime"]["transfer_over_compute"] == pytest.approx(0.3, rel=1e-3)
        assert cfg["testbed"] == ("loopback" if name == "loopback" else "emulated")
        for k in range(2):
            for d in ("up", "down"):
                _check_replay_on_event_clock(run_dir, k, d)
        energy = json.loads((run_dir / "energy.json").read_text())
        assert set(energy["devices"]) == {"ps", "w0", "w1"}
        for rank, dev in energy["devices"].items():
            assert "error" not in dev, dev
            assert dev["is_model"] and dev["source"] == ("model:laptop" if rank == "ps" else "model:quick-cpu")
            state = dev["state_s"]
            watts = dev["watts"]
            assert dev["energy_j"] == pytest.approx(sum(state[s] * watts[s] for s in state), rel=1e-9)
            assert sum(state.values()) == pytest.approx(dev["interval_s"], rel=1e-9)
            profile_name = dev["source"].split(":", 1)[1]
            assert dev["note"].startswith(f"state-based model, not a measurement: seconds per state x {profile_name} watts")
        assert "Labelled model:<profile>: a model, not a measurement." in energy["note"]
        man = json.loads((run_dir / "manifest.json").read_text())
        assert man["exit_status"]["status"] == "done" and man["traces"][0]["sha256"] == cfg["trace"]["sha256"]
        assert man["code"].get("commit") or man["code"].get("error")
        assert "--library" in man["command"] and man["testbed"] == cfg["testbed"]
        assert_tracking_accounts_for_every_transfer(run_dir, workers=2)
        if name != "loopback":
            prefix = cfg["emulated"]["prefix"]
            assert man["hosts"]["w1"]["netns"] == f"{prefix}w2" and man["hosts"]["w1"]["ps_address"] == "10.213.2.1"
            assert man["leftovers_after_cleanup"] == [] and _prefix_left(prefix) == []
            assert not (LOCK_DIR / prefix).exists()


def assert_tracking_accounts_for_every_transfer(run_dir: Path, workers: int) -> None:
    """tracking.json compares every push and pull of the event logs, or names why it left one out; a direction
    may have no compared transfer only when ROG's deadline cut every one (on a loaded machine its budget can be
    0: the mandatory rows only), which the events say independently."""
    tracking = json.loads((run_dir / "tracking.json").read_text())
    for direction, kind in (("up", "push"), ("down", "pull")):
        recs = [r for k in range(workers) for r in read_events(run_dir / f"events-w{k}.jsonl")[1] if r["kind"] == kind]
        t = tracking[direction]
        assert recs and t["n"] + sum(t["excluded"].values()) == len(recs), (direction, t, len(recs))
        assert t["excluded"]["cut by a deadline"] == sum(bool(r.get("cut")) for r in recs)
        assert t["n"] > 0 or all(r.get("cut") for r in recs), (direction, t)


def _cmdline_has(pid: int, text: str) -> bool:
    try:
        return text in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


@pytest.mark.slow  # two emulated runs of its own (about 30 s of a loaded machine); the default tier keeps the
# finished emulated runs above, the slow tier's signal scenarios interrupt emulated runs too (tests/test_signals.py)
@needs_root
def test_killed_worker_and_sigterm_leave_nothing_behind(tmp_path, warm_cache):
    args = ["--testbed", "emulated", "--library", "BSP", "--workers", "2", "--iterations", "100000", "-c", "outdoors"]
    victim = _start([*args, "--launcher", "local", "-n", "kill"], tmp_path)  # a worker started inside its namespace
    termed = _start([*args, "-n", "term"], tmp_path)  # the default launcher (Fabric where sshd exists)
    try:
        vdir, tdir = tmp_path / "BSP-outdoors-recorded-b1-w2-seed0-kill", tmp_path / "BSP-outdoors-recorded-b1-w2-seed0-term"
        _wait_training(vdir, victim)
        _wait_training(tdir, termed)
        vprefix = yaml.safe_load((vdir / "config.yaml").read_text())["emulated"]["prefix"]
        tprefix = yaml.safe_load((tdir / "config.yaml").read_text())["emulated"]["prefix"]
        pids = subprocess.run(["ip", "netns", "pids", f"{vprefix}w2"], capture_output=True, text=True).stdout.split()
        # the namespace also sees short-lived tc calls of the trace replay: kill the worker process only
        workers = [int(p) for p in pids if _cmdline_has(int(p), "--child")]
        assert workers, f"worker 1 is not running inside its namespace (pids {pids})"
        for pid in workers:
            os.kill(pid, signal.SIGKILL)  # worker 1 dies mid-run
        termed.send_signal(signal.SIGTERM)
        for proc, run_dir, prefix, why in ((victim, vdir, vprefix, "exited with code"), (termed, tdir, tprefix, "SIGTERM")):
            try:  # a bound on a loaded machine, not a speed check: the teardown steps are timed in deploy.log
                out, err = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                log = run_dir / "deploy.log"
                pytest.fail(f"{run_dir.name} still running 300 s after its signal; "
                            f"deploy.log: {log.read_text()[-3000:] if log.exists() else '(none)'}")
            assert proc.returncode == 1, err[-2000:]
            assert why in (run_dir / "INCOMPLETE").read_text() and not (run_dir / "DONE").exists()
            summary = json.loads(out.strip().splitlines()[-1])
            assert summary["status"] == "incomplete" and "leftovers" not in summary
            assert _prefix_left(prefix) == []
            man = json.loads((run_dir / "manifest.json").read_text())
            assert man["exit_status"]["status"] == "incomplete" and man["leftovers_after_cleanup"] == []
    finally:  # a failed assertion must not leave the runs (and their namespaces) behind
        for proc in (victim, termed):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # run.py removes its testbed on SIGTERM
                try:
                    proc.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()


def test_per_worker_shaping_gives_each_connection_its_schedule():
    from rog.experiment.emulated import PerWorkerShaping
    from rog.transport.ratelimit import RealClock

    class Conn:
        def __init__(self, w):
            self.worker_id, self.clock, self.limiter = w, RealClock(), None

    class Listener:
        refused = [("x", "why")]
        address = ("127.0.0.1", 1)

        def __init__(self):
            self.queue = [Conn(1), Conn(0), Conn(2)]

        def accept(self, timeout_s=None):
            return self.queue.pop(0)

    rates = {0: lambda t: 3.0, 1: lambda t: 5.0}
    wrap = PerWorkerShaping(Listener(), rates, burst_bytes=2048)
    c1, c0, c2 = wrap.accept(), wrap.accept(), wrap.accept()
    assert c1.limiter.rate_fn(0.0) == 5.0 and c0.limiter.rate_fn(0.0) == 3.0 and c2.limiter is None
    assert c1.limiter.burst_bytes == 2048 and wrap.refused == [("x", "why")]


@pytest.mark.bench  # a wall-clock accuracy figure (correlations of push times with the replayed rate), which a loaded
# machine moves: run on a quiet one (bash scripts/test.sh -m bench); the tiers keep the tracking's accounting of every
# transfer (assert_tracking_accounts_for_every_transfer on the emulated and Fabric runs)
@needs_root
def test_acceptance_bsp_tracks_the_replayed_bandwidth(tmp_path, warm_cache):
    """An acceptance run: 4 workers, 50 iterations, BSP: push time follows the replayed uplink."""
    proc = _start(["--testbed", "emulated", "--library", "BSP", "-c", "outdoors", "--iterations", "50"], tmp_path)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    run_dir = Path(json.loads(out.strip().splitlines()[-1])["run_dir"])
    res = bandwidth_tracking(run_dir, "up")
    assert res.n == 200 and res.spearman > 0.5 and res.pearson > 0.5


@needs_root
def test_a_dead_runs_testbed_is_reaped(tmp_path):
    prefix = "rgdead00"
    subprocess.run(["ip", "netns", "add", f"{prefix}w1"], check=True)
    try:
        dead = subprocess.Popen(["true"])
        dead.wait()
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        (LOCK_DIR / prefix).write_text(json.dumps({"pid": dead.pid}))
        removed = reap_stale_runs()
        assert f"netns {prefix}w1" in removed and not (LOCK_DIR / prefix).exists()
        assert _prefix_left(prefix) == []
    finally:
        subprocess.run(["ip", "netns", "del", f"{prefix}w1"], capture_output=True)
        (LOCK_DIR / prefix).unlink(missing_ok=True)
