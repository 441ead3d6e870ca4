"""Runtime control messages beyond the transport's own (registered in :data:`rog.transport.MESSAGE_TYPES`).

One worker iteration on the wire (worker ``->`` / ``<-`` parameter server)::

    -> AdmitRequest(n)                       ask for a transfer slot (FLOWN admits at most k at once)
    <- AdmitGrant(n, waited_s)
    -> push transmission (Begin, Pieces, End)   <- Ack
    -> PushDone(n, rows_planned, duration_s, mandatory_s)   the sender's measurements, for policy.observe
    <- PullStart(n, gate_s, admission_s, rows_planned)      the staleness gate let the pull proceed
    <- pull transmission                      -> Ack
    <- PolicyControl(n, value)                (only when the policy's scheduler has a number for this worker)
    <- RateUpdate(seq, rate, restart)         at any time, between any two messages (ADSP's scheduler pushes
                                              new commit rates; the worker's connection takes it out of band)
    <- PullReply(n, budget_s, sleep_s, required_rows)       (transport message) next push's budget, rows asked for

A policy with local steps (ADSP, ADACOMM) runs this exchange only on the steps it commits at.
Under a layer-segment schedule (:mod:`rog.schedules`) the push is one transmission per segment
(each Begin but the last says ``more``), and the worker sends ``PullSegments`` before ``PushDone``: the
pull that follows is then one transmission per named segment as well.

Before the first iteration: ``-> Join`` (layout, codec, policy, start mode and the digest of the initial
parameters; refused with ``Error`` on any mismatch) and ``<- JoinReply`` once every worker has joined (a
common start).  One starting model: where a worker's initial parameters differ from the team's (a file given
to the PS, else the first worker's to join), the reply says so and ``ModelPiece`` messages carry the team's
(``MODEL_FOLLOWS``), after the first worker sent them (``MODEL_WANTED``); a worker that keeps its own
(``START_OWN``) is refused instead.  At the end:
``-> Flush(m)``, a no-deadline push of everything, then, once every worker has flushed,
``<-`` a no-deadline pull of everything; then ``Bye``.

Coming back on a new connection (a dropped link, a restarted worker, a restarted parameter
server; :mod:`rog.runtime.server` states what is guaranteed)::

    -> Rejoin(layout..., fresh, iteration, pushed_iteration, push_seq, pull_seq)
    <- RejoinReply(n_workers, iteration, push_seq, last_push_delivered, pull_seq, evicted)
    -> Resync(n_push_frames, n_pull_frames, push_seq, pull_seq, pushed_iteration)
    -> one no-deadline transmission: the push chunks, then the pull chunks the PS has not counted
    <- (fresh only) a no-deadline pull of everything committed so far

``push_seq`` / ``pull_seq`` count a worker's committed push / applied pull transmissions; the
PS's :class:`PullStart` says which of them its latest checkpoint covers.

All durations travel as float64 seconds; NaN stands for "none".  Bodies are fixed-size
structs, checked on unpacking (no pickle).
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass
from typing import ClassVar

from ..rows import RowPartition
from ..transport.messages import Message, ProtocolError, register

POLICY_NAME_BYTES = 16
START_TEAM, START_OWN = 0, 1  # Join.start: take the team's initial parameters, or keep mine
MODEL_KEEP, MODEL_FOLLOWS, MODEL_WANTED = 0, 1, 2  # JoinReply.model
MODEL_PIECE_BYTES = 1 << 20  # float32 payload of one ModelPiece


def params_digest(flat_bytes: bytes) -> bytes:
    """32-byte digest of a flat float32 parameter buffer's bytes (little-endian)."""
    return hashlib.sha256(flat_bytes).digest()
EXEMPT_ITERATION = 1  # iteration tag of the rejoin transmissions (resync, full pull): exempt from the iteration order


def layout_digest(partition: RowPartition) -> bytes:
    """32-byte digest of the parameter shapes, in order (names are not compared: they may differ)."""
    text = ";".join("x".join(str(d) for d in s) for s in partition.shapes)
    return hashlib.sha256(text.encode("ascii")).digest()


