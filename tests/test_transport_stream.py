"""Speculative transmissions over the in-process transport.

The bulk check runs over 1,000 random deadlines on a virtual clock, where the delivered count is
predicted independently from the token-bucket model (bytes through piece p become available at
``(B_p - burst) / rate``), and sender and receiver must agree on it frame by frame.
"""

from __future__ import annotations

import queue
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_budget import examples

from rog.chunks import plan_chunks
from rog.codecs.compression import RawCodec, SignCodec
from rog.rows import RowPartition
from rog.transport import (
    AckStatus,
    Begin,
    End,
    LazyFrames,
    ProtocolError,
    TransportConfig,
    VirtualClock,
    WireFrames,
    inproc_pair,
)
from rog.transport import messages as m
from rog.wire import encode_frame

PART = RowPartition.from_shapes([("w1", (24, 40)), ("b1", (24,)), ("w2", (30, 36)), ("b2", (30,))])
RAW = RawCodec()


def make_frames(iteration: int, chunk_bytes: int = 600, seed: int = 0, codec=RAW):
    """Real wire frames of the tiny model: (LazyFrames producer, plan)."""
    acc = np.random.default_rng(seed).standard_normal(PART.n_elements).astype(np.float32)
    plan = plan_chunks(PART, np.arange(PART.n_rows), 20, codec.row_wire_bytes(PART), chunk_bytes=chunk_bytes)
    return LazyFrames(PART, codec, acc, codec.tensor_scales(PART, acc), plan.chunks, iteration), plan


def all_frames(iteration: int, **kw) -> list[bytes]:
    lazy, plan = make_frames(iteration, **kw)
    return [lazy(i) for i in range(len(lazy))]


class Receiver:
    """A PS end receiving transmissions in a background thread; results in a queue."""

    def __init__(self, ps, validator):
        self.ps, self.validator, self.results = ps, validator, queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            msg = self.ps.recv(30)
            if isinstance(msg, m.Bye):
                return
            self.results.put(self.ps.receive_transmission(msg, self.validator))

    def stop(self, worker):
        worker.close("test over")
        self.thread.join(5)


def keep_bytes(f: bytes, iteration: int, seq: int):
    """Validator for agreement checks: the wire checks, then the frame's bytes."""
    WireFrames(PART, RAW)(f, iteration, seq)
    return f


keep_bytes.max_frame_bytes = WireFrames(PART, RAW).max_frame_bytes


def model_delivered(frames, mandatory, deadline_s, rate_bps, burst, piece):
    """Independent prediction of the delivered count, or None if the deadline is within 1 us of a piece time."""
    begin = len(m.encode_message(Begin(1, 1, 1, len(frames), mandatory, deadline_s)))
    b = begin
    delivered = 0
    for i, f in enumerate(frames):
        for off in range(0, len(f), piece):
            b += m.PIECE_OVERHEAD + min(piece, len(f) - off)
            s = max(0.0, (b - burst) / rate_bps)
            if deadline_s is not None and i >= mandatory:
                if abs(s - deadline_s) < 1e-6:
                    return None
                if s > deadline_s:
                    return delivered
        delivered += 1
    return delivered


class CountingFrames:
    """A lazy producer over pre-encoded chunks: counts how many frames were asked for."""

    def __init__(self, chunks, iteration):
        self.chunks, self.iteration, self.calls = chunks, iteration, 0

    def __call__(self, i):
        self.calls += 1
        return encode_frame(self.chunks[i], RAW, self.iteration, i)


