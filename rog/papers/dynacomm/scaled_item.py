"""The ``dynacomm-scaled`` item (opt-in): DynaComm's rules 1-4 for the next runs (docs/dynacomm.md), one command.

``bash scripts/run_all.sh dynacomm-scaled`` (or ``python -m rog.papers.dynacomm.scaled_item``) runs, on the models
with a paper counterpart (:data:`rog.papers.dynacomm.scaling.STAND_IN`: ``vgg_mini`` for VGG-19, the 155-layer
``resnet152_mini`` for ResNet-152), the unshaped calibration when missing, then per setting of
:data:`rog.papers.dynacomm.scaling.SETTINGS` the five schedules in :data:`REPEATS` rotated rounds and one paired run
(:func:`rog.papers.dynacomm.item.rounds_and_paired`):

* ``r1-d10``: ratio 1 at 10 ms, the ``dynacomm`` item's own setting, in its folders (``R/dynacomm/``; rule 1's rounds
  on ``resnet152_mini``);
* ``r1-scaled``: ratio 1 at ``d_ours = 10 ms x c_ours / c_paper`` (rule 2), in ``R/dynacomm/r1-scaled/``;
* ``jetson-scaled``: the Jetson-class ratio 4.63 (rule 3) at ``d_ours``, in ``R/dynacomm/jetson-scaled/``.

A step whose result.json exists is skipped (rounds already run are never rerun: rule 4).  Then
``R/dynacomm/scaled.md``: each setting's claims, naming its ratio and delay (:func:`rog.papers.dynacomm.grading.
setting_rows`).  A dry run without the calibrations lists the calibrations and the rounds to come.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rog.experiment.module_item import Blocked, ModuleItem, Summary, item_main

from . import item as DI
from .scaling import SETTINGS, STAND_IN, setting_ratio_and_delay

__all__ = ["NAME", "MODELS", "REPEATS", "ESTIMATE_S", "SEEDS_REFUSED", "setting_dir", "ITEM", "main"]

NAME = "dynacomm-scaled"
MODELS = tuple(STAND_IN)  # vgg_mini, resnet152_mini
REPEATS = 3  # rule 4: three fresh orders
SEEDS_REFUSED = DI.SEEDS_REFUSED
# The estimate: each run's start-up (about 15 s) plus its iterations at Sequential's time, compute x (1 + ratio), and
# LBL's and iBatch's backward 2 L d in 2 of the 5 schedules; compute per iteration from the calibrations measured
# here on 2026-11-26 (docs/dynacomm.md: vgg_mini 0.512 s, resnet152_mini 0.349 s); d_ours taken as 1 ms (below it).
START_S, CAL_COMPUTE_S, SCALED_DELAY_GUESS_MS = 15.0, {"vgg_mini": 0.512, "resnet152_mini": 0.349}, 1.0


def _estimate_s() -> float:
    from .nulls import MODEL_LAYERS
    from rog.schedules.profiler import first_plan_iteration

    total = 0.0
    paired = first_plan_iteration() + DI.PAIRED_CYCLES * DI.PAIRED_BLOCK * len(DI.SCHEDULES) + 1
    for model in MODELS:
        c, layers = CAL_COMPUTE_S[model], MODEL_LAYERS[model]
        total += START_S + DI.CAL_ITERATIONS * c
        for ratio, delay in SETTINGS.values():
            d_s = (SCALED_DELAY_GUESS_MS if delay == "scaled" else float(delay)) / 1e3
            it_s = c * (1.0 + ratio) + 2 * layers * d_s * 2 / len(DI.SCHEDULES)
            total += REPEATS * len(DI.SCHEDULES) * (START_S + DI.ITERATIONS * it_s) + START_S + paired * it_s
    return total


ESTIMATE_S = _estimate_s()


def setting_dir(result_dir: Path, setting: str) -> Path:
    """Where a setting's rounds go: the ``dynacomm`` item's folder for its own setting, else a folder per setting."""
    base = Path(result_dir) / DI.NAME
    return base if setting == "r1-d10" else base / setting


def _steps(a):
    base = Path(a.result_dir) / DI.NAME
    for model in MODELS:
        cal = yield from DI.calibrate(base, model)
        for setting in SETTINGS:
            if cal is None:
                yield Blocked(f"{setting} {model}: {a.repeats} rounds and the paired run (rate and delay from the "
                              "calibration)", "no calibration")
                continue
            ratio, delay_ms = setting_ratio_and_delay(setting, cal, model)
            rate = DI.calibrated_rate_mbit(cal, ratio)
            print(f"[dynacomm] {setting} {model}: ratio {ratio:.2f}, {rate:.1f} Mbit/s, {delay_ms:.3f} ms per transfer",
                  flush=True)
            yield from DI.rounds_and_paired(setting_dir(a.result_dir, setting), model, rate, delay_ms, a.repeats, setting)


def _check(a, ap) -> None:
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1 (got {a.repeats})")
    return None


def _summarise(a, rc: int) -> Summary:
    from .grading import scaled_markdown

    return Summary(scaled_markdown(a.result_dir), file="scaled.md",
                   last_line={"settings": list(SETTINGS), "models": list(MODELS), "failed": bool(rc)})


ITEM = ModuleItem(
    tag=DI.NAME, folder=DI.NAME, prog="python -m rog.papers.dynacomm.scaled_item", doc=__doc__, steps=_steps,
    summarise=_summarise, check=_check, estimate_s=lambda a: ESTIMATE_S,
    arguments=lambda ap: ap.add_argument("--repeats", type=int, default=REPEATS,
                                         help=f"rounds per setting and model (default {REPEATS}: rule 4)"))


def main(argv=None) -> int:
    return item_main(ITEM, argv)


if __name__ == "__main__":
    sys.exit(main())
