"""ScaDLES's Fig. 1 measured: the streaming latency to gather a batch, per rate set and batch, next to
``b / S`` and the device profile's compute time for that batch.

For each rate set (S1, S1', S2, S2') the workers' rates are drawn as a run draws them
(:func:`rog.streams.rates.draw_rates`, seed as ``run.py``'s, scaled by :func:`rog.streams.rates.set_scale`
for the quick workload's batch and the profile's pacing time), for the paper's 16 devices by default: a
draw for ``W`` workers is the first ``W`` of a larger draw, so the first 4 are exactly the rates of the
``scadles`` item's 4-worker runs (:data:`ITEM_WORKERS`), and the analysis reads both.  For each
worker and each batch of :func:`fig1_batches`, a fresh :class:`rog.streams.source.StreamBuffer`
(persistence) is started, its 1 s prefill is taken, and then ``takes`` consecutive takes of ``b`` samples
each really sleep on the arrival clock; the latency is their mean wait.  Each take after the first starts
empty (the previous take left nothing), so the mean is ``b / S`` plus the last sleep's overshoot over
``takes``.

Time compression (to keep the measurement short): a take whose wait ``b / S`` is longer than
:data:`REAL_TAKE_S` runs on a clock ``F = (b / S) / REAL_TAKE_S`` times faster than the wall clock (the
buffer's clock is ``F x time.monotonic()``, its sleeps ``time.sleep(s / F)``), so every take sleeps about
:data:`REAL_TAKE_S` of real time; shorter waits run uncompressed (``F = 1``).  Latencies are reported in
the toolkit's time (the quick profile's pacing; x 1.2 s / 0.28 s for the paper's scale).  The sleep
overshoot, measured before and after (:func:`sleep_granularity_s`), bounds the error:
:func:`latency_tolerance_s`.

Compute per batch: the profile's pacing target ``k (a + c b)`` (:class:`rog.testbed.compute_fit.BatchPacer`,
anchored at the workload's mini-batch, as runs pace).

``python -m rog.papers.scadles.stream_latency --out DIR [--workers 16] [--seed 0] [--takes 3]`` writes
``DIR/result.json`` and prints it as JSON on the last line.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from datetime import datetime, timezone

from rog.streams.rates import PAPER_BATCH, PAPER_ITER_S, RATE_SETS, draw_rates, set_scale
from rog.streams.source import ArrivalProcess, StreamBuffer

from rog.experiment.module_item import write_result

__all__ = ["ITEM_WORKERS", "PAPER_DEVICES", "FIG1_PAPER_BATCHES", "fig1_batches", "REAL_TAKE_S", "GRANULARITY_FLOOR_S",
           "sleep_granularity_s", "latency_tolerance_s", "measure_latency", "measure_sets", "main"]

# The paper's text gives no batch list for Fig. 1 (our copy has no axis); these are its fixed batch 64 with
# two powers of two either side, in paper samples.  Here each is x (fixed batch here / 64), as rates are scaled.
FIG1_PAPER_BATCHES = (16, 32, 64, 128, 256)
ITEM_WORKERS = 4  # the scadles item's runs (rog.papers.scadles.stream_steps)
PAPER_DEVICES = 16  # the paper's IID cluster (section V-B)
REAL_TAKE_S = 0.05  # a compressed take sleeps about this many real seconds
GRANULARITY_FLOOR_S = 0.002  # the sleep overshoot assumed at least (a shared 2-core machine's wake-up jitter)
LOOP_OVERHEAD_S = 0.0005  # real seconds of Python between and around a take's sleeps


def fig1_batches(fixed_batch: int) -> list[int]:
    """The batches measured here: :data:`FIG1_PAPER_BATCHES` x ``fixed_batch / 64`` (at least 1)."""
    return [max(1, round(b * fixed_batch / PAPER_BATCH)) for b in FIG1_PAPER_BATCHES]


def sleep_granularity_s(n: int = 20, request_s: float = 0.001) -> float:
    """The largest overshoot of ``n`` real ``time.sleep(request_s)`` calls, seconds."""
    worst = 0.0
    for _ in range(n):
        t0 = time.monotonic()
        time.sleep(request_s)
        worst = max(worst, time.monotonic() - t0 - request_s)
    return worst


def latency_tolerance_s(rate: float, takes: int, compress: float, granularity_s: float) -> float:
    """Bound on ``|mean wait - b / S|`` (toolkit seconds) over ``takes`` consecutive takes at compression
    ``compress``: the fractional sample in flight at the start (``1 / S`` over the takes) plus one
    overshoot of the last sleep and the loop's overhead, in real seconds x ``compress``."""
    g = max(float(granularity_s), GRANULARITY_FLOOR_S)
    return 1.0 / (rate * takes) + compress * (g + LOOP_OVERHEAD_S)


