"""The transport: authenticated TCP connections between workers and the parameter server, and
speculative transmissions whose deadlines hold (docs/design.md#transport-deadlines).

Typical use (worker side)::

    conn = connect(host, port, worker_id=3, config=TransportConfig(secret=load_secret()))
    frames = LazyFrames(partition, codec, acc, scales, plan.chunks, iteration)
    res = conn.send_transmission(frames, n_frames=len(frames), iteration=iteration,
                                 mandatory=plan.mandatory_chunks, deadline_s=budget_s)
    frames.commit(res.delivered)              # exactly what the PS acknowledged
    conn.send(PullRequest(iteration))
    reply = conn.recv()                       # PullReply: budget of the next push, rows the PS needs
    begin = conn.recv()                       # Begin of the pull
    got = conn.receive_transmission(begin, WireFrames(partition, codec))   # acks automatically

Parameter-server side: ``Listener(config=...)``, ``conn = listener.accept()``, then the same
``recv`` / ``receive_transmission`` / ``send_transmission`` calls.  ``inproc_pair()`` gives two
connected ends in one process (optionally rate-modelled, optionally on a virtual clock).
"""

from .config import SECRET_ENV, TransportConfig, load_secret
from .connection import Connection, Pipe, SocketPipe, tune_socket
from .handshake import Listener, client_handshake, connect, server_handshake
from .inproc import MemoryPipe, inproc_pair
from .messages import (
    MESSAGE_TYPES,
    PROTOCOL_VERSION,
    Ack,
    AckStatus,
    Begin,
    Bye,
    Direction,
    End,
    Error,
    HandshakeError,
    LinkClosed,
    Message,
    MessageParser,
    Piece,
    ProtocolError,
    PullReply,
    PullRequest,
    Refuse,
    RefuseReason,
    Role,
    TransportError,
    TransportTimeout,
    encode_message,
    register,
)
from .ratelimit import Clock, RealClock, TokenBucket, VirtualClock
from .stream import LazyFrames, RecvResult, SendResult, WireFrames, receive_transmission, send_transmission

__all__ = [
    "SECRET_ENV", "TransportConfig", "load_secret",
    "Connection", "Pipe", "SocketPipe", "tune_socket",
    "Listener", "client_handshake", "connect", "server_handshake",
    "MemoryPipe", "inproc_pair",
    "MESSAGE_TYPES", "PROTOCOL_VERSION", "Ack", "AckStatus", "Begin", "Bye", "Direction", "End", "Error",
    "HandshakeError", "LinkClosed", "Message", "MessageParser", "Piece", "ProtocolError", "PullReply",
    "PullRequest", "Refuse", "RefuseReason", "Role", "TransportError", "TransportTimeout", "encode_message",
    "register",
    "Clock", "RealClock", "TokenBucket", "VirtualClock",
    "LazyFrames", "RecvResult", "SendResult", "WireFrames", "receive_transmission", "send_transmission",
]
