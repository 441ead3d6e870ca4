"""The worker engine: one worker's side of every iteration, over one transport connection.

Per iteration ``n`` (Algorithm 1; :mod:`rog.sim` is the reference semantics):

1. *compute* (logged as ``compute``, from the caller's ``compute_started_at`` on): the local rule
   turns the gradient into an update ``u`` (:class:`~rog.local_update.LocalUpdate`),
   ``acc += u``; the policy plans the push (with the budget and the rows the PS asked for in the
   previous :class:`~rog.transport.PullReply`); every chunk of the plan is encoded now, so
   compression counts as compute for every system; with ``compute_target_s`` the worker then
   sleeps the rest of that target (compute pacing: docs/reproduction.md, "The regime"; under
   per-layer pacing, :mod:`rog.schedules.pacing`, the layers slept most of it already: ``paced_s``);
2. *admission*: ``AdmitRequest`` / ``AdmitGrant`` (FLOWN limits concurrent transfers; the other
   policies grant at once; the wait is logged as ``stall`` with ``reason="admission"``);
3. *push*: a speculative transmission under the plan's deadline; exactly the acknowledged chunks
   are subtracted from ``acc`` (what the PS reconstructs: error feedback keeps the rest) and their
   rows get version ``n``; undelivered rows keep accumulating; mandatory chunks the PS rejected
   (damaged on the way) are retransmitted at once, in the same iteration;
4. *gate*: ``PushDone`` then wait for ``PullStart`` (the PS holds it while the staleness gate is
   closed; logged as ``stall``, split into gate and admission by the PS's account);
5. *pull*: the delivered chunks are subtracted from the parameters (``w -= pulled``); the
   ``PullReply`` brings the next push's budget and the rows the PS asks for (and, before it, a
   :class:`~rog.runtime.messages.PolicyControl` when the policy's scheduler has a number for us).
   A policy with a PS-side scheduler (ADSP) also gets its rates pushed at any time
   (:class:`~rog.runtime.messages.RateUpdate`, taken out of band; :mod:`rog.runtime.rate_broadcast`):
   the worker polls its connection at every mini-batch boundary.

Policies with local steps (ADSP, ADACOMM: :attr:`~rog.policies.base.Policy.local_steps`) also apply
each update to the parameters at once (``w -= u``) and keep ``w = w_pulled - acc``: a committed
chunk goes back onto ``w`` as it leaves ``acc``.  Steps 2-5 run only when
:meth:`~rog.policies.base.Policy.commit_due` says so (a step that does not commit is compute only);
the blocking round trip of a commit (steps 2-5) is its ``O_i``.

:meth:`WorkerEngine.flush` pushes everything left (no deadline), waits until every worker has
flushed and pulls everything; with compression off every worker then holds
``w0 - sum(all updates) / W``.

Faults: with a ``reconnect`` callable (a new authenticated connection), a broken link (closed,
reset, silent for too long) does not end the run: the engine reconnects with exponential backoff
for up to ``reconnect_timeout_s``, rejoins (:class:`~rog.runtime.messages.Rejoin`), settles the
push that was in flight with the PS's count (its acknowledged frames are committed exactly once),
re-sends the pushes and pulls the PS's latest checkpoint does not cover (after a PS restart), and
redoes the current iteration's communication.  ``rejoin=True`` starts a restarted worker process:
it holds the initial model and receives everything committed so far.  Until the PS says a
checkpoint covers them, the engine keeps the encoded chunks of its pushes and pulls (the wire
bytes since that checkpoint).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..chunks import DEFAULT_CHUNK_BYTES, plan_chunks
from ..codecs.compression import Codec, EncodedChunk
from ..local_update import LocalUpdate
from ..policies.base import CommitView, Policy, TransferReport, WorkerView, all_rows_plan
from ..rows import RowPartition
from ..transport import (AckStatus, Begin, Bye, Connection, Error, LinkClosed, ProtocolError, PullReply, TransportError,
                         WireFrames)
from ..wire import encode_frame, encode_frames
from .errors import RuntimeFailure
from .events import EventLog
from .messages import (
    EXEMPT_ITERATION,
    AdmitGrant,
    AdmitRequest,
    Flush,
    Join,
    MODEL_FOLLOWS,
    MODEL_WANTED,
    START_OWN,
    START_TEAM,
    JoinReply,
    PolicyControl,
    PullStart,
    PushDone,
    Rejoin,
    RejoinReply,
    Resync,
    layout_digest,
    params_digest,
)

_ALIGN_BYTES = 64
BACKOFF_START_S = 0.05  # first reconnect retry after this long, doubling
BACKOFF_MAX_S = 2.0  # ... up to this
MANDATORY_RETRIES = 3  # retransmissions of a push whose mandatory frames the PS rejected, then fail loudly
RETRYABLE_STATUSES = (AckStatus.BAD_FRAME, AckStatus.BAD_SEQUENCE, AckStatus.OVERSIZE, AckStatus.TOO_MANY)  # damage


def aligned_zeros(n_elements: int) -> np.ndarray:
    """A zeroed float32 buffer starting on a 64-byte boundary (BLAS sums then do not depend on the address)."""
    raw = np.zeros(int(n_elements) * 4 + _ALIGN_BYTES, dtype=np.uint8)
    skip = (-raw.ctypes.data) % _ALIGN_BYTES
    return raw[skip : skip + int(n_elements) * 4].view(np.float32)


def subtract_sent(codec: Codec, partition: RowPartition, buf: np.ndarray, chunk: EncodedChunk) -> None:
    """Subtract exactly what the receiver reconstructs from ``chunk`` (never zero: others may have added since)."""
    codec.decode_into(partition, chunk, (buf,), weight=-1.0)


@dataclass(frozen=True)
class IterationStats:
    """What one iteration took (seconds) and moved, as logged."""

    iteration: int
    compute_s: float
    admission_s: float  # before the push and after the gate
    gate_s: float
    push_s: float
    pull_s: float
    push_rows: int
    push_rows_planned: int
    pull_rows: int
    pull_rows_planned: int
    push_cut: bool


def delivered_mandatory_s(res) -> float | None:
    """A transmission's MTA time: until the receiver had the last mandatory frame (its own clock, from Begin),
    or, if it did not say, until the sender had written it (bytes in kernel buffers are not delivered yet)."""
    return res.rx_mandatory_s if res.rx_mandatory_s is not None else res.mandatory_s


def merge_attempts(first, retry):
    """One push's :class:`~rog.transport.SendResult` over its first attempt and a retransmission (same clock)."""
    offset_s = retry.started_at - first.started_at
    shift = lambda t: None if t is None else offset_s + t  # noqa: E731
    return replace(first, encoded=first.encoded + retry.encoded, sent=first.sent + retry.sent,
                   delivered=first.delivered + retry.delivered,
                   bytes_delivered=first.bytes_delivered + retry.bytes_delivered,
                   wire_bytes=first.wire_bytes + retry.wire_bytes,
                   mandatory_s=first.mandatory_s if retry.mandatory == 0 else shift(retry.mandatory_s),
                   send_s=offset_s + retry.send_s, duration_s=offset_s + retry.duration_s, cut=retry.cut,
                   status=retry.status,
                   rx_mandatory_s=first.rx_mandatory_s if retry.mandatory == 0 else shift(retry.rx_mandatory_s),
                   rx_last_s=shift(retry.rx_last_s) if retry.rx_last_s is not None else first.rx_last_s)


