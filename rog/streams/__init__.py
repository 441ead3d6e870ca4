"""Streaming training data (ScaDLES, Tyagi & Swany, IEEE BigData 2022): per-worker arrival processes,
the ``persistence`` / ``truncate`` buffers with a blocking take on the arrival clock
(:mod:`rog.streams.source`), ScaDLES's rate sets and the batch policies (:mod:`rog.streams.rates`),
and batch-weighted aggregation with the linear learning-rate rule (:mod:`rog.streams.weighting`);
(alpha, beta) data injection as a wrapper of a worker's batches (:mod:`rog.streams.inject`) and the relay
its samples cross next to the parameter server (:mod:`rog.streams.inject_relay`), both imported on use.
Torch-free at import (the injection wrapper imports torch when it builds a batch)."""

from .rates import BATCH_POLICIES, RATE_SETS, batch_size, draw_rates, set_scale
from .source import BUFFERS, ArrivalProcess, RateTrace, RateTraceError, StreamBuffer, load_rate_trace
from .weighting import update_multiplier

__all__ = ["ArrivalProcess", "RateTrace", "RateTraceError", "StreamBuffer", "load_rate_trace", "BUFFERS",
           "RATE_SETS", "BATCH_POLICIES", "draw_rates", "set_scale", "batch_size", "update_multiplier"]
