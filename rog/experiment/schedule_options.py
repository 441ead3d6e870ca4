"""run.py's ``--schedule`` flag (intra-iteration transfer schedule), its checks, and the worker-side hook.

* ``--schedule sequential`` (default): one push after the backward pass, one pull before the next
  forward pass (the engine as it always was);
* ``lbl``, ``ibatch``, ``dynacomm``, ``dynacomm-iter``: pulls and pushes in layer segments
  overlapped with the forward and backward passes (:mod:`rog.schedules`); ``dynacomm`` re-plans
  once per epoch (``--schedule-epoch-iterations``, default one epoch of the worker's shard),
  ``dynacomm-iter`` every iteration from a moving average of the measured goodput.

The segmented schedules need a whole-model system (BSP or SSP), one mini-batch per iteration
(``-b 1``), CPU training and no compute pacing (they overlap real compute; a pacing sleep has no
layer to belong to).  Every bad combination exits with one line naming the flag and the fix.
"""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from rog.errors import ConfigError
from rog.policies.registry import segmented_systems
from rog.schedules import SCHEDULES



class OptionError(ValueError):
    """A bad flag value; the message names the flag and the fix."""


def add_arguments(groups: Mapping[str, Any]) -> None:
    """Add the flags to run.py's ``schedule`` argument group."""
    p = groups["schedule"]
    p.add_argument("--schedule", choices=tuple(SCHEDULES), default="sequential",
                   help="transfer schedule inside an iteration: sequential (default: push after backward, pull "
                        "before forward), lbl, ibatch, dynacomm (layer segments overlapped with compute, DP re-planned "
                        "per epoch) or dynacomm-iter (re-planned every iteration); see docs/dynacomm.md")
    p.add_argument("--schedule-epoch-iterations", type=int, default=None,
                   help="iterations between re-plans of ibatch/dynacomm (default: one epoch of the worker's shard)")


def check(a: argparse.Namespace, compute_s: float | None, device: str) -> None:
    """Raise :class:`OptionError` for a segmented schedule the run cannot carry."""
    if a.schedule_epoch_iterations is not None and a.schedule_epoch_iterations < 1:
        raise OptionError(f"--schedule-epoch-iterations must be >= 1, got {a.schedule_epoch_iterations}")
    if a.schedule == "sequential":
        return
    flag = f"--schedule {a.schedule}"
    if a.library not in segmented_systems():  # the policy says (Policy.segmented_schedules), not its name
        raise OptionError(f"{flag} needs a whole-model system: add --library "
                          f"{' or --library '.join(segmented_systems())} (got {a.library})")
    if a.batchsize != 1:
        raise OptionError(f"{flag} streams one mini-batch's gradients: use -b 1 (got -b {a.batchsize})")
    if compute_s:
        raise OptionError(f"{flag} overlaps real compute with communication; compute pacing ({compute_s:g} s) "
                          "cannot be placed in layers: add --compute-s 0")
    if str(device).startswith("cuda"):
        raise OptionError(f"{flag} runs on the CPU path: add --device cpu")
    streams = [f for f in ("stream_rate", "stream_set", "stream_trace") if getattr(a, f, None) is not None]
    if streams:
        raise OptionError(f"{flag} takes one fixed mini-batch per iteration; a stream's batches vary: drop "
                          f"--{streams[0].replace('_', '-')} or use --schedule sequential")


def resolve(a: argparse.Namespace, compute_s: float | None, device: str) -> dict:
    """What config.yaml records: the schedule and its re-planning period (None: one epoch); a bad
    combination raises :class:`~rog.errors.ConfigError` (one line, the command exits 2)."""
    try:
        check(a, compute_s, device)
    except OptionError as e:
        raise ConfigError(str(e)) from None
    return dict(name=a.schedule, epoch_iterations=a.schedule_epoch_iterations)


def make_trainer(cfg: dict, model, opt, wl, k: int):
    """The worker's :class:`~rog.schedules.trainer.ScheduledTrainer`, or None under ``sequential``."""
    sch = cfg.get("schedule") or {}
    if sch.get("name", "sequential") == "sequential":
        return None
    from rog.schedules.trainer import ScheduledTrainer

    x, _ = next(wl.worker_batches(k, cfg["base_batch"], seed=cfg["seed"]))
    every = sch.get("epoch_iterations") or max(1, len(wl.shards[k]) // cfg["base_batch"])
    return ScheduledTrainer(model, opt, sch["name"], x[:1].to(opt.device), epoch_iterations=every)
