"""The fault scenarios' conservation oracle: float32 rounding of hundreds of updates is never a
"lost" row, while one genuinely dropped row (in a simulated pipeline and in a real PS/worker run)
is caught, and exactly that row."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.faults import conservation as cons
from benchmarks.faults import wire_fuzz as wf
from rog.rows import RowPartition
from rog.runtime import WorkerEngine

PART = RowPartition.from_shapes([("a", (40, 64)), ("b", (40,)), ("c", (20, 30))])


def float32_pipeline(w0, updates, W, drop=None):
    """Each worker's updates as the runtime moves them in float32: accumulate, send, scale by 1/W
    into the PS's pending rows, pull, subtract; ``drop=(update index, row)``: that row of that
    update never reaches the parameters."""
    w = w0.copy()
    acc = np.zeros_like(w0)
    pending = np.zeros_like(w0)
    weight = np.float32(1.0 / W)
    for i, u in enumerate(updates):
        acc += u
        sent = acc.copy()
        acc -= sent
        pending += weight * sent
        pulled = pending.copy()
        pending -= pulled
        if drop is not None and drop[0] == i:
            lo, hi = PART.row_start[drop[1]], PART.row_start[drop[1] + 1]
            pulled[lo:hi] = 0.0
        w -= pulled
    return w


def updates_and_w0(n, seed=0):
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal(PART.n_elements).astype(np.float32)
    ups = [(np.float32(0.05) * rng.standard_normal(PART.n_elements)).astype(np.float32) for _ in range(n)]
    return w0, ups


def test_gamma_is_n_u_over_one_minus_n_u_and_refuses_an_unbounded_count():
    u = 2.0 ** -24
    assert cons.gamma(100) == pytest.approx(100 * u / (1 - 100 * u), rel=1e-12)
    with pytest.raises(ValueError, match="no rounding bound"):
        cons.gamma(2 ** 24)


def test_float32_rounding_of_430_updates_is_not_a_loss():
    w0, ups = updates_and_w0(430)
    w = float32_pipeline(w0, ups, W=2)
    out = cons.lost_rows([w], w0, ups, 2, PART.row_start)
    assert out["rows_lost"] == 0 and out["updates"] == 430
    assert 0 < out["max_error_over_bound"] < 1.0  # rounding happened, and the bound holds it
    # the float32 oracle with a fixed 1e-5 relative tolerance is what called this a loss
    expected32 = w0 - sum(ups) / np.float32(2)
    assert np.abs(w - expected32).max() > 0  # the two float32 orders disagree at all


@pytest.mark.parametrize("row", [0, 41, PART.n_rows - 1])
def test_one_dropped_row_of_one_update_is_caught_exactly(row):
    w0, ups = updates_and_w0(430, seed=1)
    w = float32_pipeline(w0, ups, W=2, drop=(215, row))
    out = cons.lost_rows([w], w0, ups, 2, PART.row_start)
    assert out["rows_lost"] == 1 and out["max_error_over_bound"] > 1.0
    reference, magnitude, n = cons.reference_and_magnitude(w0, ups, 2)
    rows, _ = cons.rows_off(w, reference, cons.tolerance(n, magnitude), PART.row_start)
    assert rows.tolist() == [row]


def test_a_run_whose_worker_skips_a_pulled_chunk_loses_exactly_its_rows(monkeypatch):
    """A real in-process PS/worker run (no damage on the link) where worker 0 drops the first chunk of
    its third pull: the oracle reports exactly that chunk's rows."""
    original = WorkerEngine._apply_pull
    dropped: list[int] = []

    def apply_pull(self, begin):
        if not dropped and self.pull_seq == 2 and self.params is params_of_worker0():
            res = self.conn.receive_transmission(begin, self._validator)
            chunks = [chunk for _, chunk in res.frames]
            dropped.append(int(chunks[0].n_rows))
            for chunk in chunks[1:]:
                self.codec.decode_into(self.partition, chunk, (self.params,), weight=-1.0)
            self.pull_seq += 1
            self._unconfirmed_pull.append((self.pull_seq, chunks))
            return res, sum(c.n_rows for c in chunks[1:])
        return original(self, begin)

    first_params: list = []
    original_init = WorkerEngine.__init__

    def init(self, conn, partition, params, *args, **kwargs):
        if not first_params:
            first_params.append(params)
        original_init(self, conn, partition, params, *args, **kwargs)

    def params_of_worker0():
        return first_params[0] if first_params else None

    monkeypatch.setattr(WorkerEngine, "_apply_pull", apply_pull)
    monkeypatch.setattr(WorkerEngine, "__init__", init)
    out = wf.tampered_run("dup_frame", "push", policy="SSP", n_workers=1, timeout_s=30.0, tamper_iterations=())
    assert not out["hung"] and not out["worker_errors"] and not out["ps_errors"], out
    assert len(dropped) == 1 and dropped[0] >= 1
    assert out["rows_lost"] == dropped[0]


def test_the_same_run_without_the_drop_loses_nothing():
    out = wf.tampered_run("dup_frame", "push", policy="SSP", n_workers=1, timeout_s=30.0, tamper_iterations=())
    assert not out["hung"] and not out["worker_errors"] and out["rows_lost"] == 0, out
