"""Measure and fit a device profile's ``compute_fit`` (``a + c x b``; the format and the pacing:
:mod:`rog.testbed.compute_model`, whose names it re-exports).

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
from pathlib import Path

from .compute_model import FIT_FIELDS, BatchPacer, ComputeFit, fit_line, parse_compute_fit  # kept importable from here

__all__ = ["FIT_FIELDS", "ComputeFit", "BatchPacer", "parse_compute_fit", "fit_line", "measure_pass_s", "main"]

HEADER = "# Measured compute per pass as a function of the batch (written by python -m rog.testbed.compute_fit --write)."


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
