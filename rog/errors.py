"""Errors every layer may raise and only the commands turn into an exit status.

* :class:`ConfigError`: a flag or file value that cannot make a run.  Library code raises it with a
  message that names the flag (or the file and field) and the fix; a command (``scripts/*.py``, the
  ``main()`` of a ``python -m`` module) prints it as one ``<command>: error: ...`` line on stderr and
  exits with status 2.
* :class:`SignalExit`: SIGTERM / SIGHUP turned into an exception (:func:`exit_on_signal` is the
  handler), so that ``with`` blocks and ``finally`` clauses clean up (namespaces, qdiscs, child
  processes) before the process ends with status ``128 + signum``, as if the signal had killed it.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A flag or file value that cannot make a run; the message names the flag (or file and field) and the fix."""


class SignalExit(SystemExit):
    """A termination signal, raised in the main thread; the process exit status is ``128 + signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + int(signum))
        self.signum = int(signum)


def exit_on_signal(signum, frame) -> None:
    """A ``signal.signal`` handler: raise :class:`SignalExit` so that cleanup code runs."""
    raise SignalExit(signum)
