"""CPU seconds of one emulated run, for the driver's default ``--parallel`` (rog.experiment.parallel).

A run's processes are of two kinds.  The launcher (``scripts/run.py``) and what it waits for are
its process tree: the kernel adds their CPU time to the launcher's when they are reaped, and the
driver reads it with ``wait4``.  The PS and the workers start detached inside the run's network
namespaces (``setsid``: the deployment plan), so they leave that tree; :class:`NetnsCpuMeter` samples
them: every ``period_s`` it reads ``utime + stime`` of every process whose network namespace is one
of ``/run/netns/<tag>*`` (the run's slot tag, :func:`rog.experiment.parallel.slot_tag`) and keeps
each process's last value.  The sum over both kinds over-counts the namespace processes that are
also in the launcher's tree (sshd, the SSH relays: little CPU) and misses each sampled process's
last ``period_s``: an estimate, on the conservative (larger) side for the first and not for the second.

Busy cores per interval (:meth:`NetnsCpuMeter.busy_cores`): the CPU the launcher itself and the
namespace processes alive at both ends of a sampling interval used in it, over its length; their
peak and 90th percentile over the run.  :meth:`NetnsCpuMeter.machine_busy_share`: the share of the
whole machine's CPU time that was busy meanwhile (``/proc/stat``): near 1, the run got what was
left, and its figures are a lower bound of what it needs.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["NetnsCpuMeter"]

NETNS_DIR = Path("/run/netns")
TICK_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _ns_inodes(tag: str, netns_dir: Path = NETNS_DIR) -> set[int]:
    out = set()
    try:
        for p in netns_dir.iterdir():
            if p.name.startswith(tag):
                try:
                    out.add(os.stat(p).st_ino)
                except OSError:
                    pass
    except OSError:
        pass
    return out


def _cpu_ticks(pid: str) -> tuple[str, int] | None:
    """``(start time, utime + stime)`` of a process in clock ticks, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) "; field 3 of stat(5) is fields[0]
    return fields[19], int(fields[11]) + int(fields[12])


def _machine_ticks() -> tuple[int, int]:
    """``(busy, total)`` CPU ticks of the whole machine so far (``/proc/stat``), (0, 0) if unreadable."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    total = sum(f[:8])
    return total - f[3] - (f[4] if len(f) > 4 else 0), total


def _own_ticks(pid: int) -> int:
    """utime + stime of ``pid`` itself, 0 when gone."""
    got = _cpu_ticks(str(pid))
    return got[1] if got is not None else 0


def p90(values) -> float | None:
    """The 90th percentile (nearest rank) of ``values``, None when empty."""
    v = sorted(values)
    if not v:
        return None
    return float(v[min(len(v) - 1, max(0, -(-9 * len(v) // 10) - 1))])


class NetnsCpuMeter:
    """Samples the CPU time of the processes in the namespaces ``/run/netns/<tag>*`` in a thread."""

    def __init__(self, tag: str, period_s: float = 1.0, root_pid: int | None = None) -> None:
        self.tag, self.period_s, self.root_pid = tag, float(period_s), root_pid
        self.busy: list[float] = []  # cores busy per sampling interval (launcher + namespace processes alive in it)
        self._last_t: float | None = None
        self._last_root = 0
        self._machine0: tuple[int, int] | None = None
        self._machine1: tuple[int, int] | None = None
        self.ticks: dict[tuple[str, str], int] = {}  # (pid, start time) -> last utime + stime
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "NetnsCpuMeter":
        self._thread.start()
        return self

    def sample(self) -> None:
        """One pass over /proc."""
        import time

        inodes = _ns_inodes(self.tag)
        delta = 0
        for pid in os.listdir("/proc") if inodes else []:
            if not pid.isdigit():
                continue
            try:
                link = os.readlink(f"/proc/{pid}/ns/net")  # "net:[4026532301]"
            except OSError:
                continue
            if int(link[5:-1]) not in inodes:
                continue
            got = _cpu_ticks(pid)
            if got is not None:
                key = (pid, got[0])
                if key in self.ticks:  # a process first seen adds nothing to this interval (its past is unknown)
                    delta += got[1] - self.ticks[key]
                self.ticks[key] = got[1]
        root = _own_ticks(self.root_pid) if self.root_pid else 0
        delta += max(0, root - self._last_root) if self._last_t is not None else 0
        self._last_root = root
        m = _machine_ticks()
        if self._machine0 is None:
            self._machine0 = m
        self._machine1 = m
        now = time.monotonic()
        if self._last_t is not None and now > self._last_t:
            self.busy.append(delta / float(TICK_S) / (now - self._last_t))
        self._last_t = now

    def machine_busy_share(self) -> float | None:
        """Share of the machine's CPU time busy between the first and the last sample (None: too few)."""
        if self._machine0 is None or self._machine1 is None or self._machine1[1] <= self._machine0[1]:
            return None
        return (self._machine1[0] - self._machine0[0]) / (self._machine1[1] - self._machine0[1])

    def busy_cores(self) -> tuple[float | None, float | None]:
        """The cores the run kept busy per sampling interval (CPU s / wall s of the launcher and of the
        namespace processes seen at both ends of the interval): ``(peak, 90th percentile)``."""
        return (max(self.busy) if self.busy else None), p90(self.busy)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a measurement must never break a run
                pass

    def stop(self) -> float:
        """Stop sampling; CPU seconds of every process seen."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        return sum(self.ticks.values()) / float(TICK_S)