def test_delivered_sets_agree_over_1000_random_deadlines_on_a_virtual_clock():
    rate_mbit, burst, piece = 2.0, 512, 512
    rate_bps = rate_mbit * 1e6 / 8
    clock = VirtualClock()
    cfg = TransportConfig(rate_mbit_at=rate_mbit, burst_bytes=burst, piece_bytes=piece)
    worker, ps = inproc_pair(4, worker_config=cfg, clock=clock)
    rx = Receiver(ps, keep_bytes)
    rng = np.random.default_rng(1)
    encoded = {}  # chunk size -> (encoded chunks, plan), encoded once
    for cb in (700, 1500, 3000):
        lazy, plan = make_frames(1, chunk_bytes=cb, seed=cb)
        encoded[cb] = ([RAW.encode(PART, lazy.acc, lazy.scales, c) for c in plan.chunks], plan)
    checked = cut = full = 0
    iteration = 0
    while checked < 1000:
        iteration += 1
        chunks, plan = encoded[(700, 1500, 3000)[iteration % 3]]
        n = len(chunks)
        mandatory = int(rng.integers(0, n + 1)) if rng.random() < 0.3 else plan.mandatory_chunks
        expected = [encode_frame(c, RAW, iteration, i) for i, c in enumerate(chunks)]
        sizes = [len(f) for f in expected]
        total_s = (sum(sizes) + n * 4 * m.PIECE_OVERHEAD) / rate_bps
        deadline = None if rng.random() < 0.03 else float(rng.uniform(0, 1.2 * total_s))
        want = model_delivered(expected, mandatory, deadline, rate_bps, burst, piece)
        clock.sleep(10.0)  # idle: the bucket refills to its burst size
        producer = CountingFrames(chunks, iteration)
        res = worker.send_transmission(producer, n_frames=n, iteration=iteration, mandatory=mandatory, deadline_s=deadline)
        got = rx.results.get(timeout=10)
        assert res.delivered == got.delivered and res.status == got.status == AckStatus.OK
        assert got.frames == expected[: got.delivered]  # the same frames, byte for byte
        assert res.bytes_delivered == sum(sizes[: res.delivered])
        assert res.delivered >= mandatory
        assert producer.calls == res.encoded <= res.sent + 1  # a frame is encoded only when it is about to go
        assert res.cut == (res.sent < n)
        if want is None:
            continue
        assert res.delivered == want, (iteration, deadline, mandatory)
        checked += 1
        cut += res.cut
        full += not res.cut
    rx.stop(worker)
    assert cut > 100 and full > 100  # both outcomes exercised


def test_mandatory_frames_go_even_with_a_zero_deadline():
    worker, ps = inproc_pair(0, worker_config=TransportConfig(rate_mbit_at=1.0, burst_bytes=300), clock=VirtualClock())
    rx = Receiver(ps, WireFrames(PART, RAW))
    lazy, plan = make_frames(1)
    res = worker.send_transmission(lazy, n_frames=len(lazy), iteration=1, mandatory=3, deadline_s=0.0)
    got = rx.results.get(timeout=10)
    assert res.delivered == got.delivered == 3 and res.cut and res.encoded == 3
    rx.stop(worker)


def test_commit_removes_exactly_what_the_receiver_reconstructs():
    """Sign codec, partial delivery: receiver's sum + sender's remaining accumulator == the original."""
    codec = SignCodec()
    worker, ps = inproc_pair(0, worker_config=TransportConfig(rate_mbit_at=0.5, burst_bytes=256, piece_bytes=64),
                             clock=VirtualClock())
    rx = Receiver(ps, WireFrames(PART, codec))
    acc = np.random.default_rng(5).standard_normal(PART.n_elements).astype(np.float32)
    original = acc.copy()
    plan = plan_chunks(PART, np.arange(PART.n_rows)[::-1], 10, codec.row_wire_bytes(PART), chunk_bytes=40)
    lazy = LazyFrames(PART, codec, acc, codec.tensor_scales(PART, acc), plan.chunks, 1)
    res = worker.send_transmission(lazy, n_frames=len(lazy), iteration=1, mandatory=plan.mandatory_chunks, deadline_s=0.004)
    got = rx.results.get(timeout=10)
    assert 0 < res.delivered < len(plan.chunks)
    lazy.commit(res.delivered)
    applied = PART.new_flat()
    for _, chunk in got.frames:
        codec.decode_into(PART, chunk, (applied,))
    np.testing.assert_allclose(applied + acc, original, rtol=0, atol=1e-5)
    untouched = ~PART.rows_mask(plan.rows(res.delivered))
    idx = PART.element_index(np.flatnonzero(untouched))
    assert np.array_equal(acc[idx], original[idx])  # undelivered rows keep accumulating, unchanged
    rx.stop(worker)


