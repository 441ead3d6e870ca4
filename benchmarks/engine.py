"""Benchmark the data path of one full ConvMLP-M push and pull on one CPU thread.

Measures, as medians over ``--repeats`` runs after a warm-up:

- ``push_prepare_s``: worker side, per-tensor scales (compress), ROG importance order (rank),
  :func:`rog.chunks.plan_chunks` (cut) and the frame bytes of every chunk (encode);
- ``pull_apply_s``: worker side, decode and check every frame of a full pull and add it to the
  parameters;
- ``ps_pull_prepare_s``: parameter server, scales + server-side order + cut + frames of one
  worker's pending update;
- ``memcpy_s``: a numpy ``.copy()`` of the same float32 buffer (the physical floor);

and the wire overhead of a full push (all frame bytes over the packed sign bits + scales
alone).  The row staleness the ranking sees comes from a short simulated history of pushes cut
at random points of ROG's own order, so its segments look like a real run's.  Also reported
(not goals): commit (error feedback) and PS push-apply times, and a "fragmented" case where
staleness is random per row (worst case for the row index).

Prints human-readable lines, then, as the LAST line, one JSON object.
Usage: ``python scripts/bench_engine.py [--repeats 7] [--chunk-bytes 32768] [--threshold 4]``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # single thread, set before numpy/scipy load BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from rog.papers.rog.references import ARTIFACT_ENGINE  # noqa: E402
from rog.chunks import DEFAULT_CHUNK_BYTES, plan_chunks  # noqa: E402
from rog.codecs.compression import SignCodec  # noqa: E402
from rog.rows import RowPartition  # noqa: E402
from rog.wire import decode_frame, encode_frame  # noqa: E402

GOALS = {  # this machine class (2-core x86, one thread), one full ConvMLP-M push
    "push_plus_pull_s_max": 0.12,  # push_prepare_s + pull_apply_s
    "ps_pull_prepare_s_max": 0.08,
    "prepare_over_memcpy_max": 20.0,
    "wire_overhead_frac_max": 0.01,
}
REFERENCE = ARTIFACT_ENGINE  # the original artifact's engine on the same machine class
N_WORKERS = 4
ITERATION = 20  # the iteration whose push is measured


def convmlp_m_partition() -> tuple[RowPartition, str]:
    """ConvMLP-M (CIFAR-100 head) rows from the real model, or from its derived shapes if torch is missing."""
    try:
        from rog.models import make_model

        return RowPartition.from_module(make_model("convmlp_m", 100)), "rog.models.make_model"
    except ImportError:
        return RowPartition.from_shapes(_convmlp_m_shapes()), "derived shapes"


def _convmlp_m_shapes(num_classes: int = 100) -> list[tuple[str, tuple[int, ...]]]:
    """The 226 (name, shape) pairs of ConvMLP-M (blocks 3/6/3, dims 128/256/512, mlp ratio 3)."""
    out: list[tuple[str, tuple[int, ...]]] = []

    def add(name, *shapes):
        for suffix, shape in shapes:
            out.append((f"{name}.{suffix}", shape))

    ch, dims, blocks = 64, (128, 256, 512), (3, 6, 3)
    for i, (o, c) in enumerate(((ch // 2, 3), (ch // 2, ch // 2), (ch, ch // 2))):
        add(f"tokenizer.block.{3 * i}", ("weight", (o, c, 3, 3)))
        add(f"tokenizer.block.{3 * i + 1}", ("weight", (o,)), ("bias", (o,)))
    for b in range(3):
        for j, (o, c, k) in enumerate(((dims[0], ch, 1), (dims[0], dims[0], 3), (ch, dims[0], 1))):
            add(f"conv_stages.conv_blocks.{b}.{3 * j}", ("weight", (o, c, k, k)))
            add(f"conv_stages.conv_blocks.{b}.{3 * j + 1}", ("weight", (o,)), ("bias", (o,)))
    add("conv_stages.downsample", ("weight", (dims[0], ch, 3, 3)), ("bias", (dims[0],)))
    for s, d in enumerate(dims):
        h = 3 * d
        for b in range(blocks[s]):
            p = f"stages.{s}.blocks.{b}"
            norm = (("weight", (d,)), ("bias", (d,)))
            mlp = (("fc1.weight", (h, d)), ("fc1.bias", (h,)), ("fc2.weight", (d, h)), ("fc2.bias", (d,)))
            add(f"{p}.norm1", *norm)
            add(f"{p}.channel_mlp1", *mlp)
            add(f"{p}.norm2", *norm)
            add(f"{p}.connect", ("weight", (d, 1, 3, 3)))
            add(f"{p}.connect_norm", *norm)
            add(f"{p}.channel_mlp2", *mlp)
        if s + 1 < len(dims):
            add(f"stages.{s}.downsample_mlp.downsample", ("weight", (dims[s + 1], d, 3, 3)), ("bias", (dims[s + 1],)))
    add("norm", ("weight", (dims[-1],)), ("bias", (dims[-1],)))
    add("head", ("weight", (num_classes, dims[-1])), ("bias", (num_classes,)))
    return out


def realistic_values(part: RowPartition, rng: np.random.Generator) -> np.ndarray:
    """Gradient-like values: normal noise with a per-tensor magnitude spread over four decades."""
    mag = 10.0 ** rng.uniform(-5, -1, part.n_tensors)
    flat = rng.standard_normal(part.n_elements, dtype=np.float32)
    for t in range(part.n_tensors):
        flat[part.tensor_offset[t] : part.tensor_offset[t + 1]] *= np.float32(mag[t])
    return flat


class Ranker:
    """Worker and PS ranking: the ROG policy, or (until it exists) the importance formulas of docs/design.md#artifact-choices."""

    def __init__(self, part: RowPartition, threshold: int) -> None:
        self.part = part
        self.threshold = threshold
        try:
            from rog.policies.base import ServerView, WorkerView
            from rog.policies.registry import make_policy

            self.policy = make_policy("ROG", threshold)
            self.WorkerView, self.ServerView = WorkerView, ServerView
            self.source = f"rog.policies ROG({threshold}).push_plan / pull_plan"
        except ImportError:
            self.policy = None
            self.source = "fallback: np.argsort on docs/design.md#artifact-choices importance, MTA share 0.32"

    def push(self, iteration: int, row_push_iter: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, int]:
        """Send order and mandatory rows of a worker push."""
        if self.policy is not None:
            view = self.WorkerView(self.part, 0, iteration, row_push_iter, scales)
            plan = self.policy.push_plan(view)
            return plan.order, plan.mandatory_rows
        imp = (row_push_iter.max() - row_push_iter) + (scales / (scales.max() + 0.1))[self.part.row_tensor]
        return self._order(imp, scales)

    def pull(self, updates_since_pull: np.ndarray, push_iter: np.ndarray, scales: np.ndarray):
        """Send order and mandatory rows of a PS pull to worker 0."""
        if self.policy is not None:
            w, n = updates_since_pull.shape
            view = self.ServerView(
                self.part, push_iter, np.repeat(push_iter[:, None], n, axis=1), updates_since_pull, np.ones(w, bool)
            )
            plan = self.policy.pull_plan(view, 0, scales)
            return plan.order, plan.mandatory_rows
        imp = updates_since_pull[0] + (scales / (scales.max() + 1.0))[self.part.row_tensor]
        return self._order(imp, scales)

    def _order(self, imp: np.ndarray, scales: np.ndarray) -> tuple[np.ndarray, int]:
        mta = int(round(0.32 * self.part.n_rows))
        head = np.argsort(-imp, kind="stable")[:mta]
        rest = np.ones(self.part.n_rows, bool)
        rest[head] = False
        ids = np.flatnonzero(rest)
        tail = ids[np.argsort(-scales[self.part.row_tensor[ids]], kind="stable")]
        return np.concatenate([head, tail]), mta


