"""The parameter server's exchange with one worker: receive a push, hold the staleness gate, send the pull;
and the flush at the end of a run.

A push's delivered chunks are added to every worker's pending buffer (and the running total) with
weight ``1/W``; a pull subtracts exactly the chunks the worker acknowledged (:class:`~rog.runtime.ps_state.RowState`).
:class:`Exchange` owns what is in flight between a push and its pull; the server holds one (``ps.exchange``).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..chunks import plan_chunks
from ..policies.base import TransferReport, all_rows_plan
from ..transport import Begin, Connection, ProtocolError, PullReply, WireFrames
from .messages import AdmitGrant, AdmitRequest, Flush, PolicyControl, PullStart, PushDone
from .segmented_pull import PendingFrames as _PendingFrames
from .segmented_pull import send_segmented_pull
from .errors import POLL_S, RuntimeFailure
from .worker import RETRYABLE_STATUSES, delivered_mandatory_s, share

__all__ = ["Exchange"]


class Exchange:
    """Push, staleness gate, pull and flush for every worker.  Owns ``last_push`` (worker -> its newest push not yet
    reported: ``(Begin, result, rows delivered, start)``), ``pull_segments`` (worker -> segment per tensor, for its
    next pull only), the frame ``validator`` and the push ``weight`` (``1/W``)."""

    def __init__(self, ps) -> None:
        self.ps = ps
        self.weight = 1.0 / ps.n_workers
        self.validator = WireFrames(ps.partition, ps.codec)
        self.row_wire_bytes = ps.codec.row_wire_bytes(ps.partition)
        self.last_push: dict[int, tuple] = {}
        self.pull_segments: dict[int, tuple] = {}

    def admit(self, conn: Connection, r: int, msg: AdmitRequest) -> None:
        """Worker ``r`` asks for a transfer slot before its push."""
        with self.ps.cond:
            waited = self.ps.admission.acquire(r, conn)
        conn.send(AdmitGrant(msg.iteration, waited))

    def receive_push(self, conn: Connection, r: int, begin: Begin, flush: bool) -> tuple:
        """Receive one push transmission and apply what it delivered; returns ``last_push[r]``."""
        ps, state = self.ps, self.ps.state
        t0 = time.monotonic()
        res = conn.receive_transmission(begin, self.validator)
        if res.status.name in ("REPLAYED", "STALE", "WRONG_DIRECTION"):  # nothing of it counts, not even as a push
            raise ProtocolError(f"worker {r}: push transmission {begin.tid} (iteration {begin.iteration}) refused: "
                                f"{res.status.name}: {res.reason}")
        chunks = [c for _, c in res.frames]
        with ps.cond:
            ps.check_current(conn)  # a superseded connection's push is never applied
            rows = state.add_push(ps.codec, chunks, self.weight)
            state.push_seq[r] += 1
            state.last_push_delivered[r] = len(chunks)
            if not flush:
                n = begin.iteration
                if not begin.more:  # a segmented push counts once its last segment is in
                    state.push_iter[r] = n
                state.versions[r, rows] = n
                state.updates_since_pull[:, rows] += 1
                state.requested[r, rows] = False  # delivered: the request is satisfied
                ps.admission.try_admit()
            out = (begin, res, int(rows.size), t0)
            prev = self.last_push.get(r)  # under the lock: a rejoin's pop never lands between read and write
            if prev is not None and prev[0].iteration == begin.iteration:  # a retransmission (mandatory frames were rejected)
                merged = replace(prev[1], delivered=prev[1].delivered + res.delivered,
                                 bytes_delivered=prev[1].bytes_delivered + res.bytes_delivered, cut=res.cut,
                                 status=res.status, reason=res.reason)
                out = (prev[0], merged, prev[2] + int(rows.size), prev[3])
            self.last_push[r] = out
            ps.cond.notify_all()  # gates re-check
        return out

    def gate_and_pull(self, conn: Connection, r: int, done: PushDone) -> None:
        """Report worker ``r``'s push to the policy, hold its staleness gate, then send its pull."""
        ps, state, policy = self.ps, self.ps.state, self.ps.policy
        n = done.iteration
        with ps.cond:
            ps.check_current(conn)  # a superseded link's report belongs to nobody
            last = self.last_push.pop(r, None)
        if last is None or last[0].iteration != n:
            raise ProtocolError(f"worker {r}: PushDone({n}) without a push of iteration {n}")
        begin, res, rows_delivered, t_push = last
        push_report = TransferReport(r, "push", n, done.rows_planned, rows_delivered, res.bytes_delivered,
                                     done.duration_s, done.mandatory_s, begin.deadline_s)
        ps.log("push", t_push, worker=r, iteration=n, rows_planned=done.rows_planned, rows_delivered=rows_delivered,
               bytes=res.bytes_delivered, deadline_s=begin.deadline_s,
               delivered_share=share(rows_delivered, done.rows_planned), duration_s=done.duration_s,
               mandatory_s=done.mandatory_s, cut=res.cut, frames_planned=begin.planned)
        part = ps.partition
        with ps.cond:
            ps.reports.append(push_report)
            policy.observe(push_report)
            # the staleness gate: a stalled worker gives its transfer slot back and asks for lagging rows
            t_gate = time.monotonic()
            released = False
            # no time limit here: a worker that holds the gate is either connected (a slow or cut link: the
            # gate waits, as it should) or lost, and then evicted after evict_after_s
            while True:
                view = state.view()
                if policy.pull_ready(view, r):
                    break
                if not released:
                    ps.admission.release(r)
                    released = True
                for o in np.flatnonzero(state.active).tolist():
                    lag = np.asarray(policy.lagging_rows(view, o), dtype=np.int64)
                    if lag.size:
                        state.requested[o, lag] = True
                ps.check_current(conn)
                ps.cond.wait(POLL_S)
            gate_s = time.monotonic() - t_gate
            admission_s = ps.admission.acquire(r, conn) if released else 0.0
            view = state.view()
            plan = policy.pull_plan(view, r, part.tensor_mean_abs(state.pending[r]).astype(np.float32))
            budget_s = policy.push_budget_s(view, r)
            basis = policy.budget_basis  # what decided the budget (ROG: rule, reason, lead)
            scales = ps.codec.tensor_scales(part, state.pending[r])
            covered = ps.checkpoints.covered(r)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self.row_wire_bytes, ps.chunk_bytes)
        rows_planned = int(len(plan.order))
        conn.send(PullStart(n, gate_s, admission_s, rows_planned, int(covered[0]), int(covered[1])))
        t_pull = time.monotonic()
        segments = self.pull_segments.pop(r, None)  # named for this pull only
        if segments is not None:  # one transmission per layer segment
            res, delivered, n_chunks = send_segmented_pull(
                conn, part, plan, segments, lambda c: _PendingFrames(ps, r, c, scales, n),
                self.row_wire_bytes, ps.chunk_bytes, n)
        else:
            frames, n_chunks = _PendingFrames(ps, r, cp.chunks, scales, n), cp.n_chunks
            res = conn.send_transmission(frames, n_frames=cp.n_chunks, iteration=n, mandatory=cp.mandatory_chunks,
                                         deadline_s=plan.deadline_s)
            delivered = frames.encoded[: res.delivered]
        mandatory_s = delivered_mandatory_s(res)
        with ps.cond:
            rows = state.subtract_pull(ps.codec, r, delivered)
            state.pull_seq[r] += 1
            report = TransferReport(r, "pull", n, rows_planned, int(rows.size), res.bytes_delivered, res.duration_s,
                                    mandatory_s, plan.deadline_s)
            ps.reports.append(report)
            policy.observe(report)
            required = np.flatnonzero(state.requested[r]).astype(np.int64)
            control = policy.commit_control(r)
            ps.admission.release(r)
        if control is not None:  # the policy's scheduler has a number for this worker (ADSP: its commit rate)
            conn.send(PolicyControl(n, control))
        conn.send(PullReply(n, budget_s, 0.0, required))
        ps.log("pull", t_pull, worker=r, iteration=n, rows_planned=rows_planned, rows_delivered=int(rows.size),
               bytes=res.bytes_delivered, deadline_s=plan.deadline_s,
               delivered_share=share(rows.size, rows_planned), duration_s=res.duration_s,
               mandatory_s=mandatory_s, cut=res.cut, frames_planned=n_chunks, budget_s=budget_s,
               **{f"budget_{k}": v for k, v in basis.items()})

    def flush(self, conn: Connection, r: int, msg: Flush) -> None:
        """Worker ``r``'s flush: its last push (no deadline), the barrier, then a pull of everything."""
        ps, members = self.ps, self.ps.membership
        with ps.cond:
            ps.state.active[r] = False  # done training: it no longer counts in anyone's staleness gate
            ps.admission.in_flight.discard(r)
            ps.admission.try_admit()
            ps.cond.notify_all()
        begin = conn.recv(ps.wait_timeout_s)
        if not isinstance(begin, Begin) or begin.iteration != msg.iteration:
            raise ProtocolError(f"worker {r}: Flush({msg.iteration}) must be followed by its push")
        _, res, rows_in, t0 = self.receive_push(conn, r, begin, flush=True)
        while res.delivered < begin.planned and res.status in RETRYABLE_STATUSES:  # damaged: the worker retransmits
            retry = conn.recv(ps.wait_timeout_s)
            if not isinstance(retry, Begin) or retry.iteration != msg.iteration:
                raise ProtocolError(f"worker {r}: a flush push that lost frames must be followed by its retransmission")
            _, res, rows_in, _ = self.receive_push(conn, r, retry, flush=True)
        self.last_push.pop(r, None)
        if res.delivered != begin.planned:
            raise RuntimeFailure(f"worker {r}: flush push delivered {res.delivered} of {begin.planned} chunks ({res.reason})")
        ps.log("flush", t0, worker=r, direction="push", rows_delivered=rows_in, bytes=res.bytes_delivered,
               duration_s=time.monotonic() - t0)
        with ps.cond:
            members.flushed.add(r)
            ps.cond.notify_all()
            # no time limit: every worker still counted is connected or lost (evicted after evict_after_s)
            ps.wait(members.all_flushed, None, f"worker {r} waited for every worker to flush", conn)
            members.barrier_passed = True
        t1 = time.monotonic()
        res, rows = self.send_all(conn, r, msg.iteration)
        ps.log("flush", t1, worker=r, direction="pull", rows_delivered=rows, bytes=res.bytes_delivered,
               duration_s=res.duration_s)

    def send_all(self, conn: Connection, r: int, iteration: int) -> tuple:
        """A no-deadline pull of all of ``pending[r]``; subtracts exactly what was delivered."""
        ps, part = self.ps, self.ps.partition
        with ps.cond:
            scales = ps.codec.tensor_scales(part, ps.state.pending[r])
        plan = all_rows_plan(part)
        cp = plan_chunks(part, plan.order, plan.mandatory_rows, self.row_wire_bytes, ps.chunk_bytes)
        frames = _PendingFrames(ps, r, cp.chunks, scales, iteration)
        res = conn.send_transmission(frames, n_frames=cp.n_chunks, iteration=iteration, mandatory=cp.n_chunks,
                                     deadline_s=None)
        delivered = frames.encoded[: res.delivered]
        with ps.cond:
            rows = ps.state.subtract_pull(ps.codec, r, delivered)
            ps.state.pull_seq[r] += 1
        if res.delivered != cp.n_chunks:
            raise RuntimeFailure(f"worker {r}: full pull delivered {res.delivered} of {cp.n_chunks} chunks")
        return res, int(rows.size)
