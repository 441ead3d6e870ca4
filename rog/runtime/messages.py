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

All durations travel as float64 seconds; NaN stands for "none".  Each message declares its wire
layout as ``FIELDS`` (:mod:`rog.transport.fields`: packing, unpacking and their checks follow; no pickle).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..rows import RowPartition
from ..transport.fields import Array, Choice, Data, Flag, Name, Raw, Real, Seconds, U, finite, positive
from ..transport.messages import Message, ProtocolError, register

POLICY_NAME_BYTES = 16
START_TEAM, START_OWN = 0, 1  # Join.start: take the team's initial parameters, or keep mine
MODEL_KEEP, MODEL_FOLLOWS, MODEL_WANTED = 0, 1, 2  # JoinReply.model
MODEL_PIECE_BYTES = 1 << 20  # float32 payload of one ModelPiece
EXEMPT_ITERATION = 1  # iteration tag of the rejoin transmissions (resync, full pull): exempt from the iteration order
MAX_PULL_SEGMENTS = 0xFFFF
MAX_CLOCK_SAMPLES = 64
CLOCK_PHASES = ("join", "end")
_TIME = "a finite time in seconds"


def params_digest(flat_bytes: bytes) -> bytes:
    """32-byte digest of a flat float32 parameter buffer's bytes (little-endian)."""
    return hashlib.sha256(flat_bytes).digest()


def layout_digest(partition: RowPartition) -> bytes:
    """32-byte digest of the parameter shapes, in order (names are not compared: they may differ)."""
    text = ";".join("x".join(str(d) for d in s) for s in partition.shapes)
    return hashlib.sha256(text.encode("ascii")).digest()


def _layout_fields() -> tuple:
    """The fields :class:`Join` and :class:`Rejoin` open with: what the worker trains."""
    return (U("n_elements", "Q"), U("n_rows", "I"), U("codec_id", "B"), U("threshold", "I"),
            Name("policy", POLICY_NAME_BYTES), Raw("digest", 32))


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
    TYPE = 64
    FIELDS = _layout_fields() + (Choice("start", (START_TEAM, START_OWN), "start mode"), Raw("model_digest", 32))


@register
@dataclass(frozen=True)
class JoinReply(Message):
    """PS -> worker: accepted; every worker has joined, training may start (after the initial model's pieces:
    ``model`` MODEL_KEEP: none, MODEL_FOLLOWS: the PS sends the team's, MODEL_WANTED: the worker sends its own)."""

    n_workers: int
    model: int = MODEL_KEEP
    model_digest: bytes = bytes(32)  # params_digest of the team's initial parameters
    TYPE = 65
    FIELDS = (U("n_workers", "I"), Choice("model", (MODEL_KEEP, MODEL_FOLLOWS, MODEL_WANTED), "model mode"),
              Raw("model_digest", 32))


@register
@dataclass(frozen=True)
class ModelPiece(Message):
    """Either end, at join: float32 initial parameters from element ``offset`` on (little-endian bytes)."""

    offset: int
    data: bytes
    TYPE = 80
    FIELDS = (U("offset", "Q"), Data("data", MODEL_PIECE_BYTES, multiple=4))


@register
@dataclass(frozen=True)
class AdmitRequest(Message):
    """Worker -> PS: I want to push iteration ``iteration``; give me a transfer slot."""

    iteration: int
    TYPE = 66
    FIELDS = (U("iteration", "I"),)


@register
@dataclass(frozen=True)
class AdmitGrant(Message):
    """PS -> worker: the slot is yours; ``waited_s`` is how long the PS held the request."""

    iteration: int
    waited_s: float
    TYPE = 67
    FIELDS = (U("iteration", "I"), Seconds("waited_s", optional=False))


@register
@dataclass(frozen=True)
class PushDone(Message):
    """Worker -> PS after a push: the sender's measurements; then the worker waits for its pull."""

    iteration: int
    rows_planned: int
    duration_s: float  # start of the transmission to its acknowledgement
    mandatory_s: float | None  # start to the last mandatory frame written (None: nothing mandatory)
    TYPE = 68
    FIELDS = (U("iteration", "I"), U("rows_planned", "I"), Seconds("duration_s", optional=False),
              Seconds("mandatory_s"))


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
    TYPE = 69
    FIELDS = (U("iteration", "I"), Seconds("gate_s", optional=False), Seconds("admission_s", optional=False),
              U("rows_planned", "I"), U("covered_push_seq", "Q"), U("covered_pull_seq", "Q"))


