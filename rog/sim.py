"""In-process discrete-event simulation: one parameter server, N workers, modelled links, a fake clock.

What it is for: running any :class:`~rog.policies.base.Policy` over modelled links
(:mod:`rog.links`) with the engine's real numerics -- :class:`~rog.rows.RowPartition`, a
:class:`~rog.codecs.compression.Codec`, :func:`~rog.chunks.plan_chunks`, encode / decode_into / commit
on flat numpy buffers -- in seconds of CPU, deterministically, with no sockets and no threads.
The clock is a ``simpy`` environment; each worker is one simpy process.

Per worker and iteration ``n`` (Algorithm 1; the PS side is Algorithm 2):

1. compute for ``compute_s(worker, n)`` seconds, then ``g = gradient_fn(worker, params, n)``;
   the local rule (:mod:`rog.local_update`) gives ``u``; ``acc += u``;
2. admission: wait until ``policy.admit`` lets the worker start (FLOWN limits concurrent
   transfers; the others admit at once).  The slot is held through the push and the pull, but
   given back while the worker stalls at the staleness gate and taken again (a second admission
   wait) before its pull -- holding it through a stall would let two stalled fast workers lock
   out the slow worker they wait for;
3. push: ``policy.push_plan`` with the budget and required rows the PS handed out with the
   previous pull; :func:`plan_chunks`; chunk ``k`` is through when its cumulative frame bytes
   (:func:`rog.wire.frame_bytes`) are through the uplink.  Chunks that complete by
   ``start + deadline_s`` are delivered, and the mandatory chunks always are; a chunk still in
   flight at the deadline is dropped.  With ``shared_ap`` (:class:`~rog.sim_links.SharedAccessPoint`)
   every transfer, push or pull, also shares one capacity with the others in flight.  The transmission ends when everything is through, or at
   ``max(start + deadline_s, end of the mandatory chunks)``.  At that moment the PS applies the
   delivered chunks (``decode_into`` every worker's pending buffer with weight ``1/W``,
   ``versions[r, rows] = n``, ``updates_since_pull[:, rows] += 1``) and the worker commits exactly
   those chunks (``codec.commit``, ``row_push_iter[rows] = n``);
4. gate: stall until ``policy.pull_ready``; re-checked whenever any push is applied.  While
   blocked, the PS asks every lagging worker for ``policy.lagging_rows``; a request reaches that
   worker with its next pull reply and counts as satisfied once the row is delivered;
5. pull: ``policy.pull_plan`` over the downlink, same chunk mechanics; the worker applies the
   delivered chunks with ``decode_into(params, weight=-1)``, the PS commits them from that
   worker's pending buffer and zeroes ``updates_since_pull[r, rows]``.  The PS hands out
   ``policy.push_budget_s`` (decided from the same view as the pull plan, as the artifact did)
   and the rows requested so far for the worker's next push.

Values are read at the moment a transmission ends (when both ends agree on the delivered
chunks): the simulated PS encodes, decodes and commits a pull in one step, so pushes applied to
that worker's pending buffer during the pull are kept exactly.  Every report is passed to
``policy.observe``.  :meth:`Simulation.flush` at the end pushes and pulls everything left, with
no deadline, so that nothing stays in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Callable, Sequence, Union

import numpy as np

try:  # the simulator is for tests and benchmarks: simpy comes with the `sim` (and `test`) extra, not a robot install
    import simpy
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError("rog.sim needs simpy, which a robot install does not carry: pip install -e '.[sim]' "
                      "(the test extra includes it)") from e

from .chunks import DEFAULT_CHUNK_BYTES, ChunkPlan, ChunkSpec, canonical_segments, plan_chunks
from .codecs.compression import Codec, SignCodec
from .links import InfiniteLink, Link
from .local_update import PAPER_MILESTONES, LocalUpdate, LocalUpdateConfig
from .policies.base import Policy, ServerView, TransferReport, TransmitPlan, WorkerView, all_rows_plan
from .rows import RowPartition
from .sim_links import Delivery, SharedAccessPoint, SimulationError, deliver_chunks  # re-exported: rog.sim's API
from .wire import frame_bytes

GradientFn = Callable[[int, np.ndarray, int], np.ndarray]  # (worker, params_flat, iteration) -> gradient
ComputeTime = Union[float, Sequence[float], Callable[[int, int], float]]  # (Union: Python 3.8) seconds; callable(worker, iteration)


class SimDeadlock(SimulationError):
    """Every unfinished worker waits on something that can no longer happen."""


@dataclass
class SimConfig:
    """Everything a simulation run needs; validated by :class:`Simulation`."""

    partition: RowPartition  # row layout of the model
    n_workers: int  # W
    policy: Policy  # BSP, SSP(s), FLOWN(s), ROG(s), ... (stateful: use a fresh one per run)
    gradient_fn: GradientFn  # (worker, params_flat, iteration) -> flat float32 gradient
    codec: Codec = field(default_factory=SignCodec)  # DEFSGDM 1-bit by default; RawCodec = compression off
    iterations: int | Sequence[int] = 10  # iterations per worker (one int for all, or one per worker)
    compute_s: ComputeTime = 1.0  # compute time per iteration: float, per-worker list, or callable(worker, n)
    uplinks: Link | Sequence[Link] | None = None  # worker -> PS links (one for all, or one per worker); None = infinite
    downlinks: Link | Sequence[Link] | None = None  # PS -> worker links; None = infinite
    chunk_bytes: int = DEFAULT_CHUNK_BYTES  # target data bytes per chunk (the deadline is checked per chunk)
    initial_params: np.ndarray | None = None  # w0, flat; None = seeded N(0, 0.1^2)
    local_update: LocalUpdateConfig = field(default_factory=lambda: LocalUpdateConfig(milestones=PAPER_MILESTONES))  # worker-side DEFSGDM rule, the artifact's step halving
    seed: int = 0  # seeds the default initial parameters
    record_updates: bool = False  # keep every update u (for conservation checks; memory W * N * model)
    shared_ap: SharedAccessPoint | None = None  # one capacity every transfer also shares (rog.sim_links); None = none
    # keep one sum of the delivered pushes and each worker's sum of delivered pulls instead of W pending buffers
    # (pending[r] = pushed - pulled[r], computed when read): O(W) per round instead of O(W^2), equal up to rounding
    aggregate_pending: bool = False


@dataclass(frozen=True)
class IterationRecord:
    """One worker's iteration: time composition, transfer sizes, staleness (times in fake seconds)."""

    worker: int
    iteration: int
    t_start_s: float  # compute starts
    t_push_start_s: float
    t_pull_start_s: float
    t_end_s: float  # pull done
    iteration_s: float  # t_end_s - t_start_s
    compute_s: float
    admission_s: float  # waits for a transfer slot (FLOWN), before the push and before the pull
    gate_s: float  # wait at the staleness gate
    stall_s: float  # admission_s + gate_s
    push_s: float
    pull_s: float
    push_rows_planned: int
    push_required_rows: int  # rows the PS had asked this worker for (lagging rows)
    push_rows: int  # rows delivered
    push_bytes: int  # frame bytes delivered
    push_share: float  # push_rows / push_rows_planned (1.0 when nothing was planned)
    push_deadline_s: float  # nan = no deadline
    pull_rows_planned: int
    pull_rows: int
    pull_bytes: int
    pull_share: float
    pull_deadline_s: float  # nan = no deadline
    gate_staleness: int  # n - min(versions[active]) when the pull proceeded (RSP's quantity)
    row_staleness_max: int  # n - min(row_push_iter) after the push: this worker's oldest row


