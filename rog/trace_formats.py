"""Trace files in the formats people have: Mahimahi delivery opportunities and iperf3 ``--json`` logs.

:func:`rog.traces.load_trace` reads four formats, told apart by content (:func:`detect_format`, from the
first line that is not blank or a ``#`` comment) or named with ``--trace-format`` (:data:`TRACE_FORMATS`):

* ``csv``: the toolkit's ``t_s,mbps`` CSV (a comma on that line);
* ``record``: the original artifact's ``seconds Mbps`` pairs (two whitespace-separated numbers);
* ``mahimahi``: Mahimahi's link trace, one line per delivery opportunity of one 1500-byte packet, the line
  an integer timestamp in milliseconds (non-decreasing; a repeated timestamp is several opportunities in
  the same millisecond).  Mahimahi repeats a trace with the last timestamp as its period, and a packet
  given the opportunity at ``t`` ms has crossed by ``t``; so the series is binned as the bytes through
  by each bin's end: bin ``k`` covers ``(k * bin_s, (k + 1) * bin_s]`` (an opportunity at 0 ms counts in
  bin 0) and carries ``count * 1500 * 8`` bits, so its rate is ``count * 0.012 / bin_s`` Mbit/s; the
  bins run to the one holding the last timestamp, so one pass lasts ``ceil(last / bin_s) * bin_s``
  seconds and carries exactly the file's bytes.  The bin interval is :data:`MAHIMAHI_BIN_S` (0.5 s, the order of the recorded
  traces' 0.55 s samples) unless the format is named ``mahimahi:BIN_S`` (e.g. ``mahimahi:0.1``);
* ``iperf3``: the JSON document ``iperf3 --json`` writes (starts with ``{``): one sample per entry of
  ``intervals`` whose ``sum`` gives ``start``, ``end`` and ``bits_per_second`` (``sum`` is the sender's
  direction; a ``--bidir`` log's reverse direction is ``sum_bidir_reverse`` and is not read).  Intervals
  marked ``omitted`` (iperf3 ``--omit``, the TCP warm-up) are skipped; the last sample holds until its
  interval's end.

Every bad file raises :class:`TraceError` (also :class:`rog.traces.TraceError`) naming FILE:LINE and the fix.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

__all__ = ["TraceError", "TRACE_FORMATS", "MAHIMAHI_BIN_S", "MAHIMAHI_PACKET_BYTES", "parse_format", "detect_format",
           "mahimahi_rates", "read_mahimahi", "read_iperf3", "write_mahimahi", "write_iperf3_json"]


class TraceError(ValueError):
    """A trace file that cannot be read: ``path`` and ``line`` (1-based) say where."""

    def __init__(self, path, line: int, reason: str) -> None:
        self.path = str(path)
        self.line = int(line)
        self.reason = reason
        super().__init__(f"{self.path}:{self.line}: {reason}")


TRACE_FORMATS = ("auto", "csv", "record", "mahimahi", "iperf3")
MAHIMAHI_BIN_S = 0.5  # seconds per rate sample a Mahimahi file is binned into (docstring above)
MAHIMAHI_PACKET_BYTES = 1500  # one delivery opportunity carries one MTU-sized packet (Mahimahi's rule)


def parse_format(spec: str | None) -> tuple[str, float | None]:
    """``--trace-format`` text -> ``(format, bin_s)``: ``None``/``auto`` = detect by content; ``mahimahi:0.1``
    names the bin interval. Raises ValueError naming the choices."""
    if spec is None:
        return "auto", None
    name, _, arg = str(spec).strip().lower().partition(":")
    if name not in TRACE_FORMATS:
        raise ValueError(f"--trace-format {spec!r}: choose one of {', '.join(TRACE_FORMATS)} (mahimahi:BIN_S sets "
                         f"the bin interval, default {MAHIMAHI_BIN_S} s)")
    if not arg:
        return name, None
    if name != "mahimahi":
        raise ValueError(f"--trace-format {spec!r}: only mahimahi takes an argument (mahimahi:BIN_S)")
    try:
        bin_s = float(arg)
    except ValueError:
        bin_s = math.nan
    if not (math.isfinite(bin_s) and bin_s > 0):
        raise ValueError(f"--trace-format {spec!r}: the bin interval must be seconds > 0, e.g. mahimahi:0.5")
    return name, bin_s


def detect_format(text: str) -> str:
    """The format of a trace file's text (see the module doc); ``csv`` for an empty file (its reader says so)."""
    for line in text.split("\n"):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("{"):
            return "iperf3"
        if "," in s:
            return "csv"
        fields = s.split()
        if len(fields) == 1 and fields[0].isdigit():
            return "mahimahi"
        return "record"
    return "csv"


