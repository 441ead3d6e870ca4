"""The per-rank event log: one typed JSON record per line, the only source the figures are computed from.

One file per rank (:func:`events_file_name`: ``events-ps.jsonl``, ``events-w<k>.jsonl``).  The
first line is a header (schema version, rank, run id, clock origin); every later line is one
record ``{"kind": ..., "t_s": ..., <fields>}`` where ``t_s`` is the event's start in seconds
since the clock origin (``time.monotonic`` minus ``origin_monotonic_s``: CLOCK_MONOTONIC is
shared by every process on one machine, so ranks line up; on separate hosts each counts from its own
origin, and the analysis puts them on the PS's clock by the PS's offset estimates, :mod:`rog.runtime.clock_sync`).

Kinds and their fields (:data:`KINDS`) use the same boundaries for every system (docs/design.md#event-records):

* ``compute``: gradient computation, local update, accumulation, push planning and encoding
  (compression), plus any compute-pacing sleep (``sleep_s``);
* ``push`` / ``pull``: one transmission (rows planned and delivered, frame bytes, deadline,
  delivered share, duration, time to the last mandatory frame); on a worker a push includes
  committing the delivered rows and a pull applying them, so that one iteration's compute,
  stall, push and pull records tile its wall time; the parameter server's ``pull`` of a ROG run
  also names the budget it handed out (``budget_s``) and what decided it (``budget_rule``,
  ``budget_reason``: initial / straggler / history, ``budget_lead``: the worker's lead over the
  slowest in the rule's unit, transmission steps or pushes);
* ``stall``: waiting for a transfer slot (``reason="admission"``, FLOWN) or at the staleness gate
  (``reason="gate"``);
* ``data_wait``: a streaming run's wait for its batch on the arrival clock (``batch`` samples; ``buffer``
  held before the take, ``buffer_after``; ``dropped`` and ``arrived`` so far; ``analytic_s`` = max(0,
  (b - q) / S)); a fourth time component, never part of ``stall``;
* ``staleness``: after a push, how many iterations this worker's rows trail its push count;
* ``eval``: a test of a model some worker actually holds;
* ``flush``: the final no-deadline push/pull that empties every buffer;
* ``fault``: a runtime fault and the recovery from it (``event``: ``link_lost``, ``reconnected``,
  ``worker_lost``, ``worker_evicted`` (``level="warning"``), ``worker_rejoined``, ``worker_left`` (said bye or
  reported an error without flushing: gone for good), ``ps_resumed``;
  ``gap_s`` is how long the affected worker or server was away; a ``worker_lost`` names who noticed it,
  ``noticed_by`` ``connection`` (the broken link's own thread) or ``rejoin`` (the worker came back on a new
  link first; ``heard_s_ago``: how long before that the old link last delivered bytes));
* ``checkpoint``: the parameter server wrote its state (``seq``, ``bytes``, ``duration_s``);
* ``inject``: ScaDLES data injection on a worker (``direction`` send/recv, ``samples``, ``bytes`` on the
  wire, 0 for the local shortcut; ``peer``, ``mode``), :mod:`rog.streams.inject`;
* ``schedule``: a server-side scheduler's record (ADSP: ``event`` ``window`` with the search's reward
  fit, ``decision``, ``search_start``, ``research``, ``checkpoint`` with commit counts ``commits`` and
  rates ``delta_c``, ``rates`` when new rates go out);
* ``run_start`` / ``run_end``.

A restarted parameter server appends to its file (:class:`EventLog` with ``append=True``): no
second header, its first record is ``fault`` / ``ps_resumed``.

:func:`read_events` validates a file and names the file and line of the first bad record.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
HEADER_KIND = "header"
HEADER_FIELDS = ("schema", "rank", "run_id", "origin_monotonic_s", "origin_unix_s")
STALL_REASONS = ("gate", "admission")
FLUSH_DIRECTIONS = ("push", "pull")

_NUM = (int, float)
_OPT_NUM = (int, float, type(None))
_TRANSFER = {
    "iteration": int,
    "rows_planned": int,
    "rows_delivered": int,
    "bytes": int,
    "deadline_s": _OPT_NUM,  # null = no deadline
    "delivered_share": _NUM,
    "duration_s": _NUM,
    "mandatory_s": _OPT_NUM,  # null = nothing mandatory (or never reached)
}

OVERLAP_TIMES = ("fwd_s", "fwd_from_pull_s", "bwd_s", "fwd_compute_s", "bwd_compute_s", "fwd_wait_s",
                 "predicted_fwd_s", "predicted_bwd_s", "plan_s", "dt_s", "compute_only_s", "overlap_s",
                 "comm_only_s", "stall_s")
# kind -> (required fields with their types, optional fields with their types)
KINDS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "run_start": ({}, {"policy": str, "threshold": int, "n_workers": int, "worker": int, "codec": str}),
    "run_end": ({"status": str}, {"iterations": int, "reason": str}),
    "compute": ({"iteration": int, "duration_s": _NUM}, {"sleep_s": _NUM, "worker": int, "lr": _NUM}),
    "push": (_TRANSFER, {"worker": int, "cut": bool, "required_rows": int, "frames_planned": int}),
    "pull": (_TRANSFER, {"worker": int, "cut": bool, "apply_s": _NUM, "frames_planned": int,
                         # PS side, ROG: the budget handed out with this pull and what decided it
                         "budget_s": _OPT_NUM, "budget_rule": str, "budget_reason": str,
                         "budget_lead": (int, type(None))}),
    "stall": ({"iteration": int, "duration_s": _NUM, "reason": str}, {"worker": int}),
    "data_wait": ({"iteration": int, "duration_s": _NUM}, {"worker": int, "batch": int, "buffer": int, "buffer_after": int,
                                                          "dropped": int, "arrived": int, "analytic_s": _NUM}),
    "staleness": ({"iteration": int, "max": int, "mean": _NUM}, {"worker": int, "tensor_max": list}),
    "eval": ({"iteration": int, "accuracy": _NUM, "loss": _NUM}, {"duration_s": _NUM, "worker": int,
                                                                  "flushed": bool, "train_loss": _OPT_NUM}),
    "flush": ({"direction": str, "rows_delivered": int, "bytes": int, "duration_s": _NUM}, {"worker": int}),
    "fault": ({"event": str}, {"worker": int, "level": str, "reason": str, "gap_s": _NUM, "iteration": int,
                               "fresh": bool, "evicted": bool, "attempts": int, "push_frames": int,
                               "pull_frames": int, "checkpoint": int, "since_checkpoint_s": _NUM,
                               "noticed_by": str, "heard_s_ago": _NUM}),
    "checkpoint": ({"seq": int, "bytes": int, "duration_s": _NUM}, {"path": str}),
    "inject": ({"iteration": int, "direction": str, "samples": int, "bytes": int}, {"worker": int, "peer": int, "mode": str}),
    "schedule": ({"event": str}, {"epoch": int, "k": int, "reward": _OPT_NUM, "fit_ok": bool, "a1": _OPT_NUM,
                                  "a2": _OPT_NUM, "a3": _OPT_NUM, "target_loss": _OPT_NUM, "times_s": list,
                                  "losses": list, "reason": str, "compared_with": int, "commits": list,
                                  "delta_c": list, "spread": int, "loss": _OPT_NUM, "previous_loss": _OPT_NUM,
                                  "searching": bool, "held_s": _NUM, "remeasure": bool}),
    # ADSP's rates pushed by the PS's scheduler (rog.runtime.rate_broadcast) and received by a worker
    "rate_push": ({"worker": int, "seq": int, "rate": _NUM, "restart": bool}, {"error": str, "boundary_s": _NUM}),
    "rate": ({"seq": int, "rate": _NUM, "restart": bool}, {"worker": int}),
    # the global model at the PS on one time grid, every system (rog.runtime.global_eval)
    "global_eval": ({"t_grid_s": _NUM, "loss": _NUM, "accuracy": _NUM, "duration_s": _NUM, "cpu_s": _NUM},
                    {"skipped": int}),
    # per-layer pacing (rog.schedules.pacing): this machine's per-layer compute the paced time is spread by
    "pacing": ({"mode": str, "n_layers": int}, {"passes": int, "fwd_s": list, "bwd_s": list}),
    # a transfer schedule's iteration (rog.schedules): time composition, the plan's predictions
    "overlap": ({"iteration": int, "duration_s": _NUM}, {**{k: _OPT_NUM for k in OVERLAP_TIMES},
        "schedule": str, "fwd_segments": int, "bwd_segments": int, "replanned": bool, "n_layers": int}),
}
FAULT_EVENTS = ("link_lost", "reconnected", "worker_lost", "worker_evicted", "worker_rejoined", "worker_left", "ps_resumed")


class EventLogError(ValueError):
    """An event file or record breaks the schema (the message names the file and line)."""


def events_file_name(rank: str) -> str:
    """File name of a rank's log: ``events-ps.jsonl`` or ``events-w<k>.jsonl``."""
    _check_rank(rank)
    return f"events-{rank}.jsonl"


