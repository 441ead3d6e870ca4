"""The device twins of the codecs by ``--compression`` name: :mod:`.codec_registry`'s counterpart over torch tensors.

Its own module, so that :mod:`.device_codec` (the 1-bit and raw twins) and :mod:`.device_codec_topk` (which
subclasses the raw twin) import each other in one direction only.
"""

from __future__ import annotations

from .compression import Codec
from .device_codec import TorchRawCodec, TorchSignCodec
from .device_codec_topk import TorchTopKCodec


def torch_codecs() -> dict[str, type[Codec]]:
    """The device twins by ``--compression`` name."""
    return {"sign": TorchSignCodec, "none": TorchRawCodec, "topk": TorchTopKCodec}


def make_device_codec(name: str, device, use_cupy: bool | None = None, **options) -> Codec:
    """The torch twin of :func:`rog.codecs.codec_registry.make_codec` ``name`` working on ``device``'s tensors
    (``options``: the codec's own, e.g. ``ratio`` for ``topk``)."""
    codecs = torch_codecs()
    try:
        cls = codecs[name]
    except KeyError:
        raise ValueError(f"unknown compression {name!r}; choose one of {sorted(codecs)}") from None
    return cls(device, use_cupy, **options)
