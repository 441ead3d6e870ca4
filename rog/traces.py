"""Bandwidth traces: one format, two readers, and the transformations replay needs.

A :class:`Trace` is a piecewise-constant link rate (zero-order hold): ``rate_mbit[k]`` (megabits,
10^6 bits, per second) holds from ``times_s[k]`` until ``times_s[k + 1]``; the last rate holds for
``hold_after_s`` seconds (default: the median sample interval), which ends the trace at
``duration_s``.  Beyond ``duration_s`` a trace repeats (looping, as every replay of a record does):
:meth:`Trace.rate_at`, :meth:`Trace.integral_mbit_s`, :meth:`Trace.offset`, :meth:`Trace.window`
and :meth:`Trace.looped` all read the trace as a function of period ``duration_s``.

Files (see ``configs/traces/README.md``): CSV with the header ``t_s,mbps`` (``configs/traces/``), or
the original artifact's record format, ``seconds Mbps`` per line, whitespace separated, the first
column a timestamp or elapsed seconds; also Mahimahi delivery-opportunity files and ``iperf3 --json``
logs (:mod:`rog.trace_formats`, which detects the format by content).  All are normalised to start at 0.  Lines starting with
``#`` are comments; ``# hold_after_s=X`` sets the last sample's hold (written by
:meth:`Trace.to_csv` only when it differs from the default).  Bad files raise :class:`TraceError`
naming FILE:LINE and the fix.

Replay modes (:data:`REPLAY_MODES`): ``recorded`` replays the samples as recorded; ``artifact``
reproduces the original artifact's logged behaviour (hold the current rate for a further 10-90 s
after about half of the samples), never a silent default.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from rog.links import RateTrace
from rog.trace_formats import TraceError, detect_format, parse_format, read_iperf3, read_mahimahi

REPLAY_MODES = ("recorded", "artifact")
# Where a run's trace came from (its config's ``trace.kind``) -> the words summaries use for it:
# the record ``utils/download_data.sh`` fetches, the synthetic trace in ``configs/traces/``, a --trace FILE.
TRACE_SOURCES = {"record": "recorded", "synthetic": "synthetic", "user": "user file"}
ARTIFACT_HOLD_S = (10.0, 90.0)  # the original replay's extra hold, seconds of record time
_FORMAT_HELP = ("a CSV with the header 't_s,mbps', 'seconds Mbps' pairs one sample per line, a Mahimahi trace or "
                "an iperf3 --json log")
_HOLD_DIRECTIVE = re.compile(r"^#\s*hold_after_s\s*[=:]\s*(\S+)\s*$")


@dataclass(frozen=True, eq=False)
class Trace:
    """A zero-order-hold rate trace in Mbit/s that repeats every ``duration_s`` seconds."""

    times_s: np.ndarray
    rate_mbit: np.ndarray
    source: str = ""
    hold_after_s: float | None = None
    _cum: np.ndarray = field(init=False, repr=False)  # integral (Mbit) up to each breakpoint and the end

    def __post_init__(self) -> None:
        t = np.array(self.times_s, dtype=np.float64, copy=True)
        r = np.array(self.rate_mbit, dtype=np.float64, copy=True)
        if t.ndim != 1 or r.ndim != 1:
            raise ValueError(f"times_s and rate_mbit must be 1-D arrays, got shapes {t.shape} and {r.shape}")
        if t.size == 0 or t.size != r.size:
            raise ValueError(f"times_s ({t.size}) and rate_mbit ({r.size}) need the same, non-zero length")
        if not np.all(np.isfinite(t)):
            raise ValueError(f"times_s[{int(np.argmin(np.isfinite(t)))}] is not finite; give finite seconds")
        if t[0] != 0.0:
            raise ValueError(f"times_s must start at 0, got times_s[0]={t[0]}; subtract times_s[0] first")
        bad = np.flatnonzero(np.diff(t) <= 0)
        if bad.size:
            k = int(bad[0]) + 1
            raise ValueError(f"times_s must be strictly increasing; times_s[{k}]={t[k]} <= times_s[{k - 1}]={t[k - 1]}")
        bad = np.flatnonzero(~np.isfinite(r) | (r < 0))
        if bad.size:
            k = int(bad[0])
            raise ValueError(f"rate_mbit must be finite and >= 0; rate_mbit[{k}]={r[k]}")
        hold = self.hold_after_s
        if hold is None:
            if t.size < 2:
                raise ValueError("a one-sample trace needs hold_after_s (how long its rate holds)")
        else:
            hold = float(hold)
            if not (math.isfinite(hold) and hold > 0):
                raise ValueError(f"hold_after_s must be a finite number of seconds > 0, got {self.hold_after_s}")
        t.flags.writeable = False
        r.flags.writeable = False
        object.__setattr__(self, "times_s", t)
        object.__setattr__(self, "rate_mbit", r)
        object.__setattr__(self, "hold_after_s", hold)
        ends = np.append(t[1:], t[-1] + self.hold_s)
        cum = np.concatenate([[0.0], np.cumsum(r * (ends - t))])
        cum.flags.writeable = False
        object.__setattr__(self, "_cum", cum)

    # ------------------------------------------------------------------ basic properties
    @property
    def hold_s(self) -> float:
        """How long the last rate holds: ``hold_after_s`` or the median sample interval."""
        if self.hold_after_s is not None:
            return self.hold_after_s
        return float(np.median(np.diff(self.times_s)))

    @property
    def duration_s(self) -> float:
        """Length of one pass: last sample time plus its hold."""
        return float(self.times_s[-1] + self.hold_s)

    @property
    def n_samples(self) -> int:
        """Number of rate samples."""
        return int(self.times_s.size)

    @property
    def mean_mbit(self) -> float:
        """Time-weighted mean rate over one pass."""
        return float(self._cum[-1] / self.duration_s)

    def __len__(self) -> int:
        return self.n_samples

    def __eq__(self, other) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return (
            np.array_equal(self.times_s, other.times_s)
            and np.array_equal(self.rate_mbit, other.rate_mbit)
            and self.hold_s == other.hold_s
        )

    __hash__ = None  # arrays inside: not hashable

    def __repr__(self) -> str:
        return (f"Trace({self.n_samples} samples, {self.duration_s:.6g} s, mean {self.mean_mbit:.4g} Mbit/s, "
                f"source={self.source!r})")

    # ------------------------------------------------------------------ queries
    def rate_at(self, t_s):
        """Rate in force at ``t_s`` (scalar or array, >= 0; the trace repeats after ``duration_s``)."""
        t = np.asarray(t_s, dtype=np.float64)
        if np.any(~(t >= 0)) or np.any(~np.isfinite(t)):
            raise ValueError(f"t_s must be finite times >= 0, got {t_s}")
        tt = np.mod(t, self.duration_s)
        out = self.rate_mbit[np.searchsorted(self.times_s, tt, side="right") - 1]
        return float(out) if out.ndim == 0 else out

    def _cum_at(self, t: np.ndarray) -> np.ndarray:
        """Integral of the rate from 0 to ``t`` (>= 0, finite) in Mbit, across repetitions."""
        d = self.duration_s
        n = np.floor(t / d)
        tt = t - n * d
        k = np.searchsorted(self.times_s, tt, side="right") - 1
        return n * self._cum[-1] + self._cum[k] + self.rate_mbit[k] * (tt - self.times_s[k])

    def integral_mbit_s(self, t0_s, t1_s):
        """Megabits the rate carries between ``t0_s`` and ``t1_s`` (exact piecewise integral)."""
        t0 = np.asarray(t0_s, dtype=np.float64)
        t1 = np.asarray(t1_s, dtype=np.float64)
        if np.any(~(t0 >= 0)) or np.any(~np.isfinite(t1)) or np.any(~np.isfinite(t0)):
            raise ValueError(f"t0_s must be a finite time >= 0 and t1_s finite, got {t0_s}, {t1_s}")
        if np.any(t1 < t0):
            raise ValueError(f"t1_s ({t1_s}) must be >= t0_s ({t0_s})")
        out = self._cum_at(t1) - self._cum_at(t0)
        return float(out) if out.ndim == 0 else out

    # ------------------------------------------------------------------ transformations
    def _derived(self, times_s, rate_mbit, hold_after_s, what: str) -> "Trace":
        return Trace(times_s, rate_mbit, f"{self.source} | {what}" if self.source else what, hold_after_s)

    def time_scaled(self, k: float) -> "Trace":
        """Stretch time by ``k`` (> 0): every sample and the last hold last ``k`` times longer."""
        k = _positive("k", k)
        return self._derived(self.times_s * k, self.rate_mbit, self.hold_s * k, f"time_scaled({k:g})")

    def rate_scaled(self, k: float) -> "Trace":
        """Multiply every rate by ``k`` (>= 0), e.g. 0.7 for the artifact's worker scale."""
        if not (math.isfinite(k) and k >= 0):
            raise ValueError(f"k must be a finite factor >= 0, got {k}")
        return self._derived(self.times_s, self.rate_mbit * k, self.hold_after_s, f"rate_scaled({k:g})")

    def _segment(self, t0: float, t1: float, what: str) -> "Trace":
        """The repeating trace between ``t0`` and ``t1`` (0 <= t0 < t1), as a new trace from 0."""
        d = self.duration_s
        p0 = int(math.floor(t0 / d))
        p1 = max(int(math.ceil(t1 / d)), p0 + 1)
        shifts = np.arange(p0, p1, dtype=np.float64) * d
        starts = (shifts[:, None] + self.times_s[None, :]).ravel()
        ends = np.append(starts[1:], p1 * d)
        rates = np.tile(self.rate_mbit, p1 - p0)
        lo = np.maximum(starts, t0)
        hi = np.minimum(ends, t1)
        eps = 1e-9 * max(1.0, d)
        keep = hi - lo > eps  # drop slivers left by rounding at the cut points
        if not np.any(keep):
            keep[np.argmax(hi - lo)] = True
        lo, hi, rates = lo[keep] - t0, hi[keep] - t0, rates[keep]
        lo[0] = 0.0
        return self._derived(lo, rates, float(hi[-1] - lo[-1]), what)

    def offset(self, start_s: float) -> "Trace":
        """The trace as seen from ``start_s`` on (wrapping around: same duration, rotated)."""
        if not (math.isfinite(start_s) and start_s >= 0):
            raise ValueError(f"start_s must be a finite time >= 0, got {start_s}")
        s = math.fmod(start_s, self.duration_s)
        if s == 0.0:
            return self._derived(self.times_s, self.rate_mbit, self.hold_s, f"offset({start_s:g})")
        return self._segment(s, s + self.duration_s, f"offset({start_s:g})")

    def window(self, t0_s: float, t1_s: float) -> "Trace":
        """The part between ``t0_s`` and ``t1_s`` as a trace from 0 (past the end it wraps around)."""
        if not (math.isfinite(t0_s) and t0_s >= 0 and math.isfinite(t1_s) and t1_s > t0_s):
            raise ValueError(f"window needs finite 0 <= t0_s < t1_s, got t0_s={t0_s}, t1_s={t1_s}")
        return self._segment(t0_s, t1_s, f"window({t0_s:g}, {t1_s:g})")

    def looped(self, total_s: float) -> "Trace":
        """The trace repeated (or cut) to last exactly ``total_s`` seconds."""
        total_s = _positive("total_s", total_s)
        return self._segment(0.0, total_s, f"looped({total_s:g})")

    def resampled(self, dt_s: float) -> "Trace":
        """Rates on a regular grid of ``dt_s``: the time-weighted mean over each bin (the last bin
        is cut at ``duration_s``), so the integral over the pass is unchanged."""
        dt_s = _positive("dt_s", dt_s)
        d = self.duration_s
        n = max(1, int(math.ceil(d / dt_s - 1e-6)))
        edges = np.append(np.arange(n, dtype=np.float64) * dt_s, d)
        rates = np.diff(self._cum_at(edges)) / np.diff(edges)
        rates = np.maximum(rates, 0.0)  # rounding can give -1e-17 on zero stretches
        return self._derived(edges[:-1], rates, float(edges[-1] - edges[-2]), f"resampled({dt_s:g})")

    def with_artifact_holds(self, seed: int, share: float = 0.5, hold_s=ARTIFACT_HOLD_S) -> "Trace":
        """The original artifact's replay: after each sample, with probability ``share`` (chosen
        with ``seed``), hold that rate for a further uniform ``hold_s`` = (lo, hi) seconds.

        Holds are seconds of this trace's time.  With a time-scaled trace, scale them too:
        ``t.with_artifact_holds(s).time_scaled(k)`` equals
        ``t.time_scaled(k).with_artifact_holds(s, hold_s=(10 * k, 90 * k))`` (the same draws);
        :func:`apply_replay_mode` does the latter.
        """
        if not (0.0 <= share <= 1.0):
            raise ValueError(f"share must be a probability in [0, 1], got {share}")
        lo, hi = (float(x) for x in hold_s)
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
            raise ValueError(f"hold_s must be (lo, hi) seconds with 0 <= lo <= hi, got {hold_s}")
        rng = np.random.default_rng(seed)
        held = rng.random(self.n_samples) < share
        extra = np.where(held, rng.uniform(lo, hi, self.n_samples), 0.0)
        lengths = np.append(np.diff(self.times_s), self.hold_s) + extra
        times = np.concatenate([[0.0], np.cumsum(lengths[:-1])])
        what = f"artifact_holds(seed={seed}, share={share:g}, hold_s=({lo:g}, {hi:g}))"
        return self._derived(times, self.rate_mbit, float(lengths[-1]), what)

    # ------------------------------------------------------------------ statistics and export
    def stats(self) -> dict:
        """Summary statistics (one pass): mean (time-weighted), median and p10 of the samples,
        share of time and of samples below 10 % of the mean, and 20 % / 40 % swings: consecutive
        samples whose rate changes by at least that fraction of the earlier one (share of
        consecutive pairs, and swings per second of trace)."""
        r = self.rate_mbit
        d = self.duration_s
        lengths = np.append(np.diff(self.times_s), self.hold_s)
        mean = self.mean_mbit
        low = r < 0.1 * mean
        step = np.abs(np.diff(r))
        prev = r[:-1]
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(prev > 0, step / prev, np.where(step > 0, np.inf, 0.0))
        pairs = max(rel.size, 1)
        sw20 = int(np.count_nonzero(rel >= 0.2))
        sw40 = int(np.count_nonzero(rel >= 0.4))
        return {
            "n_samples": self.n_samples,
            "duration_s": d,
            "mean_interval_s": float(lengths.mean()),
            "mean_mbit": mean,
            "median_mbit": float(np.median(r)),
            "p10_mbit": float(np.percentile(r, 10)),
            "share_time_below_10pct_mean": float(lengths[low].sum() / d),
            "share_samples_below_10pct_mean": float(low.mean()),
            "swing20_share": sw20 / pairs,
            "swing40_share": sw40 / pairs,
            "swing20_per_s": sw20 / d,
            "swing40_per_s": sw40 / d,
        }

    def to_rate_trace(self, loop: bool = True) -> RateTrace:
        """The same rates as a :class:`rog.links.RateTrace` (repeating every ``duration_s`` with
        ``loop=True``; otherwise the last rate holds forever)."""
        if loop:
            return RateTrace(self.times_s, self.rate_mbit, loop=True, period_s=self.duration_s)
        return RateTrace(self.times_s, self.rate_mbit)

    def to_csv(self, path) -> Path:
        """Write the ``t_s,mbps`` CSV (a ``# hold_after_s=`` line first when the last hold is not
        the median interval, so that :func:`load_trace` gives back the same duration)."""
        path = Path(path)
        lines = []
        default = float(np.median(np.diff(self.times_s))) if self.n_samples > 1 else None
        if default is None or not math.isclose(self.hold_s, default, rel_tol=1e-9, abs_tol=1e-12):
            lines.append(f"# hold_after_s={_num(self.hold_s)}")
        lines.append("t_s,mbps")
        lines += [f"{_num(t)},{_num(r)}" for t, r in zip(self.times_s.tolist(), self.rate_mbit.tolist())]
        path.write_text("\n".join(lines) + "\n")
        return path