def worker_rank(worker: int) -> str:
    """The rank name of worker ``worker`` (``w<k>``)."""
    if isinstance(worker, bool) or int(worker) != worker or worker < 0:
        raise ValueError(f"worker must be a non-negative integer, got {worker!r}")
    return f"w{int(worker)}"


def _check_rank(rank: str) -> None:
    if rank != "ps" and not (isinstance(rank, str) and rank[:1] == "w" and rank[1:].isdigit()):
        raise ValueError(f"rank must be 'ps' or 'w<k>' (e.g. 'w0'), got {rank!r}")


def _type_ok(value, types) -> bool:
    if isinstance(value, bool) and types is not bool and (not isinstance(types, tuple) or bool not in types):
        return False  # JSON true/false is not a number
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if types is float:
        types = _NUM
    if types is int and isinstance(value, float):
        return False
    return isinstance(value, types)


def check_record(rec: dict) -> None:
    """Raise ValueError unless ``rec`` is a valid record (known kind, required fields, field types)."""
    if not isinstance(rec, dict):
        raise ValueError(f"a record must be a JSON object, got {type(rec).__name__}")
    kind = rec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
    required, optional = KINDS[kind]
    if "t_s" not in rec:
        raise ValueError(f"{kind} record misses field 't_s'")
    if not _type_ok(rec["t_s"], _NUM):
        raise ValueError(f"{kind} record: field 't_s' must be a finite number, got {rec['t_s']!r}")
    for name, types in required.items():
        if name not in rec:
            raise ValueError(f"{kind} record misses field {name!r}")
    for name, value in rec.items():
        if name in ("kind", "t_s"):
            continue
        types = required.get(name, optional.get(name))
        if types is None:
            raise ValueError(f"{kind} record has unknown field {name!r}; known: {sorted(required) + sorted(optional)}")
        if not _type_ok(value, types):
            raise ValueError(f"{kind} record: field {name!r} has a bad value {value!r}")
    if kind == "stall" and rec["reason"] not in STALL_REASONS:
        raise ValueError(f"stall record: reason must be one of {STALL_REASONS}, got {rec['reason']!r}")
    if kind == "fault" and rec["event"] not in FAULT_EVENTS:
        raise ValueError(f"fault record: event must be one of {FAULT_EVENTS}, got {rec['event']!r}")
    if kind == "flush" and rec["direction"] not in FLUSH_DIRECTIONS:
        raise ValueError(f"flush record: direction must be one of {FLUSH_DIRECTIONS}, got {rec['direction']!r}")


