"""The fused device codec's building blocks: scales and payload indices over one flat view.

Every step here is a fixed number of torch operations over the whole flat buffer, whatever the
number of tensors of the model:

- :class:`FusedBlockSums`: the per-block ``sum |x|`` of :mod:`rog.scales` (same blocks, same
  fold, so the same bits).  The blocks of one fold width are rows of *one* gather from a sliding
  window view of the flat buffer (``flat.unfold(0, width, 1)``, no copy), short blocks are zeroed
  past their length by one masked fill, then all rows fold together.  Blocks near the end of the
  buffer, whose window would run past it, come from a zero-padded copy of the buffer's last
  ``width`` elements.
- :func:`segment_index`: a per-element int64 index (the flat element, or payload bit, of every
  payload element) built from a per-segment table by one cumulative sum, instead of one slice per
  segment.
"""

from __future__ import annotations

import numpy as np
import torch

from ..rows import RowPartition
from ..scales import BLOCK_ELEMENTS, block_layout, fold_width

FOLD_TIERS = (1 << 12, BLOCK_ELEMENTS)  # blocks fold at the smallest of these widths that holds them


class FusedBlockSums:
    """Per-block ``sum |x|`` of a flat device buffer laid out by ``partition``, bit-identical to
    :func:`rog.scales.block_sums_abs_numpy` (the fold of a zero-padded block does not depend on the
    power-of-two width it is padded to, so every block of a tier folds at the tier's width)."""

    def __init__(self, partition: RowPartition, device) -> None:
        self.device = torch.device(device)
        self.n = int(partition.n_elements)
        start, length, _ = block_layout(partition.tensor_offset)
        widths = np.array([fold_width(x) for x in length.tolist()], dtype=np.int64)
        tier = np.searchsorted(np.array(FOLD_TIERS), widths)
        self.tiers = []  # (width, index into flat windows, index into tail windows, lo, mask of short rows, n_full)
        order = []
        for ti, width in enumerate(FOLD_TIERS):
            members = np.flatnonzero(tier == ti)
            if members.size == 0:
                continue
            s, n = start[members], length[members]
            inside = s + width <= self.n
            full = n == width  # always inside
            groups = [members[full], members[~full & inside], members[~full & ~inside]]
            rows = np.concatenate(groups)
            order.append(rows)
            lo = max(0, self.n - width)
            win = np.concatenate([start[groups[0]], start[groups[1]]])
            tail = start[groups[2]] - lo
            short_len = length[np.concatenate(groups[1:])]
            mask = None
            if short_len.size:
                mask = (torch.arange(width, device=self.device)[None, :]
                        >= torch.as_tensor(short_len, device=self.device)[:, None])
            self.tiers.append((width, self._dev(win), self._dev(tail), lo, mask, int(groups[0].size)))
        self.order = np.concatenate(order)  # block ids, in the order of the sums returned

    def _dev(self, a: np.ndarray) -> torch.Tensor | None:
        return torch.as_tensor(a, dtype=torch.int64, device=self.device) if a.size else None

    def __call__(self, flat: torch.Tensor) -> torch.Tensor:
        """float32 block sums of ``|flat|`` (device), in the block order of :attr:`order`."""
        parts = []
        for width, win, tail, lo, mask, n_full in self.tiers:
            rows = []
            if win is not None:
                rows.append(flat.unfold(0, width, 1).index_select(0, win))
            if tail is not None:
                ext = torch.cat([flat[lo:], flat.new_zeros(width)])
                rows.append(ext.unfold(0, width, 1).index_select(0, tail))
            x = rows[0] if len(rows) == 1 else torch.cat(rows)
            x.abs_()
            if mask is not None:
                x[n_full:].masked_fill_(mask, 0.0)
            parts.append(fold_rows_(x))
        return parts[0] if len(parts) == 1 else torch.cat(parts)


def fold_rows_(x: torch.Tensor) -> torch.Tensor:
    """Fold every row of a ``(m, w)`` float32 tensor in place (``x[:, j] += x[:, j + w/2]`` until one
    column is left, :mod:`rog.scales`' tree); returns column 0."""
    w = x.shape[1]
    while w > 1:
        h = w >> 1
        x[:, :h] += x[:, h:w]
        w = h
    return x[:, 0]


def segment_index(first: np.ndarray, lens: np.ndarray, total: int, to_device) -> torch.Tensor:
    """Per-element int64 index of consecutive runs: segment ``i`` contributes ``first[i] + j`` for
    ``j < lens[i]``, segments back to back (``total = sum(lens)``).  Built as one cumulative sum of
    ones with the jump of each segment's first element (no per-segment operation, no per-element
    table look-up); ``to_device`` copies a host array to the device."""
    first = np.asarray(first, dtype=np.int64)
    lens = np.asarray(lens, dtype=np.int64)
    keep = lens > 0
    first, lens = first[keep], lens[keep]
    if total == 0:
        return to_device(np.zeros(0, dtype=np.int64))
    at = np.cumsum(lens) - lens  # where each segment starts among the elements
    prev_end = np.concatenate([[0], first[:-1] + lens[:-1] - 1])
    jump = first - prev_end  # idx[at[i]] = idx[at[i] - 1] + jump[i]  (idx[-1] taken as 0)
    wide = abs(int(jump.min())) >= 1 << 31 or int(jump.max()) >= 1 << 31 or int(at.max()) >= 1 << 31
    table = to_device(np.concatenate([at, jump]).astype(np.int64 if wide else np.int32)).to(torch.int64)
    k = len(at)
    inc = torch.ones(total, dtype=torch.int64, device=table.device)
    inc.index_copy_(0, table[:k], table[k:])
    return torch.cumsum(inc, 0, out=inc)
