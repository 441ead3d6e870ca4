"""The parameter server: per-worker pending buffers, row versions, the staleness gate, admission, flush.

State (Algorithm 2; :mod:`rog.sim` is the reference semantics), all guarded by one lock:

* ``pending[r]``: the averaged update not yet sent to worker ``r``.  A push's delivered chunks
  are added to *every* worker's pending buffer with weight ``1/W``; a pull subtracts exactly
  the chunks worker ``r`` acknowledged from ``pending[r]`` (never zeroes it: pushes keep adding
  while a pull is under way);
* ``push_iter`` (W,), ``versions`` (W, n_rows), ``updates_since_pull`` (W, n_rows), ``active``;
* ``requested`` (W, n_rows): rows the PS asked each worker for (lagging rows), satisfied when
  they arrive.

One thread per worker connection runs that worker's side of the protocol
(:mod:`rog.runtime.messages`).  Decisions go through the :class:`~rog.policies.base.Policy` API
only, under the lock: ``push_plan`` runs on the worker; here ``pull_ready`` (re-checked whenever
a push is applied or a worker leaves), ``lagging_rows`` (asked while a gate is closed),
``pull_plan`` and ``push_budget_s`` (from one view, as the artifact did), ``admit`` (a worker
stalled at the gate gives its transfer slot back and takes one again before its pull) and
``observe`` (the push report is the worker's measurement, the pull report the PS's).  Scheduler:
:mod:`rog.runtime.scheduler` (ADSP); ``commit_control`` goes out with pulls (:class:`PolicyControl`).

Flush: each worker sends ``Flush`` (from then on it no longer counts in the staleness gates: it
will never push again) and a no-deadline push of everything; its pull of everything waits until
every worker that joined and is not gone has flushed.

Faults. A worker whose connection breaks is *lost*: it still counts in the gates for ``evict_after_s``
seconds (0: evicted at once), then it is *evicted* (a ``worker_evicted`` warning event; the others go on)
and counts as gone. It may come back on a new connection with :class:`~rog.runtime.messages.Rejoin` at any
time before the run ends; an evicted worker is moved up to the slowest active worker's iteration.
Guarantees:

* a push counts exactly when the PS received and acknowledged it (a worker killed mid-push adds
  nothing); both ends keep the newest transmission until they know its outcome, and the rejoin
  exchange settles it (push and pull sequence numbers), so nothing is applied twice or lost;
* ``total`` is the sum of every committed push; a *fresh* rejoin (a restarted worker process that
  starts from the initial model) gets ``pending[r] := total`` and a full pull: it then holds what
  every other worker will hold;
* with checkpoints (:meth:`start_checkpoints`) the PS can be restarted from its latest checkpoint
  (:meth:`resume`); every :class:`PullStart` tells a worker which of its pushes and pulls that
  checkpoint covers, the worker keeps the encoded chunks of the others, and after a restart it
  re-sends them (:class:`Resync`): the PS adds the pushes to every pending buffer and subtracts the
  pulls from the worker's own.  With compression off every worker's model after the flush then
  equals the initial model minus the sum of every committed push over W.  Not restored: the
  policy's measurements and exact row versions of re-sent rows (they get the worker's newest
  pushed iteration), which only shape the schedule, never the model.

The code, by concern: :mod:`~rog.runtime.ps_lifecycle` (threads, connections, the end of a run),
:mod:`~rog.runtime.ps_membership` (join, loss, eviction, rejoin), :mod:`~rog.runtime.ps_exchange` (push,
gate, pull, flush) and :mod:`~rog.runtime.ps_checkpoint` (checkpoints, resume); :class:`ParameterServer`
holds the state above and joins them.  The transfer slots are an object of their own, with their own state
(:class:`~rog.runtime.ps_admission.Admission`, ``ps.admission``), called with the server's lock held.
"""

from __future__ import annotations

import threading
import weakref
from typing import Callable

import numpy as np

from ..chunks import DEFAULT_CHUNK_BYTES
from ..codecs.compression import Codec
from ..policies.base import Policy, ServerView, TransferReport
from ..rows import RowPartition
from ..transport import Connection, WireFrames
from .clock_sync import ClockOffsets
from .events import EventLog
from .ps_admission import Admission
from .ps_checkpoint import PSCheckpointing
from .ps_exchange import PSExchange
from .ps_lifecycle import PSLifecycle
from .initial_model import PSInitialModel
from .ps_membership import PSMembership
from .messages import params_digest
from .worker import aligned_zeros


