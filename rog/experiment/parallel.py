"""Independent runs of a plan side by side (``scripts/run_items.py --parallel N``).

Slots: at most ``N`` runs at once, each in a *slot* ``0..N-1``.  A run's emulated testbed prefix is
random (:func:`rog.experiment.emulated.new_prefix`: a 2-5 character tag + random hex, 8 characters
in all); two runs started at random collide with probability 2^-24 per pair.  The driver makes a
collision impossible: the run in slot ``k`` gets the tag :func:`slot_tag` (the user's
``$ROG_TESTBED_PREFIX`` tag or ``rg``, then the slot's character) in its environment, so runs that
are live at the same time differ in the tag, at the same position of a fixed-length prefix:
their namespace, link and work-folder names (``<prefix>ps``, ``<prefix>w1``, ``<prefix>v1w``, ...)
cannot be equal.  A slot is handed to the next run only after its run has exited (and cleaned up).

Default N (:func:`default_parallel`): ``max(1, floor(cores / cpu_per_run))`` with ``cpu_per_run`` =
the plan's largest run (workers + the PS) x the CPU cores one process of a run keeps busy, measured:
the median of ``busy_cores_peak / (workers + 1)`` over the completed runs recorded in
``<result-dir>/cpu_use.json`` (the driver records every run it starts: CPU seconds of the run's
process tree, ``wait4``, and of its namespaces' processes, :mod:`rog.experiment.cpu_meter`; and the
cores it kept busy per second of wall clock, at their peak (and 90th percentile, for the record): a
run's busy stretches (its workers compute at the same moments: after a BSP pull all at once) are
what a second run beside it would slow down, changing its per-iteration figures; the mean over
the whole run hides them in the stalls.  Records under :data:`MIN_MEASURED_WALL_S` are
left out, and so are runs measured while the whole machine was at least :data:`SATURATED_SHARE`
busy: they show what the run got, not what it needs), else
:data:`ASSUMED_CPU_PER_PROCESS` (conservative).  The plan's duration at N (:func:`estimate_at`) is
the plan order list-scheduled over N slots.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from rog.experiment.emulated import PREFIX_TAG_ENV
from rog.experiment.rundir import DONE_FILE, write_atomic

__all__ = ["CPU_FILE", "ASSUMED_CPU_PER_PROCESS", "SLOT_CHARS", "add_parallel_arguments", "slot_tag", "cores",
           "record_cpu", "read_cpu", "cpu_per_process", "default_parallel", "estimate_at", "run_slots",
           "ChildRun", "start_child", "poll_child", "check_parallel", "measure_run", "SATURATED_SHARE"]

CPU_FILE = "cpu_use.json"  # <result-dir>/cpu_use.json: run id -> {"cpu_s", "wall_s", "workers", "parallel"}
# Without a measurement: half a core per process (the PS and every worker).  Compute pacing keeps a
# worker asleep part of each iteration; the PS and the transports still work while it sleeps.
ASSUMED_CPU_PER_PROCESS = 0.5
SATURATED_SHARE = 0.9  # a run measured while the machine was this busy or more shows a lower bound only
MIN_MEASURED_WALL_S = 30.0  # a shorter record (a run that failed at start) says nothing about training
SLOT_CHARS = "0123456789abcdefghijklmnopqrstuvwxyz"  # one character per slot: at most 36 slots


def add_parallel_arguments(p: argparse.ArgumentParser) -> None:
    """``--parallel N`` on the driver's parser."""
    p.add_argument("--parallel", type=int, default=None, metavar="N",
                   help="run up to N independent runs side by side, each in its own namespaces (default: "
                        "floor(cores / measured CPU cores per run), at least 1; see docs/robustness.md)")


def check_parallel(n: int | None) -> None:
    """ValueError naming the flag unless ``n`` is None or 1..len(SLOT_CHARS)."""
    if n is not None and not (1 <= n <= len(SLOT_CHARS)):
        raise ValueError(f"--parallel must be an integer from 1 to {len(SLOT_CHARS)}, got {n}")


def slot_tag(slot: int, base: str | None = None) -> str:
    """The testbed prefix tag of the run in ``slot``: the base tag (``$ROG_TESTBED_PREFIX`` or ``rg``,
    cut to 4 characters) + the slot's character; distinct slots give distinct tags of equal length."""
    base = (base if base is not None else os.environ.get(PREFIX_TAG_ENV) or "rg")[:4]
    if not (0 <= slot < len(SLOT_CHARS)):
        raise ValueError(f"slot must be 0..{len(SLOT_CHARS) - 1}, got {slot}")
    return base + SLOT_CHARS[slot]


