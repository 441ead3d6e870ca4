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


class NetnsCpuMeter:
    """Samples the CPU time of the processes in the namespaces ``/run/netns/<tag>*`` in a thread."""

    def __init__(self, tag: str, period_s: float = 1.0) -> None:
        self.tag, self.period_s = tag, float(period_s)
        self.ticks: dict[tuple[str, str], int] = {}  # (pid, start time) -> last utime + stime
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "NetnsCpuMeter":
        self._thread.start()
        return self

    def sample(self) -> None:
        """One pass over /proc."""
        inodes = _ns_inodes(self.tag)
        if not inodes:
            return
        for pid in os.listdir("/proc"):
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
                self.ticks[(pid, got[0])] = got[1]

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
