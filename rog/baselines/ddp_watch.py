"""Time limits and a stage watchdog for the DDP baseline's workers (:mod:`rog.baselines.ddp`).

A DDP worker goes through stages that wait on the other processes: the store connect, the gloo
process-group init (every pair of workers connects), the first all-reduce (the model checksum),
every iteration's barrier and gradient all-reduce, and the teardown.  Each gets a limit here:

* the rendezvous stages (:data:`JOIN_TIMEOUT_S`): the workers are released together (``links.ready``
  or the launcher's go), so joining needs only a few handshakes and store round trips, whatever
  the links' rate;
* the collectives (:func:`collective_timeout_s`): at a constant shaped rate, a safety factor on the
  ring all-reduce's own transfer time (:func:`ring_transfer_s`), never below a floor that covers
  the peer's compute and worker 0's evaluation (the barrier waits for them); on replayed traces the
  rate can fall to almost nothing for minutes, so the old ten-minute limit stays.

Torch enforces these (the store's and the process group's ``timeout``); :class:`StageWatch` turns a
failure into a :class:`DDPStageError` that names the stage, its limit and the addresses involved,
and arms :func:`faulthandler.dump_traceback_later` for the stage: if a stage outlives its limit by
:data:`WATCHDOG_GRACE_S` (a wait torch does not bound, e.g. a deadlock in a destructor, which holds
the GIL so no Python thread could react), every thread's stack is written to the worker's log and
the process exits with status 1, so the launcher reports the failure instead of waiting forever.
"""

from __future__ import annotations

import contextlib
import faulthandler
import sys
import time

JOIN_TIMEOUT_S = 120.0  # store connect, process group init, first all-reduce
COLLECTIVE_FLOOR_S = 300.0  # a training collective may wait this long for the peer's compute and evaluation
COLLECTIVE_SAFETY = 10.0  # x the ring all-reduce's transfer time at the shaped rate
TRACE_COLLECTIVE_TIMEOUT_S = 600.0  # replayed traces: the rate can drop near zero (ROG's wait_timeout_s)
TEARDOWN_TIMEOUT_S = 60.0  # leaving the process group
WATCHDOG_GRACE_S = 30.0  # beyond a stage's limit before the watchdog dumps the stacks and exits


class DDPStageError(RuntimeError):
    """A DDP worker's stage failed or timed out (the message names the stage, its limit and the addresses)."""


def ring_transfer_s(grad_bytes: int, workers: int, rate_mbit: float) -> float:
    """Seconds a ring all-reduce of ``grad_bytes`` needs on links of ``rate_mbit``: each worker sends
    (and receives) 2(N-1)/N of the payload through its own link."""
    if workers < 2:
        return 0.0
    return 2.0 * (workers - 1) / workers * grad_bytes * 8.0 / (float(rate_mbit) * 1e6)


def collective_timeout_s(grad_bytes: int, workers: int, rate_mbit: float | None, cap_mbit: float | None = None,
                         traced: bool = False) -> float:
    """The process group's collective limit: ``traced`` (the rate follows a trace): :data:`TRACE_COLLECTIVE_TIMEOUT_S`;
    else :data:`COLLECTIVE_SAFETY` x the transfer at the slowest rate (``rate_mbit``, or an equal share of the
    shared channel ``cap_mbit``), at least :data:`COLLECTIVE_FLOOR_S` (also the limit of an unshaped run)."""
    if traced:
        return TRACE_COLLECTIVE_TIMEOUT_S
    rates = [r for r in (rate_mbit, None if cap_mbit is None else cap_mbit / max(1, workers)) if r is not None]
    if not rates:
        return COLLECTIVE_FLOOR_S
    return max(COLLECTIVE_FLOOR_S, COLLECTIVE_SAFETY * ring_transfer_s(grad_bytes, workers, min(rates)))


class StageWatch:
    """Names worker ``worker``'s stages; ``where`` (store, interface, addresses) goes into every message.

    ``with watch.stage(name, limit_s):`` logs the stage's start (unless ``quiet``), turns an exception
    into a :class:`DDPStageError` and arms the faulthandler watchdog (``limit_s + grace_s``) meanwhile.
    """

    def __init__(self, worker: int, where: str = "", log=None, grace_s: float = WATCHDOG_GRACE_S) -> None:
        self.worker = int(worker)
        self.where = where
        self.log = log if log is not None else sys.stderr
        self.grace_s = float(grace_s)

    def message(self, name: str, limit_s: float, elapsed_s: float, error: BaseException) -> str:
        """The failure message of stage ``name`` (the error's first line: torch appends its C++ frames)."""
        where = f"; {self.where}" if self.where else ""
        text = str(error).strip()
        first = text.splitlines()[0] if text else ""
        return (f"worker {self.worker}: DDP stage '{name}' failed after {elapsed_s:.1f} s (limit {limit_s:g} s{where}): "
                f"{type(error).__name__}: {first}")

    @contextlib.contextmanager
    def stage(self, name: str, limit_s: float, quiet: bool = False):
        """Run the ``with`` body as stage ``name``, limited to ``limit_s`` seconds (see the class)."""
        if not quiet:
            where = f" ({self.where})" if self.where else ""
            print(f"worker {self.worker}: DDP stage '{name}'{where}, limit {limit_s:g} s", file=self.log, flush=True)
        t0 = time.monotonic()
        try:
            faulthandler.dump_traceback_later(float(limit_s) + self.grace_s, exit=True, file=self.log)
        except (AttributeError, ValueError, OSError):  # a log without a file descriptor (e.g. captured output)
            faulthandler.dump_traceback_later(float(limit_s) + self.grace_s, exit=True, file=sys.__stderr__)
        try:
            yield
        except DDPStageError:
            raise
        except Exception as e:
            raise DDPStageError(self.message(name, limit_s, time.monotonic() - t0, e)) from e
        finally:
            faulthandler.cancel_dump_traceback_later()
