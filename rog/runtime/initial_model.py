"""One starting model: at join the parameter server hands every worker the team's initial parameters.

The team's parameters are a file given to the server (``ParameterServer(initial_params=...)``), else those of
the first worker to join.  Every worker announces the digest of its own (:func:`~rog.runtime.messages.params_digest`);
once all have joined, a worker whose digest matches keeps its parameters (nothing moves: the usual case of an
experiment, where every worker loads the same pre-trained model), one that differs receives the team's
(``ModelPiece`` messages, exact float32), and one that asked to keep its own (``initial_model="own"``) is
refused with a message naming the fix.  The first worker sends its parameters only when some worker needs
them.  Torch DDP broadcasts rank 0's parameters at construction in the same spirit.

:class:`TeamModel` is the server's part (``ps.team``); :func:`send_model` and :func:`receive_model` are used by
both ends.
"""

from __future__ import annotations

import numpy as np

from ..transport import Connection, Error, ProtocolError
from .errors import RuntimeFailure
from .messages import (MODEL_FOLLOWS, MODEL_KEEP, MODEL_PIECE_BYTES, MODEL_WANTED, START_OWN, START_TEAM, JoinReply,
                       ModelPiece, params_digest)


def flat_bytes(params) -> bytes:
    """A flat float32 buffer (numpy, or a torch tensor on any device) as little-endian bytes."""
    arr = params if isinstance(params, np.ndarray) else params.detach().cpu().numpy()
    return np.ascontiguousarray(arr, dtype="<f4").tobytes()


def send_model(conn: Connection, data: bytes) -> None:
    """Send float32 parameter bytes as ``ModelPiece`` messages."""
    step = MODEL_PIECE_BYTES
    for start in range(0, len(data), step):
        conn.send(ModelPiece(start // 4, data[start : start + step]))


def receive_model(conn: Connection, n_elements: int, digest: bytes, timeout_s: float, who: str) -> np.ndarray:
    """Receive ``n_elements`` float32 values as ``ModelPiece`` messages, in order, and check their digest."""
    out = np.empty(int(n_elements), dtype="<f4")
    got = 0
    while got < n_elements:
        msg = conn.recv(timeout_s)
        if isinstance(msg, Error):
            raise RuntimeFailure(f"{who}: the initial model did not arrive: {msg.text}")
        if not isinstance(msg, ModelPiece) or msg.offset != got or len(msg.data) // 4 > n_elements - got:
            raise ProtocolError(f"{who}: expected the initial model's piece at element {got} of {n_elements}, got "
                                f"{type(msg).__name__}")
        piece = np.frombuffer(msg.data, dtype="<f4")
        out[got : got + piece.size] = piece
        got += piece.size
    if params_digest(out.tobytes()) != digest:
        raise ProtocolError(f"{who}: the initial model's digest does not match the one announced")
    return out.astype(np.float32, copy=False)


class TeamModel:
    """The team's initial parameters (``initial_params``: a file given to the server, else the first worker's once it
    sent them), the order in which workers joined and what each announced at join (``start_of``: worker ->
    ``(Join.start, Join.model_digest)``).  The server holds one (``ps.team``), called with its lock held except
    :meth:`hand_out`."""

    def __init__(self, ps, initial_params: np.ndarray | None) -> None:
        self.ps = ps
        self.initial_params = initial_params
        self.initial_digest = None if initial_params is None else params_digest(initial_params.astype("<f4").tobytes())
        self.join_order: list[int] = []
        self.start_of: dict[int, tuple[int, bytes]] = {}

    def record_join(self, r: int, msg) -> None:
        """Worker ``r`` joined with ``msg`` (a Join)."""
        self.join_order.append(r)
        self.start_of[r] = (msg.start, msg.model_digest)

    def digest(self) -> bytes:
        """The digest of the team's initial parameters (once the first worker joined)."""
        if self.initial_params is not None:
            return self.initial_digest
        return self.start_of[self.join_order[0]][1]

    def check_restart(self, msg, r: int) -> list[str]:
        """A fresh :class:`~rog.runtime.messages.Rejoin` (a restarted worker) must hold the team's initial parameters,
        as the PS then sends it everything committed since."""
        if not msg.fresh or msg.model_digest == bytes(32) or not (self.join_order or self.initial_params is not None):
            return []
        if msg.model_digest == self.digest():
            return []
        return [f"worker {r} restarted from initial parameters that differ from the team's: the parameter server "
                f"resends only what was committed since the start, so rebuild the team's (the same seed or "
                f"weights file as at the first start{', or the file the server was given' if self.initial_params is not None else ''})"]

    def hand_out(self, conn: Connection, r: int, msg) -> None:
        """After every worker joined: reply to worker ``r``'s ``Join``, with the team's parameters if it needs them."""
        ps = self.ps
        with ps.cond:
            team = self.digest()
            from_file = self.initial_params is not None
            first = self.join_order[0]
            differs = msg.model_digest != team
            wanted = (not from_file and r == first
                      and any(d != team and s == START_TEAM for s, d in self.start_of.values()))
        if differs and msg.start == START_OWN:
            source = "the file given to the parameter server" if from_file else f"worker {first}'s (the first to join)"
            text = (f"join refused: worker {r} keeps its own initial parameters (initial_model='own') but they differ "
                    f"from the team's, {source}: start every worker from identical weights, or let the parameter "
                    f"server hand out the team's (initial_model='team', the default)")
            conn.send(Error(3, text))
            raise RuntimeFailure(text)
        if wanted:
            conn.send(JoinReply(ps.n_workers, MODEL_WANTED, team))
            params = receive_model(conn, ps.partition.n_elements, team, ps.wait_timeout_s, f"worker {r}")
            with ps.cond:
                self.initial_params, self.initial_digest = params, team
                ps.cond.notify_all()
        elif differs:
            with ps.cond:
                ps.wait(lambda: self.initial_params is not None, ps.wait_timeout_s,
                        f"worker {r} waited for the team's initial parameters", conn)
                data = self.initial_params.astype("<f4").tobytes()
            conn.send(JoinReply(ps.n_workers, MODEL_FOLLOWS, team))
            send_model(conn, data)
        else:
            conn.send(JoinReply(ps.n_workers, MODEL_KEEP, team))


__all__ = ["TeamModel", "flat_bytes", "receive_model", "send_model", "MODEL_KEEP", "MODEL_FOLLOWS",
           "MODEL_WANTED", "START_OWN", "START_TEAM"]