def cores() -> int:
    """CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def read_cpu(result_dir: Path) -> dict[str, dict]:
    """``cpu_use.json`` (run id -> record), or {} when absent or unreadable."""
    try:
        doc = json.loads((Path(result_dir) / CPU_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def record_cpu(result_dir: Path, run_id: str, cpu_s: float, wall_s: float, workers: int, parallel: int,
               busy_cores_peak: float | None = None, busy_cores_p90: float | None = None,
               machine_busy_share: float | None = None) -> None:
    """Add (or replace) one run's measured CPU and wall seconds and busy cores (peak and 90th percentile
    over 1 s intervals) in ``cpu_use.json``."""
    doc = read_cpu(result_dir)
    doc[run_id] = {"cpu_s": round(float(cpu_s), 2), "wall_s": round(float(wall_s), 2), "workers": int(workers),
                   "parallel": int(parallel),
                   "busy_cores_peak": None if busy_cores_peak is None else round(float(busy_cores_peak), 3),
                   "busy_cores_p90": None if busy_cores_p90 is None else round(float(busy_cores_p90), 3),
                   "machine_busy_share": None if machine_busy_share is None else round(float(machine_busy_share), 3)}
    write_atomic(Path(result_dir) / CPU_FILE, json.dumps(doc, indent=2, sort_keys=True) + "\n")


def cpu_per_process(result_dir: Path) -> tuple[float | None, int]:
    """Median CPU cores per process (PS and workers) over the completed runs recorded, and how many: a
    run's busy cores at their peak over 1 s intervals when recorded, else its mean (CPU s / wall s)."""
    vals = []
    for rid, rec in read_cpu(result_dir).items():
        try:
            cpu, wall, w = float(rec["cpu_s"]), float(rec["wall_s"]), int(rec["workers"])
        except (KeyError, TypeError, ValueError):
            continue
        sat = rec.get("machine_busy_share")
        if isinstance(sat, (int, float)) and sat >= SATURATED_SHARE:
            continue  # measured on a saturated machine: what the run got, not what it needs
        if wall >= MIN_MEASURED_WALL_S and w >= 1 and (Path(result_dir) / rid / DONE_FILE).exists():
            busy = rec.get("busy_cores_peak")
            vals.append((float(busy) if isinstance(busy, (int, float)) else cpu / wall) / (w + 1))
    return (float(statistics.median(vals)) if vals else None), len(vals)


def default_parallel(requested: int | None, result_dir: Path, workers: Iterable[int],
                     n_cores: int | None = None) -> tuple[int, str]:
    """N and the sentence that says why (``requested``: the user's --parallel, taken as given)."""
    n_cores = cores() if n_cores is None else int(n_cores)
    per, n_meas = cpu_per_process(result_dir)
    w = max(list(workers) or [4])
    n_sat = sum(1 for rec in read_cpu(result_dir).values() if isinstance(rec, dict)
                and isinstance(rec.get("machine_busy_share"), (int, float)) and rec["machine_busy_share"] >= SATURATED_SHARE)
    why_none = (f"{n_sat} run(s) measured on a saturated machine, left out" if n_sat else "no measured run yet")
    src = (f"measured {per:.2f} cores per process (median of {n_meas} completed run(s) in {CPU_FILE})"
           if per is not None else f"assumed {ASSUMED_CPU_PER_PROCESS:g} cores per process ({why_none})")
    per = ASSUMED_CPU_PER_PROCESS if per is None else per
    per_run = per * (w + 1)
    if requested is not None:
        return requested, f"--parallel {requested} (given); the rule would give {max(1, math.floor(n_cores / per_run))}"
    n = max(1, min(len(SLOT_CHARS), math.floor(n_cores / per_run)))
    return n, (f"N = max(1, floor({n_cores} cores / {per_run:.2f} cores per run)) = {n}; {src}, "
               f"x {w + 1} processes (the largest run: {w} workers + the PS)")


def estimate_at(durations_s: Sequence[float], n: int) -> float:
    """Wall seconds of runs of these durations started in order on ``n`` slots (each on the first free one)."""
    ends = [0.0] * max(1, int(n))
    for d in durations_s:
        k = min(range(len(ends)), key=lambda i: ends[i])
        ends[k] += float(d)
    return max(ends)


