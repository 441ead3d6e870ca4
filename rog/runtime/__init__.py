"""The engine on the wire: a parameter server and worker engines over :mod:`rog.transport`.

* :class:`ParameterServer` (:mod:`.server`): per-worker pending buffers, row versions, the
  staleness gate, admission, lagging-row requests, flush; one thread per worker connection; its parts
  are objects it owns (``state``, ``membership``, ``team``, ``admission``, ``exchange``, ``checkpoints``);
* :class:`WorkerEngine` (:mod:`.worker`): one worker's iteration (local update, accumulate,
  push, gate, pull) and the final flush;
* :class:`EventLog` / :func:`read_events` (:mod:`.events`): the per-rank typed event log;
* :mod:`.messages`: the runtime's control messages (join, admission, push done, pull start, flush,
  and rejoin / resync after a broken link, a restarted worker or a restarted parameter server);
* :mod:`.ps_checkpoint`: atomic, verified checkpoints of the parameter server's state (``--resume-ps``).

The drop-in optimizer built on these is :class:`rog.optim.ROGOptimizer`; :mod:`rog.sim` is the
reference semantics (the same algorithm on a fake clock).
"""

from .events import EventLog, EventLogError, events_file_name, read_events, worker_rank
from .server import ParameterServer
from .worker import IterationStats, RuntimeFailure, WorkerEngine, aligned_zeros

__all__ = [
    "EventLog", "EventLogError", "events_file_name", "read_events", "worker_rank",
    "ParameterServer", "WorkerEngine", "IterationStats", "RuntimeFailure", "aligned_zeros",
]
