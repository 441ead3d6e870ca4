"""One timing run of a transfer schedule (DynaComm's Figs. 6 and 7): a BSP parameter server here and
``W`` worker processes on 127.0.0.1, every link shaped by the transport's token bucket to
``--rate-mbit`` in both directions, compression off, synthetic inputs of the model's size (:data:`rog.models.convnets.MODELS`).

Per worker and iteration it records the forward, backward and iteration seconds:

* Sequential: forward = the previous pull + the forward compute; backward = from the backward
  pass's start to the push's end (backward compute, update and encoding, admission, push);
* segmented schedules: the ``overlap`` record (:mod:`rog.schedules.trainer`): forward from the pull's
  start to the forward pass's end, backward from the backward pass's start to the push's end;
* iteration: wall time between consecutive iteration starts; stall: the BSP gate.

``--link-delay-ms D`` holds each transmission's Begin D ms (an emulated per-transfer latency, both
directions: :attr:`rog.transport.TransportConfig.link_delay_s`); ``--rate-step K:R`` switches every link
to R Mbit/s when worker 0 starts iteration K (a step in rate, for re-planning; :class:`SharedRate`).

Writes ``<out>/result.json`` and prints it as the last line (means and medians over every worker's
iterations after ``--warmup``, and the machine's load meanwhile from ``/proc/stat``: ``machine_busy_share``,
the busy share of all cores, and ``other_busy_cores``, the cores busy with anything but this run).  ``python -m rog.papers.dynacomm.bench --model vgg_mini --schedule dynacomm
--rate-mbit 100 --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import secrets
import sys
import time
from pathlib import Path

import numpy as np

from rog.experiment.links import link_delay_ms_arg

SCHEDULE_NAMES = ("sequential", "lbl", "ibatch", "dynacomm", "dynacomm-iter")
MODEL_NAMES = ("vgg_mini", "resnet_mini", "resnet152_mini", "inception_mini")  # rog.models.convnets.MODELS (torch-free here)
PAIRED = "paired"  # every schedule of SCHEDULE_NAMES in turn inside one run (rog.schedules.paired)


class SharedRate:
    """A link rate (Mbit/s) every process reads from one shared value: ``rate_mbit_at(t_s)`` ignores ``t_s``."""

    def __init__(self, value) -> None:
        self.value = value  # a multiprocessing.Value('d')

    def __call__(self, t_s: float) -> float:
        return float(self.value.value)


def _worker(k: int, a: dict, address, secret: bytes, out: str, rate=None) -> None:
    import torch
    import torch.nn.functional as F

    from rog.models.convnets import MODELS
    from rog.optim import ROGOptimizer, WorkerOptions
    from rog.runtime import EventLog
    from rog.schedules.paired import PairedTrainer
    from rog.schedules.trainer import ScheduledTrainer

    torch.set_num_threads(1)
    torch.manual_seed(a["seed"])
    make, hw = MODELS[a["model"]]
    model = make()
    g = torch.Generator().manual_seed(a["seed"] * 100 + k)
    data = [(torch.randn(a["batch"], 3, hw, hw, generator=g), torch.randint(0, 10, (a["batch"],), generator=g))
            for _ in range(4)]
    rows = []
    with EventLog(Path(out) / f"events-w{k}.jsonl", f"w{k}", "bench", time.time()) as events:
        opt = ROGOptimizer(model.parameters(), server=address, worker_id=k, lr=0.01, policy="BSP", compression="none",
                           secret=secret,
                           options=WorkerOptions(
                               rate_mbit=SharedRate(rate) if rate is not None else a["rate_mbit"],
                               transport_options={"link_delay_s": a.get("link_delay_ms", 0.0) / 1000.0}, events=events,
                               reconnect_timeout_s=None))
        tr = None
        if a["schedule"] == PAIRED:
            tr = PairedTrainer(model, opt, a.get("paired_names") or SCHEDULE_NAMES, data[0][0][:1],
                               block=a.get("paired_block", 2),
                               epoch_iterations=a["epoch_iterations"])
        elif a["schedule"] != "sequential":
            tr = ScheduledTrainer(model, opt, a["schedule"], data[0][0][:1], epoch_iterations=a["epoch_iterations"])
        prev_pull_s = None
        for n in range(1, a["iterations"] + 1):
            x, y = data[n % len(data)]
            if rate is not None and k == 0 and n == a["rate_step"][0]:
                rate.value = a["rate_step"][1]
            t0 = time.monotonic()
            if tr is not None:
                tr.iteration(x, y, F.cross_entropy)
                r = dict(tr.last)
                row = dict(fwd_s=r["fwd_from_pull_s"], bwd_s=r["bwd_s"], stall_s=r["stall_s"],
                           fwd_compute_s=r["fwd_compute_s"], bwd_compute_s=r["bwd_compute_s"],
                           predicted_fwd_s=r["predicted_fwd_s"], predicted_bwd_s=r["predicted_bwd_s"],
                           fwd_segments=r["fwd_segments"], bwd_segments=r["bwd_segments"], overlap_s=r["overlap_s"],
                           compute_only_s=r["compute_only_s"], comm_only_s=r["comm_only_s"], dt_s=r["dt_s"],
                           schedule=r.get("schedule", a["schedule"]), measured=r.get("measured", True),
                           plan_s=r["plan_s"], replanned=r["replanned"])
            else:
                opt.zero_grad(set_to_none=False)  # the flat gradient buffer: no copy at the step (as before)
                loss = F.cross_entropy(model(x), y)
                t1 = time.monotonic()
                loss.backward()
                t2 = time.monotonic()
                opt.step()
                s = opt.last_stats
                bwd = (t0 + s.compute_s - t1) + s.admission_s + s.push_s  # to the push's end
                row = dict(fwd_s=None if prev_pull_s is None else prev_pull_s + (t1 - t0), bwd_s=bwd, stall_s=s.gate_s,
                           fwd_compute_s=t1 - t0, bwd_compute_s=t2 - t1, predicted_fwd_s=None, predicted_bwd_s=None,
                           fwd_segments=1, bwd_segments=1, overlap_s=0.0, compute_only_s=s.compute_s,
                           comm_only_s=s.admission_s + s.push_s + s.pull_s, dt_s=None, schedule="sequential",
                           measured=True)
                prev_pull_s = s.pull_s
            row.update(iteration=n, t0=t0)
            rows.append(row)
        segment_log, plan_log = [], []
        if tr is not None:
            tr.close()
            segment_log = list(tr.segment_log)
            plan_log = [dict(iteration=n, fwd_segments=pl.fwd_segments, bwd_segments=pl.bwd_segments,
                             predicted_fwd_s=pl.predicted_fwd_s, predicted_bwd_s=pl.predicted_bwd_s, dt_s=pr.dt_s,
                             **{k: getattr(pr, k).tolist() for k in ("pt", "fc", "bc", "gt")})
                        for n, pr, pl in tr.plan_log]
        opt.close()
    for i in range(len(rows) - 1):
        rows[i]["iteration_s"] = rows[i + 1]["t0"] - rows[i]["t0"]
    rows[-1]["iteration_s"] = None
    payload = int(sum(p.numel() for p in model.parameters())) * 4
    (Path(out) / f"worker-{k}.json").write_text(json.dumps(dict(rows=rows, payload_bytes=payload, segment_log=segment_log, plan_log=plan_log)))


def _mean(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(vals)) if vals else None


def _median(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return float(np.median(vals)) if vals else None


def _load_now() -> tuple[float, tuple[int, int], float]:
    """(wall clock, machine busy/total ticks, CPU seconds of this process and its reaped children)."""
    from rog.experiment.cpu_meter import _machine_ticks

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.monotonic(), _machine_ticks(), me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _load_since(start) -> dict:
    """The machine's load since ``start`` (:func:`_load_now`): busy share of all cores, and the cores
    busy with anything but this process and its children (the workers, reaped by then)."""
    t0, (busy0, total0), own0 = start
    t1, (busy1, total1), own1 = _load_now()
    wall_s, ticks = t1 - t0, total1 - total0
    if ticks <= 0 or wall_s <= 0:
        return dict(wall_s=wall_s, machine_busy_share=None, other_busy_cores=None)
    cores = os.cpu_count() or 1
    busy_core_s = (busy1 - busy0) / ticks * cores * wall_s
    return dict(wall_s=wall_s, machine_busy_share=(busy1 - busy0) / ticks,
                other_busy_cores=max(0.0, busy_core_s - (own1 - own0)) / wall_s)


class BenchFailure(RuntimeError):
    """A worker process or the parameter server of the bench failed (the command exits 1)."""


def run_bench(a: dict) -> dict:
    """Run one configuration; returns the summary written to ``result.json``."""
    from rog.codecs.compression import RawCodec
    from rog.models.convnets import MODELS
    from rog.policies import make_policy
    from rog.rows import RowPartition
    from rog.runtime import ParameterServer
    from rog.transport import Listener, TransportConfig

    out = Path(a["out"])
    out.mkdir(parents=True, exist_ok=True)
    load0 = _load_now()
    secret = secrets.token_bytes(32)
    import torch

    torch.manual_seed(a["seed"])
    part = RowPartition.from_module(MODELS[a["model"]][0]())
    ctx = mp.get_context("spawn")
    rate = None
    if a.get("rate_step"):
        rate = ctx.Value("d", float(a["rate_mbit"]))
    listener = Listener("127.0.0.1", 0, config=TransportConfig(
        secret=secret, rate_mbit_at=SharedRate(rate) if rate is not None else a["rate_mbit"],
        link_delay_s=a.get("link_delay_ms", 0.0) / 1000.0), worker_ids=set(range(a["workers"])))
    ps = ParameterServer(part, a["workers"], make_policy("BSP"), RawCodec(), join_timeout_s=120.0, wait_timeout_s=300.0)
    t = ps.start(listener)
    procs = [ctx.Process(target=_worker, args=(k, a, listener.address, secret, str(out), rate))
             for k in range(a["workers"])]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    t.join(60)
    listener.close()
    if any(p.exitcode for p in procs) or ps.errors:
        raise BenchFailure(f"a worker or the PS failed (exit codes {[p.exitcode for p in procs]}, "
                             f"PS errors {ps.errors!r})")
    load = _load_since(load0)
    per_worker = [json.loads((out / f"worker-{k}.json").read_text()) for k in range(a["workers"])]
    rows = [r for w in per_worker for r in w["rows"] if r["iteration"] > a["warmup"]]
    keys = ("fwd_s", "bwd_s", "iteration_s", "stall_s", "fwd_compute_s", "bwd_compute_s", "predicted_fwd_s",
            "predicted_bwd_s", "fwd_segments", "bwd_segments", "overlap_s", "compute_only_s", "comm_only_s", "dt_s",
            "plan_s")
    summary = dict(model=a["model"], schedule=a["schedule"], workers=a["workers"], rate_mbit=a["rate_mbit"],
                   link_delay_ms=a.get("link_delay_ms", 0.0), rate_step=a.get("rate_step"),
                   plan_log=per_worker[0]["plan_log"],
                   batch=a["batch"], iterations=a["iterations"], warmup=a["warmup"],
                   payload_bytes=per_worker[0]["payload_bytes"], n_samples=len(rows), **load,
                   **{f"mean_{k}": _mean(rows, k) for k in keys}, **{f"median_{k}": _median(rows, k) for k in keys})
    if a["schedule"] == PAIRED:
        summary.update(paired_summary([r for w in per_worker for r in w["rows"]], keys, a.get("paired_block", 2),
                                      tuple(a.get("paired_names") or SCHEDULE_NAMES)))
    (out / "result.json").write_text(json.dumps(summary, indent=1))
    return summary


def paired_summary(rows: list[dict], keys, block: int, names=SCHEDULE_NAMES) -> dict:
    """A paired run's measured rows (every worker's) by schedule: ``per_schedule`` {schedule: medians of
    ``keys`` and ``samples``}, and ``cycles``: per rotation, {schedule: iteration seconds, the mean over
    the workers} (a cycle missing a schedule's iteration, the run's last, is left out)."""
    from rog.schedules.profiler import first_plan_iteration

    measured = [r for r in rows if r.get("measured") and r.get("schedule") and r.get("iteration_s") is not None]
    per_schedule = {}
    for s in names:
        mine = [r for r in measured if r["schedule"] == s]
        per_schedule[s] = dict(samples=len(mine), **{f"median_{k}": _median(mine, k) for k in keys})
    span = block * len(names)
    by_cycle: dict[int, dict[str, list[float]]] = {}
    for r in measured:
        c = (r["iteration"] - first_plan_iteration() - 1) // span
        by_cycle.setdefault(c, {}).setdefault(r["schedule"], []).append(r["iteration_s"])
    cycles = [{s: float(np.mean(v)) for s, v in sorted(d.items())} for c, d in sorted(by_cycle.items())
              if len(d) == len(names)]
    return dict(paired_block=block, per_schedule=per_schedule, cycles=cycles)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rog.papers.dynacomm.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODEL_NAMES, required=True)
    ap.add_argument("--schedule", choices=SCHEDULE_NAMES + (PAIRED,), required=True,
                    help=f"'{PAIRED}': every schedule in turn inside one run, --paired-block iterations each")
    ap.add_argument("--paired-schedules", default=",".join(SCHEDULE_NAMES),
                    help="comma-separated schedules a paired run rotates through (default: all)")
    ap.add_argument("--paired-block", type=int, default=2,
                    help="iterations per schedule's turn in a paired run; the last of each is measured (default 2)")
    ap.add_argument("--rate-mbit", type=float, default=None, help="token-bucket rate per link and direction (default: none)")
    ap.add_argument("--link-delay-ms", type=link_delay_ms_arg, default=0.0,
                    help="emulated per-transfer latency: each transmission's Begin leaves this late (default 0)")
    ap.add_argument("--rate-step", default=None, metavar="ITERATION:MBIT",
                    help="switch every link to MBIT Mbit/s when worker 0 starts ITERATION (needs --rate-mbit)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2, help="iterations left out of the means (profiling, start-up)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epoch-iterations", type=int, default=100, help="ibatch/dynacomm re-plan period")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    for ok, msg in ((a.workers >= 1, f"--workers must be >= 1, got {a.workers}"),
                    (a.warmup >= 0, f"--warmup must be >= 0, got {a.warmup}"),
                    (a.iterations > a.warmup + 1, f"--iterations must exceed --warmup + 1 ({a.warmup + 1}), got {a.iterations}"),
                    (a.batch >= 1, f"--batch must be >= 1, got {a.batch}"),
                    (a.paired_block >= 1, f"--paired-block must be >= 1, got {a.paired_block}"),
                    (a.epoch_iterations >= 1, f"--epoch-iterations must be >= 1, got {a.epoch_iterations}"),
                    (a.rate_mbit is None or a.rate_mbit > 0, f"--rate-mbit must be a positive number, got {a.rate_mbit}")):
        if not ok:
            ap.error(msg)
    a.paired_names = tuple(x.strip() for x in a.paired_schedules.split(",") if x.strip())
    if len(a.paired_names) < 2 or any(x not in SCHEDULE_NAMES for x in a.paired_names):
        ap.error(f"--paired-schedules must name two or more of {', '.join(SCHEDULE_NAMES)}, got {a.paired_schedules!r}")
    if a.rate_step is not None:
        try:
            it, mbit = a.rate_step.split(":")
            a.rate_step = (int(it), float(mbit))
        except ValueError:
            ap.error(f"--rate-step must be ITERATION:MBIT (e.g. 10:5), got {a.rate_step!r}")
        if a.rate_mbit is None or not (1 <= a.rate_step[0] <= a.iterations and a.rate_step[1] > 0):
            ap.error(f"--rate-step needs --rate-mbit, an iteration in [1, --iterations] and a rate > 0, got {a.rate_step}")
    try:
        summary = run_bench(vars(a))
    except BenchFailure as e:
        print(f"rog.papers.dynacomm.bench: {e}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