@register
@dataclass(frozen=True)
class Flush(Message):
    """Worker -> PS: my training is over; a no-deadline push of everything (iteration ``iteration``) follows."""

    iteration: int
    TYPE = 70
    FIELDS = (U("iteration", "I"),)


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
    TYPE = 71
    FIELDS = _layout_fields() + (Flag("fresh"), U("iteration", "I"), U("pushed_iteration", "I"), U("push_seq", "Q"),
                                 U("pull_seq", "Q"), Raw("model_digest", 32))


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
    TYPE = 72
    FIELDS = (U("n_workers", "I"), U("iteration", "I"), U("push_seq", "Q"), U("last_push_delivered", "I"),
              U("pull_seq", "Q"), Flag("evicted"))


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
    TYPE = 73
    FIELDS = (U("n_push_frames", "I"), U("n_pull_frames", "I"), U("push_seq", "Q"), U("pull_seq", "Q"),
              U("pushed_iteration", "I"))


@register
@dataclass(frozen=True)
class PolicyControl(Message):
    """PS -> worker, after a pull and before its ``PullReply``, only when the policy's scheduler has a number
    for this worker (:meth:`~rog.policies.base.Policy.commit_control`; ADSP: the commit rate dC_i)."""

    iteration: int
    value: float
    TYPE = 74
    FIELDS = (U("iteration", "I"), Real("value", finite, "finite"))


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
    TYPE = 75
    FIELDS = (U("seq", "I"), Real("rate", positive, "a finite number > 0"), Flag("restart"))


@register
@dataclass(frozen=True)
class PullSegments(Message):
    """Worker -> PS, before ``PushDone``: send the next pulls as one transmission per layer segment;
    ``seg_of_tensor[t]`` is the segment (``0 .. K-1``, in pull order) of parameter tensor ``t``."""

    seg_of_tensor: tuple
    TYPE = 76
    FIELDS = (Array("seg_of_tensor", "H", 1_000_000, "tensors"),)

    def check(self) -> None:
        segs = self.seg_of_tensor
        if not segs or set(segs) != set(range(max(segs) + 1)):
            raise ProtocolError("PullSegments must name segments 0 .. K-1, each at least once")


@register
@dataclass(frozen=True)
class ClockProbe(Message):
    """Worker -> PS (:mod:`rog.runtime.clock_sync`): exchange ``seq`` of a clock-offset estimate, sent at
    ``t0_s`` on the worker's event clock (Unix seconds); the PS answers with :class:`ClockEcho`."""

    seq: int
    t0_s: float
    TYPE = 77
    FIELDS = (U("seq", "I"), Real("t0_s", finite, _TIME))


@register
@dataclass(frozen=True)
class ClockEcho(Message):
    """PS -> worker: the probe's ``t0_s`` back, with its receipt ``t1_s`` and this reply's send ``t2_s`` on the
    PS's event clock."""

    seq: int
    t0_s: float
    t1_s: float
    t2_s: float
    TYPE = 78
    FIELDS = (U("seq", "I"), Real("t0_s", finite, _TIME), Real("t1_s", finite, _TIME), Real("t2_s", finite, _TIME))


@register
@dataclass(frozen=True)
class ClockReport(Message):
    """Worker -> PS after its probes: every exchange's four times ``(t0, t1, t2, t3)`` (``t3``: the echo's
    receipt on the worker's clock); ``phase`` indexes :data:`CLOCK_PHASES` (at join, at the end)."""

    phase: int
    samples: tuple  # of (t0_s, t1_s, t2_s, t3_s)
    TYPE = 79
    FIELDS = (Choice("phase", range(len(CLOCK_PHASES)), "phase"),
              Array("samples", "4d", MAX_CLOCK_SAMPLES, "samples", min_n=1, elem=Real("time", finite, _TIME)))
