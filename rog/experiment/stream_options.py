"""run.py's streaming flags (ScaDLES), made from :class:`rog.streams.options.Options` (which checks their
values), the checks that need the workers, the files or the system, and ``config.yaml``'s ``stream`` section.

A source is one of ``--stream-rate R`` (samples/s, one for every worker or one per worker), ``--stream-set
S1|S2|S1p|S2p`` (rates drawn from ScaDLES's Table I with ``--seed``, scaled to this machine by
:func:`rog.streams.rates.set_scale` unless ``--stream-scale``) or ``--stream-trace FILE[,FILE...]`` (``t_s,
samples_per_s`` CSVs).  Without a source the run does not stream and the other flags stay at their defaults.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Mapping

from rog.errors import ConfigError
from rog.options import add_option_flags, options_from
from rog.policies.registry import engine_systems, has_own_runtime
from rog.streams import rates as R
from rog.streams.options import FLAG_PREFIX, Options
from rog.streams.source import RateTraceError, load_rate_trace


def add_arguments(groups: Mapping[str, Any]) -> None:
    """Add the streaming flags (made from :class:`rog.streams.options.Options`) to run.py's ``streams`` group."""
    add_option_flags(groups["streams"], Options, FLAG_PREFIX, "streams")


def _per_worker(text: str, n_workers: int, flag: str, what: str) -> list[str]:
    """A comma-separated ``flag`` value as one item per worker (one item: the same for all)."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    items = items * n_workers if len(items) == 1 else items
    if len(items) != n_workers:
        raise ConfigError(f"{flag}: got {len(items)} {what} for {n_workers} workers; give one for all or one per worker")
    return items


def _rates(text: str, n_workers: int) -> list[float]:
    items = _per_worker(text, n_workers, "--stream-rate", "rates")  # a ConfigError is a ValueError: not in the try
    try:
        vals = [float(x) for x in items]
    except ValueError:
        raise ConfigError(f"--stream-rate: {text!r} is not a number or comma-separated list; give samples per second, "
                          f"e.g. 40 or one per worker") from None
    bad = [v for v in vals if not (v > 0 and math.isfinite(v))]
    if bad:
        raise ConfigError(f"--stream-rate: rates must be positive numbers of samples per second, got {bad[0]:g}; e.g. 40")
    return vals


def _traces(text: str, n_workers: int) -> list:
    out = []
    for p in _per_worker(text, n_workers, "--stream-trace", "files"):
        try:
            out.append((p, load_rate_trace(p)))
        except RateTraceError as e:
            raise ConfigError(f"--stream-trace: {e}") from None
    return out


def _checked(a: argparse.Namespace) -> tuple[list[float] | None, list | None] | None:
    """The options' own check (:class:`rog.streams.options.Options`), then the rates, the trace files (each loaded
    once) and the system; None when the run does not stream, else the rates and the loaded traces (either None)."""
    if not options_from(a, Options, FLAG_PREFIX).streaming:
        return None
    rates = _rates(a.stream_rate, a.workers) if a.stream_rate is not None else None
    loaded = _traces(a.stream_trace, a.workers) if a.stream_trace is not None else None
    lib = getattr(a, "library", None)
    if lib is not None and has_own_runtime(lib):
        raise ConfigError(f"--stream-* streams data into the ROG engine's systems; {lib} runs its own runtime and does "
                          f"not stream: choose --library {', '.join(engine_systems())}")
    return rates, loaded


def check(a: argparse.Namespace) -> None:
    """run.py's check of the streaming flags (:class:`~rog.errors.ConfigError` naming the flag)."""
    _checked(a)


def resolve(a: argparse.Namespace, compute_s: float | None, fixed_batch: int) -> dict | None:
    """The ``stream`` section of config.yaml (None: no streaming): the source (rate, set or trace), the set and its
    ``scale`` (the paper's rates to this machine's), the rates (samples/s; a trace's mean), each worker's nominal
    batch (``batch_policy`` over ``window_s``, ``fixed_batch`` the linear rule's b_ref), the buffer, the ablations."""
    given_rates, loaded = _checked(a) or (None, None)
    W, traces, scale, window = a.workers, [None] * a.workers, None, a.batch_window_s
    if given_rates is not None:
        rates, source = given_rates, "rate"
    elif loaded is not None:
        traces, rates, source = [str(p) for p, _ in loaded], [t.mean_rate for _, t in loaded], "trace"
    elif a.stream_set is not None:
        if a.stream_scale is None and compute_s is None:
            raise ConfigError("--stream-set scales ScaDLES's rates by the run's compute pacing time, and this run is "
                              "unpaced: add --profile quick-cpu or --compute-s S, or give --stream-scale")
        scale = a.stream_scale if a.stream_scale is not None else R.set_scale(fixed_batch, compute_s)
        rates, source = R.draw_rates(a.stream_set, W, a.seed, scale), "set"
        if window is None:
            window = fixed_batch / (R.PAPER_BATCH * scale)  # = compute_s / 1.2 s with the default scale
    else:
        return None
    window = 1.0 if window is None else float(window)
    return dict(source=source, set=a.stream_set, scale=scale, rates=[round(float(r), 3) for r in rates],
                traces=traces, buffer=a.stream_buffer, batch_policy=a.batch_policy, window_s=window,
                fixed_batch=int(fixed_batch),
                batches=[R.batch_size(a.batch_policy, r, window, fixed_batch) for r in rates],
                weighted_aggregation=bool(a.weighted_aggregation),  # update x W b_i / sum b
                lr_scaling=a.lr_scaling == "linear")  # lr x sum b / (b_ref W)