@dataclass(frozen=True)
class GateCheck:
    """One evaluation of the staleness gate."""

    t_s: float
    worker: int
    iteration: int
    ready: bool


@dataclass(frozen=True)
class UpdateRecord:
    """The local update ``u`` a worker produced in one iteration (kept when ``record_updates``)."""

    worker: int
    iteration: int
    update: np.ndarray


# fields averaged by summary(): durations, sizes, shares, staleness (not ids, not absolute times)
_NUMERIC_FIELDS = [
    f.name for f in fields(IterationRecord) if f.name not in ("worker", "iteration") and not f.name.startswith("t_")
]


class Simulation:
    """One parameter server and ``n_workers`` workers on a fake clock (see the module docstring).

    After :meth:`run` (and :meth:`flush`): ``params[r]``, ``acc[r]`` (worker r's unsent
    accumulator), ``pending[r]`` (the PS's unsent averaged update for r), ``versions``,
    ``records`` (one :class:`IterationRecord` per worker and iteration, in completion order),
    ``gate_log``, ``reports`` / ``flush_reports`` (every :class:`TransferReport`), ``updates``
    (with ``record_updates``) and ``max_in_flight``.
    """

    def __init__(self, config: SimConfig) -> None:
        c = config
        if not isinstance(c.partition, RowPartition):
            raise ValueError("partition must be a rog.rows.RowPartition")
        if isinstance(c.n_workers, bool) or int(c.n_workers) != c.n_workers or c.n_workers < 1:
            raise ValueError(f"n_workers must be an integer >= 1, got {c.n_workers!r}")
        if not isinstance(c.policy, Policy):
            raise ValueError(f"policy must be a rog.policies.base.Policy, got {type(c.policy).__name__}")
        if not isinstance(c.codec, Codec):
            raise ValueError(f"codec must be a rog.codecs.compression.Codec, got {type(c.codec).__name__}")
        if not callable(c.gradient_fn):
            raise ValueError("gradient_fn must be callable as gradient_fn(worker, params_flat, iteration)")
        if isinstance(c.chunk_bytes, bool) or int(c.chunk_bytes) != c.chunk_bytes or c.chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be a positive integer, got {c.chunk_bytes!r}")
        if not isinstance(c.local_update, LocalUpdateConfig):
            raise ValueError("local_update must be a rog.local_update.LocalUpdateConfig")
        self.config = c
        self.partition = c.partition
        self.n_workers = W = int(c.n_workers)
        self.policy = c.policy
        self.codec = c.codec
        self.iterations = self._per_worker_ints(c.iterations, "iterations")
        self.uplinks = self._per_worker_links(c.uplinks, "uplinks")
        self.downlinks = self._per_worker_links(c.downlinks, "downlinks")
        if not (callable(c.compute_s) or np.isscalar(c.compute_s)):
            if len(c.compute_s) != W:
                raise ValueError(f"compute_s lists {len(c.compute_s)} times for {W} workers; give one per worker")
        part = self.partition
        n_el = part.n_elements
        if c.initial_params is None:
            rng = np.random.default_rng(c.seed)
            w0 = (0.1 * rng.standard_normal(n_el)).astype(np.float32)
        else:
            w0 = np.asarray(c.initial_params)
            if w0.shape != (n_el,):
                raise ValueError(f"initial_params has shape {w0.shape}, the partition needs ({n_el},)")
            if not np.all(np.isfinite(w0)):
                raise ValueError("initial_params holds non-finite values")
            w0 = w0.astype(np.float32)
        self.initial_params = w0.copy()
        self.initial_params.setflags(write=False)  # w0, kept for reference computations
        self._row_wire_bytes = self.codec.row_wire_bytes(part)

        # worker state
        self.params = [_aligned_copy(w0) for _ in range(W)]
        self.acc = [_aligned_copy(part.new_flat()) for _ in range(W)]
        self.local = [LocalUpdate(n_el, c.local_update) for _ in range(W)]
        self.row_push_iter = np.zeros((W, part.n_rows), dtype=np.int64)
        self._budget_s: list[float | None] = [None] * W
        self._required = [np.zeros(0, dtype=np.int64) for _ in range(W)]
        # parameter-server state
        if c.aggregate_pending:
            self._pushed = _aligned_copy(part.new_flat())  # every delivered push, weighted 1/W
            self._pulled = [_aligned_copy(part.new_flat()) for _ in range(W)]  # what each worker pulled
            self.pending = _PendingViews(self._pushed, self._pulled)
        else:
            self.pending = [_aligned_copy(part.new_flat()) for _ in range(W)]
        self.push_iter = np.zeros(W, dtype=np.int64)
        self.versions = np.zeros((W, part.n_rows), dtype=np.int64)
        self.updates_since_pull = np.zeros((W, part.n_rows), dtype=np.int64)
        self.active = np.ones(W, dtype=bool)
        self._requested = np.zeros((W, part.n_rows), dtype=bool)  # rows the PS asked each worker for
        # outputs
        self.records: list[IterationRecord] = []
        self.gate_log: list[GateCheck] = []
        self.reports: list[TransferReport] = []  # every training transfer, in completion order
        self.flush_reports: list[TransferReport] = []
        self.updates: list[UpdateRecord] = []
        self.max_in_flight = 0  # most workers holding a transfer slot at once
        # clock and coordination
        self.env = simpy.Environment()
        self._changed = self.env.event()  # fires when a push is applied (gate re-check)
        self._waiting: dict[int, simpy.Event] = {}  # admission queue, arrival order
        self._in_flight: set[int] = set()
        self._stage = ["idle"] * W
        self._iteration = [0] * W  # the iteration each worker is in
        self._ran = False
        if c.shared_ap is not None:
            c.shared_ap.attach(self.env)
        self._flushed = False

    # ------------------------------------------------------------------ public
    @property
    def now(self) -> float:
        """The fake clock, seconds."""
        return float(self.env.now)

    def run(self) -> "Simulation":
        """Run every worker through its iterations; raises :class:`SimDeadlock` if they get stuck."""
        if self._ran:
            raise SimulationError("run() was already called on this Simulation; build a new one")
        self._ran = True
        for r in range(self.n_workers):
            self.env.process(self._worker(r))
        self.env.run()
        stuck = [r for r in range(self.n_workers) if self._stage[r] != "done"]
        if stuck:
            state = ", ".join(
                f"worker {r} in iteration {self._iteration[r]} waiting in {self._stage[r]}" for r in stuck
            )
            raise SimDeadlock(f"simulation stopped at t={self.now:.6g} s with workers stuck: {state}")
        return self

    def flush(self) -> "Simulation":
        """Push every worker's whole accumulator, then pull every worker's whole pending update (no deadlines)."""
        if not self._ran:
            raise SimulationError("flush() comes after run()")
        if self._flushed:
            raise SimulationError("flush() was already called")
        self._flushed = True
        for r in range(self.n_workers):
            self.env.process(self._flush_transfer(r, "push"))
        self.env.run()
        for r in range(self.n_workers):
            self.env.process(self._flush_transfer(r, "pull"))
        self.env.run()
        return self

    def summary(self, by_iteration: bool = False) -> dict:
        """Means over all iteration records (or, with ``by_iteration``, per iteration over workers).

        Keys are the duration, size, share and staleness fields of :class:`IterationRecord` plus
        ``records`` (how many were averaged) and, overall, ``end_s`` (when the last worker
        finished).  NaN deadlines (none) are left out of the deadline means.
        """
        if by_iteration:
            groups: dict[int, list[IterationRecord]] = {}
            for rec in self.records:
                groups.setdefault(rec.iteration, []).append(rec)
            return {n: _means(groups[n]) for n in sorted(groups)}
        out = _means(self.records)
        out["end_s"] = max((r.t_end_s for r in self.records), default=0.0)
        return out

    # ------------------------------------------------------------------ configuration helpers
    def _per_worker_ints(self, value, name: str) -> list[int]:
        vals = [value] * self.n_workers if np.isscalar(value) else list(value)
        if len(vals) != self.n_workers:
            raise ValueError(f"{name} lists {len(vals)} values for {self.n_workers} workers; give one per worker")
        for v in vals:
            if isinstance(v, bool) or int(v) != v or v < 0:
                raise ValueError(f"{name} must be non-negative integers, got {v!r}")
        return [int(v) for v in vals]

    def _per_worker_links(self, value, name: str) -> list:
        if value is None:
            return [InfiniteLink()] * self.n_workers
        links = [value] * self.n_workers if hasattr(value, "transfer_end_s") else list(value)
        if len(links) != self.n_workers:
            raise ValueError(f"{name} lists {len(links)} links for {self.n_workers} workers; give one per worker")
        for k, link in enumerate(links):
            if not hasattr(link, "transfer_end_s"):
                raise ValueError(f"{name}[{k}] is not a link (a RateTrace or InfiniteLink), got {type(link).__name__}")
        return links

    def _compute_s(self, r: int, n: int) -> float:
        c = self.config.compute_s
        if callable(c):
            t = c(r, n)
        elif np.isscalar(c):
            t = c
        else:
            t = c[r]
        t = float(t)
        if not (math.isfinite(t) and t >= 0):
            raise ValueError(f"compute_s for worker {r}, iteration {n} must be finite and >= 0, got {t}")
        return t

    def _gradient(self, r: int, n: int) -> np.ndarray:
        view = self.params[r].view()
        view.flags.writeable = False
        g = np.asarray(self.config.gradient_fn(r, view, n))
        if g.shape != (self.partition.n_elements,):
            raise ValueError(
                f"gradient_fn(worker={r}, iteration={n}) returned shape {g.shape}, "
                f"expected ({self.partition.n_elements},)"
            )
        if not np.all(np.isfinite(g)):
            raise ValueError(f"gradient_fn(worker={r}, iteration={n}) returned non-finite values")
        return g.astype(np.float32, copy=False)

    # ------------------------------------------------------------------ state views
    def _server_view(self) -> ServerView:
        # copies: a policy that keeps a view must not see later changes (a defect of the artifact)
        return ServerView(
            self.partition,
            self.push_iter.copy(),
            self.versions.copy(),
            self.updates_since_pull.copy(),
            self.active.copy(),
        )

    def _min_version(self) -> int:
        return int(self.versions[self.active].min())

    # ------------------------------------------------------------------ transfers
    def _chunk_plan(self, plan: TransmitPlan, what: str) -> ChunkPlan:
        if not isinstance(plan, TransmitPlan):
            raise SimulationError(f"{what}: the policy returned {type(plan).__name__}, not a TransmitPlan")
        order = np.asarray(plan.order, dtype=np.int64)
        if order.size and (order.min() < 0 or order.max() >= self.partition.n_rows):
            raise SimulationError(f"{what}: the plan names rows outside [0, {self.partition.n_rows})")
        return plan_chunks(self.partition, order, plan.mandatory_rows, self._row_wire_bytes, self.config.chunk_bytes)

    def _frame_sizes(self, cp: ChunkPlan) -> np.ndarray:
        """Frame bytes of each chunk, as :func:`rog.wire.encode_frame` will make them.

        A codec sends a chunk's segments merged (:func:`canonical_segments`) and packs its
        payload per chunk (:meth:`Codec.data_bytes`), so the size is known without encoding.
        """
        part = self.partition
        sizes = np.empty(cp.n_chunks, dtype=np.int64)
        for k, ch in enumerate(cp.chunks):
            n_seg = len(canonical_segments(part, ch.segments))
            start, stop = part.segment_elements(ch.segments)
            sizes[k] = frame_bytes(n_seg, self.codec.data_bytes(int((stop - start).sum())))
        return sizes

    def _schedule(self, link, cp: ChunkPlan, deadline_s: float | None, what: str) -> Delivery:
        try:
            return deliver_chunks(link, self.now, self._frame_sizes(cp), cp.mandatory_chunks, deadline_s)
        except SimulationError as e:
            raise SimulationError(f"{what}: {e}") from None

    def _transmit(self, link, cp: ChunkPlan, deadline_s: float | None, what: str):
        """Send ``cp`` over ``link`` from now (through the shared access point if any); returns the Delivery."""
        if self.config.shared_ap is None:
            sched = self._schedule(link, cp, deadline_s, what)
            yield self.env.timeout(sched.end_s - self.now)
            return sched
        return (yield from self.config.shared_ap.transmit(link, self._frame_sizes(cp), cp.mandatory_chunks, deadline_s))

    def _report(self, r: int, direction: str, n: int, plan: TransmitPlan, cp: ChunkPlan, s: Delivery) -> TransferReport:
        return TransferReport(
            worker=r,
            direction=direction,
            iteration=n,
            rows_planned=int(len(plan.order)),
            rows_delivered=cp.rows_in(s.n_delivered),
            bytes_delivered=s.bytes_delivered,
            duration_s=s.end_s - s.start_s,
            mandatory_s=None if s.mandatory_end_s is None else s.mandatory_end_s - s.start_s,
            deadline_s=plan.deadline_s,
        )

    def _apply_push(self, r: int, cp: ChunkPlan, k: int) -> np.ndarray:
        """PS adds the delivered chunks to every pending buffer; the worker commits them. Returns the rows."""
        part, codec, acc = self.partition, self.codec, self.acc[r]
        if k == 0:
            return np.zeros(0, dtype=np.int64)
        scales = codec.tensor_scales(part, acc)
        enc = codec.encode(part, acc, scales, _delivered(cp, k))
        targets = (self._pushed,) if self.config.aggregate_pending else self.pending
        codec.decode_into(part, enc, targets, weight=1.0 / self.n_workers)
        codec.commit(part, acc, enc)
        return cp.rows(k)

    def _apply_pull(self, r: int, cp: ChunkPlan, k: int) -> np.ndarray:
        """The worker subtracts the delivered chunks from its parameters; the PS commits them."""
        part, codec, pend = self.partition, self.codec, self.pending[r]
        if k == 0:
            return np.zeros(0, dtype=np.int64)
        scales = codec.tensor_scales(part, pend)
        enc = codec.encode(part, pend, scales, _delivered(cp, k))
        codec.decode_into(part, enc, (self.params[r],), weight=-1.0)
        codec.commit(part, pend, enc)
        if self.config.aggregate_pending:
            np.subtract(self._pushed, pend, out=self._pulled[r])  # pulled so far = pushed - what is still pending
        return cp.rows(k)

    # ------------------------------------------------------------------ coordination
    def _notify_changed(self) -> None:
        old, self._changed = self._changed, self.env.event()
        old.succeed()

    def _try_admit(self) -> None:
        if not self._waiting:
            return
        chosen = self.policy.admit(self._server_view(), list(self._waiting), len(self._in_flight))
        for w in chosen:
            w = int(w)
            if w not in self._waiting:
                raise SimulationError(f"policy.admit chose worker {w}, which is not waiting")
            self._in_flight.add(w)
            self._waiting.pop(w).succeed()
        self.max_in_flight = max(self.max_in_flight, len(self._in_flight))

    def _acquire(self, r: int):
        """Wait for a transfer slot (a simpy sub-process body: ``yield from``)."""
        if r in self._in_flight:
            return
        ev = self.env.event()
        self._waiting[r] = ev
        self._try_admit()
        if r not in self._in_flight:
            yield ev

    def _release(self, r: int) -> None:
        if r in self._in_flight:
            self._in_flight.discard(r)
            self._try_admit()

    def _request_lagging(self, view: ServerView) -> None:
        for o in np.flatnonzero(self.active).tolist():
            rows = np.asarray(self.policy.lagging_rows(view, o), dtype=np.int64)
            if rows.size:
                self._requested[o, rows] = True

    # ------------------------------------------------------------------ processes
    def _worker(self, r: int):
        env, policy, part = self.env, self.policy, self.partition
        for n in range(1, self.iterations[r] + 1):
            # 1. compute, local update, accumulate
            self._iteration[r] = n
            self._stage[r] = "compute"
            t_start = self.now
            compute_s = self._compute_s(r, n)
            yield env.timeout(compute_s)
            g = self._gradient(r, n)
            u = self.local[r].step(g, self.params[r], n)
            self.acc[r] += u
            if self.config.record_updates:
                self.updates.append(UpdateRecord(r, n, u.copy()))

            # 2. admission
            self._stage[r] = "admission"
            t0 = self.now
            yield from self._acquire(r)
            admission_s = self.now - t0

            # 3. push
            self._stage[r] = "push"
            t_push = self.now
            wview = WorkerView(
                partition=part,
                worker=r,
                iteration=n,
                row_push_iter=self.row_push_iter[r].copy(),
                tensor_scale=part.tensor_mean_abs(self.acc[r]).astype(np.float32),
                budget_s=self._budget_s[r],
                required_rows=self._required[r],
            )
            plan = policy.push_plan(wview)
            what = f"push of worker {r}, iteration {n}"
            cp = self._chunk_plan(plan, what)
            sched = yield from self._transmit(self.uplinks[r], cp, plan.deadline_s, what)
            rows = self._apply_push(r, cp, sched.n_delivered)
            self.push_iter[r] = n
            self.versions[r, rows] = n
            self.updates_since_pull[:, rows] += 1
            self.row_push_iter[r, rows] = n
            self._requested[r, rows] = False  # delivered: the PS's request is satisfied
            push_report = self._report(r, "push", n, plan, cp, sched)
            self.reports.append(push_report)
            policy.observe(push_report)
            row_staleness_max = int(n - self.row_push_iter[r].min())
            self._notify_changed()
            self._try_admit()

            # 4. staleness gate
            self._stage[r] = "gate"
            t_gate = self.now
            released = False
            while True:
                sview = self._server_view()
                ready = bool(policy.pull_ready(sview, r))
                self.gate_log.append(GateCheck(self.now, r, n, ready))
                if ready:
                    break
                if not released:
                    self._release(r)  # a stalled worker does not hold a transfer slot
                    released = True
                self._request_lagging(sview)
                yield self._changed
            gate_s = self.now - t_gate
            if released:
                self._stage[r] = "admission"
                t0 = self.now
                yield from self._acquire(r)
                admission_s += self.now - t0
            gate_staleness = int(n - self._min_version())

            # 5. pull
            self._stage[r] = "pull"
            t_pull = self.now
            sview = self._server_view()
            plan_pull = policy.pull_plan(sview, r, part.tensor_mean_abs(self.pending[r]).astype(np.float32))
            budget = policy.push_budget_s(sview, r)
            what = f"pull of worker {r}, iteration {n}"
            cp_pull = self._chunk_plan(plan_pull, what)
            sched_pull = yield from self._transmit(self.downlinks[r], cp_pull, plan_pull.deadline_s, what)
            rows = self._apply_pull(r, cp_pull, sched_pull.n_delivered)
            self.updates_since_pull[r, rows] = 0
            pull_report = self._report(r, "pull", n, plan_pull, cp_pull, sched_pull)
            self.reports.append(pull_report)
            policy.observe(pull_report)
            self._budget_s[r] = budget
            self._required[r] = np.flatnonzero(self._requested[r]).astype(np.int64)
            self._release(r)

            self.records.append(
                IterationRecord(
                    worker=r,
                    iteration=n,
                    t_start_s=t_start,
                    t_push_start_s=t_push,
                    t_pull_start_s=t_pull,
                    t_end_s=self.now,
                    iteration_s=self.now - t_start,
                    compute_s=compute_s,
                    admission_s=admission_s,
                    gate_s=gate_s,
                    stall_s=admission_s + gate_s,
                    push_s=sched.end_s - sched.start_s,
                    pull_s=sched_pull.end_s - sched_pull.start_s,
                    push_rows_planned=push_report.rows_planned,
                    push_required_rows=int(wview.required_rows.size),
                    push_rows=push_report.rows_delivered,
                    push_bytes=push_report.bytes_delivered,
                    push_share=_share(push_report),
                    push_deadline_s=math.nan if plan.deadline_s is None else float(plan.deadline_s),
                    pull_rows_planned=pull_report.rows_planned,
                    pull_rows=pull_report.rows_delivered,
                    pull_bytes=pull_report.bytes_delivered,
                    pull_share=_share(pull_report),
                    pull_deadline_s=math.nan if plan_pull.deadline_s is None else float(plan_pull.deadline_s),
                    gate_staleness=gate_staleness,
                    row_staleness_max=row_staleness_max,
                )
            )
        self._stage[r] = "done"

    def _flush_transfer(self, r: int, direction: str):
        plan = all_rows_plan(self.partition)
        what = f"flush {direction} of worker {r}"
        cp = self._chunk_plan(plan, what)
        link = self.uplinks[r] if direction == "push" else self.downlinks[r]
        sched = yield from self._transmit(link, cp, None, what)
        if direction == "push":
            self._apply_push(r, cp, sched.n_delivered)
        else:
            rows = self._apply_pull(r, cp, sched.n_delivered)
            self.updates_since_pull[r, rows] = 0
        self.flush_reports.append(self._report(r, direction, int(self.push_iter[r]), plan, cp, sched))