def simulated_history(part, ranker, codec, rng, iteration: int) -> tuple[np.ndarray, np.ndarray]:
    """Row versions of worker 0 and PS-side update counts after pushes cut at random points.

    Every earlier push sent ROG's own order up to a random share between its mandatory
    prefix and everything, like a run on a fluctuating link.
    """
    row_push_iter = np.zeros(part.n_rows, dtype=np.int64)
    updates = np.zeros((N_WORKERS, part.n_rows), dtype=np.int64)
    for it in range(1, iteration):
        scales = codec.tensor_scales(part, realistic_values_cheap(part, rng))
        order, mandatory = ranker.push(it, row_push_iter, scales)
        cut = int(rng.integers(mandatory, part.n_rows + 1))
        row_push_iter[order[:cut]] = it
        if it >= iteration - 3:  # the last three pushes reached the PS since worker 0's last pull
            for _ in range(N_WORKERS):
                updates[:, order[: int(rng.integers(mandatory, part.n_rows + 1))]] += 1
    return row_push_iter, updates


def realistic_values_cheap(part: RowPartition, rng: np.random.Generator) -> np.ndarray:
    """Per-tensor magnitudes only (scales of a history step), without a 17M-element draw."""
    mag = 10.0 ** rng.uniform(-5, -1, part.n_tensors)
    return np.repeat(mag, part.tensor_elements).astype(np.float32)


