"""Every group of timing figures, by name, and the run that prints them (``python -m benchmarks.timing``)."""

from __future__ import annotations

import os
import platform
import tempfile
import time
from pathlib import Path

from . import compute, global_eval, network, pacing, streams

GROUPS = {  # name -> figures(tmp_path) (each returns a list of figure dicts, benchmarks/timing/figures.py)
    "layer_shares": lambda tmp: [pacing.measured_shares()],
    "layer_pass": lambda tmp: pacing.paced_pass_figures(),
    "layer_sequential": pacing.sequential_figures,
    "layer_lbl_overlap": pacing.lbl_overlap_figures,
    "compute_fit": lambda tmp: compute.step_figures(),
    "stream_take": lambda tmp: streams.take_figures(),
    "scadles_latency": lambda tmp: streams.latency_figures(),
    "scadles_producer": lambda tmp: streams.producer_figures(),
    "global_eval": lambda tmp: global_eval.grid_figures(),
    "netns_shaping": lambda tmp: network.shaped_uplink_figures(),
    "inference_live": lambda tmp: network.live_latency_figures(),
}


def run_groups(names, echo=print) -> dict:
    """Run the named groups (all when empty), echo one line per figure; returns the summary."""
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        raise ValueError(f"unknown group(s) {unknown}; known: {', '.join(GROUPS)}")
    figs = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rog-timing-") as tmp:
        for name in names or list(GROUPS):
            sub = Path(tmp) / name
            sub.mkdir()
            for f in GROUPS[name](sub):
                figs.append(dict(group=name, **f))
                verdict = "skip" if f["ok"] is None else "ok" if f["ok"] else "OFF"
                echo(f"{verdict:4s} {f['name']}: measured {f['measured']} reference {f['reference']} "
                     f"tolerance {f.get('tolerance')} ({f.get('tolerance_kind', f.get('skipped'))})")
    held = [f for f in figs if f["ok"] is not None]
    return dict(figures=figs, held=sum(f["ok"] for f in held), measured=len(held),
                seconds=round(time.monotonic() - t0, 1), load_average=[round(x, 2) for x in os.getloadavg()], cpus=os.cpu_count(), machine=platform.machine())