def run_slots(jobs: Iterable[Any], n: int, start: Callable[[Any, int], Any], poll: Callable[[Any], Any],
              on_done: Callable[[Any, int, Any], None], stopping: Callable[[], bool] = lambda: False,
              sleep: Callable[[float], None] = time.sleep, tick_s: float = 0.5,
              on_tick: Callable[[dict], None] | None = None) -> None:
    """Run ``jobs`` in order with at most ``n`` at once, each in a free slot (the lowest).

    ``start(job, slot)`` returns a handle; ``poll(handle)`` returns None while the job runs, else its
    result, and ``on_done(job, slot, result)`` is called before the slot is handed on.  Once
    ``stopping()`` is true no job starts; the live ones are polled until they end.  ``on_tick(live)``
    (``{slot: (job, handle)}``) is called once per round, e.g. for a status line."""
    check_parallel(n)
    pending = deque(jobs)
    free = list(range(n))
    live: dict[int, tuple[Any, Any]] = {}
    while live or (pending and not stopping()):
        while pending and free and not stopping():
            slot = free.pop(0)
            job = pending.popleft()
            live[slot] = (job, start(job, slot))
        ended = False
        for slot in sorted(live):
            job, handle = live[slot]
            res = poll(handle)
            if res is not None:
                del live[slot]
                on_done(job, slot, res)
                free.append(slot)
                free.sort()
                ended = True
        if on_tick is not None and live:
            on_tick(dict(live))
        if live and not ended:
            sleep(tick_s)


@dataclass
class ChildRun:
    """One live child: its process, its stdout (read by a thread), when it started."""

    proc: subprocess.Popen
    chunks: list
    reader: threading.Thread
    t0: float
    meter: Any = None  # the slot's NetnsCpuMeter
    stop_sent_at: float | None = None


def start_child(cmd: Sequence[str], cwd: str, slot: int) -> ChildRun:
    """Start ``cmd`` in its own session with the slot's testbed prefix tag; stdout is collected."""
    env = dict(os.environ, **{PREFIX_TAG_ENV: slot_tag(slot)})
    proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.PIPE, text=True, start_new_session=True,
                            stdin=subprocess.DEVNULL, env=env)
    chunks: list[str] = []
    stream = proc.stdout
    reader = threading.Thread(target=lambda: chunks.extend(stream), daemon=True)
    reader.start()
    from rog.experiment.cpu_meter import NetnsCpuMeter

    return ChildRun(proc, chunks, reader, time.monotonic(), NetnsCpuMeter(slot_tag(slot), root_pid=proc.pid).start())


def exit_code(status: int) -> int:
    """A wait status as ``Popen.returncode`` has it: the exit code, or minus the signal (Python 3.8 has no
    ``os.waitstatus_to_exitcode``)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def poll_child(c: ChildRun, stop_grace_s: float | None = None) -> tuple[int, str, float, float, tuple] | None:
    """None while running; else ``(exit code, stdout, wall s, CPU s, (busy cores peak, p90, machine busy share))`` (its process tree + its
    namespaces' processes: :mod:`rog.experiment.cpu_meter`).  With
    ``stop_grace_s``: after a stop was sent, a child still alive that long later has its process
    group killed."""
    try:
        pid, status, ru = os.wait4(c.proc.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere
        pid, status, ru = c.proc.pid, 0, None
    if pid == 0:
        if stop_grace_s is not None and c.stop_sent_at is not None and time.monotonic() - c.stop_sent_at > stop_grace_s:
            try:
                os.killpg(c.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return None
    c.proc.returncode = exit_code(status) if ru is not None else c.proc.poll()
    c.reader.join(timeout=5.0)
    cpu = (ru.ru_utime + ru.ru_stime) if ru is not None else float("nan")
    busy = (None, None, None)
    if c.meter is not None:
        cpu += c.meter.stop()
        busy = (*c.meter.busy_cores(), c.meter.machine_busy_share())
    return int(c.proc.returncode or 0), "".join(c.chunks), time.monotonic() - c.t0, cpu, busy


def measure_run(cmd: Sequence[str], cwd: str, slot: int = 0, tick_s: float = 0.5) -> dict[str, Any]:
    """Run one command as the driver runs a run (slot ``slot``) and return what the driver records of it:
    ``{"rc", "wall_s", "cpu_s", "cpu_per_wall", "busy_cores_peak", "busy_cores_p90", "machine_busy_share"}``."""
    c = start_child(cmd, cwd, slot)
    while (res := poll_child(c)) is None:
        time.sleep(tick_s)
    rc, _, wall, cpu, (peak, q90, share) = res
    return {"rc": rc, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "cpu_per_wall": round(cpu / wall, 3),
            "busy_cores_peak": peak, "busy_cores_p90": q90, "machine_busy_share": share,
            "counted_by_the_rule": share is None or share < SATURATED_SHARE}
