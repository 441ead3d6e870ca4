"""Shaped links against real time (root and network namespaces): an 8 Mbit/s uplink of the emulated testbed
moving 3 MB in wire bytes / rate, and Intra-DP's live per-layer plans at 20 Mbit/s against the cost
model's timeline."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from rog.testbed.netns import Testbed, payload_per_frame, probe_argv, root_netns_status, start_probe, wait_ready

from .figures import figure, skipped, within

PREFIX = "r49b"  # the benchmark's namespaces (tests use their own prefixes)
LIVE_MBIT = 20.0  # the per-layer plans' link rate


def shaped_uplink(tb, rate_mbit: float = 8.0, payload: int = 3_000_000) -> dict:
    """Send ``payload`` bytes from worker 1 to the PS of the created testbed ``tb`` over its uplink shaped to
    ``rate_mbit``: the receiver's time from its first to its last recv, and wire bytes / rate for the bytes
    after the first recv (the shaper counts 1514-byte frames per MSS of payload)."""
    tb.set_rate(1, "up", rate_mbit)
    out_file = Path(f"/tmp/{tb.prefix}-rx.npz")
    rx = start_probe(tb, "ps", "bulk-recv", "--host", tb.ps_address(1), "--port", "7002", "--out", str(out_file))
    try:
        wait_ready(rx)
        tx = subprocess.run(tb.exec_argv(1, probe_argv("bulk-send", "--host", tb.ps_address(1), "--port", "7002",
                                                       "--bytes", str(payload))),
                            capture_output=True, text=True, timeout=60)
        if tx.returncode != 0:
            raise RuntimeError(f"bulk-send failed: {tx.stderr}")
        if rx.wait(timeout=30) != 0:
            raise RuntimeError("bulk-recv failed")
        info = json.loads(tx.stdout)
        d = np.load(out_file)
        t, n = d["t"], d["n"]
    finally:
        if rx.poll() is None:
            rx.kill()
        out_file.unlink(missing_ok=True)
    wire_bits = (payload - n[0]) * payload_per_frame(info["mss"]) * 8
    return dict(received=int(n.sum()), measured_s=float(t[-1] - t[0]), expected_s=wire_bits / (rate_mbit * 1e6))


def shaped_uplink_figures() -> list[dict]:
    """The 8 Mbit/s uplink's transfer time within 5 % of wire bytes / rate."""
    ok, why = root_netns_status()
    if not ok:
        return [skipped("netns.shaped_uplink_s", why)]
    tb = Testbed(n_workers=2, prefix=f"{PREFIX}{os.getpid() % 1000}")
    try:
        r = shaped_uplink(tb.create())
    finally:
        tb.destroy()
    return [figure("netns.shaped_uplink_s", r["measured_s"], r["expected_s"], 0.05, rel=True, rate_mbit=8.0)]


def live_plans_run(tmp) -> dict:
    """One Intra-DP session on a real netns link (the inference tests' run): one-segment plans at 40 Mbit/s,
    per-layer (LOSS) plans at 20 Mbit/s (each also streamed in 3 row bands), 2 inferences each."""
    from rog.experiment.emulated import leftovers
    from rog.inference import runner as R
    from rog.inference.costmodel import Plan, cut_plan, local_plan
    from rog.inference.loss import MultiPlan, stage_boundaries

    prep = R.prepare("resnet18", ["all"], [50], robot_factor=4.0, server_factor=2.0, repeats=3)
    plans = [local_plan(prep.graph), cut_plan(0), Plan(0, 4, 0.5, "server"), Plan(0, 4, 0.5, "robot")]
    sb = stage_boundaries(prep.graph)
    multi = [MultiPlan((sb[0], sb[1], sb[2]), (0.3, 0.7), "robot"),
             MultiPlan((sb[1], sb[2], sb[3]), (0.6, 0.4), "server")]
    multi += [MultiPlan(p.bounds, p.xs, p.merge, 3) for p in multi]  # the same plans sending rows as they finish
    with R.LiveSession(prep, tmp) as s:
        prefix = s.net.prefix
        for p in plans:
            s.run_fixed(p, 40.0, 2)
        for p in multi:
            s.run_fixed(p, LIVE_MBIT, 2)
        overhead_s = s.overhead_s
    return dict(prep=prep, recs=R.read_records(Path(tmp) / "records.jsonl"), reference=s.reference, prefix=prefix,
                left=leftovers(prefix), plans=plans, multi=multi, overhead_s=overhead_s)


def live_latency_ratios(run: dict) -> dict:
    """Each per-layer plan's measured latency over the cost model's timeline at the same rate, by plan label."""
    from rog.inference import runner as R

    out = {}
    for plan in run["multi"]:
        sim = R.predict(run["prep"], plan, LIVE_MBIT, run["overhead_s"])
        out[plan.label()] = [r["latency_s"] / sim.latency_s for r in run["recs"] if r["label"] == plan.label()]
    return out


def live_latency_figures() -> list[dict]:
    """Per-layer plans' latency within 0.8-2.5 x the cost model's timeline."""
    ok, why = root_netns_status()
    if not ok:
        return [skipped("inference.live_latency_ratio", why)]
    with tempfile.TemporaryDirectory() as tmp:
        ratios = live_latency_ratios(live_plans_run(tmp))
    return [within(f"inference.live_latency_ratio[{label}]", r, 0.8, 2.5) for label, r in ratios.items()]
