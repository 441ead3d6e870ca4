"""Benchmark tc trace replay on the emulated testbed: does a bulk TCP transfer follow the trace?

Creates a 1-worker testbed, replays the first --seconds (120) of the default outdoor trace (the
record utils/download_data.sh fetches, else configs/traces/outdoors-synth.csv; or --trace FILE in any
format rog.traces reads: a Mahimahi file is replayed as its binned rate series) on the
worker's uplink in real time (--time-scale 1: no compression; with another scale the per-sample
rates are unchanged, only their durations), while one Python process in the worker namespace
sends TCP as fast as it can to one in the PS namespace, which timestamps every recv.

Then it steps the rate 50 -> 5 -> 50 Mbit/s --steps times (1.5 s per level) and measures the
change latency: from just before the `tc qdisc change` to the moment the receiver's throughput,
over a 20 ms window centred on that moment, crosses the midpoint (27.5 Mbit/s).

The last line is JSON:
  corr               Pearson correlation of requested (trace integral) and measured payload Mbit
                     per second of the replay
  goodput_over_rate  measured payload bytes / the trace's integral over the replay interval
                     (TCP/IP/Ethernet headers are 66 of every 1514 bytes the shaper counts, so
                     0.956 is the ceiling; wire_over_rate adds them back)
  change_latency_s   median over the downward steps (rate 50 -> 5); change_latency_up_s is the
                     same for 5 -> 50, where TCP must also grow its window
Goals: corr >= 0.95, goodput_over_rate >= 0.90, change_latency_s <= 0.05.  Needs root.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rog.testbed.netns import (Testbed, payload_per_frame, probe_argv, root_netns_status, start_probe,
                               wait_ready)
from rog.testbed.replay import ReplayOptions, build_schedule

PORT = 5201
HIGH_MBIT, LOW_MBIT, LEVEL_S, WINDOW_S = 50.0, 5.0, 1.5, 0.020


def pick_trace(seconds: float, path: str | None = None, fmt: str | None = None):
    """The first ``seconds`` of ``path`` (read as ``fmt``; default the outdoor trace, recorded or synthetic)
    and its source label."""
    from rog.experiment.traceplan import default_trace
    from rog.traces import load_trace

    if path is not None:
        trace = load_trace(path, fmt=fmt)
        return trace.window(0.0, min(seconds, trace.duration_s)), f"user ({fmt or 'auto'}): {path}"
    path, kind = default_trace("outdoors")
    return load_trace(path).window(0.0, seconds), f"{kind}: {path}"


def centred_rate_mbit(t: np.ndarray, n: np.ndarray, at: np.ndarray, width_s: float) -> np.ndarray:
    """Payload Mbit/s over [at - w/2, at + w/2) from recv timestamps ``t`` and sizes ``n``."""
    cum = np.concatenate([[0], np.cumsum(n)])
    lo = np.searchsorted(t, at - width_s / 2)
    hi = np.searchsorted(t, at + width_s / 2)
    return (cum[hi] - cum[lo]) * 8 / 1e6 / width_s


def crossing_latency(t, n, t_cmd: float, level_s: float, threshold: float, downward: bool) -> float:
    """Seconds from ``t_cmd`` until the centred-window rate crosses ``threshold`` (NaN if never)."""
    grid = t_cmd + np.arange(0.0, level_s, 0.001)
    r = centred_rate_mbit(t, n, grid, WINDOW_S)
    hit = np.flatnonzero(r < threshold if downward else r > threshold)
    return float(grid[hit[0]] - t_cmd) if hit.size else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0, help="trace seconds to replay")
    ap.add_argument("--trace", default=None, help="trace file to replay (default: the outdoor trace)")
    ap.add_argument("--trace-format", default=None, help="auto (default), csv, record, mahimahi[:BIN_S] or iperf3")
    ap.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per trace second")
    ap.add_argument("--steps", type=int, default=6, help="50 -> 5 -> 50 Mbit/s step cycles")
    ap.add_argument("--prefix", default="rogbench")
    ap.add_argument("--cc", default=None,
                    help="TCP congestion control of the sender (default: the testbed's, cubic)")
    ap.add_argument("--log", default=None, help="keep the replay log here (default: a temp dir)")
    ap.add_argument("--dump", default=None, help="write per-second requested/measured Mbit here (JSON)")
    a = ap.parse_args(argv)
    ok, why = root_netns_status()
    if not ok:
        print(f"bench_replay: needs root and network namespaces: {why}", file=sys.stderr)
        return 1
    try:
        trace, source = pick_trace(a.seconds, a.trace, a.trace_format)
    except (OSError, ValueError) as e:
        print(f"bench_replay: error: --trace: {e}", file=sys.stderr)
        return 2
    schedule = build_schedule(trace, ReplayOptions(time_scale=a.time_scale))
    replay_s = schedule.end_s
    tmp = Path(tempfile.mkdtemp(prefix="rog-bench-"))
    log_path = Path(a.log) if a.log else tmp / "replay.csv"
    rx_path = tmp / "rx.npz"
    steps_s = a.steps * 2 * LEVEL_S
    with Testbed(n_workers=1, prefix=a.prefix) as tb:
        ps = tb.ps_address(1)
        tb.set_rate(1, "up", schedule.changes[0][1])
        rx = start_probe(tb, "ps", "bulk-recv", "--host", ps, "--port", str(PORT), "--out", str(rx_path),
                         "--timeout-s", "30")
        wait_ready(rx)
        send_s = 1.0 + replay_s + steps_s + 0.5
        cc = ["--cc", a.cc] if a.cc else []
        tx = subprocess.Popen(tb.exec_argv(tb.netns_of(1), probe_argv(
            "bulk-send", "--host", ps, "--port", str(PORT), "--duration-s", f"{send_s:.3f}", *cc)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # connection up and TCP out of slow start before the replay starts
        print(f"bench_replay: replaying {replay_s:.0f} s of {source} (time scale {a.time_scale:g})",
              file=sys.stderr, flush=True)
        h = tb.start_replay(1, "up", schedule, log_path)
        h.thread.join()
        if h.error:
            raise h.error
        t0 = h.replayer.stats.start_monotonic
        cmds = []  # (monotonic just before tc, downward?)
        for _ in range(a.steps):
            for rate, down in ((HIGH_MBIT, False), (LOW_MBIT, True)):
                tc_t = time.monotonic()
                tb.set_rate(1, "up", rate)
                cmds.append((tc_t, down))
                time.sleep(LEVEL_S)
        out, err = tx.communicate(timeout=send_s + 30)
        rx.wait(timeout=30)
        if tx.returncode != 0 or rx.returncode != 0:
            print(f"bench_replay: transfer failed: {err.strip()} {rx.stderr.read().strip()}", file=sys.stderr)
            if rx_path.is_file():
                d = np.load(rx_path)
                gaps = np.diff(d["t"])
                k = np.argsort(gaps)[-3:]
                t0 = h.replayer.stats.start_monotonic
                print(f"bench_replay: longest receive gaps (s after replay start, length s): "
                      f"{[(round(float(d['t'][i] - t0), 3), round(float(gaps[i]), 3)) for i in k]}", file=sys.stderr)
            return 1
        sent = json.loads(out.strip().splitlines()[-1])
        mss = sent["mss"]
    d = np.load(rx_path)
    t, n = d["t"], d["n"]

    secs = int(np.floor(replay_s))
    edges = t0 + np.arange(secs + 1, dtype=np.float64)
    cum = np.concatenate([[0], np.cumsum(n)])
    got_mbit = np.diff(cum[np.searchsorted(t, edges)]) * 8 / 1e6
    want_mbit = np.array([schedule_integral(schedule, k, k + 1) for k in range(secs)])
    corr = float(np.corrcoef(want_mbit, got_mbit)[0, 1])
    goodput_over_rate = float(got_mbit.sum() / want_mbit.sum())
    # the first cycle's up step starts from the trace's last rate, not from LOW: skip it
    down = [crossing_latency(t, n, c, LEVEL_S, (HIGH_MBIT + LOW_MBIT) / 2, True) for c, dn in cmds if dn]
    up = [crossing_latency(t, n, c, LEVEL_S, (HIGH_MBIT + LOW_MBIT) / 2, False) for c, dn in cmds[2:] if not dn]
    result = {
        "corr": round(corr, 5),
        "goodput_over_rate": round(goodput_over_rate, 4),
        "wire_over_rate": round(goodput_over_rate * payload_per_frame(mss), 4),
        "change_latency_s": round(float(np.nanmedian(down)), 4),
        "change_latency_down_all_s": [round(x, 4) for x in down],
        "change_latency_up_s": round(float(np.nanmedian(up)), 4) if up else None,
        "trace_source": source,
        "trace_seconds": a.seconds,
        "replay_wall_s": round(replay_s, 3),
        "time_scale": a.time_scale,
        "requested_mean_mbit": round(float(want_mbit.mean()), 3),
        "measured_mean_mbit": round(float(got_mbit.mean()), 3),
        "replay_changes_applied": h.replayer.stats.applied,
        "replay_changes_skipped": h.replayer.stats.skipped,
        "replay_max_late_ms": round(h.replayer.stats.max_late_s * 1e3, 2),
        "mss": mss,
        "tcp_cc": sent["cc"],
        "goals_met": bool(corr >= 0.95 and goodput_over_rate >= 0.90 and np.nanmedian(down) <= 0.05),
    }
    if a.dump:
        Path(a.dump).write_text(json.dumps({"requested_mbit": want_mbit.tolist(), "measured_mbit": got_mbit.tolist(),
                                            "rx": str(rx_path), "t0": t0}))
    print(json.dumps(result))
    return 0


def schedule_integral(schedule, t0_s: float, t1_s: float) -> float:
    """Megabits the schedule requests between wall seconds ``t0_s`` and ``t1_s`` (exact)."""
    pts = [(t, r) for t, r in schedule.iter_changes()]
    total = 0.0
    for i, (t, r) in enumerate(pts):
        end = pts[i + 1][0] if i + 1 < len(pts) else schedule.end_s
        lo, hi = max(t, t0_s), min(end, t1_s)
        if hi > lo:
            total += r * (hi - lo)
    return total