def mahimahi_rates(stamps_ms: np.ndarray, bin_s: float) -> np.ndarray:
    """Mbit/s per bin of delivery-opportunity timestamps (ms): ``count * 1500 * 8 / 1e6 / bin_s``."""
    stamps_s = np.asarray(stamps_ms, dtype=np.float64) / 1000.0
    k = np.maximum(np.ceil(stamps_s / bin_s - 1e-9).astype(np.int64) - 1, 0)
    n_bins = int(k[-1]) + 1
    counts = np.bincount(k, minlength=n_bins)
    return counts * (MAHIMAHI_PACKET_BYTES * 8 / 1e6) / bin_s


def read_mahimahi(path, text: str, bin_s: float | None = None):
    """A Mahimahi delivery-opportunity file binned at ``bin_s`` seconds: ``(times_s, rate_mbit, source,
    hold_after_s)``, the fields of a :class:`rog.traces.Trace`."""
    bin_s = MAHIMAHI_BIN_S if bin_s is None else float(bin_s)
    stamps: list[int] = []
    first_line = 0
    last_line = 0
    for line_no, line in enumerate(text.split("\n"), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not s.isdigit():
            raise TraceError(path, line_no, f"expected one integer millisecond timestamp per line (Mahimahi's "
                                            f"delivery opportunities), got {s!r}")
        t = int(s)
        if stamps and t < stamps[-1]:
            raise TraceError(path, line_no, f"timestamp {t} ms after {stamps[-1]} ms on line {last_line}; Mahimahi "
                                            "timestamps never decrease (sort the file)")
        stamps.append(t)
        first_line = first_line or line_no
        last_line = line_no
    if not stamps:
        raise TraceError(path, 1, "no delivery opportunities (a Mahimahi trace has one ms timestamp per line)")
    if stamps[-1] == 0:
        raise TraceError(path, last_line, "every opportunity is at 0 ms, so the trace has no duration; a Mahimahi "
                                          "trace's last timestamp is its period")
    rates = mahimahi_rates(np.asarray(stamps), bin_s)
    if rates.size < 2:
        raise TraceError(path, first_line, f"all opportunities fall in one {bin_s:g} s bin; give a longer trace or "
                                           "a shorter bin (--trace-format mahimahi:BIN_S)")
    times = np.arange(rates.size, dtype=np.float64) * bin_s
    return times, rates, str(path), bin_s


def read_iperf3(path, text: str):
    """An ``iperf3 --json`` log, one sample per (non-omitted) interval: ``(times_s, rate_mbit, source,
    hold_after_s)``, the fields of a :class:`rog.traces.Trace`."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(path, e.lineno, f"not valid JSON ({e.msg}); an iperf3 log is what 'iperf3 --json' "
                                         "writes") from None
    line = _line_of(text, '"intervals"')
    if not isinstance(doc, dict):
        raise TraceError(path, 1, "an iperf3 --json log is a JSON object with an 'intervals' list")
    if "intervals" not in doc:
        why = f"iperf3 reported an error: {doc['error']!r}; " if "error" in doc else ""
        raise TraceError(path, 1, f"{why}no 'intervals' list; record the link with 'iperf3 -c HOST --json'")
    intervals = doc["intervals"]
    if not isinstance(intervals, list):
        raise TraceError(path, line, "'intervals' must be a list of interval objects")
    starts: list[float] = []
    ends: list[float] = []
    rates: list[float] = []
    for i, iv in enumerate(intervals):
        where = f"intervals[{i}]"
        s = iv.get("sum") if isinstance(iv, dict) else None
        if not isinstance(s, dict):
            raise TraceError(path, line, f"{where} has no 'sum' object (iperf3 writes start, end and bits_per_second "
                                         "there)")
        if s.get("omitted"):
            continue
        try:
            t0, t1, bps = (float(s[k]) for k in ("start", "end", "bits_per_second"))
        except (KeyError, TypeError, ValueError):
            raise TraceError(path, line, f"{where}.sum needs numbers 'start', 'end' and 'bits_per_second'") from None
        if not (math.isfinite(t0) and math.isfinite(t1) and t1 > t0):
            raise TraceError(path, line, f"{where}.sum: end ({t1}) must be after start ({t0})")
        if not (math.isfinite(bps) and bps >= 0):
            raise TraceError(path, line, f"{where}.sum.bits_per_second must be >= 0, got {s['bits_per_second']!r}")
        if starts and t0 < ends[-1] - 1e-6:
            raise TraceError(path, line, f"{where} starts at {t0} s, before the previous interval's end "
                                         f"{ends[-1]} s; intervals must follow each other")
        starts.append(t0)
        ends.append(t1)
        rates.append(bps / 1e6)
    if not starts:
        raise TraceError(path, line, "no (non-omitted) intervals; run iperf3 with --json for at least one interval")
    if not any(rates):
        raise TraceError(path, line, "every interval carried 0 bits/s; no byte could ever cross the link")
    t = np.asarray(starts) - starts[0]
    if t.size > 1 and np.any(np.diff(t) <= 0):
        raise TraceError(path, line, "two intervals start at the same time; intervals must follow each other")
    return t, np.asarray(rates), str(path), ends[-1] - starts[-1]


def _line_of(text: str, needle: str) -> int:
    """1-based line of the first ``needle`` in ``text`` (1 if absent)."""
    k = text.find(needle)
    return 1 if k < 0 else text.count("\n", 0, k) + 1


def write_mahimahi(trace, path, packet_bytes: int = MAHIMAHI_PACKET_BYTES) -> Path:
    """Write ``trace`` (one pass) as Mahimahi delivery opportunities: opportunity ``j`` at the first
    millisecond by which ``(j + 1) * packet_bytes`` have crossed (the integral of the rate)."""
    path = Path(path)
    total_bytes = trace.integral_mbit_s(0.0, trace.duration_s) * 1e6 / 8
    n = int(total_bytes // packet_bytes)
    ms = np.arange(1, int(math.ceil(trace.duration_s * 1000)) + 1, dtype=np.float64)
    through = trace.integral_mbit_s(np.zeros_like(ms), np.minimum(ms / 1000, trace.duration_s)) * 1e6 / 8
    stamps = np.searchsorted(through, (np.arange(n) + 1) * packet_bytes - 1e-6, side="left") + 1
    path.write_text("".join(f"{int(s)}\n" for s in stamps))
    return path


def write_iperf3_json(trace, path, interval_s: float = 1.0) -> Path:
    """Write ``trace`` as an ``iperf3 --json``-shaped log: intervals of ``interval_s`` with the mean rate."""
    path = Path(path)
    r = trace.resampled(interval_s)
    ends = np.append(r.times_s[1:], r.duration_s)
    intervals = [{"streams": [], "sum": {"start": float(a), "end": float(b), "seconds": float(b - a),
                                         "bytes": int(rate * 1e6 / 8 * (b - a)), "bits_per_second": float(rate * 1e6),
                                         "omitted": False}}
                 for a, b, rate in zip(r.times_s.tolist(), ends.tolist(), r.rate_mbit.tolist())]
    doc = {"start": {"version": "iperf 3 (written by rog.trace_formats.write_iperf3_json)"}, "intervals": intervals,
           "end": {}}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path