def _dur(value: float | None) -> float:
    if value is None:
        return math.nan
    value = float(value)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"a duration must be a finite number of seconds >= 0 or None, got {value!r}")
    return value


def _undur(value: float, name: str, optional: bool = True) -> float | None:
    if math.isnan(value):
        if optional:
            return None
        raise ProtocolError(f"{name} must be a duration, got NaN")
    if not (value >= 0 and math.isfinite(value)):
        raise ProtocolError(f"{name} must be a finite duration >= 0, got {value}")
    return value


def _unpack(st: struct.Struct, body: bytes, name: str) -> tuple:
    if len(body) != st.size:
        raise ProtocolError(f"{name} body is {len(body)} bytes, expected {st.size}")
    return st.unpack(body)


@register
@dataclass(frozen=True)
class Join(Message):
    """Worker -> PS: what this worker trains (model layout, codec, policy), checked before training."""

    n_elements: int
    n_rows: int
    codec_id: int
    policy: str
    threshold: int
    digest: bytes  # layout_digest of the partition
    start: int = START_TEAM  # START_TEAM: take the team's initial parameters; START_OWN: keep mine (refused if they differ)
    model_digest: bytes = bytes(32)  # params_digest of this worker's initial parameters
    TYPE: ClassVar[int] = 64
    _S: ClassVar[struct.Struct] = struct.Struct(f"<QIBI{POLICY_NAME_BYTES}s32sB32s")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        name = self.policy.encode("ascii")
        if len(name) > POLICY_NAME_BYTES:
            raise ValueError(f"policy name {self.policy!r} is longer than {POLICY_NAME_BYTES} bytes")
        return self._S.pack(self.n_elements, self.n_rows, self.codec_id, self.threshold, name, self.digest,
                            self.start, self.model_digest)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Join":
        n_el, n_rows, codec_id, threshold, name, digest, start, model_digest = _unpack(cls._S, body, "Join")
        try:
            policy = name.rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError:
            raise ProtocolError("Join carries a non-ASCII policy name") from None
        if start not in (START_TEAM, START_OWN):
            raise ProtocolError(f"Join carries an unknown start mode {start}")
        return cls(n_el, n_rows, codec_id, policy, threshold, digest, start, model_digest)


@register
@dataclass(frozen=True)
class JoinReply(Message):
    """PS -> worker: accepted; every worker has joined, training may start (after the initial model's pieces:
    ``model`` MODEL_KEEP: none, MODEL_FOLLOWS: the PS sends the team's, MODEL_WANTED: the worker sends its own)."""

    n_workers: int
    model: int = MODEL_KEEP
    model_digest: bytes = bytes(32)  # params_digest of the team's initial parameters
    TYPE: ClassVar[int] = 65
    _S: ClassVar[struct.Struct] = struct.Struct("<IB32s")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.n_workers, self.model, self.model_digest)

    @classmethod
    def unpack_body(cls, body: bytes) -> "JoinReply":
        n, model, digest = _unpack(cls._S, body, "JoinReply")
        if model not in (MODEL_KEEP, MODEL_FOLLOWS, MODEL_WANTED):
            raise ProtocolError(f"JoinReply carries an unknown model mode {model}")
        return cls(n, model, digest)


@register
@dataclass(frozen=True)
class ModelPiece(Message):
    """Either end, at join: float32 initial parameters from element ``offset`` on (little-endian bytes)."""

    offset: int
    data: bytes
    TYPE: ClassVar[int] = 80
    _S: ClassVar[struct.Struct] = struct.Struct("<Q")
    MAX_BODY: ClassVar[int] = _S.size + MODEL_PIECE_BYTES

    def pack_body(self) -> bytes:
        return self._S.pack(self.offset) + bytes(self.data)

    @classmethod
    def unpack_body(cls, body: bytes) -> "ModelPiece":
        if len(body) < cls._S.size or (len(body) - cls._S.size) % 4:
            raise ProtocolError("ModelPiece body is not an offset and whole float32 values")
        return cls(cls._S.unpack_from(body)[0], body[cls._S.size:])