class EventLog:
    """Writes one rank's records, one JSON line each, flushed per line (so a parent can tail it).

    ``origin_monotonic_s`` is the run's clock origin (shared by every rank; default: now).
    Thread-safe: the parameter server's connection threads share one log.  ``append=True`` continues
    an existing file (a restarted parameter server): no new header; a missing file starts with one.
    """

    def __init__(self, path: str | os.PathLike, rank: str, run_id: str, origin_monotonic_s: float | None = None,
                 append: bool = False) -> None:
        _check_rank(rank)
        if not isinstance(run_id, str) or not run_id:
            raise ValueError(f"run_id must be a non-empty string, got {run_id!r}")
        from .clock_sync import clock_skew_s  # ROG_CLOCK_SKEW_S: a host clock off by that much (tests, emulation)

        now_mono, now_unix = time.monotonic(), time.time() + clock_skew_s()
        self.origin_s = now_mono if origin_monotonic_s is None else float(origin_monotonic_s)
        if not math.isfinite(self.origin_s):
            raise ValueError(f"origin_monotonic_s must be finite, got {origin_monotonic_s!r}")
        self.origin_unix_s = now_unix - (now_mono - self.origin_s)  # the origin on this host's wall clock
        self.path = Path(path)
        self.rank = rank
        self.run_id = run_id
        self._lock = threading.Lock()
        continuing = append and self.path.exists() and self.path.stat().st_size > 0
        if continuing:
            with open(self.path, "rb+") as f:  # a crash may have cut the last line: drop the partial line
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.truncate(_last_line_start(self.path))
        self._file = open(self.path, "a" if continuing else "w", encoding="utf-8")
        if continuing:
            return
        header = {
            "kind": HEADER_KIND,
            "schema": SCHEMA_VERSION,
            "rank": rank,
            "run_id": run_id,
            "origin_monotonic_s": self.origin_s,
            "origin_unix_s": self.origin_unix_s,
            "pid": os.getpid(),
        }
        self._write_line(header)

    def now_s(self) -> float:
        """Seconds since the clock origin."""
        return time.monotonic() - self.origin_s

    def at(self, monotonic_s: float) -> float:
        """A ``time.monotonic`` value as seconds since the clock origin."""
        return float(monotonic_s) - self.origin_s

    def _write_line(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":"), allow_nan=False)
        with self._lock:
            if self._file.closed:
                raise ValueError(f"event log {self.path} is closed")
            self._file.write(line + "\n")
            self._file.flush()

    def write(self, kind: str, t_s: float | None = None, **fields) -> dict:
        """Validate and append one record (``t_s``: event start since the origin; default now)."""
        rec = {"kind": kind, "t_s": self.now_s() if t_s is None else float(t_s)}
        rec.update({k: _plain(v) for k, v in fields.items()})
        check_record(rec)
        self._write_line(rec)
        return rec

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _last_line_start(path: Path) -> int:
    """Byte offset just after the last newline of ``path`` (0 if none): where an unterminated last line starts."""
    data = path.read_bytes()
    return data.rfind(b"\n") + 1


