"""``python -m rog.inference.profiler``: profile a model as ``run_inference.py`` does and write the profile.

The command lives apart from the profiling library (the package) because it drives the runner, which
profiles through the library: one module for both would import in a circle.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from rog.inference import runner as R


def main(argv=None) -> int:
    """``python -m rog.inference.profiler --model M [--server-device cuda] --out FILE``: profile ``M`` as
    ``run_inference.py`` does (robot on this CPU, server on this CPU or the GPU) and write the profile, each
    unit's whole seconds on both sides, and the machine; ``run_inference.py --times FILE`` then uses it."""
    ap = argparse.ArgumentParser(prog="python -m rog.inference.profiler", description=main.__doc__.split(":")[0])
    ap.add_argument("--model", default="vgg19")
    ap.add_argument("--server-device", choices=R.SERVER_DEVICES, default="cpu")
    ap.add_argument("--repeats", type=int, default=7, help="timings per unit and share (the fastest is kept)")
    ap.add_argument("--out", required=True, help="the profile's JSON file")
    a = ap.parse_args(argv)
    device, note = R.resolve_server_device(a.server_device)
    if note:
        print(f"profiler: {note}", file=sys.stderr)
    t0 = time.perf_counter()
    prep = R.prepare(a.model, [], [1.0], repeats=a.repeats, server_device=device)
    t = prep.times
    units = [{"unit": u, "name": type(prep.graph.units[u].node).__name__, "robot_cpu_s": t.cpu_s[u],
              "server_s": t.server_s(u) / t.server_factor} for u in range(len(prep.graph))]
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    doc = {"model": a.model, "server_device": device, "requested_server_device": a.server_device, "gpu": gpu,
           "cpu": platform.processor() or platform.machine(), "torch": torch.__version__, "repeats": a.repeats,
           "profile_s": time.perf_counter() - t0, "robot_cpu_total_s": sum(t.cpu_s),
           "server_total_s": sum(x["server_s"] for x in units), "units": units, "times": t.to_dict()}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({**{k: doc[k] for k in ("model", "server_device", "gpu", "robot_cpu_total_s", "server_total_s",
                                             "profile_s")}, "out": a.out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
