"""Suite-wide setup.

A shell that starts a command in the background (``nohup bash scripts/test.sh &``, a CI job runner)
may start it with SIGINT ignored, and an ignored signal stays ignored across ``exec``: every
``scripts/run.py`` a test starts would then ignore the Ctrl-C the interrupt tests send it, and those
tests would wait out their timeouts.  A handled signal is reset to its default in an exec'd child,
so restoring Python's handler here gives every child the ordinary Ctrl-C behaviour again.
"""

from __future__ import annotations

import signal


def pytest_configure(config) -> None:
    """Undo an inherited ``SIG_IGN`` for SIGINT (pytest itself becomes interruptible again, too)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
