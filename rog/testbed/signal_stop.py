"""Stop a command's main loop on a signal without taking a lock inside the signal handler.

A handler that calls ``threading.Event.set()`` can hang the process for good: Python runs the handler in the main
thread between two bytecodes, and when those are inside the same event's ``wait()`` (which holds the event's
internal, non-reentrant lock for a few bytecodes on the way in and out) ``set()`` waits for a lock its own thread
holds.  ``tc_replay`` waits on its stop event every few milliseconds at a small ``--time-scale``, and a Ctrl-C
landing in that window left it running with the qdiscs changed (seen once in the suite on a loaded machine).

Here the handler only records the signal and writes one byte to a pipe (a system call, no Python lock); a daemon
thread that reads the pipe sets the event.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Iterable, List, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_on_signals(stop: threading.Event, signals: Iterable[int] = STOP_SIGNALS,
                    got: Optional[List[int]] = None) -> None:
    """From now on, each of ``signals`` appends its number to ``got`` (when given) and sets ``stop`` soon after,
    from a watcher thread.  Call it from the main thread (where Python runs signal handlers)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def on_signal(signum, frame) -> None:
        if got is not None:
            got.append(signum)
        try:
            os.write(write_fd, b"s")
        except OSError:  # the pipe is full: a byte is already waiting, the watcher will set the event
            pass

    def watch() -> None:
        os.read(read_fd, 1)
        stop.set()

    threading.Thread(target=watch, name="stop-on-signal", daemon=True).start()
    for sig in signals:
        signal.signal(sig, on_signal)