def _num(x: float) -> str:
    return format(x, ".12g")


def _positive(name: str, x: float) -> float:
    x = float(x)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {x}")
    return x


# ---------------------------------------------------------------------- reading files
def load_trace(path, hold_after_s: float | None = None, fmt: str | None = None) -> Trace:
    """Read a trace file: ``t_s,mbps`` CSV, ``seconds Mbps`` records, a Mahimahi delivery-opportunity
    file or an ``iperf3 --json`` log (:mod:`rog.trace_formats`), detected from the content unless
    ``fmt`` (``--trace-format``: ``csv``, ``record``, ``mahimahi[:BIN_S]``, ``iperf3``; None/``auto`` =
    detect) names it; times are shifted so the trace starts at 0.  ``hold_after_s`` overrides the
    file's last hold."""
    path = Path(path)
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        wanted, bin_s = parse_format(fmt)
    except ValueError as e:
        raise TraceError(path, 1, str(e)) from None
    if wanted in ("auto", "mahimahi", "iperf3"):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceError(path, raw.count(b"\n", 0, e.start) + 1, "not UTF-8 text; a trace is plain text, "
                             + _FORMAT_HELP) from None
        kind = detect_format(text) if wanted == "auto" else wanted
        if kind in ("mahimahi", "iperf3"):
            times, rates, source, hold = read_mahimahi(path, text, bin_s) if kind == "mahimahi" else read_iperf3(path, text)
            return Trace(times, rates, source, hold if hold_after_s is None else hold_after_s)
    fmt = None if wanted == "auto" else wanted  # "csv" or "record": the reader below checks the file is that
    header_line = 0
    file_hold = None
    times: list[float] = []
    rates: list[float] = []
    lines_of: list[int] = []
    for line_no, braw in enumerate(raw.split(b"\n"), start=1):
        try:
            text = braw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise TraceError(path, line_no, "not UTF-8 text; a trace is plain text, " + _FORMAT_HELP) from None
        if not text:
            continue
        if text.startswith("#"):
            m = _HOLD_DIRECTIVE.match(text)
            if m:
                try:
                    file_hold = float(m.group(1))
                except ValueError:
                    file_hold = math.nan
                if not (math.isfinite(file_hold) and file_hold > 0):
                    raise TraceError(path, line_no, f"hold_after_s must be seconds > 0, got {m.group(1)!r}")
            continue
        if fmt is None or (fmt == "csv" and not header_line):
            if "," in text:
                fmt = "csv"
                fields = [f.strip().lower() for f in text.split(",")]
                if fields != ["t_s", "mbps"]:
                    hint = "add it as the first line" if _all_numeric(fields) else "replace this line with it"
                    raise TraceError(path, line_no, f"bad header {text!r}: a CSV trace starts with 't_s,mbps' ({hint})")
                header_line = line_no
                continue
            if fmt == "csv":
                raise TraceError(path, line_no, f"--trace-format csv, but {text!r} is not the 't_s,mbps' header")
            fmt = "record"
        fields = [f.strip() for f in text.split(",")] if fmt == "csv" else text.split()
        want = "'t_s,mbps'" if fmt == "csv" else "'seconds Mbps'"
        if len(fields) != 2:
            raise TraceError(path, line_no, f"expected 2 columns {want}, got {len(fields)}: {text!r}")
        try:
            t, r = float(fields[0]), float(fields[1])
        except ValueError:
            hint = (" (a CSV header must be 't_s,mbps', with a comma)" if fmt == "record" and not times else "")
            raise TraceError(path, line_no, f"non-numeric field in {text!r}; expected two numbers {want}{hint}") from None
        if not math.isfinite(t):
            raise TraceError(path, line_no, f"time {fields[0]!r} is not a finite number of seconds")
        if not math.isfinite(r):
            raise TraceError(path, line_no, f"rate {fields[1]!r} is not finite; give Mbit/s >= 0 (0 for an outage)")
        if r < 0:
            raise TraceError(path, line_no, f"negative rate {fields[1]}; give Mbit/s >= 0 (0 for an outage)")
        if times and t <= times[-1]:
            kind = "duplicate time" if t == times[-1] else "time goes backwards:"
            raise TraceError(path, line_no, f"{kind} {fields[0]} after {times[-1]!r} on line {lines_of[-1]}; "
                                            "times must be strictly increasing (sort the file, drop repeats)")
        times.append(t)
        rates.append(r)
        lines_of.append(line_no)
    if fmt is None:
        raise TraceError(path, 1, "empty file (no samples); expected " + _FORMAT_HELP)
    if not times:
        raise TraceError(path, header_line + 1, "no samples after the header; add 't_s,mbps' rows")
    if len(times) < 2:
        raise TraceError(path, lines_of[0], "only one sample; a trace needs at least 2 (their interval sets "
                                            "how long the last rate holds)")
    if not any(rates):
        raise TraceError(path, lines_of[0], "every rate is 0 Mbit/s, so no byte could ever cross the link; give at "
                                            "least one positive rate (0 marks an outage between them)")
    t_arr = np.asarray(times, dtype=np.float64)
    hold = hold_after_s if hold_after_s is not None else file_hold
    return Trace(t_arr - t_arr[0], np.asarray(rates, dtype=np.float64), str(path), hold)


