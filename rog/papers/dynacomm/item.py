"""The ``dynacomm`` evaluation item: DynaComm's Figs. 6 and 7 on this machine (opt-in).

``bash scripts/run_all.sh dynacomm`` runs, per model (``vgg_mini``, ``resnet_mini``, ``resnet152_mini``: the ResNet-152 claims), BSP with
:data:`WORKERS` workers, compression off, synthetic inputs:

1. calibration: Sequential on unshaped links; the rule, fixed before any shaped run, sets the link
   rate so that Sequential's communication (one push and one pull of the whole model) takes as long
   as its computation: ``rate = 2 x payload_bits / (forward + backward compute)``;
2. Sequential, LBL, iBatch, DynaComm and DynaComm-iter at that rate and a per-transfer latency of
   :data:`LINK_DELAY_MS` (the paper's round trip)
   (:mod:`rog.papers.dynacomm.bench`), :data:`REPEATS` rounds with the schedules interleaved,
   round ``r`` starting at the ``r``-th schedule (:func:`round_order`): the machine's load drifts,
   so the analysis compares schedules within a round and takes medians over rounds; then one paired
   run (``--schedule paired``, :mod:`rog.schedules.paired`): all five in turn inside one run,
   :data:`PAIRED_BLOCK` iterations a turn, :data:`PAIRED_CYCLES` rotations, on which the
   iteration-time check is read (:mod:`rog.papers.dynacomm.paired`),

3. the sweep, per model of :data:`SWEEP_MODELS` (``--sweep-models`` picks some; the two deep ones,
   ``resnet152_mini`` and ``inception_mini``, are swept only) (:data:`SWEEP_RATIOS` x
   :data:`SWEEP_DELAYS_MS`): the communication-to-compute ratio
   ``r`` (the link rate making Sequential's push + pull take ``r`` x its compute,
   :func:`calibrated_rate_mbit`) against the per-transfer latency (``--link-delay-ms``; 0 gives the
   measured minimum Δt), one paired run each of Sequential, LBL, iBatch and DynaComm
   (:data:`SWEEP_SCHEDULES`, :data:`SWEEP_CYCLES` rotations), tabulated by
   :mod:`rog.papers.dynacomm.sweep`;

4. on the replayed outdoors trace (``scripts/run.py --testbed loopback -c outdoors``, 2 workers,
   compression off, no compute pacing, :data:`OUTDOORS_BUDGET_S` s each): BSP, ROG-4, and BSP under
   ``dynacomm`` and ``dynacomm-iter`` (:data:`OUTDOORS`),

then writes ``result/dynacomm/summary.md`` (:mod:`rog.papers.dynacomm.summary`) and ``figure/dynacomm_*``.
A step whose ``result.json`` exists is skipped (delete its folder to rerun).  About
:data:`ESTIMATE_S` seconds here.

Run as ``python -m rog.papers.dynacomm.item --result-dir R --figure-dir F [--dry-run]``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rog.schedules.profiler import first_plan_iteration

from rog.experiment.config import RUN_MODULE
from rog.experiment.links import link_delay_ms_arg
from rog.experiment.module_item import ROOT, item_parser, run_step

__all__ = ["NAME", "MODELS", "SCHEDULES", "ESTIMATE_S", "calibrated_rate_mbit", "round_order", "rounds_and_paired",
           "calibrate", "main"]

NAME = "dynacomm"
MODELS = ("vgg_mini", "resnet_mini", "resnet152_mini")  # resnet152_mini: the ResNet-152 claims (155 layers)
SCHEDULES = ("sequential", "lbl", "ibatch", "dynacomm", "dynacomm-iter")
WORKERS = 2
ITERATIONS, WARMUP = 10, 3  # a cold iteration and two profiling ones (rog.schedules.profiler), then the plan
REPEATS = 5
PAIRED_CYCLES, PAIRED_BLOCK = 6, 2  # the paired run: every schedule in turn, 2 iterations a turn, 6 rotations
CAL_ITERATIONS, CAL_WARMUP = 6, 2
LINK_DELAY_MS = 10.0  # the paper's edge-cloud round trip (about 10 ms), held per transfer
# run_all.sh --seeds: refused (rog.experiment.items.module_item_seeds), with this reason
SEEDS_REFUSED = "its runs time synthetic inputs; its replicas are rounds in rotated orders (--repeats N)"
SWEEP_RATIOS = (0.25, 1.0, 4.0)
SWEEP_DELAYS_MS = (0.0, 10.0, 20.0)
SWEEP_SCHEDULES = ("sequential", "lbl", "ibatch", "dynacomm")
SWEEP_CYCLES = 3
SWEEP_MODELS = ("resnet152_mini", "inception_mini", "resnet_mini", "vgg_mini")  # the deepest first
OUTDOORS_BUDGET_S = 45
OUTDOORS = {
    "bsp": ["--library", "BSP"],
    "rog4": ["--library", "ROG", "--threshold", "4"],
    "dynacomm": ["--library", "BSP", "--schedule", "dynacomm", "--schedule-epoch-iterations", "20"],
    "dynacomm-iter": ["--library", "BSP", "--schedule", "dynacomm-iter"],
}
# measured here: 15-25 s per run (spawned workers import torch, then 10 iterations of 0.3-1.5 s)
ESTIMATE_S = (len(MODELS) * (1 + REPEATS * len(SCHEDULES)) * 20 + len(MODELS) * 60 + len(OUTDOORS) * (OUTDOORS_BUDGET_S + 35)
              + len(SWEEP_MODELS) * len(SWEEP_RATIOS) * len(SWEEP_DELAYS_MS) * 150)  # a sweep point: 60-250 s


def round_order(rep: int) -> tuple[str, ...]:
    """The schedules of round ``rep``: :data:`SCHEDULES` rotated to start at the ``rep``-th (no schedule
    always runs first, or always right after the same one)."""
    k = rep % len(SCHEDULES)
    return SCHEDULES[k:] + SCHEDULES[:k]


def outdoors_args(result_dir: Path, name: str) -> list[str]:
    """``scripts/run.py`` arguments of one outdoors run."""
    return ["--testbed", "loopback", "-c", "outdoors", "--compute-s", "0", "--compression", "none", "--workers", "2",
            "--budget-s", str(OUTDOORS_BUDGET_S), "--device", "cpu", "--eval-every", "1000", "--no-progress",
            "--item", NAME, "--result-dir", str(Path(result_dir) / NAME / "outdoors"), "-n", name, *OUTDOORS[name]]


def calibrated_rate_mbit(cal: dict, ratio: float = 1.0) -> float:
    """The calibration rule: Sequential's push + pull of the whole model take ``ratio`` x its forward +
    backward compute."""
    compute_s = float(cal["mean_fwd_compute_s"]) + float(cal["mean_bwd_compute_s"])
    return 2.0 * float(cal["payload_bytes"]) * 8.0 / (ratio * compute_s) / 1e6


def sweep_dir(model: str, ratio: float, delay_ms: float) -> str:
    """The folder name of one sweep point."""
    return f"sweep-{model}-r{ratio:g}-d{delay_ms:g}"


def _sweep(base: Path, model: str, cal: dict, dry_run: bool) -> int:
    """The sweep's paired runs of ``model`` (a point whose result.json exists is skipped)."""
    rc = 0
    n_iter = first_plan_iteration() + SWEEP_CYCLES * PAIRED_BLOCK * len(SWEEP_SCHEDULES) + 1
    for ratio in SWEEP_RATIOS:
        for delay in SWEEP_DELAYS_MS:
            d = base / sweep_dir(model, ratio, delay)
            done = (d / "result.json").exists()
            print(f"[dynacomm] {'skip (done)' if done else 'run'}: sweep {model} ratio {ratio:g} delay {delay:g} ms",
                  flush=True)
            if done or dry_run:
                continue
            rc |= _bench(["--model", model, "--workers", str(WORKERS), "--schedule", "paired",
                          "--paired-schedules", ",".join(SWEEP_SCHEDULES), "--paired-block", str(PAIRED_BLOCK),
                          "--rate-mbit", f"{calibrated_rate_mbit(cal, ratio):.3f}", "--link-delay-ms", f"{delay:g}",
                          "--iterations", str(n_iter), "--warmup", str(first_plan_iteration()), "--out", str(d)])
    return rc


