"""The torch Top-k codec: frames byte-identical to the host codec's, the same statistic, the same decode
and commit, on the CPU (always) and on a CUDA device (``gpu`` marker, skipped without one)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rog.codecs_topk import TopKCodec
from rog.device_codec import make_device_codec
from rog.rows import RowPartition
from rog.wire import encode_frame
from tests.test_topk_codec import chunks_of

PART = RowPartition.from_shapes([("a", (20, 50)), ("b", (50,)), ("c", (25, 40)), ("d", (7,)), ("e", (3, 400))])
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("ratio", [0.1, 0.01])
def test_frames_statistic_decode_and_commit_match_the_host_codec(device, ratio):
    rng = np.random.default_rng(5)
    acc = rng.standard_normal(PART.n_elements).astype(np.float32)
    host = TopKCodec(ratio=ratio, gate=True, delta=0.9)
    dev = make_device_codec("topk", device, ratio=ratio, gate=True, delta=0.9)
    host.decision = dev.decision = True
    t_acc = torch.from_numpy(acc.copy()).to(device)
    chunks = chunks_of(PART, 9)
    hs, ds = host.tensor_scales(PART, acc), dev.tensor_scales(PART, t_acc)
    np.testing.assert_array_equal(hs, ds)
    assert dev.statistic == pytest.approx(host.statistic, rel=1e-9)
    he, de = host.encode_many(PART, acc, hs, chunks), dev.encode_many(PART, t_acc, ds, chunks)
    assert [encode_frame(c, host, 1, i) for i, c in enumerate(he)] == [encode_frame(c, dev, 1, i) for i, c in enumerate(de)]
    out_h, out_d = np.zeros_like(acc), torch.zeros(PART.n_elements, device=device)
    host.decode_many(PART, he, (out_h,))
    dev.decode_many(PART, de, (out_d,))
    np.testing.assert_array_equal(out_h, out_d.cpu().numpy())
    for c in he:
        host.commit(PART, acc, c)
    for c in de:
        dev.commit(PART, t_acc, c)
    np.testing.assert_array_equal(acc, t_acc.cpu().numpy())  # the same residual, exactly
    assert np.count_nonzero(acc) < PART.n_elements  # something was sent and removed