def _all_numeric(fields: Sequence[str]) -> bool:
    try:
        [float(f) for f in fields]
    except ValueError:
        return False
    return True


def load_traces_dir(directory) -> dict[str, Trace]:
    """Every ``*.csv`` and ``*.txt`` trace in ``directory``, keyed by file name without suffix."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"traces directory {directory} does not exist or is not a folder")
    out: dict[str, Trace] = {}
    for p in sorted(directory.iterdir()):
        if p.suffix.lower() not in (".csv", ".txt") or not p.is_file():
            continue
        if p.stem in out:
            raise ValueError(f"{directory}: two traces named {p.stem!r} ({out[p.stem].source} and {p}); rename one")
        out[p.stem] = load_trace(p)
    if not out:
        raise ValueError(f"{directory} holds no *.csv or *.txt trace; add one ({_FORMAT_HELP})")
    return out


# ---------------------------------------------------------------------- per-worker replay
def worker_traces(trace: Trace, n_workers: int, offsets_s: Sequence[float] | None = None,
                  seed: int = 0) -> list[Trace]:
    """One trace per worker, each the same record from its own start offset (as the original
    replayed one record on every worker).  Default offsets ``i * duration_s / n_workers``; a
    non-zero ``seed`` adds one common random phase in ``[0, duration_s / n_workers)`` so that
    repeated runs see other stretches while the workers stay evenly spread."""
    if not (isinstance(n_workers, (int, np.integer)) and n_workers >= 1):
        raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
    d = trace.duration_s
    if offsets_s is None:
        phase = 0.0 if seed == 0 else float(np.random.default_rng(seed).uniform(0.0, d / n_workers))
        offsets = [phase + i * d / n_workers for i in range(n_workers)]
    else:
        offsets = [float(o) for o in offsets_s]
        if len(offsets) != n_workers:
            raise ValueError(f"offsets_s has {len(offsets)} entries for n_workers={n_workers}; give one per worker")
        bad = [o for o in offsets if not (math.isfinite(o) and o >= 0)]
        if bad:
            raise ValueError(f"offsets_s must be finite seconds >= 0, got {bad[0]}")
    return [trace.offset(o) for o in offsets]


def apply_replay_mode(trace: Trace, mode: str, seed: int = 0, time_scale: float = 1.0) -> Trace:
    """The trace as a replay mode plays it: ``recorded`` = time-scaled samples; ``artifact`` =
    time-scaled, then the artifact's extra holds drawn with ``seed`` and scaled by the same
    ``time_scale`` (10-90 s of record time each)."""
    if mode not in REPLAY_MODES:
        raise ValueError(f"mode must be one of {REPLAY_MODES}, got {mode!r}")
    time_scale = _positive("time_scale", time_scale)
    scaled = trace.time_scaled(time_scale) if time_scale != 1.0 else trace
    if mode == "recorded":
        return scaled
    lo, hi = ARTIFACT_HOLD_S
    return scaled.with_artifact_holds(seed, hold_s=(lo * time_scale, hi * time_scale))
