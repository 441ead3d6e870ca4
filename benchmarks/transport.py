"""Benchmark the transport over real loopback sockets, shaped by the transport's own token bucket.

(a) goodput_over_link: one full ConvMLP-M push (16,948,804 elements, 33,307 rows, 226 tensors;
    SignCodec frames, about 2.1 MB) with no deadline: payload bits / (rate x time), where time
    runs from the start of the transmission to the last byte arriving at the receiver, plus the
    time the token bucket's initial burst is worth (so a bigger burst cannot flatter the result).
    Goal >= 0.95.  Physical limit for reference: payload bytes * 8 / rate.
(b) deadline_overshoot_p50_s / _p99_s: random deadlines (uniform 0.05-0.8 s); overshoot = the
    time from the deadline to the last byte of that transmission arriving at the receiver.
    Goal p99 <= 0.05 s.
(c) (extra, --tc-like N) the same deadlines with the bottleneck *behind* the sender's kernel, as
    with tc: the sender is not shaped, the receiver reads at the rate through a small receive
    buffer, so TCP flow control fills the sender's socket buffers.  This measures what
    SO_SNDBUF / TCP_NOTSENT_LOWAT leave queued in the kernel when a deadline passes.

The parameter server (receiver) runs in its own process; both ends use CLOCK_MONOTONIC, so the
sender's start time and the receiver's arrival times are comparable.  The shared secret is made
per run and passed through ROG_SECRET.  Prints readable lines, then one JSON object as the last
line.  Runs in about a minute.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import secrets
import time

import numpy as np

from rog.chunks import DEFAULT_CHUNK_BYTES, plan_chunks
from rog.codecs.compression import SignCodec
from rog.rows import RowPartition
from rog.transport import (
    Begin,
    Bye,
    LazyFrames,
    Listener,
    TokenBucket,
    TransportConfig,
    WireFrames,
    connect,
    load_secret,
)

CONVMLP_M = {"elements": 16_948_804, "rows": 33_307, "tensors": 226}
BURST_BYTES = 32 * 1024  # token-bucket size: rides out ~13 ms sender hiccups at 20 Mbit/s; charged in (a)


def model_shapes() -> tuple[list[tuple[str, tuple[int, ...]]], str]:
    """ConvMLP-M's parameter shapes (CIFAR-100 head) from rog.models, else a stand-in with the same totals."""
    try:
        from rog.models import make_model

        model = make_model("convmlp_m", 100)
        shapes = [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]
        return shapes, "rog.models.make_model('convmlp_m', 100)"
    except Exception as e:  # noqa: BLE001 - fall back to a layout with the paper's totals
        print(f"rog.models unavailable ({e}); using a stand-in layout with ConvMLP-M's totals")
        shapes = [(f"w{i}", (144, 1152)) for i in range(100)]  # 14,400 rows
        shapes += [(f"b{i}", (144,)) for i in range(100)]  # 100 one-row tensors
        rest_rows = CONVMLP_M["rows"] - 14_400 - 100 - 25
        rest_elems = CONVMLP_M["elements"] - 100 * 144 * 1152 - 100 * 144 - 25 * 50
        per = rest_elems // rest_rows
        shapes += [("big", (rest_rows, per))] + [(f"s{i}", (50,)) for i in range(25)]
        shapes[-1] = ("s24", (50 + rest_elems - per * rest_rows,))
        return shapes, "stand-in layout (same totals)"


class ThrottledPipe:
    """Receiver-side bottleneck for the tc-like run: reads at most ``rate`` through small recvs."""

    def __init__(self, pipe, rate_mbit: float, read_bytes: int = 4096) -> None:
        self.pipe, self.read_bytes = pipe, read_bytes
        pipe.READ_BYTES = read_bytes  # small recvs, so reading follows the bucket closely
        self.bucket = TokenBucket(rate_mbit, burst_bytes=read_bytes)

    def write(self, data):
        self.pipe.write(data)

    def wait_writable(self, until):
        return self.pipe.wait_writable(until)

    def close(self):
        self.pipe.close()

    def abort(self):
        self.pipe.abort()

    def read_some(self, timeout_s):
        self.bucket.acquire(self.read_bytes)
        return self.pipe.read_some(timeout_s)