@register
@dataclass(frozen=True)
class AdmitRequest(Message):
    """Worker -> PS: I want to push iteration ``iteration``; give me a transfer slot."""

    iteration: int
    TYPE: ClassVar[int] = 66
    _S: ClassVar[struct.Struct] = struct.Struct("<I")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.iteration)

    @classmethod
    def unpack_body(cls, body: bytes) -> "AdmitRequest":
        return cls(*_unpack(cls._S, body, "AdmitRequest"))


@register
@dataclass(frozen=True)
class AdmitGrant(Message):
    """PS -> worker: the slot is yours; ``waited_s`` is how long the PS held the request."""

    iteration: int
    waited_s: float
    TYPE: ClassVar[int] = 67
    _S: ClassVar[struct.Struct] = struct.Struct("<Id")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.iteration, _dur(self.waited_s))

    @classmethod
    def unpack_body(cls, body: bytes) -> "AdmitGrant":
        it, waited = _unpack(cls._S, body, "AdmitGrant")
        return cls(it, _undur(waited, "waited_s", optional=False))


@register
@dataclass(frozen=True)
class PushDone(Message):
    """Worker -> PS after a push: the sender's measurements; then the worker waits for its pull."""

    iteration: int
    rows_planned: int
    duration_s: float  # start of the transmission to its acknowledgement
    mandatory_s: float | None  # start to the last mandatory frame written (None: nothing mandatory)
    TYPE: ClassVar[int] = 68
    _S: ClassVar[struct.Struct] = struct.Struct("<IIdd")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.iteration, self.rows_planned, _dur(self.duration_s), _dur(self.mandatory_s))

    @classmethod
    def unpack_body(cls, body: bytes) -> "PushDone":
        it, planned, dur, mand = _unpack(cls._S, body, "PushDone")
        return cls(it, planned, _undur(dur, "duration_s", optional=False), _undur(mand, "mandatory_s"))


@register
@dataclass(frozen=True)
class PullStart(Message):
    """PS -> worker: the gate let the pull of ``iteration`` proceed; how long the PS held it, and why."""

    iteration: int
    gate_s: float  # waited at the staleness gate
    admission_s: float  # waited for a transfer slot after the gate (FLOWN)
    rows_planned: int  # rows the pull plans to send
    covered_push_seq: int = 0  # this worker's pushes 1..covered_push_seq are safe in the PS's latest checkpoint
    covered_pull_seq: int = 0  # likewise its pulls
    TYPE: ClassVar[int] = 69
    _S: ClassVar[struct.Struct] = struct.Struct("<IddIQQ")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.iteration, _dur(self.gate_s), _dur(self.admission_s), self.rows_planned,
                            self.covered_push_seq, self.covered_pull_seq)

    @classmethod
    def unpack_body(cls, body: bytes) -> "PullStart":
        it, gate, adm, planned, cpush, cpull = _unpack(cls._S, body, "PullStart")
        return cls(it, _undur(gate, "gate_s", optional=False), _undur(adm, "admission_s", optional=False), planned,
                   cpush, cpull)


@register
@dataclass(frozen=True)
class Flush(Message):
    """Worker -> PS: my training is over; a no-deadline push of everything (iteration ``iteration``) follows."""

    iteration: int
    TYPE: ClassVar[int] = 70
    _S: ClassVar[struct.Struct] = struct.Struct("<I")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.iteration)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Flush":
        return cls(*_unpack(cls._S, body, "Flush"))


def _policy_name(name: bytes, what: str) -> str:
    try:
        return name.rstrip(b"\0").decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError(f"{what} carries a non-ASCII policy name") from None


