"""The DEFSGDM codecs over torch tensors: flat buffers stay on their device (a GPU, or the CPU).

:class:`TorchSignCodec` and :class:`TorchRawCodec` are :class:`~rog.codecs.compression.SignCodec` and
:class:`~rog.codecs.compression.RawCodec` for accumulators and parameters held as 1-D float32 torch
tensors.  Their frames are the numpy codecs' byte for byte (same payload order, same scales
from :mod:`rog.scales`, same sign bits, same padding), and decoding adds the same float32
values, so a worker on a GPU and a parameter server or worker on a CPU work in one run.

What crosses between host and device per call: encoding copies the packed payload (and, for
the scales, one float32 per block of 65,536 elements) to the host; decoding copies the received
payload and the chunks' segment tables to the device.  Every element-wise step (``|x|`` sums,
sign bits, packing, unpacking, the scaled add) runs on the device.  Chunks of one transmission
are handled in one batch of tensor operations, a fixed number of them whatever the number of tensors
(:mod:`rog.codecs.device_fused`; ``fused=False`` keeps the earlier per-block gather, to compare).  On CUDA with cupy
installed (the ``gpu`` extra), the sign codec's scales, packing and pull apply are one CUDA kernel each
(:mod:`rog.codecs.device_kernels`; ``kernels=False`` keeps the torch operations, to compare); elsewhere cupy's
``packbits`` / ``unpackbits`` (tensors shared through DLPack, no copies) or torch bit operations pack the bits.
:attr:`TorchCodecBase.d2h_bytes` / ``h2d_bytes`` count every
byte copied each way.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import numpy as np
import torch

from .compression import EncodedChunk, RawCodec, SignCodec, _check_scales, payload_order_many
from ..device.torch_update import check_flat_tensor
from .device_fused import FOLD_TIERS, FusedBlockSums, fold_rows_, segment_index
from .device_kernels import cupy_or_none as _cupy, cupy_stream, kernels_for, segment_table
from ..rows import RowPartition
from ..scales import BLOCK_ELEMENTS, block_layout, fold_width, sums_from_blocks
from ..wire import frame_heads, join_frame
_BIT_WEIGHTS = (128, 64, 32, 16, 8, 4, 2, 1)  # packbits order: first element = most significant bit
_STAGES_IN = 8  # pinned staging buffers for copies to the device, used in turn (a copy never waits on the last)
_TORCH_DTYPE = {np.dtype(np.uint8): torch.uint8, np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64,
                np.dtype(np.float32): torch.float32}


def _per_chunk(a: np.ndarray, counts: np.ndarray) -> list:
    """``a`` (rows of consecutive chunks back to back) cut into each chunk's rows (``counts[i]`` for chunk ``i``)."""
    ends = np.cumsum(counts).tolist()
    return [a[s:e] for s, e in zip([0] + ends[:-1], ends)]


class _ByteRun:
    """uint8 arrays to be laid back to back (one part of :meth:`TorchCodecBase._to_device_parts`)."""

    dtype = np.dtype(np.uint8)

    def __init__(self, members: list) -> None:
        self.members = members
        self.nbytes = sum(m.nbytes for m in members)

    def write(self, host: np.ndarray, at: int) -> None:
        for m in self.members:
            host[at : at + m.nbytes] = m
            at += m.nbytes

    def join(self) -> np.ndarray:
        return np.concatenate(self.members) if self.members else np.zeros(0, dtype=np.uint8)


