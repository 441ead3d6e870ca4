"""The Top-k codec (:mod:`rog.codecs.codecs_topk`) over torch tensors: accumulators stay on their device.

Thresholds and the energy statistic are computed on the device (``torch.topk`` per tensor; one
copy of ``n_tensors`` numbers to the host).  A chunk's values are gathered on the device by the raw
torch codec and selected on the host, so frames are the numpy codec's byte for byte; decoding
densifies the received values on the host and adds them on the device through the raw torch codec.
The dense values cross the host boundary once per transmission each way (4 bytes per element, as
with compression off), which a device-side selection could cut to the sent elements.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .codecs_topk import TopKCodec
from .compression import EncodedChunk
from ..device.torch_update import check_flat_tensor
from .device_codec import TorchRawCodec
from ..rows import RowPartition


class TorchTopKCodec(TopKCodec):
    """:class:`~rog.codecs.codecs_topk.TopKCodec` for 1-D float32 torch tensors on ``device``."""

    def __init__(self, device="cpu", use_cupy: bool | None = None, **options) -> None:
        super().__init__(**options)
        self._raw = TorchRawCodec(device, use_cupy)
        self.device = self._raw.device

    def flat_mean_abs(self, partition: RowPartition, flat: torch.Tensor) -> np.ndarray:
        return self._raw.flat_mean_abs(partition, flat)

    def tensor_scales(self, partition: RowPartition, acc: torch.Tensor, mean_abs=None) -> np.ndarray:
        check_flat_tensor(acc, partition.n_elements, self.device, "acc")
        ks = self.k_per_tensor(partition)
        off = partition.tensor_offset
        thr, kept, total = [], [], []
        zero = torch.zeros((), dtype=torch.float32, device=self.device)
        for t in range(partition.n_tensors):
            a = acc[off[t] : off[t + 1]].abs()
            k = int(ks[t])
            sq = a.double().square()
            total.append(sq.sum())
            if k >= a.numel():
                thr.append(zero)
                kept.append(total[-1])
                continue
            top = torch.topk(a, k, sorted=False).values
            thr.append(top.min())
            kept.append(top.double().square().sum())
        host = torch.stack([torch.stack(thr).double(), torch.stack(kept), torch.stack(total)]).cpu().numpy()
        self._set_statistics(host[1], host[2])
        return host[0].astype(np.float32)

    def encode_many(self, partition: RowPartition, acc: torch.Tensor, scales: np.ndarray, chunks) -> list:
        raws = self._raw.encode_many(partition, acc, scales, list(chunks))
        return self._sparsify_many(partition, raws, scales)

    def encode(self, partition: RowPartition, acc: torch.Tensor, scales: np.ndarray, chunk) -> EncodedChunk:
        (raw,) = self._raw.encode_many(partition, acc, scales, [chunk])
        return self._sparsify(partition, raw, scales, self._sending_compressed(), None)

    def decode_many(self, partition: RowPartition, chunks: Sequence[EncodedChunk], outs, weight: float = 1.0) -> None:
        self._raw.decode_many(partition, [self._densify(partition, c, weight) for c in chunks], outs, weight)

    def decode_into(self, partition: RowPartition, chunk: EncodedChunk, outs, weight: float = 1.0) -> None:
        self.decode_many(partition, [chunk], outs, weight)