# ---------------------------------------------------------------------------- crafted streams
def craft(worker, tid, iteration, frames, *, planned=None, mandatory=0, piece=100, lens=None, cut=False):
    """Write Begin, the frames as pieces (optionally announcing other lengths), End; no ack awaited."""
    worker.send(Begin(tid, 1, iteration, len(frames) if planned is None else planned, mandatory, None))
    for seq, f in frames:
        n = len(f) if lens is None else lens.get(seq, len(f))
        for off in range(0, len(f), piece):
            worker.write_raw(m.encode_piece(tid, seq, off, max(n, off + len(f[off : off + piece])), f[off : off + piece]))
    worker.send(End(tid, len(frames), 0, cut))


def receive(ps, validator=None):
    msg = ps.recv(5)
    return ps.receive_transmission(msg, validator or WireFrames(PART, RAW))


N = len(all_frames(1))


@pytest.mark.property
@settings(max_examples=examples(40), deadline=None)
@given(k=st.integers(0, N - 2), kind=st.sampled_from(["truncated", "reordered", "duplicate", "oversized"]))
def test_damaged_sequences_apply_only_the_intact_prefix(k, kind):
    frames = list(enumerate(all_frames(1)))
    lens = None
    if kind == "truncated":  # frame k loses its last byte; End arrives; the rest follow
        frames[k] = (k, frames[k][1][:-1])
        lens = {k: len(all_frames(1)[k])}
    elif kind == "reordered":
        frames[k], frames[k + 1] = frames[k + 1], frames[k]
    elif kind == "duplicate":
        frames.insert(k + 1, frames[k])
    elif kind == "oversized":
        lens = {k: (1 << 32) - 1}  # announced length far above the bound: refused before allocation
    worker, ps = inproc_pair(0)
    craft(worker, 1, 1, frames, planned=len(frames), lens=lens)
    got = receive(ps)
    want = k + 1 if kind == "duplicate" else k
    assert got.delivered == want and got.status != AckStatus.OK
    assert [h.seq for h, _ in got.frames] == list(range(want))
    ack = worker.recv(5)
    assert isinstance(ack, m.Ack) and ack.delivered == want


@pytest.mark.property
@settings(max_examples=examples(60), deadline=None)
@given(k=st.integers(0, N - 1), pos=st.integers(0, 10_000), xor=st.integers(1, 255))
def test_a_garbled_frame_is_not_applied_nor_anything_after_it(k, pos, xor):
    frames = list(enumerate(all_frames(1)))
    f = bytearray(frames[k][1])
    f[pos % len(f)] ^= xor
    frames[k] = (k, bytes(f))
    worker, ps = inproc_pair(0)
    craft(worker, 1, 1, frames)
    got = receive(ps)
    assert got.delivered == k and got.status == AckStatus.BAD_FRAME


def test_frames_of_another_iteration_are_not_applied():
    worker, ps = inproc_pair(0)
    craft(worker, 1, 2, list(enumerate(all_frames(1))))  # transmission says iteration 2, frames say 1
    got = receive(ps)
    assert got.delivered == 0 and got.status == AckStatus.BAD_FRAME and "iteration" in got.reason


def test_a_replayed_transmission_is_not_applied_twice():
    frames = list(enumerate(all_frames(1)))
    worker, ps = inproc_pair(0)
    craft(worker, 1, 1, frames)
    assert receive(ps).delivered == len(frames)
    craft(worker, 1, 1, frames)  # the same transmission id again
    again = receive(ps)
    assert again.delivered == 0 and again.status == AckStatus.REPLAYED
    craft(worker, 2, 1, frames)  # a fresh id but an iteration already delivered
    stale = receive(ps)
    assert stale.delivered == 0 and stale.status == AckStatus.STALE
    craft(worker, 3, 2, list(enumerate(all_frames(2))))  # the next iteration goes through
    assert receive(ps).delivered == len(frames)


def test_a_pull_sent_to_the_ps_is_refused():
    worker, ps = inproc_pair(0)
    ps_frames = list(enumerate(all_frames(1)))
    worker.send(Begin(1, 2, 1, len(ps_frames), 0, None))  # direction PULL from a worker
    worker.send(End(1, 0, 0, False))
    got = receive(ps)
    assert got.delivered == 0 and got.status == AckStatus.WRONG_DIRECTION


