"""Segments as transfers: Begin's ``more`` flag keeps an iteration open, ``PullSegments`` round-trips,
the emulated per-transfer latency (``link_delay_s``), and the measured per-segment cost Δt on a
loopback TCP link rising by the delay set."""

from __future__ import annotations

import secrets
import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

from rog.compression import RawCodec
from rog.optim import ROGOptimizer
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import ParameterServer
from rog.runtime.messages import PullSegments
from rog.runtime.segmented_pull import segment_order
from rog.schedules.trainer import ScheduledTrainer
from rog.transport import AckStatus, Begin, Listener, ProtocolError, TransportConfig, WireFrames, inproc_pair
from test_transport_stream import PART, RAW, Receiver, all_frames


def test_begin_more_flag_round_trips():
    for more in (False, True):
        b = Begin(7, 1, 42, 3, 3, None, more)
        assert Begin.unpack_body(b.pack_body()) == b
    assert Begin.unpack_body(Begin(7, 1, 42, 3, 3, None).pack_body()).more is False


def test_more_keeps_the_iteration_open_until_the_last_segment():
    worker, ps = inproc_pair(0)
    rx = Receiver(ps, WireFrames(PART, RAW))
    try:
        frames = all_frames(5)
        for more in (True, True, False):  # three segments of iteration 5
            res = worker.send_transmission(frames, n_frames=len(frames), iteration=5, mandatory=len(frames),
                                           deadline_s=None, more=more)
            assert res.status == AckStatus.OK and res.delivered == len(frames)
        got = [rx.results.get(timeout=5) for _ in range(3)]
        assert [g.status for g in got] == [AckStatus.OK] * 3
        # closed now: another transmission of iteration 5 is stale
        res = worker.send_transmission(frames, n_frames=len(frames), iteration=5, mandatory=len(frames),
                                       deadline_s=None)
        assert res.status == AckStatus.STALE and res.delivered == 0
    finally:
        rx.stop(worker)


def test_link_delay_holds_each_begin():
    # 3 transmissions with a 30 ms delay each take >= 90 ms in all; without it, far less
    cfg = TransportConfig(link_delay_s=0.03)
    for config, low, high in ((cfg, 0.09, 1.0), (None, 0.0, 0.06)):
        worker, ps = inproc_pair(0, worker_config=config)
        rx = Receiver(ps, WireFrames(PART, RAW))
        try:
            t0 = time.monotonic()
            for it in (1, 2, 3):
                frames = all_frames(it)
                worker.send_transmission(frames, n_frames=len(frames), iteration=it, mandatory=len(frames), deadline_s=None)
            assert low <= time.monotonic() - t0 < high
        finally:
            rx.stop(worker)
    with pytest.raises(ValueError, match="link_delay_s"):
        TransportConfig(link_delay_s=-1)


def test_pull_segments_message_and_split():
    msg = PullSegments((0, 0, 1, 2))
    assert PullSegments.unpack_body(msg.pack_body()) == msg
    with pytest.raises(ProtocolError, match="0 .. K-1"):
        PullSegments.unpack_body(PullSegments((0, 2)).pack_body())  # segment 1 missing
    # PART's tensors: w1 24 rows, b1 1, w2 30, b2 1 (a row per leading index; a bias is one row)
    order = np.arange(PART.n_rows)[::-1]
    parts = segment_order(PART, order, (1, 1, 0, 0))
    t = PART.row_tensor
    assert [sorted(set(t[p].tolist())) for p in parts] == [[2, 3], [0, 1]]
    assert all(np.all(np.diff(p) < 0) for p in parts)  # each keeps the given order
    assert sum(p.size for p in parts) == PART.n_rows
    with pytest.raises(ProtocolError, match="tensors"):
        segment_order(PART, order, (0, 1))


def _model():
    torch.manual_seed(0)
    # layer sizes 1.8 KB, 18 KB, 131 KB, 1.3 KB: a spread of segment bytes for the regression
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 5))


def measured_dt(delay_s: float, iterations: int = 9, rate_mbit: float = 40.0) -> dict:
    """LBL over a loopback TCP link, one worker: the link estimate's per-transfer intercepts."""
    secret = secrets.token_bytes(32)
    model = _model()
    part = RowPartition.from_module(model)
    cfg = TransportConfig(secret=secret, rate_mbit_at=rate_mbit, link_delay_s=delay_s)
    listener = Listener("127.0.0.1", 0, config=cfg, worker_ids={0})
    ps = ParameterServer(part, 1, make_policy("BSP"), RawCodec(), join_timeout_s=20.0, wait_timeout_s=20.0)
    t = ps.start(listener)
    out = {}
    try:
        opt = ROGOptimizer(model.parameters(), server=listener.address, worker_id=0, lr=0.01, policy="BSP",
                           compression="none", secret=secret, rate_mbit=rate_mbit,
                           transport_options={"link_delay_s": delay_s}, reconnect_timeout_s=None)
        tr = ScheduledTrainer(model, opt, "lbl", torch.zeros(1, 3, 8, 8))
        g = torch.Generator().manual_seed(1)
        for _ in range(iterations):
            tr.iteration(torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 5, (8,), generator=g),
                         nn.functional.cross_entropy)
        tr.close()
        opt.close()
        out = {d: tr.link.fit(d)[0] for d in ("push", "pull")}
    finally:
        t.join(20)
        listener.close()
    assert not ps.errors, ps.errors
    return out


def test_measured_dt_rises_by_the_delay_on_loopback():
    # rule (fixed before the first run): per direction, Δt(20 ms) - Δt(0) lies within 20 ms ± 30 %
    delay = 0.020
    base, slow = measured_dt(0.0), measured_dt(delay)
    for d in ("push", "pull"):
        rise = slow[d] - base[d]
        assert abs(rise - delay) <= 0.3 * delay, (d, base[d], slow[d])
