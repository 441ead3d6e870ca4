"""Put every rank's event times on the parameter server's clock (runs whose hosts have their own clocks).

A rank's ``t_s`` counts from its header's origin; ``origin_unix_s`` places that origin on the rank's
own wall clock.  Ranks whose header names the PS's ``origin_monotonic_s`` share the PS's clock (one
machine: the local and emulated testbeds) and are left as they are.  Any other rank ``r`` (a device of
``--testbed hosts``) is shifted onto the PS's run clock by

    shift_s(r) = origin_unix_s(r) + offset_s(r) - origin_unix_s(ps)

where ``offset_s(r)`` = PS clock - clock of r, as the PS estimated it over the run's connection
(``clock_offsets.json``, :mod:`rog.runtime.clock_sync`; the mean of the join and end estimates).  A
rank with no estimate is shifted with offset 0 (its wall clock taken as right) and named in a warning.
"""

from __future__ import annotations

from pathlib import Path

from rog.experiment.rundir import CLOCK_OFFSETS_FILE
from rog.runtime.clock_sync import read_offsets_file, worker_offset_s

__all__ = ["read_clock_offsets", "rank_shifts_s", "align_events"]


def read_clock_offsets(run_dir: str | Path) -> dict | None:
    """``clock_offsets.json`` of a run folder, or None when there is none."""
    return read_offsets_file(Path(run_dir) / CLOCK_OFFSETS_FILE)


def rank_shifts_s(headers: dict[str, dict], offsets: dict | None) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """``(shifts, offsets_used, warnings)``: seconds to add to each rank's ``t_s`` (ranks on their own
    clock only) and the offset used for it; empty when there is no PS header to align to."""
    ps = headers.get("ps")
    if ps is None or ps.get("origin_unix_s") is None:
        return {}, {}, []
    shifts, used, warnings = {}, {}, []
    entries = (offsets or {}).get("workers", {})
    for rank, h in headers.items():
        if rank == "ps" or h.get("origin_monotonic_s") == ps.get("origin_monotonic_s") or h.get("origin_unix_s") is None:
            continue
        est = worker_offset_s(entries[rank]) if isinstance(entries.get(rank), dict) else None
        if est is None:
            warnings.append(f"{rank}: no clock offset estimated by the PS; its events are aligned by its own wall clock")
        used[rank] = 0.0 if est is None else est[0]
        shifts[rank] = float(h["origin_unix_s"]) + used[rank] - float(ps["origin_unix_s"])
    return shifts, used, warnings


def align_events(events: dict, headers: dict[str, dict], offsets: dict | None) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Shift each rank's event table (``t_s``, in place) onto the PS's run clock; returns :func:`rank_shifts_s`."""
    shifts, used, warnings = rank_shifts_s(headers, offsets)
    for rank, s in shifts.items():
        df = events.get(rank)
        if df is not None and not df.empty:
            df["t_s"] = df["t_s"].astype(float) + s
    return shifts, used, warnings