def test_garbage_mid_transmission_breaks_the_connection_and_delivers_nothing():
    worker, ps = inproc_pair(0)
    frames = all_frames(1)
    worker.send(Begin(1, 1, 1, len(frames), 0, None))
    worker.write_raw(m.encode_piece(1, 0, 0, len(frames[0]), frames[0]))
    worker.pipe.write(b"\x00" * 40)
    with pytest.raises(ProtocolError, match="bad magic"):
        receive(ps)
    assert ps.closed
    reply = worker.recv(5)
    assert isinstance(reply, m.Error)  # the sender learns it, commits nothing


def test_sender_rejects_an_ack_that_disagrees():
    worker, ps = inproc_pair(0)
    done = {}

    def fake_ps():
        begin = ps.recv(5)
        while not isinstance(ps.recv(5), End):
            pass
        ps.send(m.Ack(begin.tid, 1, 12345, 0, None, None))  # wrong digest for frame 0
        done["ok"] = True

    t = threading.Thread(target=fake_ps)
    t.start()
    lazy, _ = make_frames(1)
    with pytest.raises(ProtocolError, match="digest"):
        worker.send_transmission(lazy, n_frames=len(lazy), iteration=1, mandatory=0, deadline_s=None)
    t.join(5)


def test_bad_arguments_are_named():
    worker, _ = inproc_pair(0)
    with pytest.raises(ValueError, match="mandatory"):
        worker.send_transmission([], n_frames=2, iteration=1, mandatory=3, deadline_s=None)
    with pytest.raises(ValueError, match="deadline_s"):
        worker.send_transmission([], n_frames=2, iteration=1, mandatory=0, deadline_s=-1.0)


def test_a_failing_producer_aborts_and_the_receiver_delivers_nothing():
    worker, ps = inproc_pair(0)
    frames = all_frames(1)

    def producer(i):
        if i == 3:
            raise RuntimeError("encoder failed")
        return frames[i]

    applied = []
    with pytest.raises(RuntimeError, match="encoder failed"):
        worker.send_transmission(producer, n_frames=len(frames), iteration=1, mandatory=0, deadline_s=None)
    assert worker.closed
    begin = ps.recv(5)
    with pytest.raises(m.LinkClosed):
        ps.receive_transmission(begin, WireFrames(PART, RAW), on_frame=applied.append)
    assert len(applied) == 3  # provisional only: receive_transmission raised, so none count as delivered


def _flipped(frames, k):
    f = bytearray(frames[k][1])
    f[len(f) // 2] ^= 0x10
    return frames[:k] + [(k, bytes(f))] + frames[k + 1 :]


def test_a_rejected_mandatory_frame_leaves_the_iteration_open_for_one_retransmission():
    lazy, plan = make_frames(1)
    frames = list(enumerate(lazy(i) for i in range(len(lazy))))
    k, mandatory = 2, 5
    worker, ps = inproc_pair(0)
    craft(worker, 1, 1, _flipped(frames, k), mandatory=mandatory)
    first = receive(ps)
    assert first.delivered == k and first.status == AckStatus.BAD_FRAME
    rest = [(j, encode_frame(c, RAW, 1, j)) for j, c in enumerate(lazy.encoded[k:])]  # renumbered from 0
    craft(worker, 2, 1, rest, mandatory=mandatory - k)  # new id, same iteration
    retry = receive(ps)
    assert retry.status == AckStatus.OK and retry.delivered == len(frames) - k
    assert [c.rows().tolist() for _, c in first.frames + retry.frames] == [c.rows().tolist() for c in lazy.encoded]
    craft(worker, 3, 1, rest, mandatory=mandatory - k)  # the iteration is now closed: a third one is stale
    again = receive(ps)
    assert again.delivered == 0 and again.status == AckStatus.STALE


def test_damage_in_the_optional_part_closes_the_iteration():
    frames = list(enumerate(all_frames(1)))
    k, mandatory = 4, 3  # frame 4 is optional: a cut, not a reason to retransmit
    worker, ps = inproc_pair(0)
    craft(worker, 1, 1, _flipped(frames, k), mandatory=mandatory)
    got = receive(ps)
    assert got.delivered == k and got.status == AckStatus.BAD_FRAME
    craft(worker, 2, 1, frames[k:], mandatory=0)
    assert receive(ps).status == AckStatus.STALE