def _plain(v):
    """numpy scalars -> Python scalars (JSON-serialisable)."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        return v.item()
    return v


def read_events(path: str | os.PathLike, allow_partial_last_line: bool = False) -> tuple[dict, list[dict]]:
    """``(header, records)`` of one event file, validated; EventLogError names the file and line.

    ``allow_partial_last_line`` skips an unterminated last line (a file still being written).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise EventLogError(f"{path}: cannot read: {e.strerror}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines and allow_partial_last_line:
        lines.pop()
    if not lines:
        raise EventLogError(f"{path}:1: empty event file (expected a header line)")
    header = _parse(path, 1, lines[0])
    if header.get("kind") != HEADER_KIND:
        raise EventLogError(f"{path}:1: first line must be the header (kind 'header'), got kind {header.get('kind')!r}")
    missing = [f for f in HEADER_FIELDS if f not in header]
    if missing:
        raise EventLogError(f"{path}:1: header misses field(s) {missing}")
    if header["schema"] != SCHEMA_VERSION:
        raise EventLogError(f"{path}:1: schema version {header['schema']!r}; this reader knows {SCHEMA_VERSION}")
    records = []
    for i, line in enumerate(lines[1:], start=2):
        rec = _parse(path, i, line)
        try:
            check_record(rec)
        except ValueError as e:
            raise EventLogError(f"{path}:{i}: {e}") from None
        records.append(rec)
    return header, records


def _parse(path: Path, lineno: int, line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise EventLogError(f"{path}:{lineno}: not a JSON line ({e.msg})") from None
    if not isinstance(obj, dict):
        raise EventLogError(f"{path}:{lineno}: a record must be a JSON object")
    return obj