@register
@dataclass(frozen=True)
class Rejoin(Message):
    """Worker -> PS on a new connection: the :class:`Join` fields, then what this worker holds.

    ``fresh``: a restarted worker process (its model is the initial one, nothing accumulated): the
    PS sends it everything committed so far.  Otherwise the worker kept its state across a dropped
    link or a parameter-server restart.
    """

    n_elements: int
    n_rows: int
    codec_id: int
    policy: str
    threshold: int
    digest: bytes
    fresh: bool
    iteration: int  # iterations completed
    pushed_iteration: int  # newest iteration whose push was committed
    push_seq: int  # committed push transmissions
    pull_seq: int  # applied pull transmissions
    model_digest: bytes = bytes(32)  # fresh: params_digest of the initial parameters it rebuilt (zeros: unchecked)
    TYPE: ClassVar[int] = 71
    _S: ClassVar[struct.Struct] = struct.Struct(f"<QIBI{POLICY_NAME_BYTES}s32sBIIQQ32s")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        name = self.policy.encode("ascii")
        if len(name) > POLICY_NAME_BYTES:
            raise ValueError(f"policy name {self.policy!r} is longer than {POLICY_NAME_BYTES} bytes")
        return self._S.pack(self.n_elements, self.n_rows, self.codec_id, self.threshold, name, self.digest,
                            int(bool(self.fresh)), self.iteration, self.pushed_iteration, self.push_seq, self.pull_seq,
                            self.model_digest)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Rejoin":
        (n_el, n_rows, codec_id, threshold, name, digest, fresh, it, pushed, push_seq, pull_seq,
         model_digest) = _unpack(cls._S, body, "Rejoin")
        if fresh not in (0, 1):
            raise ProtocolError(f"Rejoin fresh flag must be 0 or 1, got {fresh}")
        return cls(n_el, n_rows, codec_id, _policy_name(name, "Rejoin"), threshold, digest, bool(fresh), it, pushed,
                   push_seq, pull_seq, model_digest)


@register
@dataclass(frozen=True)
class RejoinReply(Message):
    """PS -> worker: accepted; the iteration to continue after, and the PS's count of this worker's
    pushes (with the frames it kept of the newest) and pulls, so both ends settle what was in flight."""

    n_workers: int
    iteration: int  # continue with iteration + 1 (an evicted worker is moved up to the slowest active one)
    push_seq: int  # pushes of this worker the PS has applied
    last_push_delivered: int  # frames of push number push_seq the PS applied (acknowledged or not)
    pull_seq: int  # pulls to this worker the PS knows were applied
    evicted: bool  # the worker had been evicted from the staleness gate
    TYPE: ClassVar[int] = 72
    _S: ClassVar[struct.Struct] = struct.Struct("<IIQIQB")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.n_workers, self.iteration, self.push_seq, self.last_push_delivered, self.pull_seq,
                            int(bool(self.evicted)))

    @classmethod
    def unpack_body(cls, body: bytes) -> "RejoinReply":
        n, it, push_seq, last, pull_seq, evicted = _unpack(cls._S, body, "RejoinReply")
        if evicted not in (0, 1):
            raise ProtocolError(f"RejoinReply evicted flag must be 0 or 1, got {evicted}")
        return cls(n, it, push_seq, last, pull_seq, bool(evicted))


@register
@dataclass(frozen=True)
class Resync(Message):
    """Worker -> PS after :class:`RejoinReply`: a transmission of ``n_push_frames`` push chunks the PS
    does not hold (lost with a restarted PS) then ``n_pull_frames`` pull chunks it has not counted."""

    n_push_frames: int
    n_pull_frames: int
    push_seq: int  # the worker's counts after settling
    pull_seq: int
    pushed_iteration: int
    TYPE: ClassVar[int] = 73
    _S: ClassVar[struct.Struct] = struct.Struct("<IIQQI")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.n_push_frames, self.n_pull_frames, self.push_seq, self.pull_seq, self.pushed_iteration)

    @classmethod
    def unpack_body(cls, body: bytes) -> "Resync":
        return cls(*_unpack(cls._S, body, "Resync"))