def ps_main(shapes, rate_mbit: float, tc_like: bool, port_pipe) -> None:
    """The receiver process: accept one worker, receive transmissions until bye, report arrival times."""
    import socket

    partition = RowPartition.from_shapes(shapes)
    validator = WireFrames(partition, SignCodec())
    config = TransportConfig(secret=load_secret(), rate_mbit_at=None if tc_like else rate_mbit, burst_bytes=BURST_BYTES)
    with Listener("127.0.0.1", 0, config=config) as lst:
        if tc_like:  # Ethernet-sized segments (loopback's 64 KB MSS against a 16 KB window stalls on zero windows)
            lst._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
        port_pipe.send(lst.address[1])
        conn = lst.accept(60)
    if tc_like:
        conn.pipe.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        conn.pipe = ThrottledPipe(conn.pipe, rate_mbit)
    records = []
    while True:
        msg = conn.recv(120)
        if isinstance(msg, Bye):
            break
        assert isinstance(msg, Begin), msg
        got = conn.receive_transmission(msg, validator)
        records.append(
            dict(tid=msg.tid, delivered=got.delivered, bytes=got.bytes_delivered, status=int(got.status),
                 begin_at=got.begin_at, last_byte_at=got.last_byte_at, end_at=got.end_at)
        )
    conn.close()
    port_pipe.send(records)


def run_session(shapes, partition, frames_for, n_frames, rate_mbit, jobs, tc_like, ctx, drain_aware=True):
    """Start a receiver process, run ``jobs`` = [(deadline_s, mandatory)], return [(SendResult, record)]."""
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=ps_main, args=(shapes, rate_mbit, tc_like, child), daemon=True)
    proc.start()
    port = parent.recv()
    config = TransportConfig(secret=load_secret(), rate_mbit_at=None if tc_like else rate_mbit, burst_bytes=BURST_BYTES,
                             drain_aware=drain_aware)
    conn = connect("127.0.0.1", port, worker_id=0, config=config)
    warm = conn.send_transmission(frames_for(1), n_frames=n_frames, iteration=1, mandatory=0, deadline_s=0.2)
    results = []  # the warm-up transmission above (first decode, first encode) is not measured
    for i, (deadline_s, mandatory) in enumerate(jobs, start=2):
        frames = frames_for(i)
        res = conn.send_transmission(frames, n_frames=n_frames, iteration=i, mandatory=mandatory, deadline_s=deadline_s)
        results.append(res)
        time.sleep(0.02)  # let the link idle a moment between transmissions
    conn.close("bench over")
    records = parent.recv()
    proc.join(10)
    by_tid = {r["tid"]: r for r in records if r["tid"] != warm.tid}
    return [(res, by_tid[res.tid]) for res in results]