class ParameterServer(PSLifecycle, PSMembership, PSInitialModel, PSExchange, PSCheckpointing):
    """One parameter server for ``n_workers`` workers (ids ``0 .. n_workers-1``).

    Serve connections with :meth:`serve` (a :class:`~rog.transport.Listener`), :meth:`run`
    (already connected ends, e.g. from :func:`~rog.transport.inproc_pair`) or :meth:`start`
    (either, in a background thread).  After the run: ``pending``, ``versions``, ``push_iter``,
    ``reports`` (every :class:`TransferReport` given to ``policy.observe``), ``errors``.
    """

    def __init__(
        self,
        partition: RowPartition,
        n_workers: int,
        policy: Policy,
        codec: Codec,
        *,
        events: EventLog | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        join_timeout_s: float = 120.0,
        wait_timeout_s: float = 600.0,
        evict_after_s: float = 0.0,
        global_loss: Callable[[np.ndarray], float] | None = None,
        initial_params: np.ndarray | None = None,
    ) -> None:
        if not isinstance(partition, RowPartition):
            raise ValueError("partition must be a rog.rows.RowPartition (RowPartition.from_module(model))")
        if isinstance(n_workers, bool) or int(n_workers) != n_workers or n_workers < 1:
            raise ValueError(f"n_workers must be an integer >= 1, got {n_workers!r}")
        if not isinstance(policy, Policy):
            raise ValueError(f"policy must be a rog.policies.Policy (make_policy('ROG', 4)), got {type(policy).__name__}")
        if not isinstance(codec, Codec):
            raise ValueError(f"codec must be a rog.codecs.compression.Codec (make_codec('sign')), got {type(codec).__name__}")
        if isinstance(chunk_bytes, bool) or int(chunk_bytes) != chunk_bytes or chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
        for name, v in (("join_timeout_s", join_timeout_s), ("wait_timeout_s", wait_timeout_s)):
            if not v > 0:
                raise ValueError(f"{name} must be positive, got {v!r}")
        if not (evict_after_s >= 0 and np.isfinite(evict_after_s)):
            raise ValueError(f"evict_after_s must be a finite number of seconds >= 0 (0: evict at once), got {evict_after_s!r}")
        if initial_params is not None:
            initial_params = np.ascontiguousarray(initial_params, dtype=np.float32).reshape(-1)
            if initial_params.size != partition.n_elements or not np.all(np.isfinite(initial_params)):
                raise ValueError(f"initial_params must hold {partition.n_elements} finite float32 values (the layout's), "
                                 f"got {initial_params.size}")
        self.initial_params = initial_params  # the team's starting parameters (None: the first worker's; rog.runtime.initial_model)
        self._initial_digest = None if initial_params is None else params_digest(initial_params.astype("<f4").tobytes())
        self._join_order: list[int] = []  # workers in the order they joined
        self._start_of: dict[int, tuple[int, bytes]] = {}  # worker -> (Join.start, Join.model_digest)
        self.partition = partition
        self.n_workers = W = int(n_workers)
        self.policy = policy
        self.codec = codec
        self.events = events
        self.chunk_bytes = int(chunk_bytes)
        self.join_timeout_s = float(join_timeout_s)
        self.wait_timeout_s = float(wait_timeout_s)
        n_rows = partition.n_rows
        self.pending = [aligned_zeros(partition.n_elements) for _ in range(W)]
        self.push_iter = np.zeros(W, dtype=np.int64)
        self.versions = np.zeros((W, n_rows), dtype=np.int64)
        self.updates_since_pull = np.zeros((W, n_rows), dtype=np.int64)
        self.active = np.ones(W, dtype=bool)
        self.requested = np.zeros((W, n_rows), dtype=bool)
        self.reports: list[TransferReport] = []
        self.errors: list[tuple[int, BaseException]] = []
        self._cond = threading.Condition(threading.RLock())
        self.admission = Admission(policy, self._cond, self.server_view, self._wait, self.wait_timeout_s)  # slots
        self._joined: set[int] = set()
        self._flushed: set[int] = set()
        self._failed: set[int] = set()
        self._stop = threading.Event()
        self._row_wire_bytes = codec.row_wire_bytes(partition)
        self._validator = WireFrames(partition, codec)
        self._last_push: dict[int, tuple] = {}
        self._pull_segments: dict[int, tuple] = {}  # worker -> segment per tensor (PullSegments)
        self._weight = 1.0 / W
        # faults: connections, loss, eviction, rejoin, checkpoints
        self.evict_after_s = float(evict_after_s)
        self.total = aligned_zeros(partition.n_elements)  # sum of every committed push (weighted 1/W)
        self.push_seq = np.zeros(W, dtype=np.int64)  # push transmissions of each worker applied
        self.last_push_delivered = np.zeros(W, dtype=np.int64)  # frames applied of push number push_seq
        self.pull_seq = np.zeros(W, dtype=np.int64)  # pull transmissions each worker acknowledged
        self.covered_push_seq = np.zeros(W, dtype=np.int64)  # what the latest checkpoint holds
        self.covered_pull_seq = np.zeros(W, dtype=np.int64)
        self.checkpoint_seq = 0  # checkpoints written (or resumed from)
        self.faults: list[dict] = []  # fault records (as logged), for callers without an event log
        self._finished: set[int] = set()  # flushed and said bye
        self._lost: dict[int, float] = {}  # worker -> time.monotonic() its connection broke (the eviction clock)
        self._away_since: dict[int, float] = {}  # worker -> its first loss not yet settled by a rejoin (gap_s)
        self._losses_recorded: weakref.WeakSet = weakref.WeakSet()  # links whose loss is recorded (once each)
        self._conns: dict[int, Connection] = {}  # the current connection of each worker
        self._alive: dict[int, int] = {}  # connection threads per worker
        self._threads: list[threading.Thread] = []
        self._resumed = False
        self._ended = False
        self._grace_until = 0.0  # a resumed PS evicts nobody before this (workers are reconnecting)
        self._barrier_passed = False  # some worker's flush pull went ahead: a gone worker can no longer come back
        self._ckpt: tuple[str, float] | None = None  # (directory, period_s)
        self._ckpt_thread: threading.Thread | None = None
        self.global_loss, self.schedule_records, self._sched_thread = global_loss, [], None  # rog.runtime.scheduler
        self.clock_offsets = ClockOffsets(events)  # each worker host's clock offset (rog.runtime.clock_sync)
        self._rejoining: set[int] = set()  # ids of rejoin connections registered whose handler still runs

    @property
    def max_in_flight(self) -> int:
        """The most transfer slots held at once in this run."""
        return self.admission.max_in_flight

    def server_view(self) -> ServerView:
        """A snapshot (copies) of the PS state for a policy decision."""
        with self._cond:
            return ServerView(self.partition, self.push_iter.copy(), self.versions.copy(),
                              self.updates_since_pull.copy(), self.active.copy())
