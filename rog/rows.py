"""Rows: the unit ROG synchronises.

The paper's partition (and the original artifact's): a parameter tensor with at least
``MIN_DIMS`` dimensions **and** at least ``MIN_ELEMENTS`` elements is split along dim 0 into
one row per slice; any other tensor (1-D, or small) is a single row.  For ConvMLP-M with the
CIFAR-100 head this gives 33,307 rows over 226 tensors.

All parameters live in one flat float32 buffer, tensor after tensor, so row ``i + 1`` starts
exactly where row ``i`` ends.  A *segment* is a run of consecutive rows inside one tensor; it
is a contiguous slice of the flat buffer, which is what makes gather/scatter and bit packing
fast: hot paths loop over segments (hundreds), never over rows (tens of thousands), and batch
short segments into one vectorised index (:func:`ranges_index`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Sequence

import numpy as np

from .scales import tensor_sum_abs_numpy

MIN_DIMS = 2  # tensors with fewer dimensions are one row
MIN_ELEMENTS = 1000  # tensors with fewer elements are one row
BYTES_PER_ELEMENT = 4  # float32
SHORT_SEGMENT_ELEMENTS = 4096  # segments shorter than this are moved row by row (vectorised), longer ones by slices


def rows_of_shape(shape: Sequence[int]) -> int:
    """How many rows a tensor of this shape splits into under the paper's rule."""
    numel = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if len(shape) >= MIN_DIMS and numel >= MIN_ELEMENTS:
        return int(shape[0])
    return 1


def ranges_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``range(starts[i], starts[i] + lengths[i])`` for all ``i`` (vectorised, int64).

    This is how many short runs are moved with one fancy index instead of a Python loop.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    # output position minus position inside the run = each run's base
    base = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    base += np.arange(total, dtype=np.int64)
    return base


def _row_ids(rows, n_rows: int, what: str = "rows") -> np.ndarray:
    """Validate a 1-D sequence of row ids and return it as int64."""
    arr = np.asarray(rows)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-D sequence of row ids, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must hold integer row ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= n_rows):
        raise ValueError(f"{what} must lie in [0, {n_rows}); got {arr.min()}..{arr.max()}")
    return arr


