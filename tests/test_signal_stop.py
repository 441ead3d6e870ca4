"""rog.testbed.signal_stop: a signal that lands while the main thread holds the stop event's own lock (inside
``Event.wait()``, where tc_replay spends its time) still stops the loop, and the process does not hang.  A handler
that calls ``stop.set()`` itself waits forever on that lock (the hang this module removes; shown by the control).
Each case runs in a fresh interpreter under a time limit, so a hang fails the test instead of the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCENARIO = r'''
import os, signal, sys, threading
from rog.testbed.signal_stop import stop_on_signals

stop = threading.Event()
got = []
if sys.argv[1] == "naive":
    signal.signal(signal.SIGUSR1, lambda *_: (got.append(signal.SIGUSR1), stop.set()))
else:
    stop_on_signals(stop, (signal.SIGUSR1,), got=got)
with stop._cond:  # the lock Event.wait() holds for a few bytecodes on its way in and out
    os.kill(os.getpid(), signal.SIGUSR1)
    for _ in range(10000):  # bytecode boundaries: Python runs the handler at one of them, in this thread
        if got:
            break
    handled = bool(got)
print("handled" if handled else "not handled", flush=True)
print("stopped" if stop.wait(30) else "not stopped", flush=True)
'''


def _scenario(mode: str, timeout_s: float) -> tuple[str, bool]:
    try:
        p = subprocess.run([sys.executable, "-c", SCENARIO, mode], capture_output=True, text=True, cwd=str(ROOT),
                           timeout=timeout_s)
        return p.stdout, False
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return out, True


def test_a_signal_inside_the_events_lock_stops_the_loop():
    out, hung = _scenario("pipe", timeout_s=120)
    assert not hung, f"hung; printed {out!r}"
    assert out.split() == ["handled", "stopped"]


def test_control_a_handler_that_sets_the_event_hangs_there():
    out, hung = _scenario("naive", timeout_s=4)
    assert hung and out == "", out  # it never got past the handler: the case the module exists for
