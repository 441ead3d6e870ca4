"""``energy.json`` for a run folder: one energy report per device (workers and PS), source named.

On the emulated testbed (and on loopback) every device is a process on this machine: a power
sensor here (RAPL, NVML) would measure the emulating machine, not the robot or laptop a process
stands for.  So every device's energy is the state-based model (docs/design.md#energy-model) over its real
training interval (``run_start`` .. ``run_end`` of its event log), labelled
``model:<profile name>``, with the watts of its device profile (idle, i.e. time between logged
events, at the stall watts: the profile's documented default).  The file says so, and lists what
the host's sensor probe found, so a reader can tell a model from a measurement.

Also writes ``power-<rank>.csv`` (``t_s,power_w,source``, 10 Hz, the model's power on the run
clock) for the figure tools, which read power logs by header.
"""

from __future__ import annotations

import json
from pathlib import Path

from rog.power import report_from_events, timeline_from_events
from rog.power.sampler import render_model_samples, write_samples_csv

from .rundir import ENERGY_FILE, write_atomic

__all__ = ["energy_reports", "write_energy_json"]

_NOTE = ("No power sensor is used for an emulated device: every process runs on this machine, whose own "
         "sensors would measure the emulator. Energies come from the state-based model (seconds in compute / "
         "communication / stall from each device's event log x its profile's watts; time between logged events "
         "at the stall watts), integrated over each device's own run_start..run_end interval. "
         "Labelled model:<profile>: a model, not a measurement.")


def energy_reports(run_dir: str | Path, n_workers: int, worker_profile, ps_profile,
                   power_csv: bool = True) -> dict:
    """``{"note", "host_sensors", "devices": {rank: EnergyReport.to_dict() | {"error": ...}}, "total_j"}``."""
    from rog.power import probe_power_sources
    from rog.runtime.events import read_events

    run_dir = Path(run_dir)
    devices: dict = {}
    total = 0.0
    ranks = [("ps", ps_profile)] + [(f"w{k}", worker_profile) for k in range(n_workers)]
    for rank, profile in ranks:
        path = run_dir / f"events-{rank}.jsonl"
        if not path.exists():
            devices[rank] = {"error": f"no event log {path.name}", "source": profile.model_source}
            continue
        try:
            rep = report_from_events(path, profile, device=rank)
        except ValueError as e:
            devices[rank] = {"error": str(e), "source": profile.model_source}
            continue
        d = rep.to_dict()
        d["profile"] = profile.name
        d["watts"] = profile.watts()
        devices[rank] = d
        total += rep.energy_j
        if power_csv:
            _, recs = read_events(path, allow_partial_last_line=True)
            merge = "priority" if rank == "ps" else "error"
            samples = render_model_samples(timeline_from_events(recs, merge=merge), profile, rep.t0_s, rep.t1_s)
            write_samples_csv(run_dir / f"power-{rank}.csv", samples)
    try:
        sensors = {k: (v or "usable") for k, v in probe_power_sources().items()}
    except Exception as e:  # noqa: BLE001 - informational only
        sensors = {"error": str(e)}
    return {"note": _NOTE, "host_sensors": sensors, "devices": devices, "total_j": total}


def write_energy_json(run_dir: str | Path, n_workers: int, worker_profile, ps_profile) -> dict:
    """Compute :func:`energy_reports` and write ``energy.json``; returns the document."""
    doc = energy_reports(run_dir, n_workers, worker_profile, ps_profile)
    write_atomic(Path(run_dir) / ENERGY_FILE, json.dumps(doc, indent=2) + "\n")
    return doc
