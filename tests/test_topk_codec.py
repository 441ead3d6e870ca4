"""ScaDLES's Top-k codec: exact per-tensor Top-k on the wire, the energy statistic, the PS's majority
gate, CNC and floats accounting, and conservation with error feedback in a real PS/worker run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.faults.conservation import lost_rows
from rog.chunks import ChunkSpec
from rog.codecs.codecs_topk import PAYLOAD_HEADER, PAYLOAD_HEADER_BYTES, TopKCodec
from rog.codecs.codec_registry import CODEC_BY_ID, make_codec
from rog.rows import RowPartition
from rog.codecs.topk_gate import PSGate
from rog.wire import FrameError, decode_frame, encode_frame

PART = RowPartition.from_shapes([("a", (20, 50)), ("b", (50,)), ("c", (25, 40)), ("d", (7,)), ("e", (3, 400))])


def whole_model_chunk(part: RowPartition) -> ChunkSpec:
    return ChunkSpec(segments=part.segments(np.arange(part.n_rows)))


def chunks_of(part: RowPartition, rows_per_chunk: int) -> list[ChunkSpec]:
    out = []
    for r0 in range(0, part.n_rows, rows_per_chunk):
        n = min(rows_per_chunk, part.n_rows - r0)
        out.append(ChunkSpec(segments=part.segments(np.arange(r0, r0 + n))))
    return out


def reference_topk(part: RowPartition, acc: np.ndarray, ratio: float) -> np.ndarray:
    """The Top-k vector computed independently: per tensor, argsort by magnitude, keep ceil(CR n)."""
    out = np.zeros_like(acc)
    off = part.tensor_offset
    for t in range(part.n_tensors):
        a = acc[off[t] : off[t + 1]]
        k = max(1, math.ceil(ratio * a.size))
        keep = np.argsort(-np.abs(a), kind="stable")[:k]
        out[off[t] + keep] = a[keep]
    return out


@pytest.mark.parametrize("ratio", [0.1, 0.01])
def test_sparse_payload_is_exactly_per_tensor_topk_in_int32_and_float32(ratio):
    rng = np.random.default_rng(1)
    acc = rng.standard_normal(PART.n_elements).astype(np.float32)
    codec = TopKCodec(ratio=ratio)
    scales = codec.tensor_scales(PART, acc)
    enc = codec.encode_many(PART, acc, scales, chunks_of(PART, 7))  # tensors split across chunks
    got = np.zeros(PART.n_elements, dtype=np.float32)
    codec.decode_many(PART, enc, (got,))
    ref = reference_topk(PART, acc, ratio)
    np.testing.assert_array_equal(got, ref)
    ks = [max(1, math.ceil(ratio * n)) for n in PART.tensor_elements]
    sparse_bytes = sum(len(c.data) for c in enc if PAYLOAD_HEADER.unpack_from(c.data)[0] & 1)
    sparse_entries = sum(PAYLOAD_HEADER.unpack_from(c.data)[4] for c in enc if PAYLOAD_HEADER.unpack_from(c.data)[0] & 1)
    assert sparse_bytes == sum(PAYLOAD_HEADER_BYTES + 8 * PAYLOAD_HEADER.unpack_from(c.data)[4]
                               for c in enc if PAYLOAD_HEADER.unpack_from(c.data)[0] & 1)
    rec = codec.records[-1]
    assert rec["compressed"] and rec["floats"] + 0 >= sparse_entries
    assert rec["floats"] == sum(ks)  # every tensor's k (dense fallback chunks count their elements)
    # energy statistic: 1 - ||topk||^2 / ||acc||^2, by hand in float64
    a64 = acc.astype(np.float64)
    assert codec.statistics["energy"] == pytest.approx(1 - (ref.astype(np.float64) ** 2).sum() / (a64 ** 2).sum(), rel=1e-9)
    # the default (norm) reading: 1 - sum_t ||topk(a_t)|| / sum_t ||a_t||, by hand per tensor
    off = PART.tensor_offset
    norms = [(np.linalg.norm(ref[off[t]:off[t + 1]].astype(np.float64)), np.linalg.norm(a64[off[t]:off[t + 1]]))
             for t in range(PART.n_tensors)]
    assert codec.statistic == pytest.approx(1 - sum(k for k, _ in norms) / sum(n for _, n in norms), rel=1e-9)


def test_a_chunk_whose_sparse_form_is_not_smaller_goes_dense_and_exact():
    rng = np.random.default_rng(4)
    acc = rng.standard_normal(PART.n_elements).astype(np.float32)
    codec = TopKCodec(ratio=0.6)  # 0.6 x 8 bytes > 4 bytes per element
    enc = codec.encode_many(PART, acc, codec.tensor_scales(PART, acc), chunks_of(PART, 7))
    assert not any(PAYLOAD_HEADER.unpack_from(c.data)[0] & 1 for c in enc)
    got = np.zeros_like(acc)
    codec.decode_many(PART, enc, (got,))
    np.testing.assert_array_equal(got, acc)
    assert codec.records[-1]["floats"] == PART.n_elements


def test_frames_round_trip_and_damaged_positions_are_refused():
    assert CODEC_BY_ID[2] is TopKCodec
    rng = np.random.default_rng(2)
    acc = rng.standard_normal(PART.n_elements).astype(np.float32)
    codec = make_codec("topk", ratio=0.1)
    enc = codec.encode_many(PART, acc, codec.tensor_scales(PART, acc), [whole_model_chunk(PART)])[0]
    frame = encode_frame(enc, codec, 3, 0)
    _, back = decode_frame(frame, PART, codec)
    a, b = np.zeros_like(acc), np.zeros_like(acc)
    codec.decode_into(PART, enc, (a,))
    codec.decode_into(PART, back, (b,))
    np.testing.assert_array_equal(a, b)
    flags, _, _, stat, count = PAYLOAD_HEADER.unpack_from(enc.data)
    idx = np.frombuffer(enc.data, dtype="<i4", count=count, offset=PAYLOAD_HEADER_BYTES).copy()
    idx[[0, 1]] = idx[[1, 0]]  # positions out of order: a decoder must refuse, not apply twice
    bad = bytes(enc.data[:PAYLOAD_HEADER_BYTES]) + idx.tobytes() + bytes(enc.data[PAYLOAD_HEADER_BYTES + 4 * count :])
    assert "strictly increasing" in codec.check_data(bad, PART.n_elements)
    from dataclasses import replace

    with pytest.raises(FrameError, match="strictly increasing"):
        decode_frame(encode_frame(replace(enc, data=bad), codec, 3, 0), PART, codec)


def test_commit_leaves_exactly_the_unsent_residual():
    rng = np.random.default_rng(3)
    acc = rng.standard_normal(PART.n_elements).astype(np.float32)
    before = acc.copy()
    codec = TopKCodec(ratio=0.1)
    enc = codec.encode_many(PART, acc, codec.tensor_scales(PART, acc), chunks_of(PART, 11))
    for c in enc:
        codec.commit(PART, acc, c)
    sent = reference_topk(PART, before, 0.1)
    np.testing.assert_array_equal(acc, np.where(sent != 0, np.float32(0), before))


def test_ps_gate_decides_by_at_least_half_of_the_last_n_votes():
    g = PSGate(4)
    assert g.compress is False  # dense before any vote
    for v, want in [(True, False), (True, True), (False, True), (False, True), (False, False), (True, False),
                    (True, True)]:
        g.record_vote(v, 0.1)
        assert g.compress is want
    g5 = PSGate(5)
    for v in (True, True, False, False, False):
        g5.record_vote(v, 0.0)
    assert g5.compress is False  # 2 of 5 is no majority
    with pytest.raises(ValueError, match="n_workers"):
        PSGate(0)


@pytest.mark.parametrize("bad, flag", [(dict(ratio=0.0), "--topk-ratio"), (dict(ratio=1.5), "--topk-ratio"),
                                       (dict(delta=-0.1), "--topk-gate-delta"), (dict(smoothing=1.0), "--topk-gate-smoothing"),
                                       (dict(statistic="entropy"), "--topk-gate-statistic")])
def test_bad_options_name_the_flag(bad, flag):
    with pytest.raises(ValueError, match=flag):
        TopKCodec(**bad)


@pytest.mark.parametrize("statistic", ["energy", "norm"])
def test_both_readings_of_the_gate_statistic_by_hand(statistic):
    """Tensors u = [4, 3, 0 x 8] and v = [1 x 10] at CR 0.1 (k = 1 each): Top-k keeps 4 of u and one 1 of v.
    The paper's formula: 1 - (16 + 1) / (25 + 10) = 18/35; the released code's summed tensor norms:
    1 - (4 + 1) / (5 + sqrt(10))."""
    part = RowPartition.from_shapes([("u", (10,)), ("v", (10,))])
    acc = np.array([4, 3] + [0] * 8 + [1] * 10, dtype=np.float32)
    c = TopKCodec(ratio=0.1, gate=True, statistic=statistic)
    c.tensor_scales(part, acc)
    by_hand = {"energy": 18 / 35, "norm": 1 - 5 / (5 + math.sqrt(10))}
    assert c.statistics["energy"] == pytest.approx(by_hand["energy"], rel=1e-9)
    assert c.statistics["norm"] == pytest.approx(by_hand["norm"], rel=1e-9)
    assert c.statistic == pytest.approx(by_hand[statistic], rel=1e-9)
    # the vote follows the chosen reading: delta 0.45 lies between 0.387 (norm) and 0.514 (energy)
    c2 = TopKCodec(ratio=0.1, gate=True, delta=0.45, statistic=statistic)
    c2.tensor_scales(part, acc)
    assert c2._vote() is (statistic == "norm")


def gated_exchange(n_workers: int, ratio: float, delta: float, iterations: int, seed: int = 0):
    """W worker codecs and a PS codec exchanging whole-model pushes and pulls (BSP order, no network):
    returns the workers' codecs.  Gradients mix a sparse heavy part and dense noise whose weight drifts,
    so the energy statistic moves across the deltas."""
    rng = np.random.default_rng(seed)
    ps = TopKCodec(ratio=ratio, gate=True, delta=delta, ps_workers=n_workers)
    ws = [TopKCodec(ratio=ratio, gate=True, delta=delta, smoothing=0.5) for _ in range(n_workers)]
    accs = [np.zeros(PART.n_elements, dtype=np.float32) for _ in ws]
    pending = [np.zeros(PART.n_elements, dtype=np.float32) for _ in ws]
    chunks = chunks_of(PART, 9)
    heavy = rng.random(PART.n_elements) < 0.05
    for it in range(iterations):
        noise = 0.05 + 0.6 * (0.5 + 0.5 * math.sin(it / 5.0))
        for r, (c, acc) in enumerate(zip(ws, accs)):
            g = np.where(heavy, 3.0, noise) * rng.standard_normal(PART.n_elements)
            acc += g.astype(np.float32)
            enc = c.encode_many(PART, acc, c.tensor_scales(PART, acc), chunks)
            for e in enc:
                ps.decode_into(PART, e, pending, weight=1.0 / n_workers)
                c.commit(PART, acc, e)
        for r, c in enumerate(ws):
            scales = ps.tensor_scales(PART, pending[r])
            for ch in chunks:
                e = ps.encode(PART, pending[r], scales, ch)
                c.decode_into(PART, e, (np.zeros(PART.n_elements, dtype=np.float32),), weight=-1.0)
                ps.commit(PART, pending[r], e)
    return ws


def test_cnc_grows_with_delta_and_floats_follow_the_cnc_law():
    """Consistency checks (true by construction, never verdicts): the floats-sent law, CNC non-decreasing in
    delta, and CNC at CR 0.01 <= CNC at CR 0.1 at each delta for the same gradients (the top 1 % leaves more
    energy behind than the top 10 %, so the lower CR's gate opens less)."""
    by_ratio = {}
    for ratio in (0.1, 0.01):
        cncs = by_ratio[ratio] = []
        for delta in (0.1, 0.2, 0.3, 0.4, 0.6, 0.9):
            ws = gated_exchange(4, ratio, delta, iterations=30)
            st = [w.stats() for w in ws]
            cnc = sum(s["compressed"] for s in st) / sum(s["transmissions"] for s in st)
            cncs.append(cnc)
            dense = sum(s["dense_floats"] for s in st)
            floats = sum(s["floats_sent"] for s in st)
            # floats sent = dense x (1 - CNC (1 - CR)) within 2 % (k rounds up per tensor)
            assert floats == pytest.approx(dense * (1 - cnc * (1 - ratio)), rel=0.02), (ratio, delta, cnc)
        assert all(b >= a for a, b in zip(cncs, cncs[1:])), (ratio, cncs)
        assert cncs[0] < cncs[-1]  # the gate really switches within this delta range
    assert all(lo <= hi for lo, hi in zip(by_ratio[0.01], by_ratio[0.1])), by_ratio


def test_conservation_with_topk_and_error_feedback_in_a_real_run(ps_team):
    """PS and two workers over in-process links (BSP, gate on): every worker's parameters equal
    ``w0 - sum(updates) / W`` once what is still in transit is added back, i.e. the workers' residuals
    (divided by W) and the PS's pending buffer for that worker: nothing lost, nothing applied twice."""
    from rog.local_update import LocalUpdate, LocalUpdateConfig
    from rog.policies import make_policy
    from rog.runtime import ParameterServer, WorkerEngine, aligned_zeros
    from rog.transport import TransportConfig
    from rog.transport.inproc import inproc_pair

    W, iterations = 2, 8
    cfg = TransportConfig(piece_bytes=256, io_timeout_s=30.0)
    pairs = [inproc_pair(r, worker_config=cfg, ps_config=cfg) for r in range(W)]
    ps_codec = TopKCodec(ratio=0.1, gate=True, delta=0.9, ps_workers=W)
    ps = ParameterServer(PART, W, make_policy("BSP", 0), ps_codec, chunk_bytes=600, wait_timeout_s=30.0,
                         join_timeout_s=30.0)
    rule = LocalUpdateConfig(lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, milestones=())
    rng = np.random.default_rng(7)
    w0 = rng.standard_normal(PART.n_elements).astype(np.float32)
    targets = rng.standard_normal((W, PART.n_elements)).astype(np.float32)
    updates: list[list[np.ndarray]] = [[] for _ in range(W)]
    params: list = [None] * W
    engines: list = [None] * W

    class Recording(LocalUpdate):
        def __init__(self, r):
            super().__init__(PART.n_elements, rule)
            self.r = r

        def step(self, grad, p, it, out=None):
            u = super().step(grad, p, it, out)
            updates[self.r].append(u.copy())
            return u

    def worker(r: int, end) -> None:
        p = aligned_zeros(PART.n_elements)
        p[:] = w0
        params[r] = p
        eng = WorkerEngine(end, PART, p, make_policy("BSP", 0), TopKCodec(ratio=0.1, gate=True, delta=0.9),
                           Recording(r), chunk_bytes=600, wait_timeout_s=30.0)
        engines[r] = eng
        eng.join(30.0)
        for n in range(1, iterations + 1):
            eng.step((p - targets[r]) + np.float32(0.01) * np.float32(n))
        eng.flush()
        eng.close()

    ps_team(ps, worker, W, ends=pairs)
    stats = [e.codec.stats() for e in engines]
    assert all(s["transmissions"] == iterations + 1 for s in stats)  # iterations + the flush
    assert any(s["compressed"] for s in stats) and any(s["dense_floats"] > s["floats_sent"] for s in stats)
    residual = sum(e.acc.astype(np.float64) for e in engines) / W
    assert np.abs(residual).max() > 0  # Top-k really left something behind
    for r in range(W):
        held = params[r].astype(np.float64) - residual - ps.state.pending[r].astype(np.float64)
        out = lost_rows([held], w0, (u for ups in updates for u in ups), W, PART.row_start)
        assert out["rows_lost"] == 0, out
    # the same check catches a residual that was applied twice
    twice = params[0].astype(np.float64) - 2 * residual - ps.state.pending[0].astype(np.float64)
    assert lost_rows([twice], w0, (u for ups in updates for u in ups), W, PART.row_start)["rows_lost"] > 0


def test_one_codec_registry_and_no_registration_on_import():
    # every codec by name and by wire id in rog/codecs/codec_registry.py; the codec modules do not add themselves
    import ast
    from pathlib import Path

    from rog.codecs import codec_registry as reg
    from rog.codecs.compression import RawCodec, SignCodec

    assert reg.CODECS == {"sign": SignCodec, "none": RawCodec, "topk": TopKCodec}
    assert {i: c.__name__ for i, c in reg.CODEC_BY_ID.items()} == {c.codec_id: c.__name__ for c in reg.CODECS.values()}
    root = Path(reg.__file__).parent
    for name in ("compression.py", "codecs_topk.py", "device_codec.py", "device_codec_topk.py"):
        tree = ast.parse((root / name).read_text())
        assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and n.col_offset == 0
                   and any(isinstance(t, ast.Subscript) for t in n.targets)]
        assert assigns == [], f"{name} writes into a registry at import"
    with pytest.raises(ValueError, match="unknown compression 'zip'"):
        reg.make_codec("zip")