class TorchCodecBase:
    """What the torch codecs share: device, transfer counters, block sums, index building, packing."""

    def _setup(self, device, use_cupy: bool | None, fused: bool = True, kernels: bool | None = None) -> None:
        self.device = torch.device(device)
        self.fused = bool(fused)  # False: the earlier path (per-block views, 2-D segment tables), kept to compare
        self._fused_sums: dict = {}  # id(partition) -> (partition, FusedBlockSums)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        cp = _cupy() if self.device.type == "cuda" and use_cupy is not False else None
        if use_cupy and cp is None:
            raise ValueError("use_cupy=True needs cupy and a CUDA device (pip install 'rog[gpu]')")
        self._cp = cp
        self._kernels = kernels_for(self.device, cp) if cp is not None and fused and kernels is not False else None
        if kernels and self._kernels is None:
            raise ValueError("kernels=True needs cupy, a CUDA device and fused=True (pip install 'rog[gpu]')")
        self._block_tables: dict = {}  # id(partition) -> (partition, (device start int64, device length int32))
        self.d2h_bytes = 0  # bytes copied device -> host
        self.h2d_bytes = 0  # bytes copied host -> device
        self._views: dict = {}  # (data_ptr, numel) -> padded block views of a buffer, per fold tier
        self._scales_memo: tuple | None = None
        self._pinned: torch.Tensor | None = None  # staging of copies to the host
        self._stages_in: list = []  # ring of [pinned staging buffer, CUDA event of its last copy] to the device
        self._stage_at = 0

    @property
    def packer(self) -> str:
        """``kernels`` (the CUDA kernels of :mod:`rog.codecs.device_kernels`), ``cupy`` or ``torch``: what packs and
        unpacks sign bits."""
        return "kernels" if self._kernels is not None else "cupy" if self._cp is not None else "torch"

    # ---------------------------------------------------------------- transfers
    def _to_host(self, t: torch.Tensor, as_bytes: bool = False):
        """A host copy of a 1-D device tensor (pinned staging on CUDA): a numpy array, or its bytes (one copy)."""
        host = self._to_host_view(t)
        return host.tobytes() if as_bytes else host.copy()

    def _to_host_view(self, t: torch.Tensor) -> np.ndarray:
        """A 1-D device tensor on the host as a numpy array that is valid only until the next copy to the host
        (the pinned staging buffer on CUDA, reused; the tensor itself on the CPU)."""
        n = t.numel() * t.element_size()
        self.d2h_bytes += n
        if self.device.type != "cuda":
            return t.detach().numpy()
        if self._pinned is None or self._pinned.numel() < n:
            self._pinned = torch.empty(max(n, 1 << 20), dtype=torch.uint8, pin_memory=True)
        stage = self._pinned[:n].view(t.dtype)
        stage.copy_(t)
        return stage.numpy()

    def _to_device(self, a: np.ndarray) -> torch.Tensor:
        """A device copy of a 1-D host array (pinned staging on CUDA)."""
        return self._to_device_parts([a])[0]

    def _to_device_parts(self, parts) -> list:
        """Device copies of 1-D host arrays in one copy: each part is written straight into one pinned staging
        buffer at an 8-byte aligned offset, and the buffer crosses once.  A part that is a list of bytes-like
        objects becomes one uint8 part, its members back to back."""
        arrays = [a if isinstance(a, np.ndarray) else
                  _ByteRun([np.frombuffer(m, dtype=np.uint8) for m in a]) for a in parts]
        at, offsets = 0, []
        for a in arrays:
            offsets.append(at)
            at += (a.nbytes + 7) // 8 * 8
        self.h2d_bytes += sum(a.nbytes for a in arrays)
        if self.device.type != "cuda":
            return [torch.from_numpy(a.join() if isinstance(a, _ByteRun) else np.array(a, copy=True)) for a in arrays]
        if len(self._stages_in) < _STAGES_IN:
            self._stages_in.append([None, None])
        slot = self._stages_in[self._stage_at % len(self._stages_in)]
        self._stage_at += 1
        if slot[1] is not None:
            slot[1].synchronize()  # the copy that last read this slot is done (usually long ago): safe to refill
        if slot[0] is None or slot[0].numel() < at:
            slot[0] = torch.empty(max(at, 1 << 20), dtype=torch.uint8, pin_memory=True)
        host = slot[0].numpy()
        for a, o in zip(arrays, offsets):
            if isinstance(a, _ByteRun):
                a.write(host, o)
            else:
                host[o : o + a.nbytes] = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
        out = torch.empty(max(at, 1), dtype=torch.uint8, device=self.device)
        out[:at].copy_(slot[0][:at], non_blocking=True)  # asynchronous: the host does not wait for the device
        slot[1] = torch.cuda.Event()
        slot[1].record(torch.cuda.current_stream(self.device))
        return [out[o : o + a.nbytes].view(_TORCH_DTYPE[np.dtype(a.dtype).newbyteorder("=")])
                for a, o in zip(arrays, offsets)]

    # ---------------------------------------------------------------- scales
    def flat_mean_abs(self, partition: RowPartition, flat: torch.Tensor) -> np.ndarray:
        """Per-tensor ``mean |x|`` (float64, host) of a device buffer, bit-identical to
        :meth:`RowPartition.tensor_mean_abs` of the same values."""
        check_flat_tensor(flat, partition.n_elements, self.device, "flat")
        key = (flat.data_ptr(), flat._version, id(partition))  # _version counts in-place writes
        memo = self._scales_memo
        if memo is not None and memo[0] == key and memo[2]() is flat:
            return memo[1]
        sums = self._block_sums(partition, flat)
        start, length, tensor = block_layout(partition.tensor_offset)
        out = sums_from_blocks(sums, tensor, partition.n_tensors) / partition.tensor_elements
        self._scales_memo = (key, out, weakref.ref(flat))
        return out

    @staticmethod
    def _per_partition(cache: dict, partition: RowPartition, build):
        """``build(partition)``, kept in ``cache`` for the last few partitions (keyed by identity)."""
        got = cache.get(id(partition))
        if got is None or got[0] is not partition:
            if len(cache) >= 4:
                cache.pop(next(iter(cache)))
            got = cache[id(partition)] = (partition, build(partition))
        return got[1]

    def _block_table(self, partition: RowPartition) -> tuple:
        """Device (start int64, length int32) of every scale block, as the block-sum kernel reads them."""
        start, length, _ = block_layout(partition.tensor_offset)
        return (torch.as_tensor(start, dtype=torch.int64, device=self.device),
                torch.as_tensor(length.astype(np.int32), device=self.device))

    def _block_sums(self, partition: RowPartition, flat: torch.Tensor) -> np.ndarray:
        if self._kernels is not None:
            start, length = self._per_partition(self._block_tables, partition, self._block_table)
            return self._to_host(self._kernels.block_sums(flat, start, length, start.numel()))
        if self.fused:
            sums = self._per_partition(self._fused_sums, partition, lambda p: FusedBlockSums(p, self.device))
            out = np.empty(len(sums.order), dtype=np.float32)
            out[sums.order] = self._to_host(sums(flat))
            return out
        tiers = self._tier_views(partition, flat)
        parts = []
        for width, views, _ in tiers:
            x = torch.cat(views).view(-1, width)
            x.abs_()
            parts.append(fold_rows_(x))
        sums = self._to_host(torch.cat(parts) if len(parts) > 1 else parts[0])
        out = np.empty(len(sums), dtype=np.float32)
        out[np.concatenate([order for _, _, order in tiers])] = sums
        return out

    def _tier_views(self, partition: RowPartition, flat: torch.Tensor) -> list:
        key = (flat.data_ptr(), flat.numel(), id(partition))
        got = self._views.get(key)
        if got is not None:
            return got
        start, length, _ = block_layout(partition.tensor_offset)
        widths = np.array([fold_width(n) for n in length.tolist()], dtype=np.int64)
        tier = np.searchsorted(np.array(FOLD_TIERS), widths)  # smallest tier >= the block's own width
        zeros = torch.zeros(BLOCK_ELEMENTS, dtype=torch.float32, device=self.device)
        tiers = []
        for ti, width in enumerate(FOLD_TIERS):
            members = np.flatnonzero(tier == ti)
            if members.size == 0:
                continue
            views = []
            for b in members.tolist():
                a, n = int(start[b]), int(length[b])
                views.append(flat[a : a + n])
                if n < width:
                    views.append(zeros[: width - n])
            tiers.append((width, views, members))
        if len(self._views) >= 4:  # a few buffers (the accumulator, a benchmark's copies)
            self._views.pop(next(iter(self._views)))
        self._views[key] = tiers
        return tiers

    # ---------------------------------------------------------------- index building
    def _ranges(self, elem_start: np.ndarray, pos: np.ndarray, lens: np.ndarray, total: int):
        """Device int64 indices ``(elements, positions, lens)``: for each segment ``i``, elements
        ``elem_start[i] + j`` and payload positions ``pos[i] + j`` for ``j < lens[i]``; ``lens`` on the device."""
        excl = np.cumsum(lens) - lens
        table = np.stack([elem_start - excl, pos - excl, lens])
        wide = table.size and (table.min() < -(1 << 31) or table.max() >= 1 << 31)
        dev = self._to_device(table.astype(np.int64 if wide else np.int32).reshape(-1)).view(3, -1).to(torch.int64)
        base = torch.repeat_interleave(dev[:2].T, dev[2], dim=0, output_size=total)
        base += torch.arange(total, dtype=torch.int64, device=self.device)[:, None]
        return base[:, 0], base[:, 1], dev[2]

    def _segment_of_element(self, lens: np.ndarray, total: int) -> torch.Tensor:
        """Device int64 index of each payload element's segment (segments of ``lens`` back to back): ones at
        the segments' first elements, one cumulative sum (a per-element pass; ``repeat_interleave``'s CUDA
        kernel writes each segment from one thread)."""
        lens = np.asarray(lens, dtype=np.int64)
        firsts = (np.cumsum(lens) - lens)[lens > 0]
        seg = np.flatnonzero(lens > 0)  # zero-length segments own no element
        mark = torch.zeros(total, dtype=torch.int32, device=self.device)
        if total == 0:
            return mark.to(torch.int64)
        jumps = np.diff(seg, prepend=0).astype(np.int32)  # segment number steps at each first element
        table = self._to_device(np.concatenate([firsts.astype(np.int32), jumps]) if total < 1 << 31 else
                                np.concatenate([firsts, jumps.astype(np.int64)]))
        k = len(firsts)
        mark.index_copy_(0, table[:k].to(torch.int64), table[k:].to(torch.int32))
        return torch.cumsum(mark, 0, dtype=torch.int32).to(torch.int64)

    # ---------------------------------------------------------------- bits
    def _pack(self, bits: torch.Tensor) -> torch.Tensor:
        """uint8 0/1 values (length a multiple of 8) -> packed bytes, numpy.packbits order."""
        if self._cp is not None:
            cp = self._cp
            with cupy_stream(cp, self.device):
                return torch.from_dlpack(cp.packbits(cp.from_dlpack(bits)))
        w = torch.tensor(_BIT_WEIGHTS, dtype=torch.uint8, device=self.device)
        return (bits.view(-1, 8) * w).sum(dim=1, dtype=torch.uint8)

    def _unpack(self, data: torch.Tensor) -> torch.Tensor:
        """Packed bytes -> uint8 0/1 values, numpy.unpackbits order."""
        if self._cp is not None:
            cp = self._cp
            with cupy_stream(cp, self.device):
                return torch.from_dlpack(cp.unpackbits(cp.from_dlpack(data)))
        shifts = torch.arange(7, -1, -1, dtype=torch.uint8, device=self.device)
        return ((data[:, None] >> shifts) & 1).view(-1)

    # ---------------------------------------------------------------- batches
    def _encode_layout(self, partition: RowPartition, chunks, pad_bits: bool):
        """Payload-order tables of a batch of chunks: every segment back to back with each chunk's count, the same
        cut per chunk, (elem_start, pos, lens) and each chunk's (offset, size) in the concatenated payload (in bits
        for the sign codec, elements for raw)."""
        segs_all, counts = payload_order_many(partition, chunks)
        segs_l = _per_chunk(segs_all, counts)
        start, stop = partition.segment_elements(segs_all)
        lens = stop - start
        first = np.cumsum(counts) - counts  # each chunk's first segment
        excl = np.cumsum(lens) - lens  # elements before each segment, over the batch
        totals = np.diff(np.append(excl[first], excl[-1] + lens[-1]))
        sizes = (totals + 7) // 8 * 8 if pad_bits else totals
        at = np.cumsum(sizes) - sizes  # each chunk's payload offset
        pos = excl + np.repeat(at - excl[first], counts)
        spans = list(zip(at.tolist(), totals.tolist(), sizes.tolist()))
        return segs_all, counts, segs_l, start, pos, lens, spans, int(sizes.sum())

    def _decode_layout(self, partition: RowPartition, chunks, per_element_bytes: float):
        segs_l = [np.asarray(c.segments, dtype=np.int64).reshape(-1, 2) for c in chunks]
        counts = np.array([len(x) for x in segs_l], dtype=np.int64)
        start, stop = partition.segment_elements(np.concatenate(segs_l))
        lens = stop - start
        sizes = np.array([int(round(len(c.data) / per_element_bytes)) for c in chunks], dtype=np.int64)
        first = np.cumsum(counts) - counts
        excl = np.cumsum(lens) - lens
        pos = excl + np.repeat(np.cumsum(sizes) - sizes - excl[first], counts)
        return start, pos, lens, int(sizes.sum())

    @staticmethod
    def _disjoint(chunks) -> bool:
        """No row appears in two chunks of the batch (then one scatter per batch is exact)."""
        segs = np.concatenate([np.asarray(c.segments, dtype=np.int64).reshape(-1, 2) for c in chunks])
        order = np.argsort(segs[:, 0], kind="stable")
        first, n = segs[order, 0], segs[order, 1]
        return bool(np.all(first[:-1] + n[:-1] <= first[1:]))

    def _check_outs(self, partition: RowPartition, outs) -> tuple:
        outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
        for i, out in enumerate(outs):
            check_flat_tensor(out, partition.n_elements, self.device, f"outs[{i}]")
        return outs

    def decode_many(self, partition: RowPartition, chunks: Sequence[EncodedChunk], outs, weight: float = 1.0) -> None:
        """Add ``weight`` times every chunk's values into every buffer of ``outs`` (one batch when the
        chunks' rows are disjoint, as in one transmission; chunk by chunk otherwise)."""
        chunks = list(chunks)
        if not chunks:
            return
        outs = self._check_outs(partition, outs)
        if len(chunks) > 1 and not self._disjoint(chunks):
            for c in chunks:
                self._decode_batch(partition, [c], outs, weight)
            return
        self._decode_batch(partition, chunks, outs, weight)

    def decode_into(self, partition: RowPartition, chunk: EncodedChunk, outs, weight: float = 1.0) -> None:
        self.decode_many(partition, [chunk], outs, weight)

    def encode(self, partition: RowPartition, acc: torch.Tensor, scales: np.ndarray, chunk) -> EncodedChunk:
        return self.encode_many(partition, acc, scales, [chunk])[0]