_ALIGN_BYTES = 64


def _aligned_copy(x: np.ndarray) -> np.ndarray:
    """A copy of ``x`` whose data starts on a 64-byte boundary.

    The sign codec's per-tensor scales no longer depend on the address (:mod:`rog.scales`); a
    fixed alignment still keeps every numpy kernel's vector path the same from run to run.
    """
    raw = np.empty(x.nbytes + _ALIGN_BYTES, dtype=np.uint8)
    skip = (-raw.ctypes.data) % _ALIGN_BYTES
    out = raw[skip : skip + x.nbytes].view(x.dtype)
    out[...] = x
    return out


class _PendingViews:
    """``pending[r]`` of an ``aggregate_pending`` run: ``pushed - pulled[r]``, a fresh array on every read."""

    def __init__(self, pushed: np.ndarray, pulled: list) -> None:
        self._pushed, self._pulled = pushed, pulled

    def __len__(self) -> int:
        return len(self._pulled)

    def __getitem__(self, r: int) -> np.ndarray:
        out = _aligned_copy(self._pushed)
        out -= self._pulled[r]
        return out

    def __iter__(self):
        return (self[r] for r in range(len(self)))


def _delivered(cp: ChunkPlan, k: int) -> ChunkSpec:
    """The first ``k`` chunks as one: the codecs work element by element with per-tensor scales
    fixed for the transmission, so applying them together gives the same values as one by one."""
    return ChunkSpec(np.concatenate([ch.segments for ch in cp.chunks[:k]]))


def _share(report: TransferReport) -> float:
    return 1.0 if report.rows_planned == 0 else report.rows_delivered / report.rows_planned


def _means(records: Sequence[IterationRecord]) -> dict:
    out: dict = {"records": len(records)}
    if not records:
        return out
    table = np.array([[getattr(rec, f) for f in _NUMERIC_FIELDS] for rec in records], dtype=np.float64)
    for j, name in enumerate(_NUMERIC_FIELDS):
        col = table[:, j]
        col = col[~np.isnan(col)]
        out[name] = float(col.mean()) if col.size else math.nan
    return out


def simulate(config: SimConfig, flush: bool = True) -> Simulation:
    """Build a :class:`Simulation`, run it, and (by default) flush it."""
    sim = Simulation(config).run()
    return sim.flush() if flush else sim
