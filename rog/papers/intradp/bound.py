"""What the cost model expects on a replayed trace: every planner's best plan at the trace's true rate.

For one trace run (``records.jsonl`` and the robot's ``config-robot.json`` with the profile), each
frame's rate at its start (the oracle rate the robot recorded) is given to every planner's choice at
that exact rate (no estimate, no rounding to a level), and the modelled latencies are averaged over
the frames.  Intra-DP's modelled reduction against the best layer partition is then what the method
gains on that trace with that profile if the rate at a frame's start held for its inference; the
measured reduction differs by the estimate's lag, the rounding to a level and the rate changing
during an inference (which can hurt either side).
Cached in ``oracle_bound.json`` next to the records.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["oracle_bound"]

LAYER = ("layer-latency", "layer-energy-deadline")


def oracle_bound(run_dir: str | Path, planner: str = "intra-dp") -> dict | None:
    """``{"model_latency_s": {planner: mean}, "reduction_pct": ...}`` over ``planner``'s frames, or None
    when the run has no records or profile."""
    run_dir = Path(run_dir)
    cache = run_dir / "oracle_bound.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    rec_p, cfg_p = run_dir / "records.jsonl", run_dir / "config-robot.json"
    if not rec_p.is_file() or not cfg_p.is_file():
        return None
    rates = [json.loads(x).get("oracle_mbit") for x in rec_p.read_text().splitlines() if x.strip()
             and json.loads(x).get("planner") == planner]
    rates = [r for r in rates if r is not None]
    if not rates:
        return None
    from rog.inference.costmodel import DeviceTimes
    from rog.inference.graph import capture
    from rog.inference.live_config import LiveConfig
    from rog.inference.models import INPUT_SHAPE, build_model
    from rog.inference.planners import PLANNERS, Candidates, choose

    cfg = LiveConfig.from_dict(json.loads(cfg_p.read_text()), source=str(cfg_p))
    times = DeviceTimes.from_dict(cfg.times)
    graph = capture(build_model(cfg.model, cfg.seed), INPUT_SHAPE)
    cands = Candidates(graph)
    lat = {}
    for p in PLANNERS:
        memo: dict[float, float] = {}
        for r in rates:
            if r not in memo:
                memo[r] = choose(p, cands, times, max(r, 1e-3))[1].latency_s
        lat[p] = sum(memo[r] for r in rates) / len(rates)
    best = min(LAYER, key=lambda k: lat[k])
    out = {"frames": len(rates), "model_latency_s": lat, "best_layer": best,
           "reduction_pct": 100.0 * (1.0 - lat[planner] / lat[best])}
    cache.write_text(json.dumps(out, indent=1) + "\n")
    return out