def rounds_and_paired(out: Path, model: str, rate_mbit: float, delay_ms: float, repeats: int, label: str = "",
                      dry_run: bool = False) -> int:
    """``repeats`` rounds of :data:`SCHEDULES` in rotated orders (``out/<model>-<schedule>-r<round>``) and one paired
    run (``out/<model>-paired``) at ``rate_mbit`` and ``delay_ms`` per transfer; a step whose result.json exists is
    skipped.  ``label`` prefixes the printed lines (the setting)."""
    rc, common, tag = 0, ["--model", model, "--workers", str(WORKERS)], f"{label} " if label else ""
    link = ["--rate-mbit", f"{rate_mbit:.3f}", "--link-delay-ms", f"{delay_ms:g}"]
    for rep, sch in ((r, s) for r in range(repeats) for s in round_order(r)):
        d = Path(out) / f"{model}-{sch}-r{rep}"
        done = (d / "result.json").exists()
        print(f"[dynacomm] {'skip (done)' if done else 'run'}: {tag}{model} {sch} round {rep}", flush=True)
        if not (done or dry_run):
            rc |= _bench([*common, "--schedule", sch, *link, "--iterations", str(ITERATIONS), "--warmup", str(WARMUP),
                          "--out", str(d)])
    d = Path(out) / f"{model}-paired"
    done = (d / "result.json").exists()
    print(f"[dynacomm] {'skip (done)' if done else 'run'}: {tag}{model} paired", flush=True)
    if not (done or dry_run):
        n_iter = first_plan_iteration() + PAIRED_CYCLES * PAIRED_BLOCK * len(SCHEDULES) + 1
        rc |= _bench([*common, "--schedule", "paired", "--paired-block", str(PAIRED_BLOCK), *link, "--iterations",
                      str(n_iter), "--warmup", str(first_plan_iteration()), "--out", str(d)])
    return rc


