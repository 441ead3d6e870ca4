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
import sys
from pathlib import Path

from rog.schedules.profiler import first_plan_iteration

from rog.experiment.config import RUN_MODULE
from rog.experiment.links import link_delay_ms_arg
from rog.experiment.module_item import Blocked, ModuleItem, Step, Summary, item_main

__all__ = ["NAME", "MODELS", "SCHEDULES", "ESTIMATE_S", "calibrated_rate_mbit", "round_order", "rounds_and_paired",
           "calibrate", "ITEM", "main"]

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


def _bench(label: str, args: list[str], folder: Path) -> Step:
    """A :mod:`rog.papers.dynacomm.bench` run into ``folder`` (done when its result.json is there)."""
    return Step(label, ["-m", "rog.papers.dynacomm.bench", *args, "--out", str(folder)], (folder / "result.json").exists())


def _sweep(base: Path, model: str, cal: dict):
    """The sweep's paired runs of ``model``."""
    n_iter = first_plan_iteration() + SWEEP_CYCLES * PAIRED_BLOCK * len(SWEEP_SCHEDULES) + 1
    for ratio in SWEEP_RATIOS:
        for delay in SWEEP_DELAYS_MS:
            yield _bench(f"sweep {model} ratio {ratio:g} delay {delay:g} ms",
                         ["--model", model, "--workers", str(WORKERS), "--schedule", "paired",
                          "--paired-schedules", ",".join(SWEEP_SCHEDULES), "--paired-block", str(PAIRED_BLOCK),
                          "--rate-mbit", f"{calibrated_rate_mbit(cal, ratio):.3f}", "--link-delay-ms", f"{delay:g}",
                          "--iterations", str(n_iter), "--warmup", str(first_plan_iteration())],
                         base / sweep_dir(model, ratio, delay))


def rounds_and_paired(out: Path, model: str, rate_mbit: float, delay_ms: float, repeats: int, label: str = ""):
    """The steps of ``repeats`` rounds of :data:`SCHEDULES` in rotated orders (``out/<model>-<schedule>-r<round>``) and
    one paired run (``out/<model>-paired``) at ``rate_mbit`` and ``delay_ms`` per transfer.  ``label`` prefixes the
    printed lines (the setting)."""
    common, tag = ["--model", model, "--workers", str(WORKERS)], f"{label} " if label else ""
    link = ["--rate-mbit", f"{rate_mbit:.3f}", "--link-delay-ms", f"{delay_ms:g}"]
    for rep, sch in ((r, s) for r in range(repeats) for s in round_order(r)):
        yield _bench(f"{tag}{model} {sch} round {rep}", [*common, "--schedule", sch, *link, "--iterations",
                                                         str(ITERATIONS), "--warmup", str(WARMUP)],
                     Path(out) / f"{model}-{sch}-r{rep}")
    n_iter = first_plan_iteration() + PAIRED_CYCLES * PAIRED_BLOCK * len(SCHEDULES) + 1
    yield _bench(f"{tag}{model} paired", [*common, "--schedule", "paired", "--paired-block", str(PAIRED_BLOCK), *link,
                                          "--iterations", str(n_iter), "--warmup", str(first_plan_iteration())],
                 Path(out) / f"{model}-paired")


def calibrate(base: Path, model: str):
    """The unshaped Sequential calibration of ``model`` (``base/calibrate-<model>``): its step when missing
    (``cal = yield from calibrate(...)``); returns its result (None when it is not there after the step)."""
    cal_dir = Path(base) / f"calibrate-{model}"
    if not (cal_dir / "result.json").exists():
        yield _bench(f"calibration of {model}", ["--model", model, "--workers", str(WORKERS), "--schedule", "sequential",
                                                 "--iterations", str(CAL_ITERATIONS), "--warmup", str(CAL_WARMUP)],
                     cal_dir)
    p = cal_dir / "result.json"
    return json.loads(p.read_text()) if p.exists() else None


def _steps(a):
    base = Path(a.result_dir) / NAME
    for model in a.sweep_model_list:
        cal = yield from calibrate(base, model)
        yield from _sweep(base, model, cal) if cal is not None else [Blocked(f"sweep {model}", "no calibration")]
    for model in () if a.sweep_only else MODELS:
        cal = yield from calibrate(base, model)
        if cal is None:
            yield Blocked(f"{model}: {a.repeats} rounds and the paired run", "no calibration")
            continue
        rate = calibrated_rate_mbit(cal)
        print(f"[dynacomm] {model}: calibrated rate {rate:.1f} Mbit/s", flush=True)
        yield from rounds_and_paired(base, model, rate, a.link_delay_ms, a.repeats)
    for name in () if a.sweep_only else OUTDOORS:
        done = any((base / "outdoors").glob(f"*-{name}/DONE"))
        yield Step(f"outdoors {name}", ["-m", RUN_MODULE, *outdoors_args(Path(a.result_dir), name)], done)


def _arguments(ap) -> None:
    ap.add_argument("--repeats", type=int, default=REPEATS,
                    help=f"rounds of the schedules per model (default {REPEATS}; rounds already run are kept)")
    ap.add_argument("--link-delay-ms", type=link_delay_ms_arg, default=LINK_DELAY_MS,
                    help=f"per-transfer latency of the rounds and the paired run (default {LINK_DELAY_MS:g} ms)")
    ap.add_argument("--sweep-only", action="store_true", help="run the calibrations and the sweep only")
    ap.add_argument("--sweep-models", default=",".join(SWEEP_MODELS),
                    help=f"comma-separated models of the sweep (default {','.join(SWEEP_MODELS)})")


def _check(a, ap) -> None:
    a.sweep_model_list = [m for m in a.sweep_models.split(",") if m]
    unknown = [m for m in a.sweep_model_list if m not in SWEEP_MODELS]
    if unknown or not a.sweep_model_list:
        ap.error(f"--sweep-models: unknown model(s) {unknown or '(none given)'}; choose from {','.join(SWEEP_MODELS)}")
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1 (got {a.repeats})")
    return None


def _summarise(a, rc: int) -> Summary:
    from .grading import graded_rows
    from .summary import dynacomm_markdown, plot_dynacomm

    return Summary(dynacomm_markdown(a.result_dir, graded_rows(a.result_dir)),
                   figures=plot_dynacomm(a.result_dir, a.figure_dir))


ITEM = ModuleItem(tag=NAME, folder=NAME, prog="python -m rog.papers.dynacomm.item", doc=__doc__, steps=_steps,
                  summarise=_summarise, arguments=_arguments, check=_check, estimate_s=lambda a: ESTIMATE_S)


def main(argv=None) -> int:
    return item_main(ITEM, argv)


if __name__ == "__main__":
    sys.exit(main())
