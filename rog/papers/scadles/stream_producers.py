"""ScaDLES's Fig. 5 on this machine: the effective rate per stream as concurrent streams grow, with this
machine's own producer in place of Kafka.

The paper runs one Kafka broker container (16 vCPUs) whose producer processes each publish CIFAR samples
to their own topic at a target rate, one topic per device.  Here (no Kafka; 2 shared cores): ``n`` producer
processes (spawned, never forked), each with its own TCP connection to 127.0.0.1 (its *topic*), publish
:data:`SAMPLE_BYTES`-byte samples (3072, a CIFAR image) on an absolute schedule (sample ``k`` is due at
``t_go + k / rate``; a late producer sends at once, so the rate falls short only when it cannot keep up).
One consumer loop (``selectors``) reads every topic's connection and counts the bytes of each topic per
:data:`BUCKET_S` of its own monotonic clock.  A topic's effective rate is its samples received over the
measured window (after :data:`WARMUP_S`) divided by the window; its per-bucket rates are the density the
figure draws.  The wire carries a 4-byte topic id, then the consumer's 8-byte start time, then raw
samples: nothing is unpickled or evaluated.

``python -m rog.papers.scadles.stream_producers --out DIR [--streams 1,4,8,16,32] [--rates 100,600]
[--duration-s 4]`` writes ``DIR/result.json`` and prints it as JSON on the last line.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import selectors
import socket
import statistics
import struct
import sys
import time
from datetime import datetime, timezone

from rog.streams.source import CIFAR_SAMPLE_BYTES

from rog.experiment.module_item import write_result

__all__ = ["SAMPLE_BYTES", "FIG5_STREAMS", "FIG5_RATES", "WARMUP_S", "BUCKET_S", "measure_streams", "main"]

SAMPLE_BYTES = CIFAR_SAMPLE_BYTES
FIG5_STREAMS = (1, 4, 8, 16, 32)  # concurrent producers (topics), the paper's Fig. 5
FIG5_RATES = (100.0, 600.0)  # target samples/s per stream, the paper's Fig. 5a and 5b
WARMUP_S = 0.5  # excluded at the start of each measurement (connections, first wake-ups)
BUCKET_S = 0.5  # per-topic rate samples for the density
GO_LEAD_S = 0.2  # the start time is this far after the last producer connected
TAIL_S = 0.3  # producers run this long past the measured window
_HELLO, _GO = struct.Struct("!I"), struct.Struct("!d")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the consumer closed the connection before the start time")
        data += chunk
    return data


def _produce(port: int, topic: int, rate: float, run_s: float) -> None:
    """One producer process: connect, announce the topic, wait for the start time, publish until it ends."""
    payload = bytes(range(256)) * (SAMPLE_BYTES // 256)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(_HELLO.pack(topic))
        (t_go,) = _GO.unpack(_recv_exact(s, _GO.size))
        stop, k = t_go + run_s, 0
        while True:
            due, now = t_go + k / rate, time.monotonic()
            if now >= stop:
                break
            if due > now:
                time.sleep(min(due, stop) - now)
                continue
            s.sendall(payload)
            k += 1


def measure_streams(n_streams: int, rate: float, duration_s: float, warmup_s: float = WARMUP_S,
                    bucket_s: float = BUCKET_S, timeout_s: float = 30.0) -> dict:
    """Run ``n_streams`` producers at ``rate`` samples/s each for ``warmup_s + duration_s`` and return each
    topic's effective rate over the measured window and its per-bucket rates (samples/s)."""
    if n_streams < 1 or not (rate > 0 and math.isfinite(rate)) or not duration_s > 0 or not bucket_s > 0:
        raise ValueError(f"need streams >= 1, rate > 0, duration_s > 0, bucket_s > 0; got {n_streams}, {rate}, "
                         f"{duration_s}, {bucket_s}")
    ctx = mp.get_context("spawn")  # never fork: the engine may have torch loaded (tests/test_no_fork_after_torch.py)
    run_s = warmup_s + duration_s + TAIL_S
    n_buckets = max(1, int(round(duration_s / bucket_s)))
    with socket.create_server(("127.0.0.1", 0), backlog=max(n_streams, 8)) as srv:
        srv.settimeout(timeout_s)
        port = srv.getsockname()[1]
        procs = [ctx.Process(target=_produce, args=(port, t, rate, run_s), daemon=True) for t in range(n_streams)]
        for p in procs:
            p.start()
        conns = {}
        try:
            for _ in range(n_streams):
                c, _addr = srv.accept()
                c.settimeout(timeout_s)
                (topic,) = _HELLO.unpack(_recv_exact(c, _HELLO.size))
                conns[topic] = c
            t_go = time.monotonic() + GO_LEAD_S
            for c in conns.values():
                c.sendall(_GO.pack(t_go))
            counts = _consume(conns, t_go + warmup_s, bucket_s, n_buckets, t_go + run_s + timeout_s)
        finally:
            for c in conns.values():
                c.close()
            for p in procs:
                p.join(timeout=5.0)
                if p.is_alive():
                    p.terminate()
                    p.join()
    window = n_buckets * bucket_s
    per_topic = [sum(counts[t]) / SAMPLE_BYTES / window for t in range(n_streams)]
    buckets = [[b / SAMPLE_BYTES / bucket_s for b in counts[t]] for t in range(n_streams)]
    return dict(streams=n_streams, target=rate, window_s=window, bucket_s=bucket_s, warmup_s=warmup_s,
                effective=[round(x, 2) for x in per_topic], buckets=[[round(x, 1) for x in row] for row in buckets],
                exit_codes=[p.exitcode for p in procs])