class TorchSignCodec(TorchCodecBase, SignCodec):
    """DEFSGDM 1-bit codec over device tensors; frames identical to :class:`~rog.codecs.compression.SignCodec`'s."""

    def __init__(self, device="cpu", use_cupy: bool | None = None, fused: bool = True,
                 kernels: bool | None = None) -> None:
        self._setup(device, use_cupy, fused, kernels)

    def encode_many(self, partition: RowPartition, acc: torch.Tensor, scales: np.ndarray, chunks) -> list:
        """Encode a batch of chunks of ``acc``: one gather, one sign pass, one pack, one copy to the host."""
        check_flat_tensor(acc, partition.n_elements, self.device, "acc")
        scales = _check_scales(partition, scales)
        chunks = list(chunks)
        if not chunks:
            return []
        _, _, segs_l, start, pos, lens, spans, n_bits = self._encode_layout(partition, chunks, pad_bits=True)
        total = int(lens.sum())
        if self._kernels is not None:  # one kernel: every payload byte from its 8 elements' sign bits
            table = segment_table(start, pos, lens)
            dev = self._to_device(table.reshape(-1)).view(3, -1)
            packed = self._to_host(self._kernels.sign_pack(acc, dev, table.shape[1], n_bits // 8), as_bytes=True)
            return [EncodedChunk(segs, scales[partition.row_tensor[segs[:, 0]]], packed[at // 8 : (at + size) // 8])
                    for segs, (at, _, size) in zip(segs_l, spans)]
        if self.fused:  # gather in payload order, then place the bits (shifted only where chunks pad)
            pads = not np.array_equal(pos, np.cumsum(lens) - lens)
            signs = torch.signbit(acc.index_select(0, segment_index(start, lens, total, self._to_device)))
            signs = signs.view(torch.uint8)
            if pads:
                bits = torch.zeros(n_bits, dtype=torch.uint8, device=self.device)
                bits.index_copy_(0, segment_index(pos, lens, total, self._to_device), signs)
            elif n_bits > total:  # only the last chunk pads
                bits = torch.cat([signs, signs.new_zeros(n_bits - total)])
            else:
                bits = signs
        else:
            src, dst, _ = self._ranges(start, pos, lens, total)
            bits = torch.zeros(n_bits, dtype=torch.uint8, device=self.device)
            bits[dst] = torch.signbit(acc[src]).to(torch.uint8)
        packed = self._to_host(self._pack(bits)).tobytes()
        out = []
        for segs, (at, _, size) in zip(segs_l, spans):
            out.append(EncodedChunk(segs, scales[partition.row_tensor[segs[:, 0]]], packed[at // 8 : (at + size) // 8]))
        return out

    def encode_framed(self, partition: RowPartition, acc: torch.Tensor, scales: np.ndarray, chunks,
                      iteration: int) -> tuple[list, list[bytes]] | None:
        """:func:`rog.wire.encode_frames` on the kernels: the payload and every frame's crc32 computed on the
        device and brought to the host in one copy, the frames built straight from it (each chunk's data a view
        of its frame).  None where the kernels do not run (the caller then encodes and frames on the host)."""
        if self._kernels is None:
            return None
        check_flat_tensor(acc, partition.n_elements, self.device, "acc")
        scales = _check_scales(partition, scales)
        chunks = list(chunks)
        if not chunks:
            return [], []
        segs_all, counts, segs_l, start, pos, lens, spans, n_bits = self._encode_layout(partition, chunks, pad_bits=True)
        n_bytes, k = n_bits // 8, len(chunks)
        sc_all = scales[partition.row_tensor[segs_all[:, 0]]]
        seg_scales = _per_chunk(sc_all, counts)
        first = np.array([at // 8 for at, _, _ in spans], dtype=np.int64)
        count = np.array([size // 8 for _, _, size in spans], dtype=np.int64)
        heads = frame_heads(self.codec_id, iteration, segs_all, sc_all, counts, count)
        seeds = np.array([h[2] for h in heads], dtype=np.uint32).view(np.int32)
        table = segment_table(start, pos, lens)
        table_dev, fc_dev, seed_dev = self._to_device_parts([table.reshape(-1), np.concatenate([first, count]), seeds])
        crc_at = (n_bytes + 3) // 4 * 4
        out = torch.empty(crc_at + 4 * k, dtype=torch.uint8, device=self.device)
        self._kernels.sign_pack(acc, table_dev.view(3, -1), table.shape[1], n_bytes, out=out)
        self._kernels.frame_crc(out, fc_dev[:k], fc_dev[k:], seed_dev, k, out[crc_at:].view(torch.int32))
        host = self._to_host_view(out)  # the frames below copy out of it before anything else reuses it
        crcs = host[crc_at:].view("<u4").tolist()
        payload = memoryview(host)
        encoded, frames = [], []
        for segs, sc, (head, table_bytes, _), crc, a, n in zip(segs_l, seg_scales, heads, crcs, first.tolist(),
                                                               count.tolist()):
            frame = join_frame(head, crc, table_bytes, payload[a : a + n])
            frames.append(frame)
            encoded.append(EncodedChunk(segs, sc, memoryview(frame)[len(frame) - n :]))
        return encoded, frames

    def _decode_batch(self, partition: RowPartition, chunks, outs, weight: float) -> None:
        start, pos, lens, n_bits = self._decode_layout(partition, chunks, 1 / 8)
        total = int(lens.sum())
        # the one rounding step, as the numpy codec: float32(scale * weight); values are exactly +-that
        sw = (np.concatenate([np.asarray(c.scales, dtype=np.float64) for c in chunks]) * float(weight)).astype(np.float32)
        if self._kernels is not None:  # one upload (table, scales, payload), one kernel per buffer
            table = segment_table(start, pos, lens)
            k = table.shape[1]
            table_dev, sw_dev, data_dev = self._to_device_parts([table.reshape(-1), sw[lens > 0],
                                                                 [c.data for c in chunks]])
            for out in outs:
                self._kernels.sign_apply(data_dev, table_dev.view(3, k), sw_dev, k, n_bits, out)
            return
        data = np.frombuffer(b"".join(c.data for c in chunks), dtype=np.uint8)
        bits = self._unpack(self._to_device(data))
        sw_dev = self._to_device(sw)
        if self.fused:
            pads = not np.array_equal(pos, np.cumsum(lens) - lens)
            dst = segment_index(start, lens, total, self._to_device)
            neg = bits.index_select(0, segment_index(pos, lens, total, self._to_device)) if pads else bits[:total]
            scale = sw_dev.index_select(0, self._segment_of_element(lens, total))
            vals = torch.where(neg.bool(), scale.neg(), scale)  # exactly +-float32(scale * weight)
            for out in outs:  # rows of one batch are disjoint: one float32 add per element
                out.index_add_(0, dst, vals)
            return
        dst, src, lens_dev = self._ranges(start, pos, lens, total)
        scale = torch.repeat_interleave(sw_dev, lens_dev, output_size=total)
        sign = 1.0 - 2.0 * bits[src].to(torch.float32)  # exactly +1 / -1
        vals = sign * scale
        for out in outs:
            out[dst] += vals


class TorchRawCodec(TorchCodecBase, RawCodec):
    """Raw float32 codec over device tensors; frames identical to :class:`~rog.codecs.compression.RawCodec`'s."""

    def __init__(self, device="cpu", use_cupy: bool | None = None, fused: bool = True,
                 kernels: bool | None = None) -> None:
        self._setup(device, use_cupy, fused, kernels)

    def encode_many(self, partition: RowPartition, acc: torch.Tensor, scales: np.ndarray, chunks) -> list:
        """Encode a batch of chunks: one gather and one copy to the host."""
        check_flat_tensor(acc, partition.n_elements, self.device, "acc")
        chunks = list(chunks)
        if not chunks:
            return []
        _, _, segs_l, start, pos, lens, spans, n = self._encode_layout(partition, chunks, pad_bits=False)
        if self.fused:  # raw payloads are back to back: payload position = element number
            vals = acc.index_select(0, segment_index(start, lens, n, self._to_device))
        else:
            src, dst, _ = self._ranges(start, pos, lens, int(lens.sum()))
            vals = torch.empty(n, dtype=torch.float32, device=self.device)
            vals[dst] = acc[src]
        host = self._to_host(vals).astype("<f4", copy=False).tobytes()
        return [EncodedChunk(segs, np.zeros(len(segs), dtype=np.float32), host[at * 4 : (at + size) * 4])
                for segs, (at, _, size) in zip(segs_l, spans)]

    def _decode_batch(self, partition: RowPartition, chunks, outs, weight: float) -> None:
        start, pos, lens, n = self._decode_layout(partition, chunks, 4)
        data = np.frombuffer(b"".join(bytes(c.data) for c in chunks), dtype="<f4")
        vals_all = self._to_device(data.astype(np.float32, copy=False))
        if self.fused:  # payloads back to back: payload position = element number
            dst = segment_index(start, lens, n, self._to_device)
            vals = vals_all if np.float32(weight) == 1 else vals_all * float(np.float32(weight))
            for out in outs:  # rows of one batch are disjoint: one float32 add per element
                out.index_add_(0, dst, vals)
            return
        dst, src, _ = self._ranges(start, pos, lens, int(lens.sum()))
        vals = vals_all[src]
        w = np.float32(weight)
        if w != 1:
            vals = vals * float(w)
        for out in outs:
            out[dst] += vals
