"""Stream takes against real time (rog.streams.source, ScaDLES): a take that waits for 20 samples at
100 samples/s, Fig. 1's latency ``b / S`` measured with real sleeps (uncompressed and on a compressed
clock), and producers holding 100 samples/s over sockets."""

from __future__ import annotations

import time

from rog.papers.scadles import stream_latency as L
from rog.papers.scadles import stream_producers as P
from rog.streams.source import ArrivalProcess, StreamBuffer

from .figures import figure, within


def blocking_take() -> dict:
    """After the 1 s prefill, a take of 20 samples at 100/s: its wall time and its own ``wait_s``."""
    buf = StreamBuffer(ArrivalProcess(100.0), "persistence")
    buf.start()
    buf.take(100)  # the one-second prefill
    t0 = time.monotonic()
    r = buf.take(20)
    return dict(wall_s=time.monotonic() - t0, wait_s=r.wait_s)


def take_figures() -> list[dict]:
    """The take lasts 20 / 100 s (0.17-0.6 s allowed: a fraction of a sample may be in flight) and reports
    the wait it really had (within 0.02 s)."""
    t = blocking_take()
    return [within("streams.take_wall_s", t["wall_s"], 0.17, 0.6, arrival_s=20 / 100),
            figure("streams.take_wait_s", t["wait_s"], t["wall_s"], 0.02)]


def latency_figures() -> list[dict]:
    """Fig. 1's mean wait against ``b / S``, within the tolerance from this machine's sleep granularity:
    10 samples at 400/s (uncompressed, 25 ms) and 10 at 40/s on a clock 10x faster (0.25 s)."""
    g = L.sleep_granularity_s()
    out = []
    for rate, takes, compress in ((400.0, 4, 1.0), (40.0, 3, 10.0)):
        m = L.measure_latency(rate, 10, takes=takes, compress=compress)
        out.append(figure(f"scadles.latency_s@{rate:g}x{compress:g}", m["measured_s"], 10 / rate,
                          L.latency_tolerance_s(rate, takes, compress, g), granularity_s=g))
    return out


def producer_figures() -> list[dict]:
    """Two producers at 100 samples/s for 0.4 s: each effective rate within two edge samples plus those a
    late wake-up of the sleep granularity moves."""
    g = max(L.sleep_granularity_s(), L.GRANULARITY_FLOOR_S)
    m = P.measure_streams(2, 100.0, duration_s=0.4, warmup_s=0.1, bucket_s=0.2)
    return [figure("scadles.producer_rate", m["effective"], [100.0] * len(m["effective"]),
                   2 * (1 + 100.0 * g) / 0.4, granularity_s=g)]
