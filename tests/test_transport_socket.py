"""The TCP transport on loopback: handshake, refusals, silent peers, and delivered-set agreement
over a few hundred random deadlines with the transport's own rate limiter."""

from __future__ import annotations

import queue
import secrets
import socket
import threading

import numpy as np
import pytest

from rog.chunks import plan_chunks
from rog.codecs.compression import RawCodec
from rog.rows import RowPartition
from rog.transport import (
    AckStatus,
    Bye,
    HandshakeError,
    Listener,
    PullReply,
    PullRequest,
    TransportConfig,
    TransportTimeout,
    WireFrames,
    connect,
    load_secret,
)
from rog.transport import messages as m
from rog.wire import encode_frame

SECRET = secrets.token_bytes(32)  # made per run, never written down
PART = RowPartition.from_shapes([("w1", (24, 40)), ("b1", (24,)), ("w2", (30, 36)), ("b2", (30,))])
RAW = RawCodec()


def cfg(secret=SECRET, **kw):
    return TransportConfig(secret=secret, **kw)


@pytest.fixture
def listener():
    lst = Listener("127.0.0.1", 0, config=cfg(handshake_timeout_s=2.0))
    yield lst
    lst.close()


def test_handshake_identifies_the_worker_by_id_and_messages_flow(listener):
    host, port = listener.address
    w = connect(host, port, worker_id=7, config=cfg())
    ps = listener.accept(5)
    assert ps.worker_id == 7 and w.worker_id == 7
    w.send(PullRequest(3))
    assert ps.recv(5) == PullRequest(3)
    ps.send(PullReply(3, 0.4, 0.1, np.array([5, 9])))
    reply = w.recv(5)
    assert reply.budget_s == 0.4 and reply.required_rows.tolist() == [5, 9]
    w.close("done")
    assert isinstance(ps.recv(5), Bye)
    ps.close()


def test_the_ps_may_speak_first_right_after_the_handshake(listener):
    w = connect(*listener.address, worker_id=2, config=cfg())
    ps = listener.accept(5)
    ps.send(PullReply(0, 5.0, 0.0))
    ps.send(PullReply(1, None, 0.0))
    assert w.recv(5).budget_s == 5.0 and w.recv(5).budget_s is None
    w.close()
    ps.close()


def test_two_workers_on_one_address_are_told_apart(listener):
    host, port = listener.address
    a = connect(host, port, worker_id=1, config=cfg())
    b = connect(host, port, worker_id=2, config=cfg())
    ids = {listener.accept(5).worker_id, listener.accept(5).worker_id}
    assert ids == {1, 2}
    a.close()
    b.close()


def test_wrong_secret_is_refused_on_both_sides(listener):
    host, port = listener.address
    with pytest.raises(HandshakeError, match="wrong secret"):
        connect(host, port, worker_id=1, config=cfg(secret=secrets.token_bytes(32)))
    with pytest.raises(TransportTimeout):
        listener.accept(0.3)
    _wait_refused(listener, "failed to prove the shared secret")


def test_wrong_version_is_refused_on_both_sides(listener):
    host, port = listener.address
    with pytest.raises(HandshakeError, match="version mismatch"):
        connect(host, port, worker_id=1, config=cfg(), version=m.PROTOCOL_VERSION + 1)
    _wait_refused(listener, "version mismatch")


def test_a_newer_parameter_server_is_refused_by_the_worker():
    with Listener("127.0.0.1", 0, config=cfg(), version=m.PROTOCOL_VERSION + 1) as newer:
        with pytest.raises(HandshakeError, match="version mismatch"):
            connect(*newer.address, worker_id=1, config=cfg())
        _wait_refused(newer, "version mismatch")


def test_unknown_worker_id_is_refused():
    with Listener("127.0.0.1", 0, config=cfg(), worker_ids={0, 1}) as lst:
        with pytest.raises(HandshakeError, match="not one of"):
            connect(*lst.address, worker_id=5, config=cfg())


