"""The parameter server's exchange with one worker: receive a push, hold the staleness gate, send the pull;
and the flush at the end of a run.

A push's delivered chunks are added to every worker's pending buffer (and the running total) with
weight ``1/W``; a pull subtracts exactly the chunks the worker acknowledged.  A mixin of
:class:`rog.runtime.server.ParameterServer`, which holds the state and states the guarantees.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..chunks import plan_chunks
from ..policies.base import TransferReport, all_rows_plan
from ..transport import Begin, Connection, ProtocolError, PullReply
from .messages import AdmitGrant, AdmitRequest, Flush, PolicyControl, PullStart, PushDone
from .ps_lifecycle import POLL_S
from .segmented_pull import PendingFrames as _PendingFrames
from .segmented_pull import send_segmented_pull
from .worker import RETRYABLE_STATUSES, RuntimeFailure, delivered_mandatory_s, share, subtract_sent


class PSExchange:
    """Push, staleness gate, pull and flush (mixin of ``ParameterServer``)."""

    def _admit(self, conn: Connection, r: int, msg: AdmitRequest) -> None:
        with self._cond:
            waited = self.admission.acquire(r, conn)
        conn.send(AdmitGrant(msg.iteration, waited))

    def _receive_push(self, conn: Connection, r: int, begin: Begin, flush: bool) -> tuple:
        t0 = time.monotonic()
        res = conn.receive_transmission(begin, self._validator)
        if res.status.name in ("REPLAYED", "STALE", "WRONG_DIRECTION"):  # nothing of it counts, not even as a push
            raise ProtocolError(f"worker {r}: push transmission {begin.tid} (iteration {begin.iteration}) refused: "
                                f"{res.status.name}: {res.reason}")
        chunks = [c for _, c in res.frames]
        rows = np.concatenate([c.rows() for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
        with self._cond:
            self._check_current(conn)  # a superseded connection's push is never applied
            for c in chunks:
                self.codec.decode_into(self.partition, c, self._push_targets(), weight=self._weight)
            self.push_seq[r] += 1
            self.last_push_delivered[r] = len(chunks)
            if not flush:
                n = begin.iteration
                if not begin.more:  # a segmented push counts once its last segment is in
                    self.push_iter[r] = n
                self.versions[r, rows] = n
                self.updates_since_pull[:, rows] += 1
                self.requested[r, rows] = False  # delivered: the request is satisfied
                self.admission.try_admit()
            out = (begin, res, int(rows.size), t0)
            prev = self._last_push.get(r)  # under the lock: a rejoin's pop never lands between read and write
            if prev is not None and prev[0].iteration == begin.iteration:  # a retransmission (mandatory frames were rejected)
                merged = replace(prev[1], delivered=prev[1].delivered + res.delivered,
                                 bytes_delivered=prev[1].bytes_delivered + res.bytes_delivered, cut=res.cut,
                                 status=res.status, reason=res.reason)
                out = (prev[0], merged, prev[2] + int(rows.size), prev[3])
            self._last_push[r] = out
            self._cond.notify_all()  # gates re-check
        return out

    def _gate_and_pull(self, conn: Connection, r: int, done: PushDone) -> None:
        n = done.iteration
        with self._cond:
            self._check_current(conn)  # a superseded link's report belongs to nobody
            last = self._last_push.pop(r, None)
        if last is None or last[0].iteration != n:
            raise ProtocolError(f"worker {r}: PushDone({n}) without a push of iteration {n}")
        begin, res, rows_delivered, t_push = last
        push_report = TransferReport(r, "push", n, done.rows_planned, rows_delivered, res.bytes_delivered,
                                     done.duration_s, done.mandatory_s, begin.deadline_s)
        self._log("push", t_push, worker=r, iteration=n, rows_planned=done.rows_planned, rows_delivered=rows_delivered,
                  bytes=res.bytes_delivered, deadline_s=begin.deadline_s,
                  delivered_share=share(rows_delivered, done.rows_planned), duration_s=done.duration_s,
                  mandatory_s=done.mandatory_s, cut=res.cut, frames_planned=begin.planned)
        part = self.partition
        with self._cond:
            self.reports.append(push_report)
            self.policy.observe(push_report)
            # the staleness gate: a stalled worker gives its transfer slot back and asks for lagging rows
            t_gate = time.monotonic()
            released = False
            # no time limit here: a worker that holds the gate is either connected (a slow or cut link: the
            # gate waits, as it should) or lost, and then evicted after evict_after_s
            while True:
                view = self.server_view()
                if self.policy.pull_ready(view, r):
                    break
                if not released:
                    self.admission.release(r)
                    released = True
                for o in np.flatnonzero(self.active).tolist():
                    lag = np.asarray(self.policy.lagging_rows(view, o), dtype=np.int64)
                    if lag.size:
                        self.requested[o, lag] = True
                self._check_current(conn)
                self._cond.wait(POLL_S)
            gate_s = time.monotonic() - t_gate
            admission_s = self.admission.acquire(r, conn) if released else 0.0
            view = self.server_view()
            plan = self.policy.pull_plan(view, r, part.tensor_mean_abs(self.pending[r]).astype(np.float32))
            budget_s = self.policy.push_budget_s(view, r)
            basis = self.policy.budget_basis  # what decided the budget (ROG: rule, reason, lead)
            scales = self.codec.tensor_scales(part, self.pending[r])
            covered = self._covered(r)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self._row_wire_bytes, self.chunk_bytes)
        rows_planned = int(len(plan.order))
        conn.send(PullStart(n, gate_s, admission_s, rows_planned, int(covered[0]), int(covered[1])))
        t_pull = time.monotonic()
        segments = self._pull_segments.pop(r, None)  # named for this pull only
        if segments is not None:  # one transmission per layer segment
            res, delivered, n_chunks = send_segmented_pull(
                conn, part, plan, segments, lambda c: _PendingFrames(self, r, c, scales, n),
                self._row_wire_bytes, self.chunk_bytes, n)
        else:
            frames, n_chunks = _PendingFrames(self, r, cp.chunks, scales, n), cp.n_chunks
            res = conn.send_transmission(frames, n_frames=cp.n_chunks, iteration=n, mandatory=cp.mandatory_chunks,
                                         deadline_s=plan.deadline_s)
            delivered = frames.encoded[: res.delivered]
        rows = np.concatenate([c.rows() for c in delivered]) if delivered else np.zeros(0, dtype=np.int64)
        mandatory_s = delivered_mandatory_s(res)
        report = TransferReport(r, "pull", n, rows_planned, int(rows.size), res.bytes_delivered, res.duration_s,
                                mandatory_s, plan.deadline_s)
        with self._cond:
            for c in delivered:
                subtract_sent(self.codec, part, self.pending[r], c)
            self.pull_seq[r] += 1
            self.updates_since_pull[r, rows] = 0
            self.reports.append(report)
            self.policy.observe(report)
            required = np.flatnonzero(self.requested[r]).astype(np.int64)
            control = self.policy.commit_control(r)
            self.admission.release(r)
        if control is not None:  # the policy's scheduler has a number for this worker (ADSP: its commit rate)
            conn.send(PolicyControl(n, control))
        conn.send(PullReply(n, budget_s, 0.0, required))
        self._log("pull", t_pull, worker=r, iteration=n, rows_planned=rows_planned, rows_delivered=int(rows.size),
                  bytes=res.bytes_delivered, deadline_s=plan.deadline_s,
                  delivered_share=share(rows.size, rows_planned), duration_s=res.duration_s,
                  mandatory_s=mandatory_s, cut=res.cut, frames_planned=n_chunks, budget_s=budget_s,
                  **{f"budget_{k}": v for k, v in basis.items()})

    def _flush(self, conn: Connection, r: int, msg: Flush) -> None:
        with self._cond:
            self.active[r] = False  # done training: it no longer counts in anyone's staleness gate
            self.admission.in_flight.discard(r)
            self.admission.try_admit()
            self._cond.notify_all()
        begin = conn.recv(self.wait_timeout_s)
        if not isinstance(begin, Begin) or begin.iteration != msg.iteration:
            raise ProtocolError(f"worker {r}: Flush({msg.iteration}) must be followed by its push")
        _, res, rows_in, t0 = self._receive_push(conn, r, begin, flush=True)
        while res.delivered < begin.planned and res.status in RETRYABLE_STATUSES:  # damaged: the worker retransmits
            retry = conn.recv(self.wait_timeout_s)
            if not isinstance(retry, Begin) or retry.iteration != msg.iteration:
                raise ProtocolError(f"worker {r}: a flush push that lost frames must be followed by its retransmission")
            _, res, rows_in, _ = self._receive_push(conn, r, retry, flush=True)
        self._last_push.pop(r, None)
        if res.delivered != begin.planned:
            raise RuntimeFailure(f"worker {r}: flush push delivered {res.delivered} of {begin.planned} chunks ({res.reason})")
        self._log("flush", t0, worker=r, direction="push", rows_delivered=rows_in, bytes=res.bytes_delivered,
                  duration_s=time.monotonic() - t0)
        with self._cond:
            self._flushed.add(r)
            self._cond.notify_all()
            # no time limit: every worker still counted is connected or lost (evicted after evict_after_s)
            self._wait(lambda: set(range(self.n_workers)) - self._failed <= self._flushed | self._finished, None,
                       f"worker {r} waited for every worker to flush", conn)
            self._barrier_passed = True
        t1 = time.monotonic()
        res, rows = self._send_all(conn, r, msg.iteration)
        self._log("flush", t1, worker=r, direction="pull", rows_delivered=rows, bytes=res.bytes_delivered,
                  duration_s=res.duration_s)

    def _push_targets(self) -> list[np.ndarray]:
        """Buffers a committed push is added to: every worker's pending buffer and the running total."""
        return [*self.pending, self.total]

    def _send_all(self, conn: Connection, r: int, iteration: int) -> tuple:
        """A no-deadline pull of all of ``pending[r]``; subtracts exactly what was delivered."""
        part = self.partition
        with self._cond:
            scales = self.codec.tensor_scales(part, self.pending[r])
        plan = all_rows_plan(part)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self._row_wire_bytes, self.chunk_bytes)
        frames = _PendingFrames(self, r, cp.chunks, scales, iteration)
        res = conn.send_transmission(frames, n_frames=cp.n_chunks, iteration=iteration, mandatory=cp.n_chunks,
                                     deadline_s=None)
        delivered = frames.encoded[: res.delivered]
        with self._cond:
            for c in delivered:
                subtract_sent(self.codec, part, self.pending[r], c)
            rows = np.concatenate([c.rows() for c in delivered]) if delivered else np.zeros(0, dtype=np.int64)
            self.updates_since_pull[r, rows] = 0
            self.pull_seq[r] += 1
        if res.delivered != cp.n_chunks:
            raise RuntimeFailure(f"worker {r}: full pull delivered {res.delivered} of {cp.n_chunks} chunks")
        return res, int(rows.size)
