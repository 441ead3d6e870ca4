"""The live executor's messages (:mod:`rog.inference.live`): a fixed header ``struct`` then raw float32 bytes.

The header (:data:`HEADER`): magic ``RGID``, version, type (:data:`MSG`), inference id, the plan
``i, j, x*1000, merge``, row offset, 4-d shape, payload length (bounded by :data:`MAX_PAYLOAD`, an
``MPLAN`` by :data:`MAX_PLAN_BYTES`), the server's compute seconds.  A reader checks every field
before it reads the payload; nothing runs code from the bytes (no pickle).
"""

from __future__ import annotations

import socket
import struct
import time

import torch

from rog.inference.costmodel import Plan

MAGIC = b"RGID"
VERSION = 2
HEADER = struct.Struct("!4sBBIHHHBI4IQd")
MSG = {"DATA": 1, "RESULT": 2, "ACK": 3, "PROBE": 4, "BYE": 5, "MPLAN": 6}
MAX_PLAN_BYTES = 256  # an MPLAN payload (rog.inference.live_loss.pack_plan) is far shorter
MAX_PAYLOAD = 64 << 20  # no tensor of these models comes near 64 MiB; larger lengths are refused
MERGES = ("robot", "server")


class Header:
    """The fields of one message header."""

    __slots__ = ("type", "inf", "i", "j", "x_milli", "merge", "row_lo", "shape", "length", "server_s")

    def __init__(self, type, inf=0, i=0, j=0, x_milli=0, merge=0, row_lo=0, shape=(0, 0, 0, 0), length=0,
                 server_s=0.0):
        self.type, self.inf, self.i, self.j, self.x_milli, self.merge = type, inf, i, j, x_milli, merge
        self.row_lo, self.shape, self.length, self.server_s = row_lo, tuple(shape), length, server_s

    def plan(self) -> Plan:
        return Plan(self.i, self.j, self.x_milli / 1000.0, MERGES[self.merge])


def pack(h: Header) -> bytes:
    shape = tuple(h.shape) + (0,) * (4 - len(h.shape))
    return HEADER.pack(MAGIC, VERSION, h.type, h.inf, h.i, h.j, h.x_milli, h.merge, h.row_lo, *shape, h.length,
                       h.server_s)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("peer closed the connection")
        got += k
    return buf


def read_msg(sock: socket.socket) -> tuple[Header, bytearray, float, float]:
    """One message: header, payload, and the monotonic times of its first and last byte."""
    raw = _recv_exact(sock, HEADER.size)
    first = time.monotonic()
    magic, ver, typ, inf, i, j, xm, merge, row_lo, s0, s1, s2, s3, length, server_s = HEADER.unpack(raw)
    if magic != MAGIC or ver != VERSION:
        raise ConnectionError(f"bad message header (magic {magic!r}, version {ver})")
    if typ not in MSG.values() or merge > 1 or length > (MAX_PLAN_BYTES if typ == MSG["MPLAN"] else MAX_PAYLOAD):
        raise ConnectionError(f"bad message (type {typ}, merge {merge}, length {length})")
    shape = tuple(d for d in (s0, s1, s2, s3) if d)
    if typ in (MSG["DATA"], MSG["RESULT"]):
        n = 4
        for d in shape:
            n *= d
        if n != length:
            raise ConnectionError(f"payload length {length} does not match shape {shape}")
    payload = _recv_exact(sock, length) if length else bytearray()
    return Header(typ, inf, i, j, xm, merge, row_lo, shape, length, server_s), payload, first, time.monotonic()


def tensor_of(h: Header, payload: bytearray) -> torch.Tensor:
    return torch.frombuffer(payload, dtype=torch.float32).reshape(h.shape) if h.length else torch.zeros(h.shape)