@dataclass(frozen=True, eq=False)
class RowPartition:
    """The row layout of a list of named parameter tensors over one flat float32 buffer.

    Arrays are indexed by row id (``row_*``, length ``n_rows``) or by tensor id
    (``tensor_*``, length ``n_tensors``).  ``row_start[n_rows]`` equals ``n_elements``.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    tensor_offset: np.ndarray  # (n_tensors + 1,) int64: first element of each tensor; last = total
    tensor_first_row: np.ndarray  # (n_tensors + 1,) int64: first row of each tensor; last = n_rows
    row_tensor: np.ndarray  # (n_rows,) int32: tensor id of each row
    row_start: np.ndarray  # (n_rows + 1,) int64: first element of each row; last = n_elements

    def __eq__(self, other: object) -> bool:
        # everything else is derived from the names and shapes
        if not isinstance(other, RowPartition):
            return NotImplemented
        return self.names == other.names and self.shapes == other.shapes

    def __hash__(self) -> int:
        return hash((self.names, self.shapes))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_shapes(cls, named_shapes: Iterable[tuple[str, Sequence[int]]]) -> "RowPartition":
        """Build the partition for ``(name, shape)`` pairs, in the given order."""
        names: list[str] = []
        shapes: list[tuple[int, ...]] = []
        for name, shape in named_shapes:
            shape = tuple(int(d) for d in shape)
            if any(d < 0 for d in shape):
                raise ValueError(f"tensor {name!r}: negative dimension in shape {shape}")
            names.append(str(name))
            shapes.append(shape)
        if not names:
            raise ValueError("a row partition needs at least one tensor")
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"tensor name {dup!r} appears twice; names must be unique")
        numels = np.array([int(np.prod(s, dtype=np.int64)) if s else 1 for s in shapes], dtype=np.int64)
        if np.any(numels == 0):
            bad = names[int(np.argmax(numels == 0))]
            raise ValueError(f"tensor {bad!r} has no elements; drop it before partitioning")
        n_rows_t = np.array([rows_of_shape(s) for s in shapes], dtype=np.int64)
        tensor_offset = np.concatenate([[0], np.cumsum(numels)]).astype(np.int64)
        tensor_first_row = np.concatenate([[0], np.cumsum(n_rows_t)]).astype(np.int64)
        row_tensor = np.repeat(np.arange(len(names), dtype=np.int32), n_rows_t)
        row_len = np.repeat(numels // n_rows_t, n_rows_t)
        row_start = np.concatenate([[0], np.cumsum(row_len)]).astype(np.int64)
        for a in (tensor_offset, tensor_first_row, row_tensor, row_start):
            a.setflags(write=False)
        return cls(tuple(names), tuple(shapes), tensor_offset, tensor_first_row, row_tensor, row_start)

    @classmethod
    def from_module(cls, module) -> "RowPartition":
        """Build the partition of a ``torch.nn.Module``'s trainable parameters (in registration order)."""
        return cls.from_shapes((n, tuple(p.shape)) for n, p in module.named_parameters() if p.requires_grad)

    # ------------------------------------------------------------------ sizes
    @property
    def n_rows(self) -> int:
        """Number of rows over all tensors."""
        return int(self.row_tensor.shape[0])

    @property
    def n_tensors(self) -> int:
        """Number of parameter tensors."""
        return len(self.names)

    @property
    def n_elements(self) -> int:
        """Number of float32 elements in the flat buffer."""
        return int(self.tensor_offset[-1])

    @property
    def row_elements(self) -> np.ndarray:
        """Elements per row, ``(n_rows,)`` int64."""
        return np.diff(self.row_start)

    @property
    def row_bytes(self) -> np.ndarray:
        """Uncompressed float32 bytes per row, ``(n_rows,)`` int64."""
        return self.row_elements * BYTES_PER_ELEMENT

    @property
    def tensor_elements(self) -> np.ndarray:
        """Elements per tensor, ``(n_tensors,)`` int64."""
        return np.diff(self.tensor_offset)

    @property
    def tensor_rows(self) -> np.ndarray:
        """Rows per tensor, ``(n_tensors,)`` int64."""
        return np.diff(self.tensor_first_row)

    @cached_property
    def row_start_list(self) -> list[int]:
        """``row_start`` as a Python list: cheap scalar look-ups for small segment tables."""
        return self.row_start.tolist()

    @cached_property
    def row_tensor_list(self) -> list[int]:
        """``row_tensor`` as a Python list: cheap scalar look-ups for small segment tables."""
        return self.row_tensor.tolist()

    def new_flat(self) -> np.ndarray:
        """A zeroed flat float32 buffer for this layout."""
        return np.zeros(self.n_elements, dtype=np.float32)

    def check_flat(self, flat: np.ndarray, what: str = "flat") -> None:
        """Raise ValueError unless ``flat`` is a 1-D float32 buffer of this layout's size."""
        if not isinstance(flat, np.ndarray) or flat.dtype != np.float32 or flat.shape != (self.n_elements,):
            got = f"{flat.dtype} {flat.shape}" if isinstance(flat, np.ndarray) else type(flat).__name__
            raise ValueError(f"{what} must be a float32 array of shape ({self.n_elements},), got {got}")
        if not flat.flags.c_contiguous:
            raise ValueError(f"{what} must be contiguous (use np.ascontiguousarray)")

    # ------------------------------------------------------------------ views
    def tensor_view(self, flat: np.ndarray, t: int) -> np.ndarray:
        """Tensor ``t`` of ``flat`` as an array of its shape (a view, no copy)."""
        return flat[self.tensor_offset[t] : self.tensor_offset[t + 1]].reshape(self.shapes[t] or ())

    def row_view(self, flat: np.ndarray, i: int) -> np.ndarray:
        """Row ``i`` of ``flat`` (a view, no copy)."""
        if not 0 <= i < self.n_rows:
            raise ValueError(f"row id {i} outside [0, {self.n_rows})")
        return flat[self.row_start[i] : self.row_start[i + 1]]

    # ------------------------------------------------------------------ row sets
    def segments(self, rows: np.ndarray) -> np.ndarray:
        """Split an ordered row sequence into segments: runs of consecutive ids inside one tensor.

        Returns an ``(k, 2)`` int64 array of ``(first_row, n_rows)`` in the order the rows
        appear.  The concatenation of the segments is exactly ``rows``.
        """
        rows = _row_ids(rows, self.n_rows)
        if rows.size == 0:
            return np.zeros((0, 2), dtype=np.int64)
        tens = self.row_tensor[rows]
        brk = np.flatnonzero((np.diff(rows) != 1) | (np.diff(tens) != 0)) + 1
        starts = np.concatenate([[0], brk])
        lengths = np.diff(np.concatenate([starts, [rows.size]]))
        return np.stack([rows[starts], lengths], axis=1)

    def segment_elements(self, segs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Element ranges ``(start, stop)`` of segments, each ``(k,)`` int64."""
        segs = np.asarray(segs, dtype=np.int64).reshape(-1, 2)
        start = self.row_start[segs[:, 0]]
        stop = self.row_start[segs[:, 0] + segs[:, 1]]
        return start, stop

    def element_index(self, rows: np.ndarray) -> np.ndarray:
        """Flat element indices of ``rows``, concatenated in row order (vectorised)."""
        rows = _row_ids(rows, self.n_rows)
        return ranges_index(self.row_start[rows], self.row_start[rows + 1] - self.row_start[rows])

    def gather(self, flat: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Concatenate the values of ``rows`` (in the given order) into a new 1-D array."""
        start, stop = self.segment_elements(self.segments(rows))
        lens = stop - start
        out = np.empty(int(lens.sum()), dtype=flat.dtype)
        pos = np.cumsum(lens) - lens
        short = lens < SHORT_SEGMENT_ELEMENTS
        if short.any():
            out[ranges_index(pos[short], lens[short])] = flat[ranges_index(start[short], lens[short])]
        for a, b, p in zip(start[~short].tolist(), stop[~short].tolist(), pos[~short].tolist()):
            out[p : p + b - a] = flat[a:b]
        return out

    def scatter(self, flat: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
        """Write ``values`` (as produced by :meth:`gather` for the same ``rows``) into ``flat``."""
        start, stop = self.segment_elements(self.segments(rows))
        lens = stop - start
        expected = int(lens.sum())
        values = np.asarray(values)
        if values.shape != (expected,):
            raise ValueError(f"scatter: values has shape {values.shape}, expected ({expected},) for these rows")
        pos = np.cumsum(lens) - lens
        short = lens < SHORT_SEGMENT_ELEMENTS
        if short.any():
            flat[ranges_index(start[short], lens[short])] = values[ranges_index(pos[short], lens[short])]
        for a, b, p in zip(start[~short].tolist(), stop[~short].tolist(), pos[~short].tolist()):
            flat[a:b] = values[p : p + b - a]

    def row_windows(self, flat: np.ndarray, length: int) -> np.ndarray:
        """All ``length``-element windows of ``flat`` as a 2-D view: ``view[row_start[i]]`` is row ``i``.

        Indexing it with the starts of many rows of that length moves them with one fancy index
        (a short copy per row, no per-element index), which is how short segments are batched.
        """
        if not flat.flags.c_contiguous or flat.ndim != 1 or not 1 <= length <= flat.size:
            raise ValueError(f"row_windows needs a contiguous 1-D buffer of at least {length} elements")
        step = flat.itemsize
        return np.ndarray((flat.size - length + 1, length), dtype=flat.dtype, buffer=flat, strides=(step, step))

    def rows_mask(self, rows: np.ndarray) -> np.ndarray:
        """Boolean ``(n_rows,)`` mask of a row set."""
        mask = np.zeros(self.n_rows, dtype=bool)
        mask[_row_ids(rows, self.n_rows)] = True
        return mask

    def tensor_sum_abs(self, flat: np.ndarray) -> np.ndarray:
        """Sum of ``|x|`` per tensor, ``(n_tensors,)`` float64.

        Deterministic: the same values give the same bits wherever the buffer lives and on
        whatever hardware, numpy or torch (:mod:`rog.scales`: blocks folded in float32 by a fixed
        tree, block sums added in float64 in order), so a device codec computes the same scales.
        """
        self.check_flat(flat)
        return tensor_sum_abs_numpy(flat, self.tensor_offset)

    def tensor_mean_abs(self, flat: np.ndarray) -> np.ndarray:
        """Mean of ``|x|`` per tensor: the DEFSGDM scale of each block (one block per tensor)."""
        return self.tensor_sum_abs(flat) / self.tensor_elements
