"""The codecs a run can name, in one registry: ``--compression`` name -> class, and wire codec id -> class.

Adding a codec = its own module (a :class:`rog.codecs.compression.Codec` subclass with a ``name`` and a
``codec_id``) + one line in :data:`CODECS` (a :class:`rog.registry.Registry`: a name or a wire codec id
registered twice is an error).  Nothing registers itself on import.  The device twins (torch tensors)
have their own table in :mod:`rog.codecs.device_codec`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from .codecs_topk import TopKCodec
from .compression import Codec, RawCodec, SignCodec
from ..registry import DuplicateEntryError, RefusedEntryError, Registry

__all__ = ["CODECS", "CODEC_BY_ID", "make_codec"]


def _check_codec(name: str, cls: type[Codec], registry: Registry) -> None:
    """A codec is a :class:`Codec` subclass whose wire ``codec_id`` no registered codec uses."""
    if not (isinstance(cls, type) and issubclass(cls, Codec)):
        raise RefusedEntryError(f"compression {name!r}: {cls!r} is not a rog.codecs.compression.Codec subclass")
    taken = {c.codec_id: n for n, c in registry.items()}
    if cls.codec_id in taken:
        raise DuplicateEntryError(f"compression {name!r}: wire codec id {cls.codec_id} is {taken[cls.codec_id]!r}'s; "
                                  "give the codec a free codec_id")


CODECS: Registry = Registry("compression", [
    ("sign", SignCodec),
    ("none", RawCodec),
    ("topk", TopKCodec),
], check=_check_codec)


class _ById(Mapping):
    """Wire codec id -> codec class, over :data:`CODECS` (always current)."""

    def __getitem__(self, codec_id: int) -> type[Codec]:
        for cls in CODECS.values():
            if cls.codec_id == codec_id:
                return cls
        raise KeyError(codec_id)

    def __iter__(self) -> Iterator[int]:
        return iter([cls.codec_id for cls in CODECS.values()])

    def __len__(self) -> int:
        return len(CODECS)


CODEC_BY_ID: Mapping = _ById()


def make_codec(name: str, **options) -> Codec:
    """The codec registered under ``name`` (``sign`` = DEFSGDM 1-bit, ``none`` = raw float32, ``topk`` =
    ScaDLES's Top-k with error feedback; ``options`` go to its constructor, e.g. ``ratio``, ``gate``)."""
    return CODECS[name](**options)


def write_codec_stats(run_dir, rank: str, codec) -> None:
    """Write the codec's counters (CNC, floats and bytes sent, per-transmission records) to
    ``<run>/topk-<rank>.json``, when the codec keeps them (``topk``)."""
    import json
    from pathlib import Path

    if not hasattr(codec, "stats"):
        return
    path = Path(run_dir) / f"topk-{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(codec.stats(), indent=None) + "\n")
    tmp.replace(path)
