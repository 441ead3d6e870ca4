"""Sampling power at 10 Hz into a CSV file (``t_s,power_w,source``), and reading it back.

``t_s`` is seconds on the run's clock: ``time.monotonic()`` minus the run's origin (the
``origin_monotonic_s`` of the event logs' header, :mod:`rog.runtime.events`), so samples and
events line up on one machine.  Ticks are scheduled on a fixed grid (``start + k * period_s``),
so a slow read delays one row, not every later one; missed ticks are skipped, never bunched.

For the state-based model there is nothing to read live: events are logged when they end, so the
state "now" is unknown.  :func:`render_model_samples` draws the model's power on the same 10 Hz grid
from the finished timeline (for plots); its energy comes from :func:`rog.power.model_energy_j`,
which is exact for the timeline, not from these samples.
"""

from __future__ import annotations

import csv
import math
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np

from .energy import PowerSamples, _check_source, model_power_w
from .sources import PowerSource

__all__ = ["PERIOD_S", "CSV_FIELDS", "CsvSampleWriter", "run_sampler", "render_model_samples",
           "write_samples_csv", "read_samples_csv"]

PERIOD_S = 0.1  # 10 Hz, as the paper sampled jtop
CSV_FIELDS = ("t_s", "power_w", "source")


class CsvSampleWriter:
    """Appends ``t_s,power_w,source`` rows to a new CSV file, flushed row by row (a crash loses one row)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._file = open(self.path, "w", encoding="utf-8", newline="")
        self._csv = csv.writer(self._file)
        self._csv.writerow(CSV_FIELDS)
        self._file.flush()
        self.rows = 0

    def write(self, t_s: float, power_w: float, source: str) -> None:
        """One row (times with microsecond resolution, watts with milliwatt resolution)."""
        self._csv.writerow((f"{t_s:.6f}", f"{power_w:.3f}", source))
        self._file.flush()
        self.rows += 1

    def close(self) -> None:
        """Close the file (idempotent)."""
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> "CsvSampleWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_sampler(source: PowerSource, writer: CsvSampleWriter, stop: threading.Event,
                duration_s: float | None = None, period_s: float = PERIOD_S,
                origin_monotonic_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                wait: Callable[[float], object] | None = None) -> tuple[float, float]:
    """Sample ``source`` every ``period_s`` into ``writer`` until ``stop`` is set or ``duration_s`` passes.

    Returns ``(start_s, stop_s)`` on the run's clock (``origin_monotonic_s``; default: the start).
    ``clock`` and ``wait`` (default ``stop.wait``) are replaceable so tests run on a fake clock.
    """
    wait = stop.wait if wait is None else wait
    if not (isinstance(period_s, (int, float)) and math.isfinite(period_s) and period_s > 0):
        raise ValueError(f"period_s must be a positive number of seconds, got {period_s!r}")
    if duration_s is not None and not (isinstance(duration_s, (int, float)) and duration_s >= 0):
        raise ValueError(f"duration_s must be a number of seconds >= 0 or None, got {duration_s!r}")
    start = clock()
    origin = start if origin_monotonic_s is None else float(origin_monotonic_s)
    end = None if duration_s is None else start + float(duration_s)
    k = 0
    while not stop.is_set():
        now = clock()
        if end is not None and now >= end:
            break
        w = source.read_w()
        if w is not None:
            writer.write(now - origin, w, source.name)
        k = max(k + 1, int((clock() - start) / period_s) + 1)  # next grid tick still ahead
        wake = start + k * period_s
        if end is not None:
            wake = min(wake, end)
        wait(max(0.0, wake - clock()))
    return start - origin, clock() - origin


def render_model_samples(intervals: Iterable[Sequence], profile, t0_s: float, t1_s: float,
                         period_s: float = PERIOD_S) -> PowerSamples:
    """The model's power on the grid ``t0_s, t0_s + period_s, ...`` up to ``t1_s`` (included), labelled
    ``model:<profile name>``."""
    if not (isinstance(period_s, (int, float)) and period_s > 0):
        raise ValueError(f"period_s must be a positive number of seconds, got {period_s!r}")
    if not t1_s >= t0_s:
        raise ValueError(f"t1_s={t1_s!r} is before t0_s={t0_s!r}")
    n = int(math.floor((t1_s - t0_s) / period_s + 1e-9)) + 1
    t = t0_s + period_s * np.arange(n)
    if t[-1] < t1_s:
        t = np.append(t, t1_s)
    return PowerSamples(t, model_power_w(list(intervals), profile, t), profile.model_source)


def write_samples_csv(path: str | os.PathLike, samples: PowerSamples) -> None:
    """Write all of ``samples`` as one CSV file."""
    with CsvSampleWriter(path) as w:
        for t, p in zip(samples.t_s.tolist(), samples.power_w.tolist()):
            w.write(t, p, samples.source)


def read_samples_csv(path: str | os.PathLike) -> PowerSamples:
    """A sampler's CSV as :class:`PowerSamples`; errors name the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{path}: cannot read power samples: {e.strerror}") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows or tuple(rows[0]) != CSV_FIELDS:
        raise ValueError(f"{path}:1: expected the header {','.join(CSV_FIELDS)}, got {','.join(rows[0]) if rows else 'an empty file'}")
    times, watts, source = [], [], None
    for lineno, row in enumerate(rows[1:], start=2):
        if len(row) != 3:
            raise ValueError(f"{path}:{lineno}: expected 3 fields t_s,power_w,source, got {len(row)}")
        try:
            t, w = float(row[0]), float(row[1])
        except ValueError:
            raise ValueError(f"{path}:{lineno}: t_s and power_w must be numbers, got {row[0]!r}, {row[1]!r}") from None
        if source is None:
            try:
                _check_source(row[2])
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: {e}") from None
            source = row[2]
        elif row[2] != source:
            raise ValueError(f"{path}:{lineno}: source {row[2]!r} differs from {source!r} above; one file holds one source")
        if times and not t > times[-1]:
            raise ValueError(f"{path}:{lineno}: t_s={t!r} does not increase (previous {times[-1]!r})")
        times.append(t)
        watts.append(w)
    if source is None:
        raise ValueError(f"{path}: no samples after the header (the sampler stopped before its first tick)")
    try:
        return PowerSamples(np.array(times), np.array(watts), source)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
