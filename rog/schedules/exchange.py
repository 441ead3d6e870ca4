"""One worker's push and pull in layer segments, overlapped with its backward and forward passes.

Each segment is its own transfer: a push is one transmission (Begin, frames, End, Ack) per push
segment, a pull one per pull segment (the worker names its segments to the parameter server with
``PullSegments`` before each pull); every transmission but an iteration's last says ``more``, so
the receiver keeps the iteration open.  Each pays the per-transfer cost (the round trip of its
acknowledgement, and the emulated latency ``link_delay_s`` when set).

* push (backward streaming): a sender thread asks for admission as the backward pass starts, then,
  segment by segment (top-down, the plan's order), waits until the segment's lowest layer has its
  gradients, copies them, applies the local update to its slice of the accumulator, encodes its
  chunks and sends them as one transmission, waiting for its acknowledgement;
* pull (forward gating): after the gate, a receiver thread receives the segments' transmissions,
  applies each chunk as it arrives and opens a layer's forward gate once every row of its pull
  segment has been applied; the next forward pass runs meanwhile, each layer waiting only for its
  own segment.

Arithmetic is the sequential engine's: the same element-wise update on the same values, each row
sent and applied once; only times change.  Supports policies that push and pull the whole model
without deadlines and take no local steps (BSP, SSP), on the host (numpy) path.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..chunks import plan_chunks
from ..policies.base import TransferReport
from ..policies.registry import segmented_systems
from ..runtime.messages import AdmitGrant, AdmitRequest, PullSegments
from ..runtime.worker import RuntimeFailure, delivered_mandatory_s, merge_attempts, share
from ..transport import Begin
from ..wire import encode_frames
from .estimate import arrival_points
from .hooks import LayerHooks



class SegmentedExchange:
    """Segmented push/pull of a :class:`~rog.runtime.worker.WorkerEngine` (``opt.engine``) with ``hooks``."""

    def __init__(self, opt, hooks: LayerHooks) -> None:
        e = opt.engine
        if e.on_device:
            raise ValueError("layer-segment schedules run on the host (numpy) path; use --device cpu")
        if not e.policy.segmented_schedules or e.policy.local_steps:  # the policy says, not its name
            raise ValueError(f"layer-segment schedules need a whole-model policy ({', '.join(segmented_systems())}), "
                             f"got {e.policy.name}")
        self.opt, self.e, self.hooks = opt, e, hooks
        part = e.partition
        self.layer_rows = []
        for layer in hooks.layers:
            rows = [np.arange(part.tensor_first_row[t], part.tensor_first_row[t + 1]) for t in layer.params]
            self.layer_rows.append(np.sort(np.concatenate(rows)).astype(np.int64))
        self.row_layer = np.zeros(part.n_rows, dtype=np.int64)
        for j, rows in enumerate(self.layer_rows):
            self.row_layer[rows] = j
        self.tensor_layer = np.zeros(len(part.shapes), dtype=np.int64)
        for j, layer in enumerate(hooks.layers):
            self.tensor_layer[list(layer.params)] = j
        self.layer_bytes = np.array([float(e._row_wire_bytes[r].sum()) for r in self.layer_rows])
        self._pull: threading.Thread | None = None
        self._pull_error: BaseException | None = None
        self.pull_span: tuple[float, float] | None = None  # the last pull transmission (begin, applied)
        self.pull_points: list[tuple[float, float]] | None = None  # the last unread pull's arrival_points
        self.pull_start_s: float | None = None  # its time from the start to the first frame

    # ------------------------------------------------------------------ pull
    def wait_pull(self) -> None:
        """Block until the last pull (and its reply) is applied; re-raise its failure."""
        if self._pull is not None:
            self._pull.join()
            self._pull = None
        if self._pull_error is not None:
            err, self._pull_error = self._pull_error, None
            raise err

    def _start_pull(self, n: int, begin: Begin, rows_planned: int, fwd_segments) -> None:
        seg_of_layer = np.zeros(len(self.layer_rows), dtype=np.int64)
        for s, (a, b) in enumerate(fwd_segments):
            seg_of_layer[a : b + 1] = s
        self.hooks.close_all()
        self._pull = threading.Thread(target=self._pull_body, args=(n, begin, rows_planned, list(fwd_segments),
                                                                    seg_of_layer), daemon=True, name="rog-pull")
        self._pull.start()

    def _pull_body(self, n, begin, rows_planned, fwd_segments, seg_of_layer) -> None:
        try:
            self._receive_pull(n, begin, rows_planned, fwd_segments, seg_of_layer)
        except BaseException as err:  # noqa: BLE001 - handed to the training thread
            self._pull_error = err
        finally:
            self.hooks.open_segments(range(len(self.layer_rows)))

    def _receive_pull(self, n, begin, rows_planned, fwd_segments, seg_of_layer) -> None:
        e, part, hooks = self.e, self.e.partition, self.hooks
        seg_of_row = seg_of_layer[self.row_layer]
        need = np.bincount(seg_of_row, minlength=len(fwd_segments))
        got = np.zeros_like(need)
        arrivals = []  # (t, bytes, completes a segment) per frame
        t0 = time.monotonic()

        def on_frame(value) -> None:
            t = time.monotonic()
            _, chunk = value
            e.codec.decode_into(part, chunk, (e.params,), weight=-1.0)
            rows = chunk.rows()
            segs = seg_of_row[rows]
            np.add.at(got, segs, 1)
            done = [s for s in np.unique(segs) if got[s] == need[s]]
            for s in done:
                a, b = fwd_segments[s]
                hooks.open_segments(range(a, b + 1))
            arrivals.append((t, float(e._row_wire_bytes[rows].sum()), bool(done)))

        frames, delivered_bytes, mandatory_at = [], 0, None
        for s in range(len(fwd_segments)):  # one transmission per segment
            if s:
                begin = e._expect(Begin, f"pull segment {s}'s Begin")
            if begin.iteration != n or begin.more != (s < len(fwd_segments) - 1):
                raise RuntimeFailure(f"worker {e.worker}: pull segment {s} of {len(fwd_segments)} arrived as "
                                     f"iteration {begin.iteration} (more={begin.more})")
            res = e.conn.receive_transmission(begin, e._validator, on_frame=on_frame)
            if res.delivered != begin.planned:
                raise RuntimeFailure(f"worker {e.worker}: pull segment {s} delivered {res.delivered} of "
                                     f"{begin.planned} chunks ({res.reason})")
            frames.extend(res.frames)
            delivered_bytes += res.bytes_delivered
            mandatory_at = res.mandatory_at
        t_applied = time.monotonic()
        hooks.open_segments(range(len(self.layer_rows)))
        chunks = [chunk for _, chunk in frames]
        pull_rows = sum(c.n_rows for c in chunks)
        e.pull_seq += 1
        e._unconfirmed_pull.append((e.pull_seq, chunks))
        e.iteration = n
        e.read_pull_reply()
        t_end = time.monotonic()
        self.pull_span = (t0, t_applied)
        self.pull_points = arrival_points(arrivals)
        self.pull_start_s = arrivals[0][0] - t0 if arrivals else None
        pull_s = t_end - t0
        e.commits += 1
        pull_mandatory_s = None if mandatory_at is None else max(0.0, mandatory_at - t0)
        e.policy.observe(TransferReport(e.worker, "pull", n, rows_planned, pull_rows, delivered_bytes,
                                        pull_s, pull_mandatory_s, begin.deadline_s))
        e._log("pull", t0, iteration=n, rows_planned=rows_planned, rows_delivered=pull_rows,
               bytes=delivered_bytes, deadline_s=begin.deadline_s,
               delivered_share=share(pull_rows, rows_planned), duration_s=pull_s,
               mandatory_s=pull_mandatory_s, cut=res.cut, frames_planned=len(chunks))

    # ------------------------------------------------------------------ push
    def start_push(self, n: int, bwd_segments) -> None:
        """Before the backward pass of iteration ``n``: plan the segments' chunks and start the sender."""
        e = self.e
        if e._state != "training":
            raise RuntimeFailure(f"a segmented step needs a joined engine that has not flushed (state {e._state!r})")
        self.n = n
        self.opt.sync_groups()  # each group's lr as a scheduler left it
        self.segments = list(bwd_segments)
        self.seg_chunks = []
        total = 0
        for a, b in self.segments:
            rows = np.sort(np.concatenate(self.layer_rows[a : b + 1]))
            cp = plan_chunks(e.partition, rows, int(rows.size), e._row_wire_bytes, e.chunk_bytes)
            self.seg_chunks.append(cp.chunks)
            total += len(cp.chunks)
        self.n_frames = total
        self.encoded: list = []
        self.push_segment_times: list[tuple[float, float]] = []  # (bytes, Begin-ready to Ack) per segment
        self._push_error: BaseException | None = None
        self._push_result = None
        self.hooks.begin_backward()
        self._sender = threading.Thread(target=self._push_body, daemon=True, name="rog-push")
        self._sender.start()

    def _prepare(self, s: int) -> list[bytes]:
        """Segment ``s``'s gradients are final: update its slice of the accumulator, encode its chunks;
        returns its frames (numbered from 0: the segment is its own transmission)."""
        e, opt, part = self.e, self.opt, self.e.partition
        a, b = self.segments[s]
        params = opt.row_params
        off = part.tensor_offset
        for t in sorted(t for j in range(a, b + 1) for t in self.hooks.layers[j].params):
            sl = slice(int(off[t]), int(off[t + 1]))
            g = opt._grad[sl]
            p = params[t]
            g[:] = 0.0 if p.grad is None else p.grad.detach().reshape(-1).numpy()
            if not np.all(np.isfinite(g)):
                raise ValueError(f"the gradient of iteration {self.n} holds non-finite values (NaN/inf loss?)")
            u = e.local.span_update(g, e.params[sl], sl.start, sl.stop, self.n)  # its group's rule
            e.acc[sl] += u
        scales = e.codec.tensor_scales(part, e.acc, None)
        enc, frames = encode_frames(e.codec, part, e.acc, scales, self.seg_chunks[s], self.n)
        self.encoded.extend(enc)
        return frames

    def _push_body(self) -> None:
        e = self.e
        try:
            self.t_adm = time.monotonic()
            e.conn.send(AdmitRequest(self.n))
            e._expect(AdmitGrant, "AdmitGrant")
            self.t_push = time.monotonic()
            res = None
            for s, (a, b) in enumerate(self.segments):  # one transmission per segment, top-down
                self.hooks.wait_layers(range(a, b + 1))
                t_start = max(time.monotonic(), float(self.hooks.done_at[a]))
                frames = self._prepare(s)
                part = e.conn.send_transmission(frames, n_frames=len(frames), iteration=self.n, mandatory=len(frames),
                                                deadline_s=None, more=s < len(self.segments) - 1)
                t_ack = time.monotonic()
                self.push_segment_times.append((float(self.layer_bytes[a : b + 1].sum()), t_ack - t_start))
                res = part if res is None else merge_attempts(res, part)
                if part.delivered < len(frames):
                    break
            self.t_push_end = time.monotonic()
            self._push_result = res
        except BaseException as err:  # noqa: BLE001 - handed to the training thread
            self._push_error = err

    def wait_push(self) -> None:
        """Block until the push transmission has been acknowledged."""
        self._sender.join()

    def finish(self, n: int, t_c0: float, t_bwd_end: float, fwd_segments, slept_s: float = 0.0) -> dict:
        """After the backward pass of iteration ``n``: end the push, pass the gate, start the pull in
        ``fwd_segments``; returns the iteration's times (seconds) and intervals (``slept_s``: per-layer
        pacing's sleeps in the passes, the compute record's ``sleep_s``)."""
        e = self.e
        self.wait_push()
        if self._push_error is not None:
            raise self._push_error
        res = self._push_result
        if res.delivered != self.n_frames:
            raise RuntimeFailure(f"worker {e.worker}: segmented push of iteration {n} delivered {res.delivered} of "
                                 f"{self.n_frames} chunks ({res.status.name})")
        rows = e._settle_push(self.encoded, res.delivered, n)
        e._log("compute", t_c0, iteration=n, duration_s=t_bwd_end - t_c0, sleep_s=slept_s)
        admission_s = self.t_push - self.t_adm
        e._log("stall", self.t_adm, iteration=n, duration_s=admission_s, reason="admission")
        t_gate = time.monotonic()
        rows_planned = e.partition.n_rows
        mandatory_s = delivered_mandatory_s(res)
        e.policy.observe(TransferReport(e.worker, "push", n, rows_planned, int(rows.size), res.bytes_delivered,
                                        res.duration_s, mandatory_s, None))
        e._log("push", self.t_push, iteration=n, rows_planned=rows_planned, rows_delivered=int(rows.size),
               bytes=res.bytes_delivered, deadline_s=None, delivered_share=share(rows.size, rows_planned),
               duration_s=self.t_push_end - self.t_push, mandatory_s=mandatory_s, cut=res.cut,
               required_rows=int(e.required_rows.size), frames_planned=self.n_frames)
        stale = n - e.row_push_iter
        e._log("staleness", iteration=n, max=int(stale.max()), mean=float(stale.mean()))
        seg_of_layer = np.zeros(len(self.layer_rows), dtype=np.int64)
        for s, (a, b) in enumerate(fwd_segments):
            seg_of_layer[a : b + 1] = s
        e.conn.send(PullSegments(tuple(seg_of_layer[self.tensor_layer].tolist())))  # the next pull, one transfer a segment
        start, t_pull, gate_s, late_admission_s = e.await_gate(n, rows_planned, res.duration_s, mandatory_s, t_gate)
        begin = e._expect(Begin, "the pull's Begin")
        e.last_commit_s = time.monotonic() - self.t_adm
        e._t_last_commit = time.monotonic()
        e._steps_since_commit = 0
        self._start_pull(n, begin, start.rows_planned, fwd_segments)
        return dict(t_adm=self.t_adm, t_push=self.t_push, t_push_end=self.t_push_end, t_gate=t_gate, t_pull=t_pull,
                    gate_s=gate_s + late_admission_s)