def measure_latency(rate: float, batch: int, takes: int = 3, compress: float | None = None) -> dict:
    """Mean wait (toolkit seconds) of ``takes`` consecutive takes of ``batch`` samples from an empty
    persistence buffer fed at ``rate`` samples/s, with real sleeps; ``compress`` None picks
    ``max(1, (b / S) / REAL_TAKE_S)``."""
    if not (rate > 0 and math.isfinite(rate)) or int(batch) < 1 or int(takes) < 1:
        raise ValueError(f"rate must be > 0, batch and takes >= 1; got {rate!r}, {batch!r}, {takes!r}")
    analytic = batch / rate
    F = float(compress) if compress is not None else max(1.0, analytic / REAL_TAKE_S)
    buf = StreamBuffer(ArrivalProcess(rate), "persistence", clock=lambda: time.monotonic() * F,
                       sleep=lambda s: time.sleep(s / F))
    buf.start()
    buf.take(buf.held)  # the 1 s prefill: what follows starts from an empty buffer
    t0 = time.monotonic()
    waits = [buf.take(batch).wait_s for _ in range(int(takes))]
    return dict(rate=rate, batch=int(batch), analytic_s=analytic, measured_s=sum(waits) / len(waits),
                waits_s=[round(w, 6) for w in waits], compress=round(F, 4), real_s=round(time.monotonic() - t0, 4))


def measure_sets(sets, workers: int, seed: int, takes: int, fixed_batch: int, iter_s: float, pacer) -> dict:
    """Every set's drawn rates, each worker's measured latency per batch, the compute per batch."""
    g0 = sleep_granularity_s()
    scale = set_scale(fixed_batch, iter_s)
    batches = fig1_batches(fixed_batch)
    out = {}
    for name in sets:
        rates = draw_rates(name, workers, seed, scale)
        per_worker = []
        for r in rates:
            per_worker.append([measure_latency(r, b, takes) for b in batches])
        out[name] = dict(rates=rates, workers=per_worker)
    g1 = sleep_granularity_s()
    g = max(g0, g1)
    for name in out:
        for row in out[name]["workers"]:
            for m in row:
                m["tolerance_s"] = latency_tolerance_s(m["rate"], takes, m["compress"], g)
    return dict(batches=batches, paper_batches=list(FIG1_PAPER_BATCHES), fixed_batch=fixed_batch,
                scale=scale, iter_s=iter_s, to_paper_time=PAPER_ITER_S / iter_s, seed=seed, n_workers=workers,
                item_workers=min(ITEM_WORKERS, workers), takes=takes, granularity_s=dict(before=g0, after=g1), sets=out,
                compute_s=[pacer.target_s(b) for b in batches], compute_model=pacer.describe())


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m rog.papers.scadles.stream_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for result.json")
    ap.add_argument("--sets", default="S1,S1p,S2,S2p", help="rate sets, comma-separated (default all four)")
    ap.add_argument("--workers", type=int, default=PAPER_DEVICES,
                    help=f"workers per set (default the paper's {PAPER_DEVICES}; the first {ITEM_WORKERS} are the scadles item's)")
    ap.add_argument("--seed", type=int, default=0, help="rate draw seed (run.py's --seed)")
    ap.add_argument("--takes", type=int, default=3, help="consecutive takes averaged per worker and batch")
    ap.add_argument("--profile", default="quick-cpu", help="device profile for compute per batch")
    return ap


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    from rog.testbed.profiles import load_profile
    from rog.workloads.registry import WORKLOADS

    sets = [s.strip() for s in a.sets.split(",") if s.strip()]
    bad = [s for s in sets if s not in RATE_SETS]
    if bad or a.workers < 1 or a.takes < 1:
        print(f"python -m rog.papers.scadles.stream_latency: error: --sets {bad} not in {', '.join(RATE_SETS)}, or "
              f"--workers/--takes below 1; e.g. --sets S1,S2 --workers 4 --takes 3", file=sys.stderr)
        return 2
    profile = load_profile(a.profile)
    fixed = int(WORKLOADS["quick"].base_batch)
    pacer = profile.pacer(profile.compute_s_per_iteration, fixed)
    load0, t0 = os.getloadavg(), time.monotonic()
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    res = measure_sets(sets, a.workers, a.seed, a.takes, fixed, profile.compute_s_per_iteration, pacer)
    res.update(profile=a.profile, started_utc=started, wall_s=round(time.monotonic() - t0, 2),
               load_avg_before=list(load0), load_avg_after=list(os.getloadavg()), nice=os.nice(0),
               method="real sleeps on StreamBuffer.take, time-compressed per take (rog.papers.scadles.stream_latency)")
    write_result(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