def share(delivered: int, planned: int) -> float:
    """Delivered share of a transmission (1.0 when nothing was planned)."""
    return 1.0 if planned == 0 else delivered / planned


class WorkerEngine:
    """One worker: parameters (a flat float32 buffer, updated in place by pulls), accumulator, row versions.

    ``params`` is used as given (not copied): the drop-in optimizer passes the buffer its model's
    parameters are views of.  A numpy buffer keeps everything on the host; a 1-D float32 torch
    tensor (on a GPU, or the CPU) keeps the accumulator and the update on its device, with a
    device codec (:mod:`rog.codecs.device_codec`) and :class:`rog.device.torch_update.TorchLocalUpdate`.  Call
    :meth:`join` once, :meth:`step` per iteration, then :meth:`flush` and :meth:`close`.
    """

    def __init__(
        self,
        conn: Connection,
        partition: RowPartition,
        params: np.ndarray,
        policy: Policy,
        codec: Codec,
        local: LocalUpdate,
        *,
        events: EventLog | None = None,
        compute_target_s: float | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        wait_timeout_s: float = 600.0,
        reconnect: Callable[[], Connection] | None = None,
        reconnect_timeout_s: float = 600.0,
        rejoin: bool = False,
        clock_sync: bool = False,
        initial_model: str = "team",
    ) -> None:
        if initial_model not in ("team", "own"):
            raise ValueError(f"initial_model must be 'team' or 'own', got {initial_model!r}")
        self.initial_model = initial_model  # team: take the team's initial parameters at join; own: keep mine
        self.on_device = not isinstance(params, np.ndarray)  # a torch tensor: the device path
        if not self.on_device:
            partition.check_flat(params, "params")
        elif not hasattr(codec, "device"):
            raise ValueError("params is a torch tensor: the codec must be a device codec (rog.codecs.device_codec)")
        if not (reconnect_timeout_s > 0 and np.isfinite(reconnect_timeout_s)):
            raise ValueError(f"reconnect_timeout_s must be a positive number of seconds, got {reconnect_timeout_s!r}")
        if compute_target_s is not None and not (float(compute_target_s) >= 0 and np.isfinite(compute_target_s)):
            raise ValueError(f"compute_target_s must be a finite number of seconds >= 0 or None, got {compute_target_s!r}")
        if isinstance(chunk_bytes, bool) or int(chunk_bytes) != chunk_bytes or chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be a positive integer, got {chunk_bytes!r}")
        if not wait_timeout_s > 0:
            raise ValueError(f"wait_timeout_s must be positive, got {wait_timeout_s!r}")
        self.conn = conn
        self.worker = conn.worker_id
        self.partition = partition
        self.params = params
        self.policy = policy
        self.codec = codec
        self.local = local
        self.events = events
        self.compute_target_s = None if compute_target_s is None else float(compute_target_s)
        self.paced_s = 0.0  # per-layer pacing's sleeps inside this iteration's passes (added to its compute record)
        self.paced_at: float | None = None  # when the last step's own compute ended, before its pacing sleep
        self.chunk_bytes = int(chunk_bytes)
        self.wait_timeout_s = float(wait_timeout_s)
        # updates computed but not yet delivered to the PS
        self.acc = params.new_zeros(partition.n_elements) if self.on_device else aligned_zeros(partition.n_elements)
        self.row_push_iter = np.zeros(partition.n_rows, dtype=np.int64)  # last iteration each row reached the PS
        self.iteration = 0  # iterations completed
        self.n_workers: int | None = None  # learned at join
        self.budget_s: float | None = None  # deadline of the next push (from the PS)
        self.required_rows = np.zeros(0, dtype=np.int64)  # rows the PS asked for
        self._row_wire_bytes = codec.row_wire_bytes(partition)
        self._validator = WireFrames(partition, codec)
        self._state = "new"
        self.reconnect = reconnect
        self.reconnect_timeout_s = float(reconnect_timeout_s)
        self.rejoin = bool(rejoin)  # a restarted worker: join with Rejoin(fresh)
        self.clock_sync = bool(clock_sync)  # estimate this host's clock offset with the PS at join and flush
        self.clock_estimates: dict = {}  # phase -> the best ClockSample (rog.runtime.clock_sync)
        self.push_seq = 0  # push transmissions committed (acknowledged by the PS)
        self.pull_seq = 0  # pull transmissions applied
        self.pushed_iteration = 0  # newest iteration whose push committed
        self.reconnects = 0  # successful recoveries
        self.push_retries = 0  # retransmissions of pushes whose mandatory frames the PS rejected
        self._unconfirmed_push: list[tuple[int, list[EncodedChunk]]] = []  # not yet in a PS checkpoint
        self._unconfirmed_pull: list[tuple[int, list[EncodedChunk]]] = []
        self._inflight_push: tuple[int, list[EncodedChunk], int] | None = None  # (seq, chunks, iteration) awaiting its ack
        self.control: float | None = None  # the latest number the policy's scheduler sent (PolicyControl)
        self.last_commit_s: float | None = None  # O_i: the last commit's blocking round trip
        self.commits = 0  # commits (push and pull exchanges) done
        self._t_last_commit = time.monotonic()  # end of the last commit (the join before the first)
        self._steps_since_commit = 0
        self.rates_received: list[tuple[int, float, bool, float]] = []  # pushed rates (rog.runtime.rate_broadcast)
        self._listen_for_rates()

    def _listen_for_rates(self) -> None:
        """A policy with a PS-side scheduler gets its rates pushed at any time (out of band on the connection)."""
        if self.policy.scheduler_period_s is not None:
            from .rate_broadcast import attach_rate_receiver

            attach_rate_receiver(self)

    # ------------------------------------------------------------------ helpers
    def _log(self, kind: str, t0: float | None = None, **fields) -> None:
        if self.events is not None:
            self.events.write(kind, None if t0 is None else self.events.at(t0), **fields)

    def _expect(self, cls, what: str, timeout_s: float | None = None):
        msg = self.conn.recv(self.wait_timeout_s if timeout_s is None else timeout_s)
        if isinstance(msg, Error):
            raise RuntimeFailure(f"worker {self.worker}: the parameter server reported: {msg.text}")
        if isinstance(msg, Bye):
            raise LinkClosed(f"worker {self.worker}: the parameter server closed the connection ({msg.text})")
        if not isinstance(msg, cls):
            raise ProtocolError(f"worker {self.worker}: expected {what}, got {type(msg).__name__}")
        return msg

    def _encode_all(self, chunks, iteration: int, mean_abs=None) -> tuple[list[EncodedChunk], list[bytes]]:
        scales = self.codec.tensor_scales(self.partition, self.acc, mean_abs)
        return encode_frames(self.codec, self.partition, self.acc, scales, chunks, iteration)

    def _commit(self, encoded: list[EncodedChunk], delivered: int) -> np.ndarray:
        rows = [c.rows() for c in encoded[:delivered]]
        if self.on_device:  # one batch: subtract exactly what the receiver reconstructs
            self.codec.decode_many(self.partition, encoded[:delivered], (self.acc,), weight=-1.0)
            if self.policy.local_steps:  # keep w = w_pulled - acc: the update is now the PS's to send back
                self.codec.decode_many(self.partition, encoded[:delivered], (self.params,), weight=1.0)
        else:
            for c in encoded[:delivered]:
                subtract_sent(self.codec, self.partition, self.acc, c)
                if self.policy.local_steps:  # keep w = w_pulled - acc: the update is now the PS's to send back
                    self.codec.decode_into(self.partition, c, (self.params,), weight=1.0)
        return np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)

    def _apply_pull(self, begin: Begin):
        """Receive a pull and subtract its delivered chunks from the parameters; returns (result, rows)."""
        res = self.conn.receive_transmission(begin, self._validator)
        rows = 0
        chunks = [chunk for _, chunk in res.frames]
        self.codec.decode_many(self.partition, chunks, (self.params,), weight=-1.0)
        for chunk in chunks:
            rows += chunk.n_rows
        self.pull_seq += 1
        self._unconfirmed_pull.append((self.pull_seq, chunks))
        return res, rows

    def _send_push(self, frames, encoded, iteration: int, mandatory: int, deadline_s):
        """A push transmission; commits exactly the acknowledged chunks; returns (result, rows).

        If the PS rejected a *mandatory* frame (damaged on the way), the unacknowledged chunks
        are retransmitted at once in a new transmission of the same iteration (the rest of the
        deadline still bounds the optional ones), up to ``MANDATORY_RETRIES`` times: otherwise
        the worker's overdue rows would stay stale at the PS and close everyone's gate.
        """
        self._inflight_push = (self.push_seq + 1, encoded, iteration)
        res = self.conn.send_transmission(frames, n_frames=len(frames), iteration=iteration, mandatory=mandatory,
                                          deadline_s=deadline_s)
        rows = [self._settle_push(encoded, res.delivered, iteration)]
        first, done, retries = res, res.delivered, 0
        while done < mandatory and res.status in RETRYABLE_STATUSES:  # (a refused transmission: the PS reports it)
            if retries == MANDATORY_RETRIES:
                raise RuntimeFailure(
                    f"worker {self.worker}: push of iteration {iteration} delivered {done} of its {mandatory} "
                    f"mandatory chunks after {retries} retransmissions (last verdict {res.status.name}): "
                    f"the link keeps damaging frames")
            retries += 1
            self.push_retries += 1
            rest = encoded[done:]
            left_s = None if deadline_s is None else max(0.0, deadline_s - (self.conn.clock.now() - first.started_at))
            self._inflight_push = (self.push_seq + 1, rest, iteration)
            res = self.conn.send_transmission([encode_frame(c, self.codec, iteration, i) for i, c in enumerate(rest)],
                                              n_frames=len(rest), iteration=iteration, mandatory=mandatory - done,
                                              deadline_s=left_s)
            rows.append(self._settle_push(rest, res.delivered, iteration))
            done += res.delivered
            first = merge_attempts(first, res)
        return first, np.concatenate(rows)

    def _settle_push(self, encoded: list[EncodedChunk], delivered: int, iteration: int) -> np.ndarray:
        rows = self._commit(encoded, delivered)
        self.push_seq += 1
        self._unconfirmed_push.append((self.push_seq, encoded[:delivered]))
        self.row_push_iter[rows] = iteration
        if rows.size:
            self.pushed_iteration = max(self.pushed_iteration, iteration)
        self._inflight_push = None
        return rows

    def _drop_covered(self, push_seq: int, pull_seq: int) -> None:
        """Forget the transmissions the PS's latest checkpoint holds."""
        self._unconfirmed_push = [x for x in self._unconfirmed_push if x[0] > push_seq]
        self._unconfirmed_pull = [x for x in self._unconfirmed_pull if x[0] > pull_seq]

    # ------------------------------------------------------------------ faults
    def _recover(self, err: BaseException) -> None:
        """The link broke: reconnect with backoff, rejoin, settle; raise ``err`` if there is no way back."""
        if self.reconnect is None:
            raise err
        t0 = time.monotonic()
        self._log("fault", event="link_lost", worker=self.worker, iteration=self.iteration,
                  reason=f"{type(err).__name__}: {err}"[:300])
        self.conn.abort()
        delay, attempts = BACKOFF_START_S, 0
        while True:
            attempts += 1
            try:
                self.conn = self.reconnect()
                self._listen_for_rates()
                self._rejoin_exchange(fresh=False)
                break
            except (TransportError, OSError) as e:
                self.conn.abort()
                if time.monotonic() - t0 > self.reconnect_timeout_s:
                    raise RuntimeFailure(f"worker {self.worker}: no way back to the parameter server within "
                                         f"{self.reconnect_timeout_s} s ({attempts} attempts; last: {type(e).__name__}: {e})") from err
                time.sleep(delay)
                delay = min(2 * delay, BACKOFF_MAX_S)
        self.reconnects += 1
        self._log("fault", event="reconnected", worker=self.worker, iteration=self.iteration,
                  gap_s=time.monotonic() - t0, attempts=attempts)

    def _rejoin_exchange(self, fresh: bool) -> None:
        """Rejoin on ``self.conn``: settle the in-flight push, re-send what the PS lacks, (fresh) pull everything."""
        from .initial_model import flat_bytes
        part, conn = self.partition, self.conn
        mine = params_digest(flat_bytes(self.params)) if fresh else bytes(32)  # a restart rebuilt the initial model
        conn.send(Rejoin(part.n_elements, part.n_rows, self.codec.codec_id, self.policy.name, self.policy.threshold,
                         layout_digest(part), fresh, self.iteration, self.pushed_iteration, self.push_seq,
                         self.pull_seq, mine))
        reply = self._expect(RejoinReply, "RejoinReply")
        self.n_workers = int(reply.n_workers)
        if self._inflight_push is not None:
            seq, encoded, it = self._inflight_push
            if reply.push_seq >= seq:  # the PS applied it, the ack was lost: commit what it kept, once
                self._settle_push(encoded, min(int(reply.last_push_delivered), len(encoded)), it)
            self._inflight_push = None
        if fresh:
            self.push_seq, self.pull_seq = int(reply.push_seq), int(reply.pull_seq)
            self._unconfirmed_push, self._unconfirmed_pull = [], []
        pushes = [c for seq, cs in self._unconfirmed_push if seq > reply.push_seq for c in cs]
        pulls = [c for seq, cs in self._unconfirmed_pull if seq > reply.pull_seq for c in cs]
        frames = [encode_frame(c, self.codec, EXEMPT_ITERATION, i) for i, c in enumerate(pushes + pulls)]
        conn.send(Resync(len(pushes), len(pulls), self.push_seq, self.pull_seq, self.pushed_iteration))
        res = conn.send_transmission(frames, n_frames=len(frames), iteration=EXEMPT_ITERATION, mandatory=len(frames),
                                     deadline_s=None)
        if res.delivered != len(frames):
            raise RuntimeFailure(f"worker {self.worker}: resync delivered {res.delivered} of {len(frames)} frames")
        if fresh:
            begin = self._expect(Begin, "the rejoin pull's Begin")
            got, _ = self._apply_pull(begin)
            conn.last_rx_iteration = 0  # exempt from the order of the pulls that follow
            if got.delivered != begin.planned:
                raise RuntimeFailure(f"worker {self.worker}: rejoin pull delivered {got.delivered} of {begin.planned} chunks")
        if fresh or reply.evicted:  # continue level with the PS's count; every row counts as that fresh
            self.iteration = max(self.iteration, int(reply.iteration)) if not fresh else int(reply.iteration)
            np.maximum(self.row_push_iter, self.iteration, out=self.row_push_iter)
            self.pushed_iteration = max(self.pushed_iteration, self.iteration)
        self.budget_s = None
        self.required_rows = np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------------ lifecycle
    def join(self, timeout_s: float | None = None) -> int:
        """Announce the model layout, codec and policy; returns the number of workers once all have joined."""
        if self._state != "new":
            raise RuntimeFailure(f"join() called in state {self._state!r}")
        part = self.partition
        if self.rejoin:
            self._rejoin_exchange(fresh=True)
            self._log("fault", event="reconnected", worker=self.worker, iteration=self.iteration, fresh=True)
        else:
            from .initial_model import flat_bytes, receive_model, send_model

            mine = flat_bytes(self.params)
            self.conn.send(
                Join(part.n_elements, part.n_rows, self.codec.codec_id, self.policy.name, self.policy.threshold,
                     layout_digest(part), START_OWN if self.initial_model == "own" else START_TEAM, params_digest(mine))
            )
            reply = self._expect(JoinReply, "JoinReply", timeout_s)
            if reply.model == MODEL_WANTED:  # the team starts from this worker's parameters
                send_model(self.conn, mine)
            elif reply.model == MODEL_FOLLOWS:  # start from the team's
                team = receive_model(self.conn, part.n_elements, reply.model_digest, self.wait_timeout_s,
                                     f"worker {self.worker}")
                if self.on_device:
                    import torch

                    self.params.copy_(torch.from_numpy(team).to(self.params.device))
                else:
                    self.params[:] = team
            self.n_workers = int(reply.n_workers)
            self._sync_clock("join")
        self._state = "training"
        self._t_last_commit = time.monotonic()
        self._log("run_start", policy=self.policy.name, threshold=self.policy.threshold, n_workers=self.n_workers,
                  worker=self.worker, codec=self.codec.name)
        return self.n_workers

    def step(self, grad: np.ndarray, compute_started_at: float | None = None) -> IterationStats:
        """One iteration with flat gradient ``grad`` (``compute_started_at``: ``time.monotonic()`` when its computation began)."""
        if self._state != "training":
            raise RuntimeFailure(f"step() needs a joined engine that has not flushed (state {self._state!r})")
        part = self.partition
        if not self.on_device:
            grad = np.asarray(grad)
        if tuple(grad.shape) != (part.n_elements,):
            raise ValueError(f"grad must have shape ({part.n_elements},), got {tuple(grad.shape)}")
        n = self.iteration + 1
        if not (self.local.all_finite(grad) if self.on_device else np.all(np.isfinite(grad))):
            raise ValueError(f"the gradient of iteration {n} holds non-finite values (NaN/inf loss?)")
        t_c0 = time.monotonic() if compute_started_at is None else float(compute_started_at)

        # 1. local update, accumulate, plan and encode the push (all of it counts as compute)
        if self.on_device:  # on the kernels: acc += u in the update's own pass, u written only when needed
            u = self.local.step_accumulate(grad, self.params, n, self.acc, want_u=bool(self.policy.local_steps))
        else:
            u = self.local.step(grad, self.params, n)
            self.acc += u
        if self.policy.local_steps:
            self.params -= u
        self._steps_since_commit += 1
        if self.policy.scheduler_period_s is not None:
            self.conn.poll()  # a pushed rate (and a timer restart) takes effect at this mini-batch boundary
        due = self.policy.commit_due(CommitView(self.worker, n, self._steps_since_commit,
                                                time.monotonic() - self._t_last_commit, self.last_commit_s,
                                                self.control))
        if due:
            plan, cp, encoded, frames = self._plan_push(n)
        self.paced_at = time.monotonic()  # the end of this iteration's own compute (per-layer pacing measures it)
        sleep_s = 0.0
        if self.compute_target_s is not None:
            sleep_s = max(0.0, self.compute_target_s - (time.monotonic() - t_c0))
            time.sleep(sleep_s)
        t_adm = time.monotonic()
        compute_s = t_adm - t_c0
        self._log("compute", t_c0, iteration=n, duration_s=compute_s, sleep_s=sleep_s + self.paced_s,
                  lr=float(self.local.lr_at(n)))  # the first group's rate of this iteration
        self.paced_s = 0.0
        if not due:  # a local step: compute only
            self.iteration = n
            return IterationStats(n, compute_s, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, 0, False)
        while True:
            try:
                return self._exchange(n, plan, cp, encoded, frames, compute_s)
            except (TransportError, OSError) as e:  # a broken link: come back (or raise without reconnect)
                self._recover(e)
                n = self.iteration + 1  # an evicted worker may have been moved up
                plan, cp, encoded, frames = self._plan_push(n)

    def _plan_push(self, n: int):
        part = self.partition
        mean_abs = self.codec.flat_mean_abs(part, self.acc)
        view = WorkerView(
            partition=part,
            worker=self.worker,
            iteration=n,
            row_push_iter=self.row_push_iter.copy(),
            tensor_scale=mean_abs.astype(np.float32),
            budget_s=self.budget_s,
            required_rows=self.required_rows,
        )
        plan = self.policy.push_plan(view)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self._row_wire_bytes, self.chunk_bytes)
        encoded, frames = self._encode_all(cp.chunks, n, mean_abs)  # acc unchanged since mean_abs
        return plan, cp, encoded, frames

    def _exchange(self, n: int, plan, cp, encoded, frames, compute_s: float) -> IterationStats:
        """Steps 2-5 of iteration ``n`` on the current connection."""
        policy, conn = self.policy, self.conn
        t_adm = time.monotonic()

        # 2. admission
        conn.send(AdmitRequest(n))
        self._expect(AdmitGrant, "AdmitGrant")
        t_push = time.monotonic()
        admission_s = t_push - t_adm
        self._log("stall", t_adm, iteration=n, duration_s=admission_s, reason="admission")

        # 3. push
        res, rows = self._send_push(frames, encoded, n, cp.mandatory_chunks, plan.deadline_s)
        t_gate = time.monotonic()  # the push record spans the transmission and the commit (error feedback)
        rows_planned = int(len(plan.order))
        mandatory_s = delivered_mandatory_s(res)
        report = TransferReport(self.worker, "push", n, rows_planned, int(rows.size), res.bytes_delivered,
                                res.duration_s, mandatory_s, plan.deadline_s)
        policy.observe(report)
        self._log("push", t_push, iteration=n, rows_planned=rows_planned, rows_delivered=int(rows.size),
                  bytes=res.bytes_delivered, deadline_s=plan.deadline_s, delivered_share=share(rows.size, rows_planned),
                  duration_s=t_gate - t_push, mandatory_s=mandatory_s, cut=res.cut,
                  required_rows=int(self.required_rows.size), frames_planned=len(frames))
        stale = n - self.row_push_iter
        self._log("staleness", iteration=n, max=int(stale.max()), mean=float(stale.mean()),
                  tensor_max=np.maximum.reduceat(stale, self.partition.tensor_first_row[:-1]).tolist())  # per tensor, in layout order

        # 4. gate (from here on, waiting is stall: the records of one iteration tile its wall time)
        start, t_pull, gate_s, late_admission_s = self.await_gate(n, rows_planned, res.duration_s, mandatory_s, t_gate)

        # 5. pull
        begin = self._expect(Begin, "the pull's Begin")
        got, pull_rows = self._apply_pull(begin)
        self.iteration = n  # the pull is applied: the iteration is complete, whatever happens to the reply
        try:
            self.read_pull_reply()
        except (TransportError, OSError) as e:  # come back now; the next push has no budget and no requests
            self._recover(e)
        t_end = time.monotonic()
        pull_s = t_end - t_pull
        self.last_commit_s = t_end - t_adm
        self._t_last_commit = t_end
        self._steps_since_commit = 0
        self.commits += 1
        pull_mandatory_s = None if got.mandatory_at is None else max(0.0, got.mandatory_at - got.begin_at)
        policy.observe(TransferReport(self.worker, "pull", n, start.rows_planned, pull_rows, got.bytes_delivered,
                                      pull_s, pull_mandatory_s, begin.deadline_s))
        self._log("pull", t_pull, iteration=n, rows_planned=start.rows_planned, rows_delivered=pull_rows,
                  bytes=got.bytes_delivered, deadline_s=begin.deadline_s,
                  delivered_share=share(pull_rows, start.rows_planned), duration_s=pull_s,
                  mandatory_s=pull_mandatory_s, cut=got.cut, frames_planned=begin.planned)
        return IterationStats(n, compute_s, admission_s + late_admission_s, gate_s, t_gate - t_push, pull_s,
                              int(rows.size), rows_planned, pull_rows, start.rows_planned, res.cut)

    def read_pull_reply(self) -> None:
        """Read the pull's reply (after a policy control message, if the PS sent one): the next push's budget
        and the rows the PS requires in it."""
        reply = self._expect((PullReply, PolicyControl), "PullReply")
        if isinstance(reply, PolicyControl):
            self.control = reply.value
            reply = self._expect(PullReply, "PullReply")
        self.budget_s = reply.budget_s
        self.required_rows = np.asarray(reply.required_rows, dtype=np.int64)

    def await_gate(self, n: int, rows_planned: int, push_s: float, mandatory_s, t_gate: float) -> tuple:
        """Report push ``n`` done and wait for the PS's gate; log the wait as gate and late-admission stall.
        Returns ``(PullStart, t_pull, gate_s, late_admission_s)``."""
        self.conn.send(PushDone(n, rows_planned, push_s, mandatory_s))
        start = self._expect(PullStart, "PullStart")
        self._drop_covered(start.covered_push_seq, start.covered_pull_seq)
        t_pull = time.monotonic()
        waited = t_pull - t_gate
        late_admission_s = min(start.admission_s, waited)
        gate_s = waited - late_admission_s
        self._log("stall", t_gate, iteration=n, duration_s=gate_s, reason="gate")
        if late_admission_s > 0:
            self._log("stall", t_gate + gate_s, iteration=n, duration_s=late_admission_s, reason="admission")
        return start, t_pull, gate_s, late_admission_s

    def flush(self) -> None:
        """Push everything left (no deadline), wait until every worker flushed, pull everything (no deadline)."""
        if self._state != "training":
            raise RuntimeFailure(f"flush() needs a joined engine that has not flushed (state {self._state!r})")
        self._state = "flushing"
        self._sync_clock("end")
        while True:
            try:
                self._flush_once()
                break
            except (TransportError, OSError) as e:
                self._recover(e)
        self._state = "flushed"

    def _sync_clock(self, phase: str) -> None:
        if self.clock_sync:
            from .clock_sync import sync_worker_clock

            sync_worker_clock(self, phase)

    def _flush_once(self) -> None:
        part, conn = self.partition, self.conn
        m = self.iteration + 1
        conn.send(Flush(m))
        plan = all_rows_plan(part)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self._row_wire_bytes, self.chunk_bytes)
        encoded, frames = self._encode_all(cp.chunks, m)
        t0 = time.monotonic()
        res, rows = self._send_push(frames, encoded, m, len(frames), None)
        if res.delivered != len(frames):
            raise RuntimeFailure(f"worker {self.worker}: flush push delivered {res.delivered} of {len(frames)} chunks ({res.status.name})")
        self._log("flush", t0, direction="push", rows_delivered=int(rows.size), bytes=res.bytes_delivered,
                  duration_s=res.duration_s)
        begin = self._expect(Begin, "the flush pull's Begin")
        t1 = time.monotonic()
        got, pull_rows = self._apply_pull(begin)
        if got.delivered != begin.planned:
            raise RuntimeFailure(f"worker {self.worker}: flush pull delivered {got.delivered} of {begin.planned} chunks ({got.reason})")
        self._log("flush", t1, direction="pull", rows_delivered=pull_rows, bytes=got.bytes_delivered,
                  duration_s=time.monotonic() - t1)

    def close(self, reason: str = "done") -> None:
        """Leave: say bye and close the connection (idempotent)."""
        if self._state != "closed":
            self._log("run_end", status="ok" if self._state in ("flushed", "new") else "error",
                      iterations=self.iteration, reason=reason)
        self._state = "closed"
        self.conn.close(reason)
