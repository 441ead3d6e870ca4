"""The codecs a run can name, in one registry: ``--compression`` name -> class, and wire codec id -> class.

Adding a codec = its own module (a :class:`rog.compression.Codec` subclass with a ``name`` and a
``codec_id``) + one line in :data:`CODECS`.  Nothing registers itself on import.  The device twins
(torch tensors) have their own table in :mod:`rog.device_codec`.
"""

from __future__ import annotations

from .codecs_topk import TopKCodec
from .compression import Codec, RawCodec, SignCodec

__all__ = ["CODECS", "CODEC_BY_ID", "make_codec"]

CODECS: dict[str, type[Codec]] = {"sign": SignCodec, "none": RawCodec, "topk": TopKCodec}
CODEC_BY_ID: dict[int, type[Codec]] = {c.codec_id: c for c in CODECS.values()}
assert len(CODEC_BY_ID) == len(CODECS), "two codecs share a wire codec id"


def make_codec(name: str, **options) -> Codec:
    """The codec registered under ``name`` (``sign`` = DEFSGDM 1-bit, ``none`` = raw float32, ``topk`` =
    ScaDLES's Top-k with error feedback; ``options`` go to its constructor, e.g. ``ratio``, ``gate``)."""
    try:
        cls = CODECS[name]
    except KeyError:
        raise ValueError(f"unknown compression {name!r}; choose one of {sorted(CODECS)}") from None
    return cls(**options)