CPU_S: dict[str, float] = {}  # median process CPU time of the last measurement per name (load check)


def median_time(fn, repeats: int, name: str | None = None) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs after one warm-up run.

    With ``name``, also records the median process CPU time in :data:`CPU_S`: on a shared
    machine, wall time far above CPU time means the process waited for a core.
    """
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    if name:
        CPU_S[name] = statistics.median(cpu)
    return statistics.median(wall)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed runs per measurement (median; >= 1)")
    ap.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES, help="payload bytes per chunk")
    ap.add_argument("--threshold", type=int, default=4, help="ROG staleness threshold S")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.chunk_bytes < 1 or args.threshold < 0:
        ap.error("--repeats and --chunk-bytes must be >= 1, --threshold >= 0")

    t_start = time.perf_counter()
    rng = np.random.default_rng(2022)
    part, part_source = convmlp_m_partition()
    codec = SignCodec()
    ranker = Ranker(part, args.threshold)
    rwb = codec.row_wire_bytes(part)  # per-partition constant, computed once like the engine does
    acc = realistic_values(part, rng)  # worker 0's accumulated gradient
    pending = realistic_values(part, rng)  # the PS's pending update for worker 0
    params = realistic_values(part, rng)
    row_push_iter, updates = simulated_history(part, ranker, codec, rng, ITERATION)
    push_iter = np.full(N_WORKERS, ITERATION, dtype=np.int64)

    def prepare(buf, rank):
        scales = codec.tensor_scales(part, buf)
        order, mandatory = rank(scales)
        plan = plan_chunks(part, order, mandatory, rwb, args.chunk_bytes)
        chunks = [codec.encode(part, buf, scales, c) for c in plan.chunks]
        frames = [encode_frame(ch, codec, ITERATION, i) for i, ch in enumerate(chunks)]
        return plan, chunks, frames

    def push_rank(scales):
        return ranker.push(ITERATION, row_push_iter, scales)

    def pull_rank(scales):
        return ranker.pull(updates, push_iter, scales)

    def apply(frames, outs, weight):
        for f in frames:
            _, ch = decode_frame(f, part, codec)
            codec.decode_into(part, ch, outs, weight)

    plan, chunks, push_frames = prepare(acc, push_rank)
    _, _, pull_frames = prepare(pending, pull_rank)

    # one-time correctness guard: error feedback is exact (acc_after + decoded == acc_before)
    acc_copy, decoded = acc.copy(), part.new_flat()
    for ch in chunks:
        codec.commit(part, acc_copy, ch)
    apply(push_frames, (decoded,), 1.0)
    feedback_err = float(np.max(np.abs(acc_copy + decoded - acc)))
    feedback_ok = feedback_err <= 1e-6 * float(np.max(np.abs(acc)))

    scales = codec.tensor_scales(part, acc)
    ranked = push_rank(scales)
    t = {
        "push_prepare_s": median_time(lambda: prepare(acc, push_rank), args.repeats, "push_prepare_s"),
        "pull_apply_s": median_time(lambda: apply(pull_frames, (params,), 1.0), args.repeats, "pull_apply_s"),
        "ps_pull_prepare_s": median_time(lambda: prepare(pending, pull_rank), args.repeats, "ps_pull_prepare_s"),
        "memcpy_s": median_time(lambda: acc.copy(), args.repeats, "memcpy_s"),
        # breakdown and extras (not goals)
        "scales_s": median_time(lambda: codec.tensor_scales(part, acc), args.repeats),
        "rank_s": median_time(lambda: push_rank(scales), args.repeats),
        "cut_s": median_time(lambda: plan_chunks(part, *ranked, rwb, args.chunk_bytes), args.repeats),
        "commit_s": median_time(lambda: [codec.commit(part, acc_copy, ch) for ch in chunks], args.repeats),
        "ps_push_apply_s": median_time(
            lambda: apply(push_frames, [pending] * N_WORKERS, 1.0 / N_WORKERS), args.repeats
        ),
    }
    full_push_bytes = sum(len(f) for f in push_frames)
    sign_bits_bytes = (part.n_elements + 7) // 8
    scale_bytes = 4 * part.n_tensors
    n_segments = sum(len(ch.segments) for ch in chunks)

    # worst case for the row index: staleness random per row
    frag_iter = ITERATION - rng.integers(1, 4, part.n_rows)

    def frag_rank(scales):
        return ranker.push(ITERATION, frag_iter, scales)

    _, frag_chunks, frag_frames = prepare(acc, frag_rank)
    frag = {
        "segments": sum(len(ch.segments) for ch in frag_chunks),
        "push_prepare_s": median_time(lambda: prepare(acc, frag_rank), max(3, args.repeats // 2)),
        "pull_apply_s": median_time(lambda: apply(frag_frames, (params,), 1.0), max(3, args.repeats // 2)),
        "wire_overhead_frac": sum(len(f) for f in frag_frames) / (sign_bits_bytes + scale_bytes) - 1.0,
    }

    result = {
        "model": "convmlp_m",
        "partition_source": part_source,
        "rank_source": ranker.source,
        "params": part.n_elements,
        "rows": part.n_rows,
        "tensors": part.n_tensors,
        "chunk_bytes": args.chunk_bytes,
        "threshold": args.threshold,
        "repeats": args.repeats,
        "chunks": plan.n_chunks,
        "mandatory_chunks": plan.mandatory_chunks,
        "segments": n_segments,
        **{k: round(v, 5) for k, v in t.items()},
        "prepare_over_memcpy": round(t["push_prepare_s"] / t["memcpy_s"], 3),
        "full_push_bytes": full_push_bytes,
        "sign_bits_bytes": sign_bits_bytes,
        "scale_bytes": scale_bytes,
        "wire_overhead_frac": round(full_push_bytes / (sign_bits_bytes + scale_bytes) - 1.0, 6),
        "error_feedback_exact": feedback_ok,
        "cpu_s": {k: round(v, 5) for k, v in CPU_S.items()},  # median process CPU time of the same runs
        "load_avg_1min": round(os.getloadavg()[0], 2),  # > cores: other processes competed for the CPU
        "fragmented": {k: (round(v, 5) if isinstance(v, float) else v) for k, v in frag.items()},
    }
    push_pull = t["push_prepare_s"] + t["pull_apply_s"]
    result["goals"] = {
        "push_prepare_plus_pull_apply_s": {"value": round(push_pull, 5), "max": GOALS["push_plus_pull_s_max"],
                                           "met": push_pull <= GOALS["push_plus_pull_s_max"]},
        "ps_pull_prepare_s": {"value": result["ps_pull_prepare_s"], "max": GOALS["ps_pull_prepare_s_max"],
                              "met": t["ps_pull_prepare_s"] <= GOALS["ps_pull_prepare_s_max"]},
        "prepare_over_memcpy": {"value": result["prepare_over_memcpy"], "max": GOALS["prepare_over_memcpy_max"],
                                "met": result["prepare_over_memcpy"] <= GOALS["prepare_over_memcpy_max"]},
        "wire_overhead_frac": {"value": result["wire_overhead_frac"], "max": GOALS["wire_overhead_frac_max"],
                               "met": result["wire_overhead_frac"] <= GOALS["wire_overhead_frac_max"]},
    }
    result["reference"] = REFERENCE
    result["bench_wall_s"] = round(time.perf_counter() - t_start, 2)

    print(f"model convmlp_m ({part_source}): {part.n_elements:,} params, {part.n_rows:,} rows, "
          f"{part.n_tensors} tensors")
    print(f"ranking: {ranker.source}")
    print(f"full push: {plan.n_chunks} chunks ({plan.mandatory_chunks} mandatory), {n_segments} segments, "
          f"{full_push_bytes:,} bytes on the wire for {sign_bits_bytes:,} sign-bit bytes + {scale_bytes} scale bytes "
          f"(overhead {100 * result['wire_overhead_frac']:.3f} %)")
    for k in ("push_prepare_s", "pull_apply_s", "ps_pull_prepare_s", "memcpy_s", "scales_s", "rank_s", "cut_s",
              "commit_s", "ps_push_apply_s"):
        print(f"  {k:<18} {1000 * t[k]:8.2f} ms")
    print(f"  prepare / memcpy   {result['prepare_over_memcpy']:8.2f} x")
    print("  cpu time (same runs): " + ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in CPU_S.items())
          + f"; load average {result['load_avg_1min']} on {os.cpu_count()} cores")
    print(f"fragmented staleness (worst case, not a goal): {frag['segments']} segments, push prepare "
          f"{1000 * frag['push_prepare_s']:.1f} ms, pull apply {1000 * frag['pull_apply_s']:.1f} ms, "
          f"wire overhead {100 * frag['wire_overhead_frac']:.2f} %")
    print(f"error feedback exact: {feedback_ok} (max |acc_after + decoded - acc_before| = {feedback_err:.3g})")
    for name, g in result["goals"].items():
        print(f"goal {name}: {g['value']} <= {g['max']}: {'met' if g['met'] else 'NOT met'}")
    print(json.dumps(result))
    return 0
