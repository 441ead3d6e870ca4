"""Streaming training data (ScaDLES, Tyagi & Swany, IEEE BigData 2022): per-worker arrival processes,
the ``persistence`` / ``truncate`` buffers with a blocking take on the arrival clock
(:mod:`rog.streams.source`), ScaDLES's rate sets and the batch policies (:mod:`rog.streams.rates`),
and batch-weighted aggregation with the linear learning-rate rule (:mod:`rog.streams.weighting`).
Torch-free."""

from .rates import BATCH_POLICIES, RATE_SETS, batch_size, draw_rates, set_scale
from .source import BUFFERS, ArrivalProcess, RateTrace, RateTraceError, StreamBuffer, load_rate_trace
from .weighting import update_multiplier

__all__ = ["ArrivalProcess", "RateTrace", "RateTraceError", "StreamBuffer", "load_rate_trace", "BUFFERS",
           "RATE_SETS", "BATCH_POLICIES", "draw_rates", "set_scale", "batch_size", "update_multiplier"]
