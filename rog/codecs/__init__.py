"""The codecs: what a chunk of the accumulator becomes on the wire, and back.

* :mod:`.compression`: the :class:`~rog.codecs.compression.Codec` interface, :class:`EncodedChunk`,
  DEFSGDM's 1-bit :class:`SignCodec` (ROG's) and the raw float32 :class:`RawCodec`;
* :mod:`.codecs_topk`: ScaDLES's Top-k codec, with its adaptive gate's majority at the parameter
  server in :mod:`.topk_gate`;
* :mod:`.codec_registry`: every codec by ``--compression`` name and by wire id (``CODECS``,
  ``CODEC_BY_ID``, ``make_codec``);
* the device twins over torch tensors (same frames, byte for byte): :mod:`.device_codec` (1-bit and
  raw), :mod:`.device_codec_topk`, their registry :mod:`.device_codec_registry` (``make_device_codec``),
  the fused block sums :mod:`.device_fused` and the CUDA kernels :mod:`.device_kernels`.

Nothing is imported here: the device modules import torch, and a robot's parameter server imports
only what it uses.
"""
