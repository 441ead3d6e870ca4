"""run.py flags for streaming data (ScaDLES), their checks, and the ``stream`` section of ``config.yaml``.

* a source (one of): ``--stream-rate R`` (samples/s; one number for every worker or one per worker),
  ``--stream-set S1|S2|S1p|S2p`` (a rate per worker drawn from ScaDLES's Table I, seeded by ``--seed``
  and scaled to this machine by :func:`rog.streams.rates.set_scale`; ``--stream-scale`` overrides the
  factor), ``--stream-trace FILE`` (a ``t_s,samples_per_s`` CSV; one file, or one per worker, comma-separated);
* ``--stream-buffer persistence|truncate``; ``--batch-policy fixed|rate_proportional`` with
  ``--batch-window-s`` (default 1 s, scaled like the rates with ``--stream-set``);
* ``--weighted-aggregation on|off`` and ``--lr-scaling linear|off`` (ablations; both on by default).

Without a source the run does not stream and the other flags must stay at their defaults.  The flags are
made from :class:`rog.streams.options.Options`, which checks their values; every bad value exits with one
line naming the flag or file and the fix (:class:`OptionError`, or the options' ConfigError).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Mapping

from rog.errors import ConfigError

from rog.options import add_option_flags, options_from
from rog.policies.registry import has_own_runtime, system_names
from rog.streams import rates as R
from rog.streams.options import FLAG_PREFIX, Options
from rog.streams.source import RateTraceError, load_rate_trace


OptionError = ConfigError  # the older name of a bad flag value's error (the message names the flag and the fix)


def add_arguments(groups: Mapping[str, Any]) -> None:
    """Add the streaming flags (made from :class:`rog.streams.options.Options`) to run.py's ``streams`` group."""
    add_option_flags(groups["streams"], Options, FLAG_PREFIX, "streams")


def _rates(text: str, n_workers: int) -> list[float]:
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise OptionError(f"--stream-rate: {text!r} is not a number or comma-separated list; give samples per second, "
                          f"e.g. 40 or one per worker") from None
    if len(vals) == 1:
        vals = vals * n_workers
    if len(vals) != n_workers:
        raise OptionError(f"--stream-rate: got {len(vals)} rates for {n_workers} workers; give one for all or one per worker")
    bad = [v for v in vals if not (v > 0 and math.isfinite(v))]
    if bad:
        raise OptionError(f"--stream-rate: rates must be positive numbers of samples per second, got {bad[0]:g}; e.g. 40")
    return vals


def check(a: argparse.Namespace) -> None:
    """Check the flags that need no run configuration (run.py's parse_args): the options' own checks
    (:class:`rog.streams.options.Options`, ConfigError), then the ones that need the workers, the files and the
    system; raise :class:`OptionError`."""
    if not options_from(a, Options, FLAG_PREFIX).streaming:
        return
    if a.stream_rate is not None:
        _rates(a.stream_rate, a.workers)
    if a.stream_trace is not None:
        _traces(a.stream_trace, a.workers)
    lib = getattr(a, "library", None)
    if lib is not None and has_own_runtime(lib):
        engine = ", ".join(n for n in system_names() if not has_own_runtime(n))
        raise OptionError(f"--stream-* streams data into the ROG engine's systems; {lib} runs its own runtime and does "
                          f"not stream: choose --library {engine}")


def _traces(text: str, n_workers: int) -> list:
    paths = [x.strip() for x in str(text).split(",") if x.strip()]
    if len(paths) == 1:
        paths = paths * n_workers
    if len(paths) != n_workers:
        raise OptionError(f"--stream-trace: got {len(paths)} files for {n_workers} workers; give one for all or one per worker")
    out = []
    for p in paths:
        try:
            out.append((p, load_rate_trace(p)))
        except RateTraceError as e:
            raise OptionError(f"--stream-trace: {e}") from None
    return out


def resolve(a: argparse.Namespace, compute_s: float | None, fixed_batch: int) -> dict | None:
    """The ``stream`` section of config.yaml (None: no streaming); raises :class:`OptionError`."""
    check(a)
    W = a.workers
    traces = [None] * W
    scale, window = None, a.batch_window_s
    if a.stream_rate is not None:
        rates, source = _rates(a.stream_rate, W), "rate"
    elif a.stream_trace is not None:
        loaded = _traces(a.stream_trace, W)
        traces = [str(p) for p, _ in loaded]
        rates, source = [t.mean_rate for _, t in loaded], "trace"
    elif a.stream_set is not None:
        if a.stream_scale is None and compute_s is None:
            raise OptionError("--stream-set scales ScaDLES's rates by the run's compute pacing time, and this run is "
                              "unpaced: add --profile quick-cpu or --compute-s S, or give --stream-scale")
        scale = a.stream_scale if a.stream_scale is not None else R.set_scale(fixed_batch, compute_s)
        rates, source = R.draw_rates(a.stream_set, W, a.seed, scale), "set"
        if window is None:
            window = fixed_batch / (R.PAPER_BATCH * scale)  # = compute_s / 1.2 s with the default scale
    else:
        return None
    window = 1.0 if window is None else float(window)
    batches = [R.batch_size(a.batch_policy, r, window, fixed_batch) for r in rates]
    return dict(
        source=source,  # rate (--stream-rate), set (--stream-set) or trace (--stream-trace)
        set=a.stream_set,  # ScaDLES's rate set (None: not drawn from a set)
        scale=scale,  # factor from the paper's rates to this machine's (set only)
        rates=[round(float(r), 3) for r in rates],  # samples/s per worker (a trace's mean rate)
        traces=traces,  # rate trace per worker (None: constant rate)
        buffer=a.stream_buffer,  # persistence or truncate
        batch_policy=a.batch_policy,  # fixed or rate_proportional
        window_s=window,  # rate_proportional: batch = clip(rate x window_s, 8, 1024)
        fixed_batch=int(fixed_batch),  # the fixed batch and the linear rule's b_ref
        batches=batches,  # each worker's nominal batch (at its mean rate)
        weighted_aggregation=bool(a.weighted_aggregation),  # update x W b_i / sum b
        lr_scaling=a.lr_scaling == "linear",  # lr x sum b / (b_ref W)
    )