@register
@dataclass(frozen=True)
class PolicyControl(Message):
    """PS -> worker, after a pull and before its ``PullReply``, only when the policy's scheduler has a number
    for this worker (:meth:`~rog.policies.base.Policy.commit_control`; ADSP: the commit rate dC_i)."""

    iteration: int
    value: float
    TYPE: ClassVar[int] = 74
    _S: ClassVar[struct.Struct] = struct.Struct("<Id")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        v = float(self.value)
        if not math.isfinite(v):
            raise ValueError(f"PolicyControl value must be finite, got {v!r}")
        return self._S.pack(self.iteration, v)

    @classmethod
    def unpack_body(cls, body: bytes) -> "PolicyControl":
        it, v = _unpack(cls._S, body, "PolicyControl")
        if not math.isfinite(v):
            raise ProtocolError(f"PolicyControl value must be finite, got {v}")
        return cls(it, v)


@register
@dataclass(frozen=True)
class RateUpdate(Message):
    """PS -> worker at any moment (between any two messages, also inside a transmission): the scheduler's new
    commit rate for this worker (ADSP: dC_i); ``restart``: restart the commit timer now (a search-window
    boundary).  ``seq`` numbers the scheduler's pushes (1, 2, ...).  Taken out of band by the worker's
    connection (:mod:`rog.runtime.rate_broadcast`), never queued for ``recv``."""

    seq: int
    rate: float
    restart: bool
    TYPE: ClassVar[int] = 75
    _S: ClassVar[struct.Struct] = struct.Struct("<IdB")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        v = float(self.rate)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"RateUpdate rate must be a finite number > 0, got {v!r}")
        return self._S.pack(self.seq, v, 1 if self.restart else 0)

    @classmethod
    def unpack_body(cls, body: bytes) -> "RateUpdate":
        seq, v, restart = _unpack(cls._S, body, "RateUpdate")
        if not (math.isfinite(v) and v > 0):
            raise ProtocolError(f"RateUpdate rate must be a finite number > 0, got {v}")
        if restart not in (0, 1):
            raise ProtocolError(f"RateUpdate restart flag must be 0 or 1, got {restart}")
        return cls(seq, v, bool(restart))


MAX_PULL_SEGMENTS = 0xFFFF


@register
@dataclass(frozen=True)
class PullSegments(Message):
    """Worker -> PS, before ``PushDone``: send the next pulls as one transmission per layer segment;
    ``seg_of_tensor[t]`` is the segment (``0 .. K-1``, in pull order) of parameter tensor ``t``."""

    seg_of_tensor: tuple
    TYPE: ClassVar[int] = 76
    MAX_BODY: ClassVar[int] = 4 + 2 * 1_000_000

    def pack_body(self) -> bytes:
        segs = [int(s) for s in self.seg_of_tensor]
        if not segs or min(segs) < 0 or max(segs) > MAX_PULL_SEGMENTS:
            raise ValueError(f"PullSegments needs segment indices in [0, {MAX_PULL_SEGMENTS}], got {segs[:8]}...")
        return struct.pack(f"<I{len(segs)}H", len(segs), *segs)

    @classmethod
    def unpack_body(cls, body: bytes) -> "PullSegments":
        if len(body) < 4:
            raise ProtocolError("PullSegments body is shorter than its count")
        (n,) = struct.unpack_from("<I", body)
        if len(body) != 4 + 2 * n:
            raise ProtocolError(f"PullSegments says {n} tensors in a {len(body)}-byte body")
        segs = struct.unpack_from(f"<{n}H", body, 4)
        if n == 0 or set(segs) != set(range(max(segs) + 1)):
            raise ProtocolError("PullSegments must name segments 0 .. K-1, each at least once")
        return cls(tuple(segs))


MAX_CLOCK_SAMPLES = 64
CLOCK_PHASES = ("join", "end")


