"""Compute that scales with the batch: a device profile's measured ``a + c x b`` (``compute_fit``).

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

``python -m rog.testbed.compute_fit --profile quick-cpu [--write]`` measures and fits (JSON on the
last line); ``--write`` replaces the profile's ``compute_fit`` block.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

__all__ = ["FIT_FIELDS", "ComputeFit", "BatchPacer", "parse_compute_fit", "fit_line", "measure_pass_s", "main"]

FIT_FIELDS = ("a_s", "c_s_per_sample", "model", "batch_sizes", "measured_s", "repeats", "threads", "machine",
              "fit_error", "measured_at", "basis")
HEADER = "# Measured compute per pass as a function of the batch (written by python -m rog.testbed.compute_fit --write)."


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


def measure_pass_s(model_name: str, batch_sizes, repeats: int, threads: int = 1, warmup: int = 2) -> list[float]:
    """Fastest seconds of one train-mode forward + backward (cross-entropy) of ``model_name`` per batch size.

    The batch sizes are interleaved (one pass of each per round, ``warmup`` rounds untimed), so a change
    of machine load hits every size alike; the fastest of ``repeats`` rounds is the least disturbed pass."""
    import torch
    import torch.nn.functional as F

    from rog.models import make_model
    from rog.workloads.quick import QuickWorkload

    torch.set_num_threads(int(threads))
    torch.manual_seed(0)
    model = make_model(model_name, QuickWorkload.num_classes)
    model.train()
    data = [(torch.randn(int(b), *QuickWorkload.input_shape), torch.randint(0, QuickWorkload.num_classes, (int(b),)))
            for b in batch_sizes]
    best = [math.inf] * len(data)
    for r in range(warmup + repeats):
        for i, (x, y) in enumerate(data):
            model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            F.cross_entropy(model(x), y).backward()
            if r >= warmup:
                best[i] = min(best[i], time.perf_counter() - t0)
    return best


def write_fit(path: Path, fit: ComputeFit) -> None:
    """Replace (or append) the ``compute_fit`` block of the profile file ``path``, keeping its comments; the
    new text is validated as a whole profile first (ProfileError, file untouched), so an old or hand-broken
    ``compute_fit`` block is replaced by a valid one."""
    import yaml

    from ..strict_yaml import load_strict
    from .profiles import profile_from_dict

    lines = Path(path).read_text(encoding="utf-8").splitlines()
    keep, skipping = [], False
    for line in lines:
        if line == HEADER or line.startswith("compute_fit:"):
            skipping = True
            continue
        if skipping and (line.startswith((" ", "#")) or not line.strip()):
            continue  # the old block's indented lines and comments
        skipping = False
        keep.append(line)
    block = yaml.safe_dump({"compute_fit": fit.to_dict()}, sort_keys=False, width=10_000, default_flow_style=None).rstrip("\n")
    text = "\n".join(keep + [HEADER, block]) + "\n"
    profile_from_dict(load_strict(text), source=str(path), expected_name=Path(path).stem)
    Path(path).write_text(text, encoding="utf-8")


def _load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def _machine(load_start: float) -> str:
    return (f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or 'cpu'}, "
            f"1-min load average {load_start:.2f} at the start and {_load():.2f} at the end")


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def main(argv=None) -> int:
    """CLI: time the model's passes, fit ``a + c x b``, print JSON (last line); ``--write`` stores the fit."""
    from .profiles import DEVICES_DIR, ProfileError, load_profile

    p = argparse.ArgumentParser(prog="python -m rog.testbed.compute_fit", description=main.__doc__)
    p.add_argument("--profile", default="quick-cpu", help="profile name or YAML path (default quick-cpu)")
    p.add_argument("--model", default="convmlp_quick", help="rog.models name to time (default convmlp_quick)")
    p.add_argument("--batches", default="8,16,32,64,128,256", help="comma-separated batch sizes")
    p.add_argument("--repeats", type=int, default=60,
                   help="timed rounds, each one pass per batch size (the fastest is fitted; default 60: fewer read high under load)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (workers train with 1)")
    p.add_argument("--write", action="store_true", help="write the fit into the profile file")
    a = p.parse_args(argv)
    try:
        sizes = [int(x) for x in a.batches.split(",") if x.strip()]
    except ValueError:
        p.error(f"--batches: {a.batches!r} is not a comma-separated list of integers, e.g. 8,16,32,64")
    if len(set(sizes)) < 2 or min(sizes) < 1 or a.repeats < 1 or a.threads < 1:
        p.error("--batches needs two distinct sizes >= 1; --repeats and --threads must be >= 1")
    path = Path(a.profile) if a.profile.endswith((".yaml", ".yml")) or "/" in a.profile else DEVICES_DIR / f"{a.profile}.yaml"
    if not path.is_file():
        try:
            load_profile(a.profile)  # its message: no such profile, the close names, the available ones
        except ProfileError as e:
            p.error(f"--profile: {e}")
    load0, at = _load(), time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime())
    secs = [round(s, 7) for s in measure_pass_s(a.model, sizes, a.repeats, a.threads)]  # as stored, then fitted
    machine = _machine(load0)
    a_s, c, err = fit_line(sizes, secs)
    fit = ComputeFit(a_s=round(a_s, 7), c_s_per_sample=round(c, 9), model=a.model, batch_sizes=tuple(sizes),
                     measured_s=tuple(secs), repeats=a.repeats, threads=a.threads, machine=machine,
                     fit_error=round(err, 4), measured_at=at,
                     basis=f"measured: fastest of {a.repeats} interleaved rounds of train-mode forward + backward passes "
                           f"of {a.model} per batch with {a.threads} torch thread(s), least squares on relative residuals")
    if a.write:
        try:
            write_fit(path, fit)
        except ProfileError as e:
            p.error(f"--profile: {e}")
    print(json.dumps({"profile": path.stem, **fit.to_dict(), "fitted_s": [round(fit.seconds(b), 7) for b in sizes],
                      "written": bool(a.write)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