def test_a_silent_peer_is_dropped_and_others_still_get_in():
    with Listener("127.0.0.1", 0, config=cfg(handshake_timeout_s=0.3)) as lst:
        silent = socket.create_connection(lst.address)
        silent.settimeout(10)  # safety net only
        w = connect(*lst.address, worker_id=3, config=cfg())  # not blocked by the silent peer
        assert lst.accept(5).worker_id == 3
        try:
            assert silent.recv(100) == b""  # the PS closed it without a word
        except ConnectionResetError:
            pass
        _wait_refused(lst, "handshake timeout")
        silent.close()
        w.close()


def test_a_stranger_speaking_garbage_is_dropped(listener):
    s = socket.create_connection(listener.address)
    s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    s.settimeout(10)
    assert s.recv(100) in (b"",)
    s.close()
    _wait_refused(listener, "bad magic")


def test_config_requires_a_real_secret(monkeypatch):
    with pytest.raises(ValueError, match="at least 16"):
        TransportConfig(secret=b"short")
    monkeypatch.delenv("ROG_SECRET", raising=False)
    with pytest.raises(ValueError, match="ROG_SECRET is not set"):
        load_secret()
    monkeypatch.setenv("ROG_SECRET", "x" * 40)
    assert load_secret() == b"x" * 40
    with pytest.raises(ValueError, match="secret"):
        Listener("127.0.0.1", 0, config=TransportConfig())


def _wait_refused(lst, text, timeout_s=10.0):
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if any(text in reason for _, reason in lst.refused):
            return
        time.sleep(0.01)
    raise AssertionError(f"no refusal containing {text!r}: {lst.refused}")


def test_delivered_sets_agree_over_300_deadlines_on_loopback(listener):
    """Real sockets, 40 Mbit/s in the transport's limiter, deadlines around the transfer time."""
    rate_mbit = 40.0
    config = cfg(rate_mbit_at=rate_mbit, piece_bytes=512, burst_bytes=1024)
    w = connect(*listener.address, worker_id=1, config=config)
    ps = listener.accept(5)
    results: queue.Queue = queue.Queue()
    validator = WireFrames(PART, RAW)

    def keep(f, iteration, seq):
        validator(f, iteration, seq)
        return f

    keep.max_frame_bytes = validator.max_frame_bytes

    def serve():
        while True:
            msg = ps.recv(30)
            if isinstance(msg, Bye):
                return
            results.put(ps.receive_transmission(msg, keep))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    acc = np.random.default_rng(0).standard_normal(PART.n_elements).astype(np.float32)
    plan = plan_chunks(PART, np.arange(PART.n_rows), 10, RAW.row_wire_bytes(PART), chunk_bytes=800)
    chunks = [RAW.encode(PART, acc, RAW.tensor_scales(PART, acc), c) for c in plan.chunks]
    n = len(chunks)
    total_s = sum(len(encode_frame(c, RAW, 1, i)) for i, c in enumerate(chunks)) * 8 / (rate_mbit * 1e6)
    rng = np.random.default_rng(2)
    outcomes = {"cut": 0, "full": 0}
    for it in range(1, 301):
        frames = [encode_frame(c, RAW, it, i) for i, c in enumerate(chunks)]
        mandatory = int(rng.integers(0, 4))
        deadline = {0: 0.0, 1: None}.get(it % 10, float(rng.uniform(0, 1.3 * total_s)))
        res = w.send_transmission(iter(frames), n_frames=n, iteration=it, mandatory=mandatory, deadline_s=deadline)
        got = results.get(timeout=30)
        assert res.delivered == got.delivered and res.status == got.status == AckStatus.OK
        assert got.frames == frames[: res.delivered]
        assert res.delivered >= mandatory and res.sent == res.delivered
        if deadline is None:
            assert res.delivered == n and not res.cut
        if deadline == 0.0:
            assert res.delivered == mandatory and res.cut
        outcomes["cut" if res.cut else "full"] += 1
    w.close()
    t.join(10)
    assert outcomes["cut"] >= 30 and outcomes["full"] >= 30
