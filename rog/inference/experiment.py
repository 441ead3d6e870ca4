"""One inference experiment (``scripts/run_inference.py``, ``python -m rog.inference.experiment``): flags, checks,
and the modes.

* ``plan``: profile and print every planner's plan table (no testbed).
* ``sweep`` (Fig. 1): the link held at each of ``--rates``; every Fig. 1 cut point (layer
  partition "layer i", 0 = all-offload, L = local) run ``--n`` times; measured mean latency and
  energy next to the cost model's prediction at the same rate.
* ``trace`` (Table 6): the trace replayed from its start for each planner in turn, ``--duration-s``
  each; mean latency, energy, the components (robot compute, transfer, server compute) and their
  shares of the latency.
* ``control`` (the negative control): as ``trace`` on a constant rate chosen by
  :func:`rog.inference.control.control_rate_mbit` from this run's own plan tables (local fastest of the
  layer partitions by the cost model); reports how often Intra-DP chose local there.

Every result JSON states the emulation: robot and server factors, the real-time priority, the estimate mode.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rog.inference import MODEL_NAMES  # torch-free: the command's --help imports no torch
from rog.inference.planners import DEFAULT_GRID_MBIT, KNOWN_PLANNERS, PLANNERS, check_grid
from rog.paths import repo_root

__all__ = ["build_parser", "check_args", "run", "summarise_trace", "summarise_sweep", "output_check"]

ROOT = repo_root()


def _csv_floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()] if text.strip() else []


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="run_inference.py", description="Intra-DP inference on the emulated testbed")
    p.add_argument("mode", choices=("plan", "sweep", "trace", "control"),
                   help="plan tables only, Fig. 1 sweep, trace replay (Table 6), or the negative control (constant low rate)")
    p.add_argument("--model", default="vgg19", help=f"one of {', '.join(MODEL_NAMES)} (default vgg19)")
    p.add_argument("--planners", default=",".join(PLANNERS),
                   help="comma-separated planners (default: the five of Table 6; add intra-dp-loss for Intra-DP's "
                        "per-layer plans, LOSS, next to the one-segment intra-dp; intra-dp-de searches them by "
                        "differential evolution, a few seconds per level)")
    p.add_argument("--bandwidth-grid", default=",".join(f"{v:g}" for v in DEFAULT_GRID_MBIT),
                   help="plan-table bandwidth levels in Mbit/s, comma-separated (default 1..240)")
    p.add_argument("--trace", default=str(ROOT / "configs/traces/indoors-synth.csv"), help="trace file (trace mode)")
    p.add_argument("--duration-s", type=float, default=30.0, help="seconds of trace per planner (trace mode)")
    p.add_argument("--period-s", type=float, default=0.5,
                   help="trace mode: a frame every PERIOD seconds from the replay's start, the same instants for every "
                        "planner (0: back to back; default 0.5)")
    p.add_argument("--rates", default="20,50,100", help="fixed link rates in Mbit/s (sweep mode)")
    p.add_argument("--n", type=int, default=4, help="inferences per sweep point (sweep mode)")
    p.add_argument("--estimate", choices=("passive", "oracle"), default="passive",
                   help="bandwidth estimate: from the previous inference (passive) or the trace's current rate")
    p.add_argument("--robot-factor", type=float, default=None, help="robot compute = factor x profiled time (default 30)")
    p.add_argument("--server-factor", type=float, default=None, help="server compute = factor x profiled time (default 3)")
    p.add_argument("--split-costs", choices=("measured", "linear"), default="measured",
                   help="a partial unit's time: measured at row shares on the device that runs it (default) or the "
                        "whole unit's time x the share (linear, the ablation)")
    p.add_argument("--server-device", choices=("cpu", "cuda"), default="cpu",
                   help="the server half on this CPU paced to its profile (cpu, default) or on the GPU, profiled there "
                        "and unpaced (cuda; without CUDA: says so and uses the paced CPU server)")
    p.add_argument("--sweep-plans", default="cuts,splits",
                   help="sweep mode: which plans at each rate, comma list of cuts (the Fig. 1 layer cuts), splits "
                        "(Intra-DP's split and the same segment at held-out row shares) and loss (the fastest per-layer "
                        "plan and its boundaries at held-out shares), stream (the fastest plan sending rows in bands, "
                        "run in 1, 2 and 4 bands); default cuts,splits")
    p.add_argument("--times", default=None,
                   help="a profile written by python -m rog.inference.profiler --out FILE (same model): used instead of "
                        "profiling here (its factors and server device hold; not with --robot-factor/--server-factor)")
    p.add_argument("--out", default=None, help="output folder (default result/intradp/<mode>-<model>[-<trace>])")
    p.add_argument("--seed", type=int, default=0)
    return p


def main(argv=None) -> int:
    """``scripts/run_inference.py``: parse, check (a bad flag: one line, exit status 2), run one mode."""
    p = build_parser()
    a = p.parse_args(argv)
    try:
        check_args(a)
    except ValueError as e:
        p.error(str(e))
    return run(a)


def check_args(a: argparse.Namespace) -> None:
    """Turn bad input into one ValueError line naming the flag and the fix."""
    if a.model not in MODEL_NAMES:
        raise ValueError(f"--model {a.model!r} is unknown: choose one of {', '.join(MODEL_NAMES)}")
    a.planner_list = [x.strip() for x in a.planners.split(",") if x.strip()]
    bad = [x for x in a.planner_list if x not in KNOWN_PLANNERS]
    if bad or not a.planner_list:
        raise ValueError(f"--planners has {bad[0] if bad else 'nothing'!r}: choose from {', '.join(KNOWN_PLANNERS)}")
    try:
        a.grid = check_grid(_csv_floats(a.bandwidth_grid), "--bandwidth-grid")
    except ValueError as e:
        if "could not convert" in str(e):
            raise ValueError(f"--bandwidth-grid {a.bandwidth_grid!r} is not a comma-separated list of Mbit/s, "
                             f"e.g. --bandwidth-grid 10,50,100") from None
        raise
    try:
        a.rate_list = list(check_grid(_csv_floats(a.rates), "--rates"))
    except ValueError as e:
        if "could not convert" in str(e):
            raise ValueError(f"--rates {a.rates!r} is not a comma-separated list of Mbit/s, e.g. --rates 20,50") from None
        raise
    if a.mode == "trace":
        t = Path(a.trace)
        if not t.is_file():
            raise ValueError(f"--trace {a.trace}: no such file; give a trace CSV such as configs/traces/indoors-synth.csv")
        from rog.traces import load_trace

        load_trace(t)  # TraceError (a ValueError) names the file and line
    if not a.duration_s > 0:
        raise ValueError(f"--duration-s must be > 0 seconds, got {a.duration_s:g}")
    if not a.period_s >= 0:
        raise ValueError(f"--period-s must be >= 0 seconds (0: back to back), got {a.period_s:g}")
    a.sweep_kinds = [x.strip() for x in a.sweep_plans.split(",") if x.strip()]
    from rog.inference.validation import SWEEP_KINDS

    if not a.sweep_kinds or any(k not in SWEEP_KINDS for k in a.sweep_kinds):
        raise ValueError(f"--sweep-plans {a.sweep_plans!r}: give a comma list of {', '.join(SWEEP_KINDS)}, e.g. --sweep-plans cuts,splits")
    if a.n < 1:
        raise ValueError(f"--n must be at least 1 inference per sweep point, got {a.n}")
    if a.times is not None:
        from rog.inference.profiler import load_times

        if a.robot_factor is not None or a.server_factor is not None:
            raise ValueError("--times holds the factors it was profiled with: drop --robot-factor/--server-factor")
        a.loaded_times = load_times(a.times, a.model)
    for flag, v in (("--robot-factor", a.robot_factor), ("--server-factor", a.server_factor)):
        if v is not None and not v >= 1:
            raise ValueError(f"{flag} must be >= 1 (the emulated device cannot be faster than this machine), got {v:g}")


def _emulation(prep, session=None, estimate: str | None = None) -> dict:
    from rog.inference import runner as R

    d = {"robot_factor": prep.times.robot_factor, "server_factor": prep.times.server_factor,
         "robot_over_server": prep.times.robot_factor / prep.times.server_factor, "rt_priority": R.RT_PRIORITY,
         "profiled_cpu_s": sum(prep.times.cpu_s), "robot_local_s": prep.times.robot_factor * sum(prep.times.cpu_s),
         "ser_s_per_byte": prep.times.ser_s_per_byte, "power_w": __import__("rog.inference.costmodel", fromlist=["POWER_W"]).POWER_W,
         "power_source": "model:jetson-xavier-nx (Table III) + 0.21 W radio while computing",
         "split_costs": prep.times.split_costs,
         "server_device": "cuda" if prep.times.server_device == "cuda" else "cpu-paced"}
    if session is not None:
        d["msg_overhead_s"] = session.overhead_s
    if estimate:
        d["estimate"] = estimate
    return d


def run(a: argparse.Namespace) -> int:
    from rog.inference import runner as R

    kw = {}
    if a.robot_factor is not None:
        kw["robot_factor"] = a.robot_factor
    if a.server_factor is not None:
        kw["server_factor"] = a.server_factor
    planners = a.planner_list if a.mode != "sweep" else ["layer-latency"]
    if a.mode == "control" and "layer-latency" not in planners:
        planners = planners + ["layer-latency"]
    loaded = getattr(a, "loaded_times", None)
    device, note = R.resolve_server_device(loaded.server_device if loaded is not None else a.server_device)
    if loaded is not None and device != loaded.server_device:
        print(f"run_inference.py: --times {a.times} was profiled with a CUDA server and there is no CUDA device here", file=sys.stderr)
        return 2
    if note:
        print(f"run_inference.py: {note}", file=sys.stderr)
    prep = R.prepare(a.model, planners, a.grid, seed=a.seed, split_costs=a.split_costs, server_device=device,
                     times=loaded, **kw)
    stem = f"{a.mode}-{a.model}" + (f"-{Path(a.trace).stem}-{a.estimate}" if a.mode == "trace" else "")
    out = Path(a.out) if a.out else ROOT / "result" / "intradp" / stem
    out.mkdir(parents=True, exist_ok=True)
    control = None
    if a.mode == "control":
        from rog.inference.control import RULE, control_rate_mbit, write_constant_trace

        try:
            rate = control_rate_mbit(prep.tables["layer-latency"])
        except ValueError as e:
            print(f"run_inference.py control: {e}", file=sys.stderr)
            return 2
        a.trace = str(write_constant_trace(out / f"control-{rate:g}mbit.csv", rate, a.duration_s + 60))
        control = {"rate_mbit": rate, "rule": RULE}
    doc = {"mode": a.mode, "model": a.model, "grid_mbit": list(a.grid), "emulation": _emulation(prep),
           "units": len(prep.graph), "first_global": prep.graph.first_global,
           "tables": {k: [r.to_dict() for r in v] for k, v in prep.tables.items()}}
    if a.mode == "plan":
        for name, rows in prep.tables.items():
            print(f"{name}: " + "; ".join(f"{r.rate_mbit:g} Mbit/s {r.plan.label()} {r.sim.latency_s * 1e3:.0f} ms"
                                         for r in rows))
    elif a.mode == "sweep":
        rec_path = out / "records.jsonl"
        rec_path.unlink(missing_ok=True)
        from rog.inference.validation import error_distribution, profile_holdout, sweep_plans

        doc["profile_holdout"] = profile_holdout(prep)
        with R.LiveSession(prep, out, seed=a.seed) as s:
            rows = []
            for rate in a.rate_list:
                for kind, c, plan in sweep_plans(prep, rate, a.sweep_kinds):
                    n0 = len(R.read_records(rec_path))
                    s.run_fixed(plan, rate, a.n)
                    recs = R.read_records(rec_path)[n0:]
                    pred = R.predict(prep, plan, rate, s.overhead_s)
                    rows.append(dict(summarise_sweep(recs, rate, c, plan, pred), kind=kind,
                                     rate_on_plan_grid=any(abs(rate - g) < 1e-9 for g in prep.grid_mbit)))
            doc["emulation"] = _emulation(prep, s)
        doc["sweep"] = rows
        errs = [abs(r["model_error"]) for r in rows]
        doc["max_abs_model_error"] = max(errs)
        doc["points_within_15pct"] = sum(e <= 0.15 for e in errs)
        doc["points"] = len(errs)
        doc["model_error"] = {k: error_distribution([r["model_error"] for r in rows if r["kind"] == k])
                              for k in ("cut", "split", "loss", "stream")}
    else:  # trace and control
        rec_path = out / "records.jsonl"
        rec_path.unlink(missing_ok=True)
        with R.LiveSession(prep, out, trace=a.trace, estimate=a.estimate, seed=a.seed,
                           trace_duration_s=a.duration_s + 60, period_s=a.period_s) as s:
            methods = {}
            for name in a.planner_list:
                n0 = len(R.read_records(rec_path))
                t0 = time.monotonic()
                s.run_trace(name, a.duration_s)
                recs = R.read_records(rec_path)[n0:]
                methods[name] = summarise_trace(recs, prep)
                methods[name]["wall_s"] = time.monotonic() - t0
            doc["emulation"] = _emulation(prep, s, a.estimate)
        doc["trace"] = str(a.trace)
        doc["duration_s"] = a.duration_s
        doc["period_s"] = a.period_s
        doc["methods"] = methods
        if control is not None:
            doc["control"] = control
    if a.mode != "plan":
        doc.update(output_check(R.read_records(out / "records.jsonl")))
    (out / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    brief = {k: doc[k] for k in ("mode", "model", "output_checked", "output_mismatches") if k in doc}
    if "methods" in doc:
        brief["mean_latency_ms"] = {k: round(v["mean_latency_s"] * 1e3, 1) for k, v in doc["methods"].items()}
        brief["mean_energy_j"] = {k: round(v["mean_energy_j"], 3) for k, v in doc["methods"].items()}
    if "sweep" in doc:
        brief.update(max_abs_model_error=round(doc["max_abs_model_error"], 4), points=doc["points"],
                     points_within_15pct=doc["points_within_15pct"], model_error=doc["model_error"])
    brief["out"] = str(out)
    print(json.dumps(brief))
    if doc.get("output_mismatches"):
        print(f"run_inference.py {a.mode}: {doc['output_mismatches']} of {doc['output_checked']} inferences gave an output "
              f"different from the whole model's (see output_match in {out / 'records.jsonl'})", file=sys.stderr)
        return 1
    return 0


def output_check(recs: list[dict]) -> dict:
    """How many inferences were compared with the whole model's output and how many differed (a record
    without ``output_match`` counts as a mismatch: it was not checked)."""
    bad = [r for r in recs if r.get("output_match") is not True]
    diffs = [r["output_max_abs_diff"] for r in recs if r.get("output_max_abs_diff") is not None]
    return {"output_checked": len(recs), "output_mismatches": len(bad),
            "output_max_abs_diff": max(diffs) if diffs else None}


def summarise_sweep(recs: list[dict], rate: float, cut: int, plan, pred) -> dict:
    """One Fig. 1 point: measured mean latency and energy next to the model's."""
    lat = statistics.fmean(r["latency_s"] for r in recs)
    return {"rate_mbit": rate, "cut": cut, "plan": plan.label(), "n": len(recs), "latency_s": lat,
            "latency_sd_s": statistics.pstdev(r["latency_s"] for r in recs),
            "energy_j": statistics.fmean(r["energy_j"] for r in recs),
            "model_latency_s": pred.latency_s, "model_energy_j": pred.energy_j,
            "model_error": pred.latency_s / lat - 1.0}


def summarise_trace(recs: list[dict], prep=None) -> dict:
    """Mean latency, energy and components of one planner's inferences on a trace."""
    if not recs:
        return {"n": 0}
    m = lambda k: statistics.fmean(r[k] for r in recs)  # noqa: E731
    lat = m("latency_s")
    comp = {k: m(k) for k in ("robot_compute_s", "transfer_s", "server_compute_s")}
    shares = {k.replace("_s", "_share"): v / lat for k, v in comp.items()}
    plans: dict[str, int] = {}
    for r in recs:
        plans[r["label"]] = plans.get(r["label"], 0) + 1
    states = {k: statistics.fmean(r["states_s"][k] for r in recs) for k in recs[0]["states_s"]}
    return {"n": len(recs), "mean_latency_s": lat, "p50_latency_s": statistics.median(r["latency_s"] for r in recs),
            "mean_energy_j": m("energy_j"), **comp, **shares, "share_sum": sum(shares.values()),
            "states_s": states, "plans": plans, "mean_bytes_up": m("bytes_up"), "mean_bytes_down": m("bytes_down"),
            "late_s_total": recs[-1].get("late_s", 0.0)}


if __name__ == "__main__":
    sys.exit(main())
