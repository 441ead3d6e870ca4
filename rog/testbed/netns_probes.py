"""Small probes the tests and ``scripts/bench_replay.py`` start inside the testbed's namespaces: TCP
echo, bulk sender and receiver, and a read of a device's offloads.

Run as ``python -m rog.testbed.netns_probes CMD`` (or ``python -m rog.testbed.netns CMD``).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Sequence

from rog.testbed.netns_host import offload_state
from rog.testbed.tc import FRAME_BYTES

if TYPE_CHECKING:
    from rog.testbed.netns import Testbed


def probe_argv(*args: str) -> list[str]:
    """``python -m rog.testbed.netns_probes ARGS`` with this interpreter (to be wrapped in exec_argv)."""
    return [sys.executable, "-m", "rog.testbed.netns_probes", *args]


def start_probe(tb: Testbed, who, *args: str) -> subprocess.Popen:
    """Start a probe inside ``who``'s namespace; it prints ``READY`` once listening (servers)."""
    return subprocess.Popen(tb.exec_argv(tb.netns_of(who), probe_argv(*args)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_ready(p: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Block until a server probe printed ``READY`` (raise with its stderr if it died)."""
    box: list[str] = []
    th = threading.Thread(target=lambda: box.append(p.stdout.readline()), daemon=True)
    th.start()
    th.join(timeout_s)
    if not box or box[0].strip() != "READY":
        p.kill()
        raise RuntimeError(f"probe did not start: {p.stderr.read() if p.stderr else ''}")


def _serve_echo(host: str, port: int, count: int, timeout_s: float) -> None:
    with socket.create_server((host, port)) as srv:
        srv.settimeout(timeout_s)
        print("READY", flush=True)
        for _ in range(count):
            conn, _ = srv.accept()
            with conn:
                conn.settimeout(timeout_s)
                while data := conn.recv(65536):
                    conn.sendall(data)


def _echo_client(host: str, port: int, payload: bytes, timeout_s: float) -> bytes:
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        got = bytearray()
        while data := s.recv(65536):
            got += data
    return bytes(got)


def _bulk_recv(host: str, port: int, out: str, timeout_s: float) -> None:
    """Accept one connection and record (monotonic time, bytes) of every recv until EOF."""
    import numpy as np

    with socket.create_server((host, port)) as srv:
        srv.settimeout(timeout_s)
        print("READY", flush=True)
        conn, _ = srv.accept()
        times, sizes = [], []
        buf = bytearray(1 << 18)
        try:
            with conn:
                conn.settimeout(timeout_s)
                mono = time.monotonic
                while (n := conn.recv_into(buf)) > 0:
                    times.append(mono())
                    sizes.append(n)
        finally:  # a stalled transfer still leaves its timeline for diagnosis
            np.savez(out, t=np.asarray(times, dtype=np.float64), n=np.asarray(sizes, dtype=np.int64))


def _bulk_send(host: str, port: int, total_bytes: int, duration_s: float, timeout_s: float,
               cc: str | None = None) -> dict:
    """Send ``total_bytes`` (if > 0) or for ``duration_s``; report the MSS and what was sent.
    ``cc``: TCP congestion control for this socket (e.g. ``cubic``), default the namespace's."""
    chunk = b"\x5a" * (1 << 16)
    sent = 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if cc:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        s.settimeout(timeout_s)
        s.connect((host, port))
        used_cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()
        mss = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
        t0 = time.monotonic()
        while True:
            if total_bytes > 0:
                if sent >= total_bytes:
                    break
                n = s.send(chunk[: min(len(chunk), total_bytes - sent)])
            else:
                if time.monotonic() - t0 >= duration_s:
                    break
                n = s.send(chunk)
            sent += n
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # wait for the receiver to close: every byte has then arrived
        t1 = time.monotonic()
    return {"sent": sent, "mss": mss, "t0": t0, "t1": t1, "cc": used_cc}


def payload_per_frame(mss: int) -> float:
    """Wire bytes per payload byte for full TCP segments on a 1500-MTU veth (the shapers count frames)."""
    return FRAME_BYTES / mss if mss > 0 else float("nan")


def _main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rog.testbed.netns_probes", description="namespace probes")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("echo-server", "echo-client", "bulk-recv", "bulk-send"):
        p = sub.add_parser(name)
        p.add_argument("--host", required=True)
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--timeout-s", type=float, default=30.0)
        if name == "echo-server":
            p.add_argument("--count", type=int, default=1)
        if name == "echo-client":
            p.add_argument("--payload", default="rog-echo")
        if name == "bulk-recv":
            p.add_argument("--out", required=True)
        if name == "bulk-send":
            p.add_argument("--bytes", type=int, default=0)
            p.add_argument("--duration-s", type=float, default=1.0)
            p.add_argument("--cc", default=None, help="TCP congestion control of the socket")
    o = sub.add_parser("offloads")
    o.add_argument("dev")
    a = ap.parse_args(argv)
    if a.cmd == "echo-server":
        _serve_echo(a.host, a.port, a.count, a.timeout_s)
    elif a.cmd == "echo-client":
        got = _echo_client(a.host, a.port, a.payload.encode(), a.timeout_s)
        print(got.decode(errors="replace"))
    elif a.cmd == "bulk-recv":
        _bulk_recv(a.host, a.port, a.out, a.timeout_s)
    elif a.cmd == "bulk-send":
        print(json.dumps(_bulk_send(a.host, a.port, a.bytes, a.duration_s, a.timeout_s, a.cc)))
    elif a.cmd == "offloads":
        print(json.dumps(offload_state(a.dev)))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
