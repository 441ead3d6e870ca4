"""``scripts/simulate.py``: the systems at fleet scale in the discrete-event simulator, as run folders the analysis reads.

One simulated run per system and worker count (and shared access point setting)::

    python scripts/simulate.py --trace FILE --workers 4,8,16,32,64 --systems BSP,SSP-4,FLOWN-4,ROG-4 --iterations 30

Each run is configured exactly as ``scripts/run.py`` would configure it (:func:`rog.experiment.config.resolve_config`
on the same flags): the same registry of systems and their options, the workload's row partition and payload
(the model's real :class:`~rog.rows.RowPartition`, codec and chunk share), the device profile's compute time,
each worker's trace offset, the replay mode and the regime's time and rate scales.  Then
:mod:`rog.sim` runs it on a simpy clock: each worker's uplink and downlink replay the trace from its offset
(``--shape uplink``: downlinks unbounded), at the payload rate (wire rate / :data:`~rog.experiment.tracking.WIRE_FACTOR`,
since tc shapes Ethernet frames); with ``--ap-mbit`` / ``--ap-trace`` every transfer also shares one access
point (:class:`rog.sim_links.SharedAccessPoint`), whose capacity is given in the trace's units and scaled by the
same rate scale.

Compute time per iteration: the run's ``compute_s`` (the profile's) x the worker's compute ratio, constant; or,
with ``--compute-from RUN_DIR...``, the measured spread: draws (seeded per worker and iteration) from the
``compute`` records of those testbed runs, their mean and relative spread both measured.

Time composition only: the gradients are synthetic (seeded Gaussian vectors through the real local update,
codec and policy, so every plan, cut and row choice is the engine's), so the runs carry no accuracy; the run
folder says so (``simulation.accuracy``).  Output per run: ``config.yaml`` (``testbed: simulated``),
``events-w<k>.jsonl`` and ``events-ps.jsonl`` with the records the analysis reads (:mod:`rog.runtime.events`:
compute, stall, push, pull, run_start, run_end), ``sim.json`` (the access point's bytes and utilisation, the
simulator's CPU time) and ``DONE``.  ``scripts/summarize.py`` and ``scripts/plot.py`` read them as any run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from rog.errors import ConfigError
from rog.paths import repo_root

__all__ = ["parse_systems", "parse_workers", "build_parser", "measured_compute", "SimRun", "configure", "run_one",
           "main"]

SIM_ACCURACY = "none: time composition only (synthetic gradients through the real codec and policy)"
DEFAULT_SYSTEMS = "BSP,SSP-4,FLOWN-4,ROG-4"
GRADIENT_POOL = 16  # synthetic gradient vectors per run, reused by (worker, iteration)


def parse_systems(text: str) -> list[tuple[str, int | None]]:
    """``BSP,SSP-4,ROG-20`` -> ``[("BSP", None), ("SSP", 4), ("ROG", 20)]``; names from the system registry."""
    from rog.policies.registry import get_system

    out = []
    for item in (s.strip() for s in str(text).split(",")):
        if not item:
            continue
        name, _, th = item.partition("-")
        try:
            system = get_system(name.upper())
        except (KeyError, ValueError) as e:
            raise ConfigError(f"--systems: {e}") from None
        if system.policy is None:
            raise ConfigError(f"--systems: {system.name} has its own runtime, which the simulator does not model; "
                              "choose policy systems (BSP, SSP-s, FLOWN-s, ROG-s, ...)")
        try:
            out.append((system.name, int(th) if th else None))
        except ValueError:
            raise ConfigError(f"--systems: {item!r}: the threshold after '-' must be an integer, e.g. SSP-4") from None
    if not out:
        raise ConfigError(f"--systems {text!r} names no system; e.g. {DEFAULT_SYSTEMS}")
    return out


def parse_workers(text: str) -> list[int]:
    """``4,8,16`` -> ``[4, 8, 16]`` (integers >= 1)."""
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals or min(vals) < 1:
        raise ConfigError(f"--workers {text!r}: give comma-separated worker counts >= 1, e.g. 4,8,16,32,64")
    return vals


def build_parser() -> argparse.ArgumentParser:
    """``scripts/simulate.py``'s flags."""
    p = argparse.ArgumentParser(prog="simulate.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=None, help="trace file every worker replays from its offset (default: -c outdoors's)")
    p.add_argument("--trace-format", default=None, help="auto (default), csv, record, mahimahi[:BIN_S] or iperf3")
    p.add_argument("--workers", default="4,8,16,32,64", help="worker counts, comma-separated (default 4,8,16,32,64)")
    p.add_argument("--systems", default=DEFAULT_SYSTEMS, help=f"systems as labelled (default {DEFAULT_SYSTEMS})")
    p.add_argument("--iterations", type=int, default=30, help="iterations per worker (default 30)")
    p.add_argument("--seed", type=int, default=0, help="seed: trace phase of the replay mode, gradients, compute draws")
    p.add_argument("--replay-mode", choices=("recorded", "artifact"), default="recorded", help="as run.py (default recorded)")
    p.add_argument("--shape", choices=("both", "uplink"), default="both",
                   help="shape both directions (default) or the uplink only (downlinks unbounded), as run.py")
    p.add_argument("--ap-mbit", type=float, default=None,
                   help="shared access point capacity in the trace's Mbit/s (scaled by the run's rate scale); default none")
    p.add_argument("--ap-trace", default=None, help="shared access point capacity as a trace file (trace units)")
    p.add_argument("--compute-from", nargs="+", default=None, metavar="RUN_DIR",
                   help="testbed run folders whose compute records give the compute time's mean and spread")
    p.add_argument("--result-dir", default=str(repo_root() / "result" / "simulate"), help="where the run folders go")
    p.add_argument("--note", default="sim", help="run-id note (default sim; the access point adds -ap<Mbit>)")
    p.add_argument("--overwrite", action="store_true", help="replace run folders that already hold a completed run")
    return p


@dataclass(frozen=True)
class ComputeModel:
    """Compute seconds per iteration: ``base_s`` (x a worker's ratio) times a relative draw from ``rel``."""

    base_s: float
    rel: tuple[float, ...] = ()  # measured compute / its mean; () = constant
    source: str = "constant"

    def seconds(self, seed: int, worker: int, iteration: int, ratio: float = 1.0) -> float:
        """Worker ``worker``'s compute time in ``iteration`` (seeded: the same run gives the same draws)."""
        if not self.rel:
            return self.base_s * ratio
        k = np.random.default_rng((seed, worker, iteration)).integers(len(self.rel))
        return self.base_s * ratio * self.rel[int(k)]


def measured_compute(run_dirs) -> ComputeModel:
    """Mean and relative spread of the ``compute`` records of testbed runs (every worker, every iteration)."""
    from rog.analysis.load import load_run

    durations = []
    for d in run_dirs:
        try:
            run = load_run(d)
        except ValueError as e:
            raise ConfigError(f"--compute-from {d}: {e}") from None
        if run.iterations.empty:
            raise ConfigError(f"--compute-from {d}: the run has no complete iteration to measure compute time from")
        durations += run.iterations["compute_s"].astype(float).tolist()
    arr = np.asarray(durations)
    mean = float(arr.mean())
    return ComputeModel(mean, tuple(float(x) for x in arr / mean),
                        f"measured: {arr.size} compute records of {', '.join(Path(d).name for d in run_dirs)} "
                        f"(mean {mean:.4f} s, sd {arr.std():.4f} s)")


def configure(a: argparse.Namespace, name: str, threshold: int | None, workers: int) -> dict:
    """The run's resolved configuration, exactly as ``scripts/run.py`` would make it, marked simulated."""
    from rog.experiment import cli
    from rog.experiment.config import resolve_config

    note = a.note + (f"-ap{a.ap_mbit:g}" if a.ap_mbit is not None else "-aptrace" if a.ap_trace else "")
    argv = ["--testbed", "loopback", "--library", name, "--workers", str(workers), "--iterations", str(a.iterations),
            "--seed", str(a.seed), "--replay-mode", a.replay_mode, "--shape", a.shape, "--result-dir", a.result_dir,
            "-n", note, "--item", "simulate", "--device", "cpu"]
    argv += ["--trace", a.trace] if a.trace else ["-c", "outdoors"]
    if a.trace_format:
        argv += ["--trace-format", a.trace_format]
    if threshold is not None:
        argv += ["--threshold", str(threshold)]
    cfg = resolve_config(cli.parse_args(argv))
    if cfg["compression"] == "topk":
        raise ConfigError("the simulator models the sign and none codecs, not Top-k")
    cfg.update(testbed="simulated", testbed_requested="simulated", fallback_reason=None)
    return cfg


def _links(cfg: dict, trace):
    """Each worker's uplink and downlink at the payload rate, and the access point's rate factor."""
    from rog.experiment.tracking import WIRE_FACTOR
    from rog.links import InfiniteLink
    from rog.traces import apply_replay_mode

    links = []
    for k in range(cfg["workers"]):
        off = cfg["worker_offsets_s"][k]
        tr = trace.offset(off) if off else trace
        tr = apply_replay_mode(tr.rate_scaled(cfg["rate_scale"] / WIRE_FACTOR), cfg["replay_mode"], cfg["seed"],
                               cfg["time_scale"])
        links.append(tr.to_rate_trace(loop=True))
    down = links if cfg["shape"] == "both" else [InfiniteLink()] * len(links)
    return links, down, cfg["rate_scale"] / WIRE_FACTOR


@dataclass
class SimRun:
    """One simulated run: its folder, configuration and headline numbers."""

    run_dir: Path
    config: dict
    summary: dict


def _partition(model: str):
    import torch

    from rog.models import make_model
    from rog.rows import RowPartition
    from rog.workloads.registry import DEFAULTS, QUICK_MODELS

    classes = DEFAULTS["quick"].num_classes if model in QUICK_MODELS else next(
        d.num_classes for d in DEFAULTS.values() if d.model == model)
    with torch.random.fork_rng(devices=[]):
        return RowPartition.from_module(make_model(model, classes))


_PARTS: dict = {}


def run_one(cfg: dict, compute: ComputeModel | None, ap_mbit: float | None, ap_trace=None,
            result_dir: str | Path = ".") -> SimRun:
    """Simulate one resolved configuration and write its run folder under ``result_dir``."""
    from rog.chunks import chunk_bytes_for_share
    from rog.codecs.codec_registry import make_codec
    from rog.experiment import sync_options as SO
    from rog.experiment.run_config import RunConfig
    from rog.local_update import LocalUpdateConfig
    from rog.policies.registry import make_policy
    from rog.sim import SharedAccessPoint, SimConfig, simulate
    from rog.traces import load_trace

    t_cpu = time.process_time()
    typed = RunConfig.from_dict(dict(cfg, testbed="loopback"), source="simulate.py")
    part = _PARTS.get(cfg["model"]) or _PARTS.setdefault(cfg["model"], _partition(cfg["model"]))
    codec = make_codec(cfg["compression"])
    trace = load_trace(cfg["trace"]["path"], fmt=cfg["trace"].get("format"))
    up, down, factor = _links(cfg, trace)
    ap = None
    if ap_mbit is not None:
        ap = SharedAccessPoint(ap_mbit * factor)
    elif ap_trace is not None:
        scaled = ap_trace.rate_scaled(factor)
        ap = SharedAccessPoint(scaled.time_scaled(cfg["time_scale"]).to_rate_trace(loop=True))
    W, seed = cfg["workers"], cfg["seed"]
    compute = compute or ComputeModel(float(cfg["compute_s"]), (), f"constant: profile {cfg['profile']}")
    ratios = cfg.get("compute_ratios") or [1.0] * W
    rng = np.random.default_rng(seed)
    pool = [(0.01 * rng.standard_normal(part.n_elements)).astype(np.float32) for _ in range(GRADIENT_POOL)]
    sim_cfg = SimConfig(
        partition=part, n_workers=W, seed=seed, codec=codec, iterations=cfg["iterations"],
        policy=make_policy(cfg["library"], cfg["threshold"], **SO.policy_options(typed)),
        gradient_fn=lambda r, p, n: pool[(r * 7 + n) % GRADIENT_POOL],
        compute_s=lambda r, n: compute.seconds(seed, r, n, ratios[r]),
        uplinks=up, downlinks=down, shared_ap=ap, aggregate_pending=True,
        chunk_bytes=chunk_bytes_for_share(codec.row_wire_bytes(part), cfg["chunk_share"]),
        local_update=LocalUpdateConfig(lr=cfg["lr"], momentum=cfg["momentum"], weight_decay=cfg["weight_decay"],
                                       milestones=()))
    sim = simulate(sim_cfg, flush=False)
    end_s = max(r.t_end_s for r in sim.records)
    moved = sum(r.push_bytes + r.pull_bytes for r in sim.records)
    ap_info = None
    if ap is not None:
        ap_info = dict(capacity=f"{ap_mbit:g} Mbit/s (trace units)" if ap_mbit is not None else f"trace {ap_trace.source}",
                       bytes_carried=float(ap.bytes_carried), capacity_bytes=float(ap.capacity_bytes(0.0, end_s)),
                       utilisation=float(ap.bytes_carried / ap.capacity_bytes(0.0, end_s)),
                       busy_share=float(ap.busy_s / end_s))
    cfg = dict(cfg, simulation=dict(simulator="rog.sim (simpy discrete-event, the engine's numerics)",
                                    accuracy=SIM_ACCURACY, compute=compute.source, shared_ap=ap_info,
                                    payload_rate_factor=float(factor)))
    summary = dict(testbed="simulated", accuracy=SIM_ACCURACY, end_s=float(end_s), bytes_moved=int(moved),
                   cpu_s=round(time.process_time() - t_cpu, 3), **{k: v for k, v in sim.summary().items()
                                                                  if k in ("iteration_s", "stall_s", "compute_s",
                                                                           "push_s", "pull_s", "records")})
    if ap_info:
        summary["ap_utilisation"] = ap_info["utilisation"]
    run_dir = write_run(Path(result_dir) / cfg["run_id"], cfg, sim, summary)
    return SimRun(run_dir, cfg, summary)


def write_run(run_dir: Path, cfg: dict, sim, summary: dict) -> Path:
    """The run folder of a finished simulation: config.yaml, the event files, sim.json and DONE."""
    from rog.experiment.rundir import DONE_FILE, write_atomic
    from rog.runtime.events import EventLog, events_file_name, worker_rank

    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob("events-*.jsonl"):
        old.unlink()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    reports = {(rep.worker, rep.direction, rep.iteration): rep for rep in sim.reports}
    codec = cfg["compression"]
    common = dict(policy=cfg["library"], threshold=int(cfg["threshold"]), n_workers=int(cfg["workers"]), codec=codec)
    end_s = max(r.t_end_s for r in sim.records)
    with EventLog(run_dir / events_file_name("ps"), "ps", cfg["run_id"], origin_monotonic_s=0.0) as ps:
        ps.write("run_start", t_s=0.0, **common)
        ps.write("run_end", t_s=end_s, status="done")
    by_worker: dict = {}
    for rec in sim.records:
        by_worker.setdefault(rec.worker, []).append(rec)
    for r, recs in sorted(by_worker.items()):
        with EventLog(run_dir / events_file_name(worker_rank(r)), worker_rank(r), cfg["run_id"], 0.0) as log:
            log.write("run_start", t_s=0.0, worker=r, **common)
            for rec in sorted(recs, key=lambda x: x.iteration):
                _write_iteration(log, rec, reports)
            log.write("run_end", t_s=recs[-1].t_end_s, status="done", iterations=len(recs))
    write_atomic(run_dir / "sim.json", json.dumps(dict(cfg["simulation"], summary=summary), indent=1) + "\n")
    write_atomic(run_dir / DONE_FILE, json.dumps(summary) + "\n")
    return run_dir


def _write_iteration(log, rec, reports) -> None:
    """One iteration's records, tiling its time: compute, admission, push, gate, admission, pull."""
    r, n = rec.worker, rec.iteration
    log.write("compute", t_s=rec.t_start_s, iteration=n, duration_s=rec.compute_s, worker=r)
    before_push = rec.t_push_start_s - (rec.t_start_s + rec.compute_s)
    if before_push > 0:
        log.write("stall", t_s=rec.t_start_s + rec.compute_s, iteration=n, duration_s=before_push, reason="admission",
                  worker=r)
    _transfer(log, "push", rec.t_push_start_s, reports[(r, "push", n)], rec.push_required_rows)
    if rec.gate_s > 0:
        log.write("stall", t_s=rec.t_push_start_s + rec.push_s, iteration=n, duration_s=rec.gate_s, reason="gate",
                  worker=r)
    before_pull = rec.admission_s - max(before_push, 0.0)
    if before_pull > 1e-12:
        log.write("stall", t_s=rec.t_pull_start_s - before_pull, iteration=n, duration_s=before_pull,
                  reason="admission", worker=r)
    _transfer(log, "pull", rec.t_pull_start_s, reports[(r, "pull", n)], None)


def _transfer(log, kind: str, t_s: float, rep, required_rows: int | None) -> None:
    extra = {"required_rows": int(required_rows)} if required_rows is not None else {}
    log.write(kind, t_s=t_s, iteration=rep.iteration, rows_planned=rep.rows_planned, rows_delivered=rep.rows_delivered,
              bytes=rep.bytes_delivered, deadline_s=rep.deadline_s, duration_s=rep.duration_s,
              delivered_share=1.0 if rep.rows_planned == 0 else rep.rows_delivered / rep.rows_planned,
              mandatory_s=rep.mandatory_s, worker=rep.worker, **extra)


def main(argv=None) -> int:
    """Simulate every system x worker count; print one line per run and the JSON of all on the last line."""
    a = build_parser().parse_args(argv)
    try:
        systems, counts = parse_systems(a.systems), parse_workers(a.workers)
        if a.iterations < 1:
            raise ConfigError("--iterations must be >= 1")
        if a.ap_mbit is not None and not (a.ap_mbit > 0 and math.isfinite(a.ap_mbit)):
            raise ConfigError("--ap-mbit must be a rate > 0 Mbit/s")
        if a.ap_mbit is not None and a.ap_trace:
            raise ConfigError("--ap-mbit and --ap-trace both set the access point; choose one")
        ap_trace = None
        if a.ap_trace:
            from rog.traces import load_trace

            try:
                ap_trace = load_trace(a.ap_trace)
            except (OSError, ValueError) as e:
                raise ConfigError(f"--ap-trace: {e}") from None
        compute = measured_compute(a.compute_from) if a.compute_from else None
    except ConfigError as e:
        print(f"simulate.py: error: {e}")
        return 2
    t0 = time.monotonic()
    rows = []
    for W in counts:
        for name, th in systems:
            try:
                cfg = configure(a, name, th, W)
            except ConfigError as e:
                print(f"simulate.py: error: {e}")
                return 2
            if (Path(a.result_dir) / cfg["run_id"] / "DONE").exists() and not a.overwrite:
                print(f"skip (done): {cfg['run_id']}", flush=True)
                continue
            run = run_one(cfg, compute, a.ap_mbit, ap_trace, a.result_dir)
            s = run.summary
            rows.append(dict(run=run.run_dir.name, system=name if th is None else f"{name}-{th}", workers=W,
                             iteration_s=s["iteration_s"], stall_s=s["stall_s"], cpu_s=s["cpu_s"],
                             ap_utilisation=s.get("ap_utilisation")))
            print(f"{rows[-1]['system']:>8} w{W:<3} s/iter {s['iteration_s']:.4f} stall {s['stall_s']:.4f} "
                  f"cpu {s['cpu_s']:.1f} s -> {run.run_dir}", flush=True)
    print(json.dumps(dict(runs=rows, wall_s=round(time.monotonic() - t0, 2), accuracy=SIM_ACCURACY)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
