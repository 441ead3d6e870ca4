"""Pay a GPU worker's one-time costs before it joins, so that its first timed iteration is like the others.

On CUDA the first forward + backward of a process loads kernels and builds library handles, and the
device codec's first push compiles its bit-packing kernels (cupy builds them at first use).  On an
H100 this made a GPU worker's first iteration take 2.1-2.6 s against about 0.02 s for the next ones
(docs/gpu.md, "The emulated run with GPU workers"); under BSP every other worker waits for it.
:func:`warm_up` runs one forward + backward on a batch and one push + pull of the device codec on a
two-tensor stand-in, and leaves no trace: parameters, buffers (BatchNorm statistics), gradients, the
training flag and the random number generators are as they were.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["warm_up"]


def warm_up(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], device) -> float:
    """One forward + backward of ``model`` on ``batch`` and one device-codec push + pull on ``device``,
    undone afterwards; returns the seconds it took (synchronised)."""
    device = torch.device(device)
    t0 = time.monotonic()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        saved = {name: b.detach().clone() for name, b in model.named_buffers()}
        grads = {p: None if p.grad is None else p.grad.detach().clone() for p in model.parameters()}
        training = model.training
        try:
            model.train()
            x, y = batch
            F.cross_entropy(model(x.to(device)), y.to(device)).backward()
        finally:
            with torch.no_grad():
                for name, b in model.named_buffers():
                    b.copy_(saved[name])
                for p, g in grads.items():
                    p.grad = g
            model.train(training)
    _codec_round_trip(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.monotonic() - t0


def _codec_round_trip(device: torch.device) -> None:
    """Encode and decode every row of a small two-tensor buffer with the device sign codec (its packer,
    scales and scatter kernels are then built)."""
    from ..chunks import plan_chunks
    from ..codecs.compression import SignCodec
    from ..codecs.device_codec import TorchSignCodec
    from ..rows import RowPartition
    from ..wire import encode_frames

    part = RowPartition.from_shapes([("weight", (8, 16)), ("bias", (8,))])
    codec = TorchSignCodec(device)
    acc = torch.linspace(-1.0, 1.0, part.n_elements, device=device)
    out = torch.zeros(part.n_elements, device=device)
    cp = plan_chunks(part, np.arange(part.n_rows), part.n_rows, SignCodec().row_wire_bytes(part), 64)
    enc, _ = encode_frames(codec, part, acc, codec.tensor_scales(part, acc), cp.chunks, 1)  # crc kernel too
    codec.decode_many(part, enc, (out,), 1.0)