def _consume(conns: dict, t0: float, bucket_s: float, n_buckets: int, deadline: float) -> dict:
    """Read every topic until each producer closes; bytes per topic per bucket of ``[t0, t0 + n x bucket_s)``."""
    sel = selectors.DefaultSelector()
    for topic, c in conns.items():
        c.setblocking(False)
        sel.register(c, selectors.EVENT_READ, topic)
    counts = {t: [0] * n_buckets for t in conns}
    buf = bytearray(1 << 18)
    open_n = len(conns)
    while open_n and time.monotonic() < deadline:
        for key, _ev in sel.select(timeout=0.5):
            try:
                n = key.fileobj.recv_into(buf)
            except BlockingIOError:
                continue
            if n == 0:
                sel.unregister(key.fileobj)
                open_n -= 1
                continue
            i = math.floor((time.monotonic() - t0) / bucket_s)
            if 0 <= i < n_buckets:
                counts[key.data][i] += n
    sel.close()
    return counts


def _positive_list(text: str, kind=float) -> list | None:
    """Comma-separated positive numbers, or None if any is not one."""
    try:
        vals = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None
    return vals if vals and all(v > 0 for v in vals) else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rog.papers.scadles.stream_producers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for result.json")
    ap.add_argument("--streams", default=",".join(str(n) for n in FIG5_STREAMS), help="concurrent streams to try")
    ap.add_argument("--rates", default=",".join(f"{r:g}" for r in FIG5_RATES), help="target samples/s per stream")
    ap.add_argument("--duration-s", type=float, default=4.0, help="measured seconds per (streams, rate)")
    a = ap.parse_args(argv)
    streams, rates = _positive_list(a.streams, int), _positive_list(a.rates)
    if streams is None or rates is None:
        ap.error(f"--streams {a.streams!r} / --rates {a.rates!r} must list positive numbers (whole for --streams), "
                 f"comma-separated, e.g. --streams 1,4,8 --rates 100,600")
    if not a.duration_s > 0:
        ap.error("--duration-s must be a positive number of seconds, e.g. 4")
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0, runs = time.monotonic(), []
    for rate in rates:
        for n in streams:
            load = os.getloadavg()
            m = measure_streams(n, rate, a.duration_s)
            m["load_avg_before"] = list(load)
            runs.append(m)
            print(f"[fig5] {n} stream(s) at {rate:g}/s: median effective "
                  f"{statistics.median(m['effective']):.1f}/s (load {load[0]:.2f})", flush=True)
    res = dict(runs=runs, started_utc=started, wall_s=round(time.monotonic() - t0, 2), load_avg_after=list(os.getloadavg()),
               nice=os.nice(0), cpus=os.cpu_count(), sample_bytes=SAMPLE_BYTES,
               producer="this machine's producer in place of Kafka: spawned processes over loopback TCP, one topic "
                        "per connection, one selectors consumer (rog.papers.scadles.stream_producers)")
    write_result(a.out, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
