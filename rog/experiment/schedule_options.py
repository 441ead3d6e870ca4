"""run.py's ``--schedule`` (the transfer schedule inside an iteration, :mod:`rog.schedules`), the schedules'
options and ``--pacing``, made from their dataclasses (which check the values; a new schedule's options need no
line here), and the run-wide checks of a segmented schedule.

A segmented schedule (``lbl``, ``ibatch``, ``dynacomm``, ``dynacomm-iter``) overlaps layer segments' transfers
with compute, so it needs a whole-model system (BSP or SSP), one mini-batch per iteration (``-b 1``), the CPU
path and per-layer pacing or none; every bad combination exits with one line naming the flag and the fix.  The
worker side is :mod:`rog.schedules.setup`.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Mapping

from rog.errors import ConfigError
from rog.options import add_option_flags, options_from
from rog.policies.registry import has_own_runtime, segmented_systems
from rog.schedules import SCHEDULES, Schedule
from rog.schedules.options import PACING_PREFIX, Pacing


def _option_classes() -> dict:
    """``{options dataclass: [schedule names]}`` of the registered schedules that declare options."""
    out: dict = {}
    for name, sch in SCHEDULES.items():
        if sch.options is not None:
            out.setdefault(sch.options, []).append(name)
    return out


def add_arguments(groups: Mapping[str, Any]) -> None:
    """Add the flags to run.py's ``schedule`` argument group."""
    p = groups["schedule"]
    p.add_argument("--schedule", choices=tuple(SCHEDULES), default="sequential",
                   help="transfer schedule inside an iteration: sequential (default: push after backward, pull "
                        "before forward), lbl, ibatch, dynacomm (layer segments overlapped with compute, DP re-planned "
                        "per epoch) or dynacomm-iter (re-planned every iteration); see docs/dynacomm.md")
    for cls, names in _option_classes().items():
        add_option_flags(p, cls, Schedule.run_options, ", ".join(names))
    add_option_flags(p, Pacing, PACING_PREFIX, "compute pacing")


def schedule_options(a: argparse.Namespace) -> dict:
    """Every schedule option from the flags as one dict, each checked by its dataclass (ConfigError)."""
    out: dict = {}
    for cls in _option_classes():
        out.update(dataclasses.asdict(options_from(a, cls, Schedule.run_options)))
    return out


def check_options(a: argparse.Namespace) -> None:
    """run.py's check of the schedule options and ``--pacing``, each by its dataclass (ConfigError naming the flag)."""
    schedule_options(a)
    options_from(a, Pacing, PACING_PREFIX)


def check(a: argparse.Namespace, compute_s: float | None, device: str) -> None:
    """Raise :class:`~rog.errors.ConfigError` for a bad option or a segmented schedule the run cannot carry."""
    schedule_options(a)
    if a.schedule == "sequential":
        return
    flag = f"--schedule {a.schedule}"
    if a.library not in segmented_systems():  # the policy says (Policy.segmented_schedules), not its name
        raise ConfigError(f"{flag} needs a whole-model system: add --library "
                          f"{' or --library '.join(segmented_systems())} (got {a.library})")
    if a.batchsize != 1:
        raise ConfigError(f"{flag} streams one mini-batch's gradients: use -b 1 (got -b {a.batchsize})")
    if compute_s and getattr(a, "pacing", "iteration") != "layer":
        raise ConfigError(f"{flag} overlaps compute with segment transfers; end-of-iteration pacing ({compute_s:g} s) "
                          "has no layer to belong to: add --pacing layer (or --compute-s 0 for no pacing)")
    if str(device).startswith("cuda"):
        raise ConfigError(f"{flag} runs on the CPU path: add --device cpu")
    streams = [f for f in ("stream_rate", "stream_set", "stream_trace") if getattr(a, f, None) is not None]
    if streams:
        raise ConfigError(f"{flag} takes one fixed mini-batch per iteration; a stream's batches vary: drop "
                          f"--{streams[0].replace('_', '-')} or use --schedule sequential")


def resolve(a: argparse.Namespace, compute_s: float | None, device: str) -> dict:
    """What config.yaml records as ``schedule``: the name and every schedule option (a bad combination:
    :class:`~rog.errors.ConfigError`, one line, the command exits 2)."""
    check(a, compute_s, device)
    return dict(name=a.schedule, **schedule_options(a))


def resolve_pacing(a: argparse.Namespace, device: str) -> str:
    """What config.yaml records as ``pacing``; a combination per-layer pacing cannot carry raises ConfigError."""
    mode = options_from(a, Pacing, PACING_PREFIX).pacing
    if mode == "layer" and has_own_runtime(a.library):
        raise ConfigError(f"--pacing layer: {a.library} paces inside its own runtime (its all-reduce hook); "
                          "use --pacing iteration")
    if mode == "layer" and str(device).startswith("cuda"):
        raise ConfigError("--pacing layer times each layer on the CPU path (CUDA runs asynchronously): add "
                          "--device cpu or use --pacing iteration")
    return mode