def _finite(value: float, name: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ProtocolError(f"{name} must be a finite time in seconds, got {value}")
    return value


@register
@dataclass(frozen=True)
class ClockProbe(Message):
    """Worker -> PS (:mod:`rog.runtime.clock_sync`): exchange ``seq`` of a clock-offset estimate, sent at
    ``t0_s`` on the worker's event clock (Unix seconds); the PS answers with :class:`ClockEcho`."""

    seq: int
    t0_s: float
    TYPE: ClassVar[int] = 77
    _S: ClassVar[struct.Struct] = struct.Struct("<Id")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.seq, _finite(self.t0_s, "t0_s"))

    @classmethod
    def unpack_body(cls, body: bytes) -> "ClockProbe":
        seq, t0 = _unpack(cls._S, body, "ClockProbe")
        return cls(seq, _finite(t0, "ClockProbe t0_s"))


@register
@dataclass(frozen=True)
class ClockEcho(Message):
    """PS -> worker: the probe's ``t0_s`` back, with its receipt ``t1_s`` and this reply's send ``t2_s`` on the
    PS's event clock."""

    seq: int
    t0_s: float
    t1_s: float
    t2_s: float
    TYPE: ClassVar[int] = 78
    _S: ClassVar[struct.Struct] = struct.Struct("<Iddd")
    MAX_BODY: ClassVar[int] = _S.size

    def pack_body(self) -> bytes:
        return self._S.pack(self.seq, _finite(self.t0_s, "t0_s"), _finite(self.t1_s, "t1_s"), _finite(self.t2_s, "t2_s"))

    @classmethod
    def unpack_body(cls, body: bytes) -> "ClockEcho":
        seq, t0, t1, t2 = _unpack(cls._S, body, "ClockEcho")
        return cls(seq, _finite(t0, "ClockEcho t0_s"), _finite(t1, "ClockEcho t1_s"), _finite(t2, "ClockEcho t2_s"))


@register
@dataclass(frozen=True)
class ClockReport(Message):
    """Worker -> PS after its probes: every exchange's four times ``(t0, t1, t2, t3)`` (``t3``: the echo's
    receipt on the worker's clock); ``phase`` indexes :data:`CLOCK_PHASES` (at join, at the end)."""

    phase: int
    samples: tuple  # of (t0_s, t1_s, t2_s, t3_s)
    TYPE: ClassVar[int] = 79
    MAX_BODY: ClassVar[int] = 5 + 32 * MAX_CLOCK_SAMPLES

    def pack_body(self) -> bytes:
        if not 0 <= self.phase < len(CLOCK_PHASES):
            raise ValueError(f"ClockReport phase must be in [0, {len(CLOCK_PHASES)}), got {self.phase}")
        if not 1 <= len(self.samples) <= MAX_CLOCK_SAMPLES:
            raise ValueError(f"ClockReport carries 1 to {MAX_CLOCK_SAMPLES} samples, got {len(self.samples)}")
        flat = [_finite(t, "a clock sample time") for s in self.samples for t in s]
        if len(flat) != 4 * len(self.samples):
            raise ValueError("every ClockReport sample is four times (t0, t1, t2, t3)")
        return struct.pack(f"<BI{len(flat)}d", self.phase, len(self.samples), *flat)

    @classmethod
    def unpack_body(cls, body: bytes) -> "ClockReport":
        if len(body) < 5:
            raise ProtocolError("ClockReport body is shorter than its header")
        phase, n = struct.unpack_from("<BI", body)
        if phase >= len(CLOCK_PHASES) or not 1 <= n <= MAX_CLOCK_SAMPLES or len(body) != 5 + 32 * n:
            raise ProtocolError(f"ClockReport: phase {phase}, {n} samples in a {len(body)}-byte body")
        flat = [_finite(t, "ClockReport time") for t in struct.unpack_from(f"<{4 * n}d", body, 5)]
        return cls(phase, tuple(tuple(flat[4 * i:4 * i + 4]) for i in range(n)))
