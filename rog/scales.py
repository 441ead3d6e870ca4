"""Per-tensor ``sum |x|`` by one fixed summation tree, so numpy and torch (CPU or CUDA) agree bit for bit.

The DEFSGDM scale of a tensor is ``mean |x|``.  A BLAS ``sasum`` (or ``torch.sum``) adds in an
order that depends on the CPU's kernel, the address alignment or the GPU's reduction strategy,
so two hosts holding the same accumulator would disagree in the last bit of a scale, and so in
the frames they send.  Here the order is part of the definition:

1. each tensor is cut into blocks of :data:`BLOCK_ELEMENTS` elements counted from its start
   (the last block may be shorter);
2. a block's ``|x|`` values, zero-padded to ``w = BLOCK_ELEMENTS`` elements, are folded in
   float32: while ``w > 1``, ``x[j] = x[j] + x[j + w/2]`` for ``j < w/2``, ``w = w/2``; the
   block sum is ``x[0]``.  Padding to any power of two ``>= len(block)`` gives the same value
   (adding ``+0.0`` to a non-negative float32 is exact), so short blocks fold at their own width;
3. the tensor's sum is the float64 sum of its block sums in block order (left to right).

Every step is an IEEE-754 float32 (or float64) addition of two given operands, correctly rounded
to nearest-even on any conforming hardware, so the result is a function of the values alone.
"""

from __future__ import annotations

import numpy as np

BLOCK_ELEMENTS = 1 << 16  # elements per block (256 KiB of float32: a block folds in cache)
_GROUP_BLOCKS = 4  # full blocks folded together by the numpy path (1 MiB of scratch)


def block_layout(tensor_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The blocks of a flat layout: ``(start, length, tensor)`` per block, each ``(n_blocks,)`` int64, in order."""
    off = np.asarray(tensor_offset, dtype=np.int64)
    n = np.diff(off)
    nb = (n + BLOCK_ELEMENTS - 1) // BLOCK_ELEMENTS
    tensor = np.repeat(np.arange(len(n), dtype=np.int64), nb)
    first = np.repeat(np.cumsum(nb) - nb, nb)
    k = np.arange(int(nb.sum()), dtype=np.int64) - first  # block index inside its tensor
    start = off[:-1][tensor] + k * BLOCK_ELEMENTS
    length = np.minimum(off[1:][tensor] - start, BLOCK_ELEMENTS)
    return start, length, tensor


def fold_width(length: int) -> int:
    """The power of two a block of ``length`` elements is zero-padded to before folding."""
    return 1 << max(0, int(length) - 1).bit_length()


def sums_from_blocks(block_sums: np.ndarray, block_tensor: np.ndarray, n_tensors: int) -> np.ndarray:
    """Per-tensor float64 sums of float32 block sums, added left to right in block order."""
    out = [0.0] * n_tensors
    for t, s in zip(block_tensor.tolist(), np.asarray(block_sums, dtype=np.float32).astype(np.float64).tolist()):
        out[t] += s
    return np.array(out, dtype=np.float64)


def block_sums_abs_numpy(flat: np.ndarray, tensor_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(block_sums float32, block_tensor)`` of ``|flat|`` by the fixed tree (numpy, one thread)."""
    start, length, tensor = block_layout(tensor_offset)
    sums = np.empty(len(start), dtype=np.float32)
    full = np.flatnonzero(length == BLOCK_ELEMENTS)
    scratch = np.empty((_GROUP_BLOCKS, BLOCK_ELEMENTS), dtype=np.float32)
    # runs of consecutive full blocks are contiguous in the flat buffer: fold them a group at a time
    i = 0
    starts = start.tolist()
    full_list = full.tolist()
    while i < len(full_list):
        j = i + 1
        while (j < len(full_list) and j - i < _GROUP_BLOCKS and full_list[j] == full_list[j - 1] + 1
               and starts[full_list[j]] == starts[full_list[j - 1]] + BLOCK_ELEMENTS):
            j += 1
        g = j - i
        a = starts[full_list[i]]
        buf = scratch[:g]
        np.abs(flat[a : a + g * BLOCK_ELEMENTS].reshape(g, BLOCK_ELEMENTS), out=buf)
        sums[full_list[i] : full_list[i] + g] = _fold_rows(buf)
        i = j
    # short blocks (tensor tails and small tensors), batched by their fold width
    short = np.flatnonzero(length < BLOCK_ELEMENTS)
    if short.size:
        widths = np.array([fold_width(x) for x in length[short].tolist()], dtype=np.int64)
        for w in np.unique(widths).tolist():
            members = short[widths == w]
            buf = np.zeros((len(members), w), dtype=np.float32)
            for r, b in enumerate(members.tolist()):
                a, n = starts[b], int(length[b])
                np.abs(flat[a : a + n], out=buf[r, :n])
            sums[members] = _fold_rows(buf)
    return sums, tensor


def _fold_rows(buf: np.ndarray) -> np.ndarray:
    """Fold every row of a ``(m, w)`` float32 array (``w`` a power of two) in place; returns column 0."""
    w = buf.shape[1]
    while w > 1:
        h = w >> 1
        np.add(buf[:, :h], buf[:, h:w], out=buf[:, :h])
        w = h
    return buf[:, 0]


def tensor_sum_abs_numpy(flat: np.ndarray, tensor_offset: np.ndarray) -> np.ndarray:
    """Per-tensor ``sum |x|`` (float64) of a flat float32 numpy buffer by the fixed tree."""
    sums, tensor = block_sums_abs_numpy(flat, tensor_offset)
    return sums_from_blocks(sums, tensor, len(tensor_offset) - 1)
