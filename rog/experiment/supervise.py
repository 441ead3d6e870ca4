"""Supervising the run's child processes: start them, notice a failure, kill them all on exit.

Every child runs ``python -m rog.experiment --child ...`` in its own session, with ``PR_SET_PDEATHSIG`` so no
process outlives a killed launcher; SIGTERM/SIGHUP to the launcher raise :class:`Terminated` so it
still cleans up and marks the run INCOMPLETE.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .config import ROOT, RUN_MODULE


def set_pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGKILL if the launcher dies, so no process outlives a killed run."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Children:
    """The run's child processes; every one is killed on exit."""

    def __init__(self, run_dir: Path, env: dict, origin: float) -> None:
        self.run_dir, self.env, self.origin = run_dir, env, origin
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: list = []

    def spawn(self, name: str, args: list[str], wrap=None) -> subprocess.Popen:
        """Start ``python -m rog.experiment --child ...``; ``wrap`` turns the argv into another (e.g. ``ip netns exec NS argv``)."""
        log = open(self.run_dir / f"{name}.log", "wb")
        self.logs.append(log)
        cmd = [sys.executable, "-m", RUN_MODULE, "--run-dir", str(self.run_dir), "--origin", repr(self.origin), *args]
        if wrap is not None:
            cmd = wrap(cmd)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                cwd=str(ROOT), start_new_session=True, preexec_fn=set_pdeathsig)
        self.procs[name] = proc
        return proc

    def failed(self) -> str | None:
        """Why the run failed (a child exited non-zero), or None."""
        for name, proc in self.procs.items():
            rc = proc.poll()
            if rc not in (None, 0):
                return f"{name} exited with code {rc}: {tail_text(self.run_dir / f'{name}.log')}"
        return None

    def all_done(self) -> bool:
        return all(p.poll() == 0 for p in self.procs.values())

    def kill_all(self) -> None:
        """SIGTERM each child's process group (a child and the workers it forked), SIGKILL after 3 s."""
        for proc in self.procs.values():
            signal_group(proc.pid, signal.SIGTERM)
        end = time.monotonic() + 3.0
        for proc in self.procs.values():
            try:
                proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        for log in self.logs:
            log.close()


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to a process group that may already be gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def tail_text(path: Path, n_lines: int = 6) -> str:
    """The last lines of a log, joined on one line (for an error message)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-n_lines:]) if lines else "(empty log)"


class Terminated(Exception):
    """The launcher received SIGTERM or SIGHUP."""


def incomplete_reason(e: BaseException) -> str:
    """The reason an INCOMPLETE marker records for the exception that ended a run."""
    if isinstance(e, KeyboardInterrupt):
        return "interrupted (Ctrl-C)"
    if isinstance(e, Terminated):
        return f"terminated ({e})"
    return f"{type(e).__name__}: {e}"


def raise_terminated(signum, frame) -> None:
    """Signal handler: raise :class:`Terminated` with the signal's name."""
    raise Terminated(signal.Signals(signum).name)


def raise_on_termination() -> None:
    """From now on SIGTERM and SIGHUP raise :class:`Terminated` in the main thread."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_terminated)
