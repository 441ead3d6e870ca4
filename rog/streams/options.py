"""ScaDLES's streaming options as the user gives them (``run.py --stream-*``, ``--batch-*``,
``--weighted-aggregation``, ``--lr-scaling``): one frozen dataclass, checked here and nowhere else.

The checks that need the rest of the run (one rate or trace per worker, the files' content, the system's
runtime, the compute pacing a rate set scales by) and what they resolve to (``config.yaml``'s ``stream``:
rates, batches, window) are :mod:`rog.experiment.stream_options`'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Optional

from rog.errors import ConfigError
from rog.options import check_choices, field_flag, option

from .rates import BATCH_POLICIES, RATE_SETS
from .source import BUFFERS

FLAG_PREFIX = "stream"  # run.py --stream-<option>; the batch and aggregation flags keep their names
LR_SCALINGS = ("linear", "off")
SOURCES = ("rate", "set", "trace")  # the fields that name a stream source (one of them, or none: no streaming)


@dataclass(frozen=True)
class Options:
    """The streaming flags (see the module doc)."""

    rate: Optional[str] = option(None, "stream each worker's shard at this many samples/s (one number, or one per "
                                       "worker: 40,12,80,30)")
    set: Optional[str] = option(None, "draw each worker's rate from ScaDLES's set (Table I), scaled to this machine "
                                      "(docs/scadles.md)", choices=tuple(RATE_SETS))
    scale: Optional[float] = option(None, "--stream-set: factor on the paper's rates (default (batch / 64) x "
                                          "(1.2 s / compute_s))")
    trace: Optional[str] = option(None, "rate trace(s), t_s,samples_per_s CSV: one file, or one per worker "
                                        "comma-separated")
    buffer: str = option("persistence", "persistence keeps every unused sample; truncate keeps at most "
                                        "max(rate x 1 s, batch)", choices=BUFFERS)
    batch_policy: str = option("fixed", "fixed = the run's batch; rate_proportional = clip(rate x window, 8, 1024)",
                               flag="--batch-policy", choices=BATCH_POLICIES)
    batch_window_s: Optional[float] = option(None, "rate_proportional: the window in seconds (default 1, x compute_s "
                                                   "/ 1.2 s with --stream-set)", flag="--batch-window-s")
    weighted_aggregation: bool = option(True, "streaming: weight each worker's update by its batch share",
                                        flag="--weighted-aggregation")
    lr_scaling: str = option("linear", "streaming: multiply the learning rate by the team's batch sum / (batch x "
                                       "workers)", flag="--lr-scaling", choices=LR_SCALINGS)

    def __post_init__(self) -> None:
        flag = lambda name: field_flag(Options, name, FLAG_PREFIX)  # noqa: E731
        sources = [flag(name) for name in SOURCES if getattr(self, name) is not None]
        if len(sources) > 1:
            raise ConfigError(f"{' and '.join(sources)} exclude each other: give one stream source")
        if not sources:
            given = [flag(f.name) for f in fields(self) if f.name not in SOURCES and getattr(self, f.name) != f.default]
            if given:
                raise ConfigError(f"{given[0]} applies to streaming runs: add --stream-rate, --stream-set or "
                                  f"--stream-trace")
            return
        check_choices(self, FLAG_PREFIX)
        if self.scale is not None and (self.set is None or not (self.scale > 0 and math.isfinite(self.scale))):
            raise ConfigError(f"--stream-scale must be a positive factor and goes with --stream-set, got {self.scale:g}")
        window = self.batch_window_s
        if window is not None and not (window > 0 and math.isfinite(window)):
            raise ConfigError(f"--batch-window-s must be a positive number of seconds, got {window:g}; e.g. 1")

    @property
    def streaming(self) -> bool:
        """Whether the run streams (a source is given)."""
        return any(getattr(self, name) is not None for name in SOURCES)
