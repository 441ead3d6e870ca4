"""Synthetic outdoor-like and indoor-like bandwidth traces, generated offline from a seed.

The model (documented with its fitted numbers in ``configs/traces/README.md``), on a regular grid
of ``dt_s`` seconds:

* a two-state Markov chain, *up* and *drop* (a deep drop near 0 Mbit/s): per sample, up -> drop
  with probability ``p_drop`` and drop -> up with ``p_recover`` (mean run lengths
  ``1 / p_drop`` and ``1 / p_recover`` samples);
* in the up state the log-rate follows an AR(1) process around ``log(high_median_mbit)`` with
  stationary deviation ``high_sigma_log``: each sample either jumps to a fresh level (probability
  ``high_jump_p``, a draw from the stationary law) or drifts (coefficient ``high_phi``), which
  gives the heavy-tailed sample-to-sample changes of the records;
* in the drop state the rate is an AR(1) process in Mbit/s (mean ``low_mean_mbit``, stationary
  deviation ``low_sigma_mbit``, coefficient ``low_phi``) clipped at 0, so outages of exactly 0
  appear as often as the records show them.

Both processes run all the time; the chain picks which one the link shows.  :func:`fit_params`
derives every parameter from recorded traces (the procedure is in its docstring).

CLI::

    python -m data_gen.synth_traces --kind outdoors --seconds 1200 --seed 0 --out FILE.csv
    python -m data_gen.synth_traces --seeds 1,2 --out DIR     # DIR/synth-outdoors-seed<n>.csv, for --traces DIR
    python -m data_gen.synth_traces --fit tests/data/recorded_traces/outdoors-w1.csv tests/data/recorded_traces/outdoors-w2.csv
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Sequence

import numpy as np

from rog.traces import Trace, load_trace

_N = NormalDist()  # standard normal: cdf, inv_cdf, pdf
LOW_FRACTION = 0.1  # a sample below 10 % of the trace's mean counts as a deep drop


@dataclass(frozen=True)
class SynthParams:
    """Parameters of the two-state model (rates in Mbit/s, probabilities per sample)."""

    name: str
    dt_s: float
    p_drop: float
    p_recover: float
    high_median_mbit: float
    high_sigma_log: float
    high_phi: float
    high_jump_p: float
    low_mean_mbit: float
    low_sigma_mbit: float
    low_phi: float

    def __post_init__(self) -> None:
        for name in ("dt_s", "high_median_mbit", "high_sigma_log", "low_sigma_mbit", "p_recover"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v}")
        for name in ("p_drop", "p_recover", "high_jump_p"):
            v = getattr(self, name)
            if not (0.0 <= v <= 1.0):
                raise ValueError(f"{name} is a per-sample probability in [0, 1], got {v}")
        for name in ("high_phi", "low_phi"):
            v = getattr(self, name)
            if not (0.0 <= v < 1.0):
                raise ValueError(f"{name} is an AR(1) coefficient in [0, 1), got {v}")
        if not math.isfinite(self.low_mean_mbit):
            raise ValueError(f"low_mean_mbit must be finite, got {self.low_mean_mbit}")

    @property
    def drop_share(self) -> float:
        """Stationary share of samples in the drop state."""
        return self.p_drop / (self.p_drop + self.p_recover)


# Fitted to tests/data/recorded_traces/outdoors-w{1,2}.csv with fit_params (rounded; see configs/traces/README.md).
OUTDOORS = SynthParams(
    name="outdoors", dt_s=0.5435, p_drop=0.0669, p_recover=0.1263,
    high_median_mbit=67.3, high_sigma_log=0.626, high_phi=0.966, high_jump_p=0.267,
    low_mean_mbit=2.26, low_sigma_mbit=1.26, low_phi=0.81,
)
# Chosen, not fitted (no indoor record ships with the toolkit): the paper's indoors is milder,
# with a higher rate and rarer, shorter deep drops; fast swings as frequent as outdoors.
INDOORS = SynthParams(
    name="indoors", dt_s=0.5435, p_drop=0.025, p_recover=0.3,
    high_median_mbit=70.0, high_sigma_log=0.45, high_phi=0.966, high_jump_p=0.267,
    low_mean_mbit=3.0, low_sigma_mbit=1.5, low_phi=0.7,
)
KINDS = {"outdoors": OUTDOORS, "indoors": INDOORS}


# ---------------------------------------------------------------------- generation
def _drop_states(rng: np.random.Generator, n: int, p: SynthParams) -> np.ndarray:
    """Boolean per sample: True while in a deep drop (alternating geometric runs)."""
    start_low = bool(rng.random() < p.drop_share)
    if p.p_drop == 0.0:
        return np.zeros(n, dtype=bool)
    pair = 1.0 / p.p_drop + 1.0 / p.p_recover
    runs: list[np.ndarray] = []
    total = 0
    while total < n:
        k = int(math.ceil(n / pair)) + 4
        up = rng.geometric(p.p_drop, k)
        down = rng.geometric(p.p_recover, k)
        both = np.column_stack([down, up] if start_low else [up, down]).ravel()
        runs.append(both)
        total += int(both.sum())
    lengths = np.concatenate(runs)
    is_low = np.resize(np.array([start_low, not start_low]), lengths.size)
    return np.repeat(is_low, lengths)[:n]


def _ar1(rng: np.random.Generator, n: int, mean: float, sigma: float, phi: float, jump_p: float) -> np.ndarray:
    """Stationary AR(1) (mean, stationary deviation ``sigma``) that restarts from its stationary
    law with probability ``jump_p`` per sample."""
    e = rng.standard_normal(n)
    jump = rng.random(n) < jump_p
    b = sigma * math.sqrt(1.0 - phi * phi)
    x = np.empty(n)
    prev = sigma * e[0]
    x[0] = prev
    for k in range(1, n):  # sequential recursion; offline generation, n ~ 10^3-10^5
        prev = sigma * e[k] if jump[k] else phi * prev + b * e[k]
        x[k] = prev
    return mean + x


def synthesize(params: SynthParams | str, seconds: float, seed: int = 0) -> Trace:
    """A synthetic trace of about ``seconds`` (a whole number of ``dt_s`` samples, at least 2),
    deterministic for a given ``seed``; rates rounded to 1e-6 Mbit/s."""
    p = KINDS[params] if isinstance(params, str) and params in KINDS else params
    if not isinstance(p, SynthParams):
        raise ValueError(f"params must be a SynthParams or one of {sorted(KINDS)}, got {params!r}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds must be a finite duration > 0, got {seconds}")
    n = max(2, int(round(seconds / p.dt_s)))
    rng = np.random.default_rng(seed)
    low = _drop_states(rng, n, p)
    up_rate = np.exp(_ar1(rng, n, math.log(p.high_median_mbit), p.high_sigma_log, p.high_phi, p.high_jump_p))
    low_rate = np.maximum(_ar1(rng, n, p.low_mean_mbit, p.low_sigma_mbit, p.low_phi, 0.0), 0.0)
    rate = np.round(np.where(low, low_rate, up_rate), 6)
    times = np.round(np.arange(n) * p.dt_s, 6)
    return Trace(times, rate, f"synth:{p.name} seconds={seconds:g} seed={seed}")


# ---------------------------------------------------------------------- fitting
def _runs(mask: np.ndarray) -> tuple[list[int], list[int]]:
    """Lengths of the runs of True and of False in ``mask``."""
    edges = np.flatnonzero(np.diff(mask.astype(np.int8))) + 1
    bounds = np.concatenate([[0], edges, [mask.size]])
    lengths = np.diff(bounds)
    values = mask[bounds[:-1]]
    return lengths[values].tolist(), lengths[~values].tolist()


def _swing_prob(sigma: float, frac: float) -> float:
    """P(a log step ~ N(0, sigma) changes the rate by >= frac of the earlier rate)."""
    return float(1.0 - _N.cdf(math.log1p(frac) / sigma) + _N.cdf(math.log1p(-frac) / sigma))


def _swing_shares(prev: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Shares of >= 20 % and >= 40 % relative changes (0 -> 0 is no change, 0 -> x > 0 is one)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(prev > 0, np.abs(step) / prev, np.where(step != 0, np.inf, 0.0))
    return np.array([np.mean(rel >= 0.2), np.mean(rel >= 0.4)])


def _fit_low_phi(mean: float, sigma: float, step: np.ndarray, prev: np.ndarray) -> float:
    """AR(1) coefficient of the clipped drop-state process that best matches the records' swing
    shares between consecutive drop samples."""
    want = _swing_shares(prev, step)
    rng = np.random.default_rng(12345)
    z0, z1 = rng.standard_normal((2, 50_000))
    best, best_err = 0.0, math.inf
    for phi in np.arange(0.0, 0.995, 0.01):
        y0 = np.maximum(mean + sigma * z0, 0.0)
        y1 = np.maximum(mean + sigma * (phi * z0 + math.sqrt(1.0 - phi * phi) * z1), 0.0)
        err = float(np.sum((_swing_shares(y0, y1 - y0) - want) ** 2))
        if err < best_err:
            best, best_err = float(phi), err
    return best


def pooled_stats(traces: Sequence[Trace]) -> dict:
    """The statistics of :meth:`Trace.stats` averaged over ``traces`` (each trace weighs the same)."""
    if not traces:
        raise ValueError("traces is empty; give at least one Trace")
    per = [t.stats() for t in traces]
    return {k: float(np.mean([s[k] for s in per])) for k in per[0]}


def fit_params(traces: Sequence[Trace], name: str = "fitted") -> SynthParams:
    """Fit the model to recorded traces (samples on a near-regular grid).

    1. ``dt_s``: mean sample interval.  A sample is a *drop* when below 10 % of its trace's mean.
    2. ``p_drop``, ``p_recover``: 1 / mean length of the up and drop runs (pooled).
    3. Drop state: mean and standard deviation of the drop samples; ``low_phi`` (grid 0-0.99)
       minimises the squared misfit of the shares of >= 20 % and >= 40 % swings between
       consecutive drop samples (model shares by Monte Carlo with a fixed seed).
    4. Up state: log-normal (median, sigma) solved in closed form so that the model's mixture
       (stationary drop share, drop law above) has the records' mean rate and median sample.
    5. ``high_jump_p`` and ``high_phi``: solved so that consecutive up samples swing by >= 20 %
       and >= 40 % as often as in the records (a jump moves the log-rate by N(0, sigma*sqrt 2),
       a drift step by N(0, sigma*sqrt(2 (1 - phi)))).
    """
    if not traces:
        raise ValueError("traces is empty; give at least one Trace")
    ups, downs, low_vals, ll_prev, ll_next = [], [], [], [], []
    hh_prev, hh_step = [], []
    all_rates, total_mbit, total_s, intervals = [], 0.0, 0.0, []
    for tr in traces:
        r = tr.rate_mbit
        low = r < LOW_FRACTION * tr.mean_mbit
        lo_runs, up_runs = _runs(low)
        downs += lo_runs
        ups += up_runs
        low_vals.append(r[low])
        ll = low[:-1] & low[1:]
        ll_prev.append(r[:-1][ll])
        ll_next.append(r[1:][ll])
        hh = ~low[:-1] & ~low[1:]
        hh_prev.append(r[:-1][hh])
        hh_step.append(np.diff(r)[hh])
        all_rates.append(r)
        total_mbit += tr.mean_mbit * tr.duration_s
        total_s += tr.duration_s
        intervals.append(np.diff(tr.times_s))
    if len(downs) < 2 or len(ups) < 2:
        raise ValueError("the traces need at least 2 deep drops (runs below 10 % of the mean) and 2 "
                         "recoveries to fit the drop chain; give longer traces")
    dt_s = float(np.concatenate(intervals).mean())
    p_drop, p_recover = 1.0 / float(np.mean(ups)), 1.0 / float(np.mean(downs))
    lv = np.concatenate(low_vals)
    low_mean, low_sigma = float(lv.mean()), float(lv.std())
    a, b = np.concatenate(ll_prev), np.concatenate(ll_next)
    low_phi = _fit_low_phi(low_mean, low_sigma, b - a, a) if a.size > 2 else 0.5

    # 4. up state: closed form for (mu, sigma) of the log-normal
    pi_l = p_drop / (p_drop + p_recover)
    pi_h = 1.0 - pi_l
    target_mean = total_mbit / total_s
    target_median = float(np.median(np.concatenate(all_rates)))
    z = (target_median - low_mean) / low_sigma
    c = (0.5 - pi_l * _N.cdf(z)) / pi_h  # P(up sample <= median)
    clipped_low_mean = low_mean * _N.cdf(low_mean / low_sigma) + low_sigma * _N.pdf(low_mean / low_sigma)
    a_up = (target_mean - pi_l * clipped_low_mean) / pi_h  # mean of the up samples
    if not (0.0 < c < 1.0) or a_up <= target_median * math.exp(-0.5 * _N.inv_cdf(c) ** 2):
        raise ValueError("the traces' mean and median cannot be matched by the model (too many drops?)")
    zc = float(_N.inv_cdf(c))
    sigma = zc + math.sqrt(zc * zc + 2.0 * math.log(a_up / target_median))
    mu = math.log(target_median) - zc * sigma

    # 5. up-state swings: jump probability and drift step
    want = _swing_shares(np.concatenate(hh_prev), np.concatenate(hh_step))
    s_jump = sigma * math.sqrt(2.0)

    def residual(v):
        q, d = v
        return [q * _swing_prob(s_jump, f) + (1 - q) * _swing_prob(d, f) - w for f, w in zip((0.2, 0.4), want)]

    from scipy import optimize  # only the fit needs it (slow to import)

    sol = optimize.least_squares(residual, x0=[0.2, 0.2 * sigma], bounds=([0.0, 1e-4], [1.0, s_jump]))
    q, d = (float(x) for x in sol.x)
    high_phi = min(max(1.0 - d * d / (2.0 * sigma * sigma), 0.0), 0.999)
    return SynthParams(name=name, dt_s=dt_s, p_drop=p_drop, p_recover=p_recover,
                       high_median_mbit=math.exp(mu), high_sigma_log=sigma, high_phi=high_phi,
                       high_jump_p=q, low_mean_mbit=low_mean, low_sigma_mbit=low_sigma, low_phi=low_phi)


# ---------------------------------------------------------------------- CLI
STAT_KEYS = ("mean_mbit", "median_mbit", "p10_mbit", "share_time_below_10pct_mean",
             "swing20_share", "swing40_share", "swing20_per_s", "swing40_per_s", "mean_interval_s")


def main(argv: Sequence[str] | None = None) -> int:
    """Generate a synthetic trace file, or fit the model to recorded traces and print the result."""
    ap = argparse.ArgumentParser(prog="python -m data_gen.synth_traces", description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=sorted(KINDS), help="which model to generate")
    ap.add_argument("--seconds", type=float, default=1200.0, help="trace length in seconds (default 1200)")
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    ap.add_argument("--out", type=Path, help="CSV file to write (t_s,mbps); with --seeds, the folder to write into")
    ap.add_argument("--seeds", default=None,
                    help="one trace per seed, e.g. 1,2, written to --out DIR as synth-<kind>-seed<n>.csv (kind default "
                         "outdoors): a trace folder for scripts/run_all.sh --traces DIR")
    ap.add_argument("--fit", nargs="+", type=Path, metavar="TRACE",
                    help="fit the model to these traces and print parameters and statistics as JSON")
    ap.add_argument("--check-seconds", type=float, default=36000.0,
                    help="length of the synthetic trace whose statistics --fit reports (default 36000)")
    args = ap.parse_args(argv)
    if args.fit:
        traces = [load_trace(p) for p in args.fit]
        params = fit_params(traces)
        synth = synthesize(params, args.check_seconds, args.seed).stats()
        target = pooled_stats(traces)
        print(json.dumps({"params": asdict(params),
                          "target": {k: target[k] for k in STAT_KEYS},
                          "synthetic": {k: synth[k] for k in STAT_KEYS}}, indent=2))
        return 0
    if args.seeds is not None:
        return _write_seeds(ap, args)
    if args.kind is None or args.out is None:
        ap.error("give --kind and --out to generate a trace, or --fit TRACE... to fit one")
    trace = synthesize(KINDS[args.kind], args.seconds, args.seed)
    trace.to_csv(args.out)
    s = trace.stats()
    print(f"wrote {args.out}: {s['n_samples']} samples, {s['duration_s']:.1f} s, mean {s['mean_mbit']:.1f} "
          f"Mbit/s, median {s['median_mbit']:.1f}, p10 {s['p10_mbit']:.2f}, below 10 % of mean "
          f"{100 * s['share_time_below_10pct_mean']:.1f} % of the time", file=sys.stderr)
    return 0


def _write_seeds(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """--seeds: one trace file per seed into the folder --out."""
    from rog.experiment.items import parse_seeds

    if args.out is None:
        ap.error("--seeds needs --out DIR (the folder to write the traces into)")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as e:
        ap.error(str(e))
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {str(args.out)!r} exists and is not a folder; with --seeds give a folder")
    kind = args.kind or "outdoors"
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        path = args.out / f"synth-{kind}-seed{seed}.csv"
        trace = synthesize(KINDS[kind], args.seconds, seed)
        trace.to_csv(path)
        s = trace.stats()
        print(f"wrote {path}: {s['n_samples']} samples, {s['duration_s']:.1f} s, mean {s['mean_mbit']:.1f} Mbit/s",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
