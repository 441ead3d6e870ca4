"""ScaDLES's Top-k codec with error feedback and the adaptive (energy-gated) switch to dense.

Per-tensor Top-k at ratio ``CR``: for every tensor ``t`` of ``n_t`` elements the sender keeps the
``k_t = ceil(CR n_t)`` largest magnitudes of its accumulator (the threshold is computed once per
transmission over the *whole* tensor, in :meth:`TopKCodec.tensor_scales`, so chunking does not
change which elements go) and sends them as int32 positions + float32 values.  Error feedback is
the accumulator itself, as for the 1-bit codec: a commit subtracts exactly the values sent, so the
unsent elements stay in the residual and nothing is applied twice; a dense transmission sends
every value, which leaves an exact zero residual (the notes' resolution: residual cleared on dense).

The adaptive gate (ScaDLES Sec. IV): per push the worker computes a statistic of what Top-k would
*lose* from its accumulator ``a``, either the paper's formula (``statistic="energy"``)
``c = 1 - sum_t ||topk(a_t)||^2 / ||a||^2`` or the released code's (``statistic="norm"``, the default:
it matched more of the paper's Table V cells here, docs/scadles.md)
``c = 1 - sum_t ||topk(a_t)|| / sum_t ||a_t||`` (unsquared per-tensor norms, summed; both are recorded),
smooths it with an EWMA (``s = beta s + (1 - beta) c``; first value ``c``) and votes *compress* iff
``s <= delta``.  The vote goes to the parameter server in the first chunk of the push; the PS
(:class:`rog.codecs.topk_gate.PSGate`) decides by majority and puts the decision on its pull chunks;
a worker uses the latest decision it received for its next push (dense before the first one).
With the gate off the codec always sends Top-k (the static baseline).

Payload of one chunk (little-endian), after a 12-byte header
``flags u8, zero u8, zero u16, statistic f32, count u32``:

* dense (``flags & 1 == 0``): ``count`` = the chunk's elements, then ``count`` float32 values;
* sparse (``flags & 1``): ``count`` int32 positions into the chunk's element order (strictly
  increasing), then ``count`` float32 values.

``flags`` bit 1: a vote is present, bit 2: its value; bit 3: a PS decision is present, bit 4: its
value.  The segment table's scale field carries each segment's tensor threshold (informational).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..chunks import ChunkSpec
from ..errors import ConfigError
from ..options import check_choices, option
from .compression import EncodedChunk, RawCodec
from ..rows import RowPartition

PAYLOAD_HEADER = struct.Struct("<BBHfI")
PAYLOAD_HEADER_BYTES = PAYLOAD_HEADER.size  # 12
F_SPARSE, F_VOTE, F_VOTE_COMPRESS, F_DECISION, F_DECISION_COMPRESS = 1, 2, 4, 8, 16
_KNOWN_FLAGS = 31
DEFAULT_RATIO = 0.1  # ScaDLES's final configuration: CR 0.1
DEFAULT_DELTA = 0.3  # ... and delta 0.3
DEFAULT_SMOOTHING = 0.9  # EWMA weight of the previous smoothed statistic
STATISTICS = ("energy", "norm")  # the paper's squared whole-model share; the released code's summed tensor norms
DEFAULT_STATISTIC = "norm"  # the reading that matched the paper's CNC (docs/scadles.md, Table V)
FLAG_PREFIX = "topk"  # run.py --topk-<option>


def gate_statistics(kept_sq, total_sq) -> dict:
    """Both readings of the gate's statistic from per-tensor squared norms of Top-k(a_t) and of a_t:
    ``energy = 1 - sum kept_sq / sum total_sq``, ``norm = 1 - sum sqrt(kept_sq) / sum sqrt(total_sq)``."""
    kept_sq, total_sq = np.asarray(kept_sq, dtype=np.float64), np.asarray(total_sq, dtype=np.float64)
    tot, tot_n = float(total_sq.sum()), float(np.sqrt(total_sq).sum())
    return {"energy": 0.0 if tot == 0 else max(0.0, 1.0 - float(kept_sq.sum()) / tot),
            "norm": 0.0 if tot_n == 0 else max(0.0, 1.0 - float(np.sqrt(kept_sq).sum()) / tot_n)}


@dataclass(frozen=True)
class Options:
    """The Top-k codec's options (``run.py --topk-*``; ``config.yaml``'s ``compression_options``), checked here and
    nowhere else."""

    ratio: float = option(DEFAULT_RATIO, "share CR of each tensor's elements sent")
    gate: bool = option(True, "on = ScaDLES's adaptive gate (Top-k only while it keeps the "
                              "gradient's energy, majority vote at the PS), off = always Top-k")
    delta: float = option(DEFAULT_DELTA, "compress iff the smoothed lost energy share <= delta",
                          flag="--topk-gate-delta")
    smoothing: float = option(DEFAULT_SMOOTHING, "EWMA weight of the past statistic in [0, 1)",
                              flag="--topk-gate-smoothing")
    statistic: str = option(DEFAULT_STATISTIC, "norm = the released code's 1 - sum_l "
                            "||topk(g_l)|| / sum_l ||g_l|| (it matched the paper's Table V better, docs/scadles.md); "
                            "energy = the paper's formula 1 - ||topk(g)||^2 / ||g||^2", flag="--topk-gate-statistic",
                            choices=STATISTICS)

    def __post_init__(self) -> None:
        check_choices(self, FLAG_PREFIX)
        ratio, delta, smoothing = self.ratio, self.delta, self.smoothing
        if not (isinstance(ratio, (int, float)) and 0 < ratio <= 1):
            raise ConfigError(f"--topk-ratio must lie in (0, 1] (the share of each tensor's elements sent), got "
                              f"{ratio!r}; e.g. 0.1 or 0.01 as in ScaDLES")
        if not (isinstance(delta, (int, float)) and 0 <= delta <= 1):
            raise ConfigError(f"--topk-gate-delta must lie in [0, 1] (the gradient energy Top-k may lose), got "
                              f"{delta!r}; e.g. 0.3 as in ScaDLES")
        if not (isinstance(smoothing, (int, float)) and 0 <= smoothing < 1):
            raise ConfigError(f"--topk-gate-smoothing must lie in [0, 1) (the EWMA weight of the past), got "
                              f"{smoothing!r}; e.g. 0.9")
        if not isinstance(self.gate, bool):
            raise ConfigError(f"--topk-gate must be on or off, got {self.gate!r}")


def _chunk_elements(partition: RowPartition, segments: np.ndarray) -> int:
    start, stop = partition.segment_elements(np.asarray(segments, dtype=np.int64).reshape(-1, 2))
    return int((stop - start).sum())


class TopKCodec(RawCodec):
    """Top-k (ratio ``ratio``) with error feedback; ``gate=True`` adds the energy gate (``delta``,
    EWMA ``smoothing``).  ``ps_workers=N`` makes this the parameter server's instance, which
    collects the workers' votes and decides (:class:`rog.codecs.topk_gate.PSGate`)."""

    codec_id = 2
    name = "topk"
    options = Options  # --topk-*: run.py's compression group
    run_options = FLAG_PREFIX

    def __init__(self, ratio: float = DEFAULT_RATIO, gate: bool = False, delta: float = DEFAULT_DELTA,
                 smoothing: float = DEFAULT_SMOOTHING, ps_workers: int | None = None,
                 statistic: str = DEFAULT_STATISTIC) -> None:
        Options(ratio, bool(gate), delta, smoothing, statistic)  # the checks (ConfigError naming the flag)
        self.statistic_kind = statistic
        self.statistics: dict = {}  # the latest value of every reading (gate_statistics)
        self.ratio, self.gate, self.delta, self.smoothing = float(ratio), bool(gate), float(delta), float(smoothing)
        self.ps_gate = None
        if ps_workers is not None and self.gate:
            from .topk_gate import PSGate

            self.ps_gate = PSGate(ps_workers)
        self.is_ps = ps_workers is not None
        self.decision = not self.gate  # worker side: the PS's latest decision (static Top-k: always compress)
        self.statistic: float | None = None  # the latest raw statistic c of the chosen reading
        self.smoothed: float | None = None  # its EWMA s
        self.records: list[dict] = []  # one per transmission this instance encoded (see :meth:`stats`)

    # ------------------------------------------------------------------ sizes
    def data_bytes(self, n_elements: int) -> int:
        """The bound of a chunk's payload: the dense form (a sparse one is never larger)."""
        return PAYLOAD_HEADER_BYTES + 4 * int(n_elements)

    def row_wire_bytes(self, partition: RowPartition) -> np.ndarray:
        return partition.row_elements * 4.0

    def k_per_tensor(self, partition: RowPartition) -> np.ndarray:
        """``ceil(CR n_t)`` per tensor (at least 1)."""
        return np.maximum(1, np.ceil(self.ratio * partition.tensor_elements - 1e-9)).astype(np.int64)

    # ------------------------------------------------------------------ the statistic and thresholds
    def tensor_scales(self, partition: RowPartition, acc: np.ndarray, mean_abs: np.ndarray | None = None) -> np.ndarray:
        """Per-tensor Top-k thresholds (the ``k_t``-th largest magnitude) of ``acc``; also sets
        :attr:`statistic`, the share of ``acc``'s energy Top-k would not send."""
        partition.check_flat(acc, "acc")
        ks = self.k_per_tensor(partition)
        off = partition.tensor_offset
        thr = np.zeros(partition.n_tensors, dtype=np.float32)
        kept, total = np.zeros(partition.n_tensors), np.zeros(partition.n_tensors)
        for t in range(partition.n_tensors):
            a = np.abs(acc[off[t] : off[t + 1]])
            n, k = a.size, int(ks[t])
            total[t] = float(np.dot(a.astype(np.float64), a))
            if k >= n:
                kept[t] = total[t]
                continue
            top = np.partition(a, n - k)[n - k :]
            thr[t] = top.min()
            kept[t] = float(np.dot(top.astype(np.float64), top))
        self._set_statistics(kept, total)
        return thr

    def _set_statistics(self, kept_sq, total_sq) -> None:
        """Both readings of the statistic from per-tensor squared norms; :attr:`statistic` = the chosen one."""
        self.statistics = gate_statistics(kept_sq, total_sq)
        self.statistic = self.statistics[self.statistic_kind]

    def _vote(self) -> bool:
        """Update the EWMA with the latest statistic; True = this worker votes compress."""
        c = 0.0 if self.statistic is None else self.statistic
        self.smoothed = c if self.smoothed is None else self.smoothing * self.smoothed + (1 - self.smoothing) * c
        return self.smoothed <= self.delta

    def _sending_compressed(self) -> bool:
        if self.ps_gate is not None:
            return self.ps_gate.compress
        return self.decision

    # ------------------------------------------------------------------ encode / decode
    def encode(self, partition: RowPartition, acc: np.ndarray, scales: np.ndarray, chunk: ChunkSpec) -> EncodedChunk:
        return self._encode(partition, acc, scales, chunk, self._sending_compressed(), None)

    def encode_many(self, partition: RowPartition, acc: np.ndarray, scales: np.ndarray, chunks) -> list:
        return self._sparsify_many(partition, [RawCodec.encode(self, partition, acc, scales, ch) for ch in chunks],
                                   scales)

    def _sparsify_many(self, partition: RowPartition, raws: list, scales) -> list:
        """One transmission's chunks from their raw encodings: the vote in the first, the record kept."""
        compress = self._sending_compressed()
        vote = self._vote() if (self.gate and not self.is_ps) else None
        out = [self._sparsify(partition, raw, scales, compress, vote if i == 0 else None) for i, raw in enumerate(raws)]
        dense = sum(_chunk_elements(partition, c.segments) for c in out)
        sent = sum(int(struct.unpack_from("<I", c.data, 8)[0]) for c in out)
        self.records.append(dict(compressed=bool(compress), vote=vote, statistic=self.statistic,
                                 statistic_energy=self.statistics.get("energy"),
                                 statistic_norm=self.statistics.get("norm"), smoothed=self.smoothed, dense_floats=dense,
                                 floats=sent if compress else dense,
                                 bytes=sum(len(c.data) for c in out)))
        return out

    def _encode(self, partition, acc, scales, chunk, compress: bool, vote: bool | None) -> EncodedChunk:
        raw = super().encode(partition, acc, scales, chunk)  # dense float32 values in payload order
        return self._sparsify(partition, raw, scales, compress, vote)

    def _sparsify(self, partition, raw: EncodedChunk, scales, compress: bool, vote: bool | None) -> EncodedChunk:
        """The Top-k payload of a chunk given as its raw (dense float32, payload order) encoding."""
        segs = raw.segments
        thr = np.asarray(scales, dtype=np.float32)[partition.row_tensor[segs[:, 0]]]
        flags = 0
        if vote is not None:
            flags |= F_VOTE | (F_VOTE_COMPRESS if vote else 0)
        if self.ps_gate is not None:
            flags |= F_DECISION | (F_DECISION_COMPRESS if compress else 0)
        stat = float(self.smoothed if self.smoothed is not None else 0.0)
        vals = np.frombuffer(raw.data, dtype="<f4")
        if compress:
            start, stop = partition.segment_elements(segs)
            elem_thr = np.repeat(thr, stop - start)
            mag = np.abs(vals)
            idx = np.flatnonzero((mag >= elem_thr) & (mag > 0)).astype("<i4")
            if 8 * idx.size < 4 * vals.size:  # else the dense form is smaller and exact
                head = PAYLOAD_HEADER.pack(flags | F_SPARSE, 0, 0, stat, idx.size)
                return EncodedChunk(segs, thr, b"".join((head, idx.tobytes(), vals[idx].astype("<f4").tobytes())))
        head = PAYLOAD_HEADER.pack(flags, 0, 0, stat, vals.size)
        return EncodedChunk(segs, thr, head + raw.data)

    def check_data(self, data: bytes, n_elements: int) -> str | None:
        n = int(n_elements)
        if len(data) < PAYLOAD_HEADER_BYTES:
            return f"payload is {len(data)} bytes, shorter than the {PAYLOAD_HEADER_BYTES}-byte Top-k header"
        flags, z8, z16, stat, count = PAYLOAD_HEADER.unpack_from(data)
        if flags & ~_KNOWN_FLAGS or z8 or z16:
            return f"unknown Top-k payload flags 0x{flags:02x} or non-zero reserved bytes"
        if not math.isfinite(stat):
            return "Top-k payload carries a non-finite statistic"
        body = memoryview(data)[PAYLOAD_HEADER_BYTES:]
        if not flags & F_SPARSE:
            if count != n or len(body) != 4 * n:
                return f"dense Top-k payload holds {count} values in {len(body)} bytes, {n} elements need {4 * n}"
            vals = np.frombuffer(body, dtype="<f4")
        else:
            if count > n or len(body) != 8 * count:
                return f"sparse Top-k payload names {count} elements in {len(body)} bytes (chunk of {n} elements)"
            idx = np.frombuffer(body, dtype="<i4", count=count)
            if count and (idx[0] < 0 or idx[-1] >= n or (count > 1 and not (np.diff(idx) > 0).all())):
                return "sparse Top-k positions must be strictly increasing and inside the chunk"
            vals = np.frombuffer(body, dtype="<f4", offset=4 * count)
        if not np.isfinite(vals).all():
            return "payload carries non-finite values"
        return None

    def _densify(self, partition: RowPartition, chunk: EncodedChunk, weight: float) -> EncodedChunk:
        """The raw (dense float32) form of a received chunk; notes a vote (PS) or a decision (worker)."""
        flags, _, _, stat, count = PAYLOAD_HEADER.unpack_from(chunk.data)
        body = memoryview(chunk.data)[PAYLOAD_HEADER_BYTES:]
        if flags & F_SPARSE:
            dense = np.zeros(_chunk_elements(partition, chunk.segments), dtype="<f4")
            idx = np.frombuffer(body, dtype="<i4", count=count)
            dense[idx] = np.frombuffer(body, dtype="<f4", offset=4 * count)
            body = dense.tobytes()
        if weight > 0 and flags & F_VOTE and self.ps_gate is not None:  # a worker's push arriving at the PS
            self.ps_gate.record_vote(bool(flags & F_VOTE_COMPRESS), stat)
        if flags & F_DECISION and not self.is_ps:  # the PS's decision, on a pull
            self.decision = bool(flags & F_DECISION_COMPRESS)
        return EncodedChunk(chunk.segments, chunk.scales, body)

    def decode_into(self, partition: RowPartition, chunk: EncodedChunk, outs: Sequence[np.ndarray],
                    weight: float = 1.0) -> None:
        super().decode_into(partition, self._densify(partition, chunk, weight), outs, weight)

    # ------------------------------------------------------------------ counters
    def stats(self) -> dict:
        """CNC (share of transmissions sent compressed), floats and bytes sent, per transmission records."""
        recs = self.records
        n = len(recs)
        return dict(codec=self.name, ratio=self.ratio, gate=self.gate, delta=self.delta, smoothing=self.smoothing,
                    statistic=self.statistic_kind,
                    role="ps" if self.is_ps else "worker", transmissions=n,
                    compressed=sum(r["compressed"] for r in recs),
                    cnc=(sum(r["compressed"] for r in recs) / n) if n else None,
                    floats_sent=sum(r["floats"] for r in recs), dense_floats=sum(r["dense_floats"] for r in recs),
                    bytes_sent=sum(r["bytes"] for r in recs),
                    decisions=list(self.ps_gate.decisions) if self.ps_gate is not None else None,
                    records=recs)