def calibrate(base: Path, model: str, dry_run: bool) -> dict | None:
    """The unshaped Sequential calibration of ``model`` (``base/calibrate-<model>``), run when missing; its result
    (None on a dry run without it, or when it failed)."""
    cal_dir = Path(base) / f"calibrate-{model}"
    if not (cal_dir / "result.json").exists():
        print(f"[dynacomm] run: calibration of {model}", flush=True)
        if dry_run:
            return None
        _bench(["--model", model, "--workers", str(WORKERS), "--schedule", "sequential", "--iterations",
                str(CAL_ITERATIONS), "--warmup", str(CAL_WARMUP), "--out", str(cal_dir)])
    p = cal_dir / "result.json"
    return json.loads(p.read_text()) if p.exists() else None


def _bench(args: list[str]) -> int:
    return subprocess.call([sys.executable, "-m", "rog.papers.dynacomm.bench", *args], cwd=str(ROOT))


def main(argv=None) -> int:
    ap = item_parser("python -m rog.papers.dynacomm.item", __doc__)
    ap.add_argument("--repeats", type=int, default=REPEATS,
                    help=f"rounds of the schedules per model (default {REPEATS}; rounds already run are kept)")
    ap.add_argument("--link-delay-ms", type=link_delay_ms_arg, default=LINK_DELAY_MS,
                    help=f"per-transfer latency of the rounds and the paired run (default {LINK_DELAY_MS:g} ms)")
    ap.add_argument("--sweep-only", action="store_true", help="run the calibrations and the sweep only")
    ap.add_argument("--sweep-models", default=",".join(SWEEP_MODELS),
                    help=f"comma-separated models of the sweep (default {','.join(SWEEP_MODELS)})")
    a = ap.parse_args(argv)
    sweep_models = [m for m in a.sweep_models.split(",") if m]
    unknown = [m for m in sweep_models if m not in SWEEP_MODELS]
    if unknown or not sweep_models:
        ap.error(f"--sweep-models: unknown model(s) {unknown or '(none given)'}; choose from {','.join(SWEEP_MODELS)}")
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1 (got {a.repeats})")
    base = Path(a.result_dir) / NAME
    rc = 0
    for model in sweep_models:
        cal = calibrate(base, model, a.dry_run)
        if cal is not None:
            rc |= _sweep(base, model, cal, a.dry_run)
        elif not a.dry_run:
            rc |= 1
    for model in () if a.sweep_only else MODELS:
        cal = calibrate(base, model, a.dry_run)
        if cal is None:
            rc |= 0 if a.dry_run else 1
            continue
        rate = calibrated_rate_mbit(cal)
        print(f"[dynacomm] {model}: calibrated rate {rate:.1f} Mbit/s", flush=True)
        rc |= rounds_and_paired(base, model, rate, a.link_delay_ms, a.repeats, dry_run=a.dry_run)
    for name in () if a.sweep_only else OUTDOORS:
        done = any((Path(a.result_dir) / NAME / "outdoors").glob(f"*-{name}/DONE"))
        rc |= run_step("dynacomm", f"outdoors {name}", ["-m", RUN_MODULE, *outdoors_args(Path(a.result_dir), name)],
                       done, a.dry_run)
    if a.dry_run:
        print(f"[dynacomm] estimate {ESTIMATE_S / 60:.0f} min")
        return 0
    from .grading import graded_rows
    from .summary import dynacomm_markdown, plot_dynacomm

    md = base / "summary.md"
    md.write_text(dynacomm_markdown(a.result_dir, graded_rows(a.result_dir)))
    figs = plot_dynacomm(a.result_dir, a.figure_dir)
    print(f"[dynacomm] wrote {md} and {len(figs)} figure(s)")
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
