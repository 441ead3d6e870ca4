"""The schedules' options as frozen dataclasses (:mod:`rog.options`), torch-free beside the registry.

* :class:`EpochReplan`: a schedule that re-plans per epoch (``ibatch``, ``dynacomm``) may re-plan every
  ``epoch_iterations`` iterations instead (``--schedule-epoch-iterations``; default one epoch of the
  worker's shard).  :data:`rog.schedules.SCHEDULES` names it as those entries' ``options``.
* :class:`Pacing`: where compute pacing sleeps (``--pacing``), for every schedule and system:
  ``iteration`` once at the end of the iteration's compute, ``layer`` each layer's measured share
  right after its forward / backward pass (:mod:`rog.schedules.pacing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from rog.errors import ConfigError
from rog.options import check_choices, option

FLAG_PREFIX = "schedule"  # --schedule-<field>
PACING_PREFIX = "pacing"
PACING_MODES = ("iteration", "layer")


@dataclass(frozen=True)
class EpochReplan:
    """Options of a schedule that re-plans per epoch."""

    epoch_iterations: Optional[int] = option(
        None, "iterations between re-plans (default: one epoch of the worker's shard)")

    def __post_init__(self) -> None:
        if self.epoch_iterations is not None and self.epoch_iterations < 1:
            raise ConfigError(f"--schedule-epoch-iterations must be >= 1, got {self.epoch_iterations}; give a "
                              "number of iterations, or leave it out for one epoch")


@dataclass(frozen=True)
class Pacing:
    """Where compute pacing sleeps (``config.yaml``'s ``pacing``)."""

    pacing: str = option("iteration", "once, at the end of the iteration's compute (iteration) or each layer's "
                         "measured share of the paced time right after its forward / backward (layer; needed by the "
                         "segmented schedules under a paced profile)", flag="--pacing", choices=PACING_MODES)

    def __post_init__(self) -> None:
        check_choices(self, PACING_PREFIX)