def overshoots(pairs, deadlines):
    """Deadline -> last byte at the receiver, for transmissions the deadline cut."""
    out = []
    for (res, rec), d in zip(pairs, deadlines):
        assert res.delivered == rec["delivered"], "sender and receiver disagree"
        if res.cut:
            due = res.started_at + max(d, res.mandatory_s or 0.0)
            out.append(rec["last_byte_at"] - due)
    return np.array(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate-mbit", type=float, default=20.0, help="link rate of the transport's token bucket")
    ap.add_argument("--deadlines", type=int, default=100, help="random deadlines for the overshoot measurement")
    ap.add_argument("--deadline-min-s", type=float, default=0.05)
    ap.add_argument("--deadline-max-s", type=float, default=0.8)
    ap.add_argument("--goodput-runs", type=int, default=5, help="full pushes with no deadline (median reported)")
    ap.add_argument("--tc-like", type=int, default=20, help="deadlines for the receiver-bottleneck run (0 = skip)")
    ap.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES, help="payload bytes per frame")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="print every overshoot")
    args = ap.parse_args(argv)
    if "ROG_SECRET" not in os.environ:
        os.environ["ROG_SECRET"] = secrets.token_hex(32)  # per run, inherited by the receiver process
    ctx = mp.get_context("spawn")
    rng = np.random.default_rng(args.seed)

    shapes, source = model_shapes()
    partition = RowPartition.from_shapes(shapes)
    codec = SignCodec()
    acc = rng.standard_normal(partition.n_elements, dtype=np.float32)
    scales = codec.tensor_scales(partition, acc)
    plan = plan_chunks(partition, np.arange(partition.n_rows), 0, codec.row_wire_bytes(partition), args.chunk_bytes)
    n_frames = len(plan.chunks)
    frames_for = lambda it: LazyFrames(partition, codec, acc, scales, plan.chunks, it)  # noqa: E731
    sample = frames_for(1)
    payload = sum(len(sample(i)) for i in range(n_frames))
    limit_s = payload * 8 / (args.rate_mbit * 1e6)
    print(f"model: {source}: {partition.n_elements:,} elements, {partition.n_rows:,} rows, {partition.n_tensors} tensors")
    print(f"push: {n_frames} SignCodec frames, {payload:,} bytes; at {args.rate_mbit:g} Mbit/s the physical limit is {limit_s:.3f} s")

    # (a) goodput, no deadline
    t = time.monotonic()
    pairs = run_session(shapes, partition, frames_for, n_frames, args.rate_mbit,
                        [(None, 0)] * args.goodput_runs, False, ctx)
    goodputs = []
    for res, rec in pairs:
        assert res.delivered == rec["delivered"] == n_frames and res.bytes_delivered == payload
        took = rec["last_byte_at"] - res.started_at
        goodputs.append(payload * 8 / (args.rate_mbit * 1e6 * took + BURST_BYTES * 8))
        print(f"  full push: {took:.3f} s to the last byte (limit {limit_s:.3f} s), goodput {goodputs[-1]:.3f}, "
              f"acknowledged after {res.duration_s:.3f} s, wire bytes {res.wire_bytes:,}")
    goodput = float(np.median(goodputs))
    print(f"(a) goodput_over_link = {goodput:.3f} (median of {len(goodputs)}) [{time.monotonic() - t:.1f} s]")

    # (b) deadlines, shaped by the sender's token bucket
    t = time.monotonic()
    deadlines = rng.uniform(args.deadline_min_s, args.deadline_max_s, args.deadlines).tolist()
    pairs = run_session(shapes, partition, frames_for, n_frames, args.rate_mbit, [(d, 1) for d in deadlines], False, ctx)
    over = overshoots(pairs, deadlines)
    if args.verbose:
        print("    overshoots (ms):", np.round(over * 1e3, 2).tolist())
    delivered_share = np.mean([res.bytes_delivered / payload for res, _ in pairs])
    # a last byte that arrived before the deadline counts as 0: the link was already quiet
    p50, p99 = (float(np.percentile(np.maximum(over, 0.0), q)) for q in (50, 99)) if over.size else (float("nan"),) * 2
    print(f"(b) {len(deadlines)} deadlines in [{args.deadline_min_s}, {args.deadline_max_s}] s, {over.size} cut by the deadline; "
          f"mean delivered share {delivered_share:.2f}")
    print(f"    overshoot p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, max {over.max() * 1e3:.2f} ms; "
          f"{int((over <= 0).sum())} of {over.size} had their last byte in before the deadline "
          f"[{time.monotonic() - t:.1f} s]")

    # (c) tc-like: the bottleneck behind the sender's kernel buffers
    tc = {}
    if args.tc_like > 0:
        t = time.monotonic()
        d_tc = rng.uniform(args.deadline_min_s, args.deadline_max_s, args.tc_like).tolist()
        for label, aware in (("", True), ("_no_drain", False)):
            pairs = run_session(shapes, partition, frames_for, n_frames, args.rate_mbit, [(d, 1) for d in d_tc], True, ctx,
                                drain_aware=aware)
            over_tc = overshoots(pairs, d_tc)
            share = float(np.mean([res.bytes_delivered / payload for res, _ in pairs]))
            if args.verbose:
                print(f"    tc-like{label} overshoots (ms):", np.round(over_tc * 1e3, 1).tolist())
            tc.update({f"tc_like{label}_overshoot_p50_s": round(float(np.percentile(over_tc, 50)), 4),
                       f"tc_like{label}_overshoot_max_s": round(float(over_tc.max()), 4),
                       f"tc_like{label}_delivered_share": round(share, 4)})
            print(f"(c) receiver-bottleneck (tc-like) run, {len(d_tc)} deadlines, drain-aware check "
                  f"{'on' if aware else 'off (reference)'}: overshoot p50 {tc[f'tc_like{label}_overshoot_p50_s'] * 1e3:.1f} ms, "
                  f"max {tc[f'tc_like{label}_overshoot_max_s'] * 1e3:.1f} ms, mean delivered share {share:.2f} "
                  f"[{time.monotonic() - t:.1f} s]")
        tc["tc_like_n_deadlines"] = len(d_tc)

    goals = {"goodput_over_link>=0.95": goodput >= 0.95, "deadline_overshoot_p99_s<=0.05": p99 <= 0.05}
    print(json.dumps({
        "goodput_over_link": round(goodput, 4),
        "deadline_overshoot_p50_s": round(p50, 5),
        "deadline_overshoot_p99_s": round(p99, 5),
        "deadline_overshoot_raw_min_s": round(float(over.min()), 5) if over.size else None,
        "rate_mbit": args.rate_mbit,
        "n_deadlines": len(deadlines),
        "n_cut": int(over.size),
        "frames": n_frames,
        "payload_bytes": payload,
        "physical_limit_s": round(limit_s, 4),
        "physical_limit": "payload_bytes*8/(rate_mbit*1e6)",
        "shaping": "transport token bucket on 127.0.0.1 (no tc)",
        "burst_bytes": BURST_BYTES,
        "model": source,
        **tc,
        "goals": goals,
        "goals_met": all(goals.values()),
    }))
    return 0
