"""Compute that scales with the batch: a device profile's measured ``a + c x b`` (``compute_fit``) and its pacing.

A profile's ``compute_s_per_iteration`` is one number: the time of one mini-batch of the run's
workload.  A streamed worker with a rate-proportional batch computes on many more (or fewer) samples
than that, so a constant would make a large batch free.  ``compute_fit`` records how the model's own
forward + backward time grows with the batch on a measured machine::

    compute_fit:
      a_s: 0.0021              # seconds per pass, whatever the batch
      c_s_per_sample: 0.00052  # seconds per sample
      model: convmlp_quick
      batch_sizes: [8, 16, 32, 64, 128, 256]
      measured_s: [0.0058, 0.0066, ...]  # the fastest pass per batch size, the points fitted
      repeats: 15
      threads: 1
      machine: "x86_64, 2 cores, ..."
      fit_error: 0.031         # largest |measured - fitted| / measured over batch_sizes
      measured_at: "2026-11-26T22:50Z"
      basis: "measured: ..."

The stored ``a_s``, ``c_s_per_sample`` and ``fit_error`` must be the fit of the stored ``measured_s``
(a hand-edited number is refused, naming the field).

Pacing (:class:`BatchPacer`) keeps the profile's constant at the workload's mini-batch ``b0`` and
takes the *shape* from the fit: ``target(b) = k (a + c b)`` with ``k = compute_s / (a + c b0)``.  A
profile measured on its own device has ``k`` near 1; the quick profile emulates a slower robot
(``k`` = 0.28 s over this machine's time at ``b0``), and ``k`` is recorded in ``config.yaml``.
Without ``compute_fit`` the constant is used at every batch (the fallback, recorded as ``constant``).

Measured and written by :mod:`rog.testbed.compute_fit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["FIT_FIELDS", "ComputeFit", "BatchPacer", "parse_compute_fit", "fit_line"]

FIT_FIELDS = ("a_s", "c_s_per_sample", "model", "batch_sizes", "measured_s", "repeats", "threads", "machine",
              "fit_error", "measured_at", "basis")


@dataclass(frozen=True)
class ComputeFit:
    """``a + c x b`` seconds per forward + backward pass of ``model`` at batch ``b``, with its basis."""

    a_s: float  # intercept: seconds per pass at any batch (may be slightly negative from a fit)
    c_s_per_sample: float  # slope: seconds per sample (> 0)
    model: str  # the model whose passes were timed
    batch_sizes: tuple[int, ...]  # the batches timed
    measured_s: tuple[float, ...]  # the fastest pass per batch size (the points fitted), seconds
    repeats: int  # timed rounds per batch (the fastest is fitted)
    threads: int  # torch threads during the timing
    machine: str  # where it was measured (and how loaded)
    fit_error: float  # largest relative residual over batch_sizes
    measured_at: str  # UTC date and time of the measurement, e.g. 2026-11-26T22:50Z
    basis: str  # "measured: ..."

    def __post_init__(self) -> None:
        if not (_num(self.a_s) and _num(self.c_s_per_sample) and self.c_s_per_sample > 0):
            raise ValueError(f"a_s must be a number and c_s_per_sample a number > 0, got {self.a_s!r}, {self.c_s_per_sample!r}")
        if len(self.batch_sizes) < 2 or not all(isinstance(b, int) and b >= 1 for b in self.batch_sizes):
            raise ValueError(f"batch_sizes must list at least two integers >= 1, got {list(self.batch_sizes)!r}")
        if self.seconds(min(self.batch_sizes)) <= 0:
            raise ValueError(f"a_s + c_s_per_sample x {min(self.batch_sizes)} must be > 0")
        if not (isinstance(self.repeats, int) and self.repeats >= 1 and isinstance(self.threads, int) and self.threads >= 1):
            raise ValueError(f"repeats and threads must be integers >= 1, got {self.repeats!r}, {self.threads!r}")
        if not (_num(self.fit_error) and self.fit_error >= 0):
            raise ValueError(f"fit_error must be a number >= 0, got {self.fit_error!r}")
        if len(self.measured_s) != len(self.batch_sizes) or not all(_num(s) and s > 0 for s in self.measured_s):
            raise ValueError(f"measured_s must list one time > 0 per batch size ({len(self.batch_sizes)}), "
                             f"got {list(self.measured_s)!r}")
        self._check_fit_of_points()
        for name in ("model", "machine", "measured_at"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"{name} must be a non-empty string")
        if not isinstance(self.basis, str) or not self.basis.startswith("measured:"):
            raise ValueError(f"basis must start with 'measured:' (a fit is a measurement), got {self.basis!r}")

    def _check_fit_of_points(self) -> None:
        """The stored line and error must be the least-squares fit of ``measured_s`` (to the writer's rounding)."""
        a, c, err = fit_line(self.batch_sizes, self.measured_s)
        fitted = {"a_s": (self.a_s, a, 1e-6), "c_s_per_sample": (self.c_s_per_sample, c, 1e-3 * abs(c) + 1e-9),
                  "fit_error": (self.fit_error, err, 1e-3)}
        for name, (stored, value, tol) in fitted.items():
            if abs(float(stored) - value) > tol:
                raise ValueError(f"{name} {stored!r} is not the fit of measured_s ({value:.7g}); "
                                 "re-measure with python -m rog.testbed.compute_fit --write")

    def seconds(self, samples: float) -> float:
        """Fitted seconds of one pass at ``samples``."""
        return float(self.a_s) + float(self.c_s_per_sample) * float(samples)

    def to_dict(self) -> dict[str, Any]:
        """The YAML mapping (round-trips through :func:`parse_compute_fit`)."""
        return {"a_s": self.a_s, "c_s_per_sample": self.c_s_per_sample, "model": self.model,
                "batch_sizes": list(self.batch_sizes), "measured_s": list(self.measured_s), "repeats": self.repeats,
                "threads": self.threads, "machine": self.machine, "fit_error": self.fit_error,
                "measured_at": self.measured_at, "basis": self.basis}


def parse_compute_fit(v: Any) -> ComputeFit:
    """Validate a profile's ``compute_fit`` mapping; ValueError names the field and the fix."""
    if not isinstance(v, Mapping):
        raise ValueError(f"must be a mapping with {', '.join(FIT_FIELDS)}, got {v!r}")
    unknown = [k for k in v if k not in FIT_FIELDS]
    missing = [k for k in FIT_FIELDS if k not in v]
    if unknown or missing:
        raise ValueError(f"unknown fields {unknown} / missing fields {missing}; "
                         f"rewrite it with python -m rog.testbed.compute_fit --write")
    sizes, secs = v["batch_sizes"], v["measured_s"]
    if not isinstance(sizes, list):
        raise ValueError(f"batch_sizes must be a list of integers, got {sizes!r}")
    if not isinstance(secs, list):
        raise ValueError(f"measured_s must be a list of seconds, one per batch size, got {secs!r}")
    return ComputeFit(a_s=v["a_s"], c_s_per_sample=v["c_s_per_sample"], model=v["model"], batch_sizes=tuple(sizes),
                      measured_s=tuple(secs), repeats=v["repeats"], threads=v["threads"], machine=v["machine"],
                      fit_error=v["fit_error"], measured_at=v["measured_at"], basis=v["basis"])


class BatchPacer:
    """Seconds to pace one pass of ``b`` samples to: the fit's shape through ``compute_s`` at ``b0``.

    ``fit`` None: the constant ``compute_s`` at every batch (the fallback for a profile without a fit).
    """

    def __init__(self, compute_s: float, anchor_samples: int, fit: ComputeFit | None) -> None:
        if not (_num(compute_s) and compute_s > 0) or not (isinstance(anchor_samples, int) and anchor_samples >= 1):
            raise ValueError(f"compute_s must be > 0 and anchor_samples an integer >= 1, got {compute_s!r}, {anchor_samples!r}")
        self.compute_s, self.anchor_samples, self.fit = float(compute_s), int(anchor_samples), fit
        self.scale = None if fit is None else self.compute_s / fit.seconds(anchor_samples)

    def target_s(self, samples: int) -> float:
        """Pacing target of one pass over ``samples`` samples."""
        if self.fit is None:
            return self.compute_s
        return max(0.0, self.scale * self.fit.seconds(samples))

    def describe(self) -> dict[str, Any]:
        """The ``compute_model`` entry of ``config.yaml``: which model paces, and its numbers."""
        if self.fit is None:
            return {"kind": "constant", "compute_s": self.compute_s, "anchor_samples": self.anchor_samples}
        return {"kind": "fit", "compute_s": self.compute_s, "anchor_samples": self.anchor_samples,
                "scale": self.scale, "a_s": self.scale * self.fit.a_s,
                "c_s_per_sample": self.scale * self.fit.c_s_per_sample, "fit": self.fit.to_dict()}

    @classmethod
    def from_config(cls, entry: Mapping) -> "BatchPacer":
        """Rebuild from ``config.yaml``'s ``compute_model`` entry."""
        fit = parse_compute_fit(entry["fit"]) if entry.get("kind") == "fit" else None
        return cls(entry["compute_s"], int(entry["anchor_samples"]), fit)


def fit_line(batch_sizes, seconds) -> tuple[float, float, float]:
    """Least-squares ``(a, c, largest relative residual)`` of ``seconds ~ a + c x batch``, each point
    weighted by ``1 / seconds^2`` (relative residuals: a 5 ms pass counts as much as a 100 ms one)."""
    xs, ys = [float(b) for b in batch_sizes], [float(s) for s in seconds]
    if len(xs) != len(ys) or len(set(xs)) < 2 or min(ys) <= 0:
        raise ValueError("fit_line needs at least two distinct batch sizes, one positive time each")
    ws = [1.0 / (y * y) for y in ys]
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs)) / sw
    my = sum(w * y for w, y in zip(ws, ys)) / sw
    c = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys)) / sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
    a = my - c * mx
    err = max(abs(y - (a + c * x)) / y for x, y in zip(xs, ys))
    return a, c, err


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
