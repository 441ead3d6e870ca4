"""Checkpoints of a model that a worker actually holds, written cheaply and read back safely.

Why a worker's model: the original artifact checkpointed the parameter server's model, which
double-counted rows not yet delivered to the workers (docs/design.md#event-records,
docs/design.md#artifact-defects).  Here worker ``k`` checkpoints its
own ``model.state_dict()`` right after a ``step()``: its parameters after applying its last pull, plus
its own buffers (BatchNorm running statistics, which never travel through the PS).

Schedule (docs/design.md#artifact-choices, as the artifact): a checkpoint every 60 s, the period tripling after every 20
checkpoints; :class:`CheckpointSchedule` (``time_scale`` shrinks the period with the quick profile's
trace time scale).

Files, in one directory (by convention ``<run_dir>/checkpoints/``, :func:`checkpoint_dir`):

* ``ckpt-w<k>-it<iteration:06d>.pt``: ``torch.save`` of a plain ``{name: tensor}`` dict, read back
  with ``torch.load(weights_only=True)`` only (no pickle of arbitrary objects);
* ``ckpt-w<k>-it<iteration:06d>.json``: the sidecar (format, worker, iteration, ``t_s`` on the run's
  event clock, ``wall_s`` Unix time, model name, sha256 and size of the tensor file, ``meta``).

Both are written to a temporary name, fsynced, then ``os.replace``d; the sidecar last.  The sidecar is
the commit marker: a tensor file without one (a crash in between) is invisible to
:func:`list_checkpoints`, and :func:`load_checkpoint` verifies size and sha256 against it.

Cost to the worker (:class:`CheckpointWriter`): the training thread only copies the state to host
memory (about 1 ms for the quick model's 0.8 MiB; about 65 ms for ConvMLP-M's 65 MiB on a laptop
core); serialising, hashing and writing happen in a background thread, one write at a time.  If the
previous write is still running when the next checkpoint is due, that checkpoint is skipped (nothing
is copied), counted in ``skipped`` and logged, so training never waits for the disk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

__all__ = [
    "CHECKPOINT_SUBDIR",
    "FORMAT",
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointSchedule",
    "CheckpointWriter",
    "checkpoint_dir",
    "checkpoint_name",
    "list_checkpoints",
    "load_checkpoint",
    "run_start_s",
    "save_checkpoint",
    "snapshot_state",
]

CHECKPOINT_SUBDIR = "checkpoints"
FORMAT = "rog-checkpoint"
FORMAT_VERSION = 1
_NAME = re.compile(r"^ckpt-w(\d+)-it(\d{6,})\.(pt|json)$")
_HASH_BLOCK = 1 << 20

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint is missing, truncated, corrupted or not a checkpoint (the message names the file)."""


# ----------------------------------------------------------------------------- schedule
class CheckpointSchedule:
    """When to checkpoint: every ``period_s * time_scale`` seconds, the period tripling after every
    ``triple_every`` checkpoints (the artifact: 60 s, 20).

    The due times form a fixed grid from the schedule's start (t = 0): with period 60 and
    ``triple_every`` 2 they are 60, 120, 300, 480, 1020, 1560, ...  :meth:`due` is asked with the
    current time; when one or more grid times have passed it answers True once and consumes all of them
    (an iteration longer than the period gives one checkpoint, not a burst), so grid times stay put.
    """

    def __init__(self, period_s: float = 60.0, triple_every: int = 20, time_scale: float = 1.0) -> None:
        if isinstance(period_s, bool) or not isinstance(period_s, (int, float)) or not (
                math.isfinite(period_s) and period_s > 0):
            raise ValueError(f"period_s must be a positive number of seconds (the artifact: 60); got {period_s!r}")
        if isinstance(triple_every, bool) or not isinstance(triple_every, (int, np.integer)) or triple_every < 1:
            raise ValueError(f"triple_every must be a positive integer (the artifact: 20); got {triple_every!r}")
        if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or not (
                math.isfinite(time_scale) and time_scale > 0):
            raise ValueError(f"time_scale must be a positive number (1.0: real time); got {time_scale!r}")
        self.period_s = float(period_s)
        self.triple_every = int(triple_every)
        self.time_scale = float(time_scale)
        self.slots_passed = 0  # grid times consumed so far
        self.taken = 0  # times due() answered True
        self.next_s = self._interval(0)

    def _interval(self, k: int) -> float:
        """Gap between grid time k and k+1 (grid time 0 is the start, t = 0)."""
        return self.period_s * self.time_scale * 3.0 ** (k // self.triple_every)

    def times(self, n: int) -> list[float]:
        """The first ``n`` due times of the grid (seconds since the start)."""
        out, t = [], 0.0
        for k in range(int(n)):
            t += self._interval(k)
            out.append(t)
        return out

    def due(self, t_s: float) -> bool:
        """True if a due time has passed by ``t_s`` (seconds since the start); consumes every passed one."""
        if not t_s >= self.next_s:
            return False
        while self.next_s <= t_s:
            self.slots_passed += 1
            self.next_s += self._interval(self.slots_passed)
        self.taken += 1
        return True


# ----------------------------------------------------------------------------- files
def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    """Where a run keeps its checkpoints: ``<run_dir>/checkpoints``."""
    return Path(run_dir) / CHECKPOINT_SUBDIR


def checkpoint_name(worker: int, iteration: int, suffix: str = ".pt") -> str:
    """``ckpt-w<k>-it<iteration:06d>.pt`` (or the sidecar's ``.json``)."""
    _check_int("worker", worker)
    _check_int("iteration", iteration)
    return f"ckpt-w{int(worker)}-it{int(iteration):06d}{suffix}"


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint as its sidecar describes it (``path`` is the tensor file)."""

    path: Path
    worker: int
    iteration: int
    t_s: float  # seconds on the run's event clock when the state was captured
    wall_s: float  # Unix time when the state was captured
    model: str | None
    sha256: str
    bytes: int
    meta: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The tensor file's name (what accuracy.csv calls ``checkpoint``)."""
        return self.path.name

    @property
    def sidecar(self) -> Path:
        """The sidecar JSON next to the tensor file."""
        return self.path.with_suffix(".json")


def _check_int(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ValueError(f"{name} must be a non-negative integer; got {v!r}")


def _check_time(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number of seconds; got {v!r}")


def _as_tensor(name: str, v) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.detach()
    if isinstance(v, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(v))
    raise ValueError(f"model_state[{name!r}] must be a torch tensor or numpy array; got {type(v).__name__}")


def snapshot_state(model_or_state) -> dict[str, torch.Tensor]:
    """A host-memory copy of a module's ``state_dict()`` (parameters and buffers) or of a mapping of
    tensors/arrays: safe to hand to another thread while training keeps changing the originals."""
    state = model_or_state.state_dict() if isinstance(model_or_state, torch.nn.Module) else model_or_state
    if not isinstance(state, Mapping) or not state:
        raise ValueError(f"model_state must be a non-empty mapping of name -> tensor; got {type(state).__name__}")
    out = {}
    for k, v in state.items():
        if not isinstance(k, str):
            raise ValueError(f"model_state keys must be strings; got {k!r}")
        if isinstance(v, np.ndarray):
            out[k] = torch.from_numpy(np.array(v, copy=True, order="C"))
        else:
            out[k] = _as_tensor(k, v).to("cpu", copy=True)
    return out


def _sha256_file(path: Path) -> tuple[str, int]:
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            h.update(block)
            n += len(block)
    return h.hexdigest(), n


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(path: Path, write) -> None:
    """Write through ``write(tmp_path)``, fsync, then ``os.replace`` onto ``path``; no partial ``path`` ever."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def save_checkpoint(directory: str | os.PathLike, *, worker: int, iteration: int, t_s: float, wall_s: float,
                    model_state: Mapping[str, Any], meta: dict | None = None) -> CheckpointInfo:
    """Write worker ``worker``'s model at ``iteration`` (tensor file, then its sidecar; both atomic).

    ``model_state``: ``{name: tensor or array}`` with parameters and buffers, already a private copy
    if training goes on meanwhile (:func:`snapshot_state`).  ``t_s``: run event-clock seconds;
    ``wall_s``: Unix time.  ``meta``: JSON-serialisable extras (``meta["model"]`` is the model name).
    An existing checkpoint of the same worker and iteration is replaced.
    """
    _check_int("worker", worker)
    _check_int("iteration", iteration)
    _check_time("t_s", t_s)
    _check_time("wall_s", wall_s)
    if not isinstance(model_state, Mapping) or not model_state:
        raise ValueError("model_state must be a non-empty mapping of name -> tensor (parameters and buffers)")
    state = {}
    for k, v in model_state.items():
        if not isinstance(k, str):
            raise ValueError(f"model_state keys must be strings; got {k!r}")
        state[k] = _as_tensor(k, v)
    meta = dict(meta or {})
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"meta must be JSON-serialisable (plain numbers, strings, lists, dicts): {e}") from None
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / checkpoint_name(worker, iteration)
    sidecar = path.with_suffix(".json")
    sidecar.unlink(missing_ok=True)  # while the pair is replaced it is invisible, never inconsistent
    _write_atomic(path, lambda tmp: torch.save(state, tmp))
    digest, size = _sha256_file(path)
    info = CheckpointInfo(path=path, worker=int(worker), iteration=int(iteration), t_s=float(t_s),
                          wall_s=float(wall_s), model=meta.get("model"), sha256=digest, bytes=size, meta=meta)
    doc = dict(format=FORMAT, version=FORMAT_VERSION, file=path.name, worker=info.worker, iteration=info.iteration,
               t_s=info.t_s, wall_s=info.wall_s, model=info.model, sha256=digest, bytes=size,
               tensors=len(state), meta=meta)
    _write_atomic(sidecar, lambda tmp: tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8"))
    _fsync_dir(d)
    return info


def _read_sidecar(sidecar: Path) -> CheckpointInfo:
    try:
        doc = json.loads(sidecar.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{sidecar}: no checkpoint sidecar (the write did not finish, or this is not a "
                              "checkpoint written by rog.checkpoint)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{sidecar}: unreadable checkpoint sidecar: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{sidecar}: not a {FORMAT} sidecar")
    if doc.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{sidecar}: sidecar version {doc.get('version')!r}; this reader knows {FORMAT_VERSION}")
    try:
        return CheckpointInfo(path=sidecar.with_name(str(doc["file"])), worker=int(doc["worker"]),
                              iteration=int(doc["iteration"]), t_s=float(doc["t_s"]), wall_s=float(doc["wall_s"]),
                              model=doc.get("model"), sha256=str(doc["sha256"]), bytes=int(doc["bytes"]),
                              meta=dict(doc.get("meta") or {}))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{sidecar}: checkpoint sidecar misses or mangles field {e}") from None


def list_checkpoints(run_dir: str | os.PathLike, worker: int | None = None) -> list[CheckpointInfo]:
    """Committed checkpoints (those with a sidecar) in ``run_dir`` and ``run_dir/checkpoints``, sorted by
    time (``t_s``, then iteration, then worker); only ``worker``'s when given.  Does not hash the files:
    :func:`load_checkpoint` does."""
    root = Path(run_dir)
    if not root.is_dir():
        raise ValueError(f"run_dir {str(root)!r} is not a directory")
    found = []
    for d in (root, root / CHECKPOINT_SUBDIR):
        if not d.is_dir():
            continue
        for p in d.iterdir():
            m = _NAME.match(p.name)
            if m and m.group(3) == "json" and (worker is None or int(m.group(1)) == worker):
                found.append(_read_sidecar(p))
    return sorted(found, key=lambda c: (c.t_s, c.iteration, c.worker))


def load_checkpoint(path: str | os.PathLike | CheckpointInfo) -> tuple[dict[str, torch.Tensor], CheckpointInfo]:
    """``(state, info)`` of one checkpoint (its ``.pt``, its ``.json`` sidecar, or a :class:`CheckpointInfo`),
    after checking the tensor file's size and sha256 against the sidecar; CheckpointError names the file."""
    p = path.path if isinstance(path, CheckpointInfo) else Path(path)
    info = _read_sidecar(p.with_suffix(".json"))
    pt = info.path
    if not pt.is_file():
        raise CheckpointError(f"{pt}: checkpoint tensor file is missing (its sidecar {info.sidecar.name} exists)")
    digest, size = _sha256_file(pt)
    if size != info.bytes:
        raise CheckpointError(f"{pt}: checkpoint is truncated or resized: {size} bytes, the sidecar says {info.bytes}")
    if digest != info.sha256:
        raise CheckpointError(f"{pt}: checkpoint sha256 mismatch (file {digest[:16]}..., sidecar "
                              f"{info.sha256[:16]}...): the file is corrupted or was replaced")
    try:
        state = torch.load(pt, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any refusal means the same thing here
        raise CheckpointError(f"{pt}: torch.load(weights_only=True) refused the checkpoint: {e}") from None
    if not isinstance(state, dict) or not state or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise CheckpointError(f"{pt}: expected a plain {{name: tensor}} dict")
    return state, info


def run_start_s(run_dir: str | os.PathLike) -> float:
    """The run's start on its event clock: the earliest worker ``run_start`` record in ``events-w*.jsonl``
    (the first record of any event file otherwise; 0.0 without event files), as :mod:`rog.analysis.load`."""
    starts, firsts = [], []
    for p in sorted(Path(run_dir).glob("events-*.jsonl")):
        worker = p.name.startswith("events-w")
        try:
            lines = p.read_text(encoding="utf-8").split("\n")
        except OSError:
            continue
        for line in lines[1:]:  # the first line is the header
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # an empty or partial line
            if not isinstance(rec, dict) or not isinstance(rec.get("t_s"), (int, float)):
                continue
            firsts.append(float(rec["t_s"]))
            if worker and rec.get("kind") == "run_start":
                starts.append(float(rec["t_s"]))
    return min(starts) if starts else min(firsts) if firsts else 0.0


# ----------------------------------------------------------------------------- background writer
class CheckpointWriter:
    """Writes one worker's checkpoints into ``directory`` in a background thread, one write at a time.

    :meth:`submit` copies the state to host memory on the caller's thread (the model keeps training
    right after) and starts the write; if a write is still running it skips (``block=False``: the
    default, counted in ``skipped`` and logged) or waits for it (``block=True``: the final checkpoint).
    Call :meth:`close` before the process exits: it waits for the last write and raises
    CheckpointError if any write failed.
    """

    def __init__(self, directory: str | os.PathLike, *, worker: int, meta: dict | None = None) -> None:
        _check_int("worker", worker)
        self.directory = Path(directory)
        self.worker = int(worker)
        self.meta = dict(meta or {})
        self.written: list[CheckpointInfo] = []
        self.skipped = 0
        self.errors: list[str] = []
        self.copy_s = 0.0  # time the caller's thread spent copying states
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def busy(self) -> bool:
        """A write is running."""
        t = self._thread
        return t is not None and t.is_alive()

    def submit(self, model_or_state, *, iteration: int, t_s: float, wall_s: float | None = None,
               meta: dict | None = None, block: bool = False) -> bool:
        """Checkpoint ``model_or_state`` (a module or a tensor mapping) at ``iteration``; False if skipped."""
        if self._closed:
            raise RuntimeError("CheckpointWriter.submit() after close()")
        _check_int("iteration", iteration)
        _check_time("t_s", t_s)
        with self._lock:
            if self.busy:
                if not block:
                    self.skipped += 1
                    log.warning("worker %d: checkpoint at iteration %d skipped: the previous write is still running "
                                "(%d skipped so far)", self.worker, iteration, self.skipped)
                    return False
                self._thread.join()
            t0 = time.perf_counter()
            state = snapshot_state(model_or_state)
            self.copy_s += time.perf_counter() - t0
            kwargs = dict(worker=self.worker, iteration=int(iteration), t_s=float(t_s),
                          wall_s=time.time() if wall_s is None else float(wall_s), model_state=state,
                          meta={**self.meta, **(meta or {})})
            self._thread = threading.Thread(target=self._write, args=(kwargs,), daemon=True,
                                            name=f"checkpoint-w{self.worker}-it{iteration}")
            self._thread.start()
            return True

    def _write(self, kwargs: dict) -> None:
        try:
            self.written.append(save_checkpoint(self.directory, **kwargs))
        except Exception as e:  # noqa: BLE001 - reported by close()
            msg = f"worker {self.worker}: checkpoint at iteration {kwargs['iteration']} failed: {type(e).__name__}: {e}"
            self.errors.append(msg)
            log.error(msg)

    def wait(self) -> None:
        """Block until the running write (if any) has finished."""
        t = self._thread
        if t is not None:
            t.join()

    def close(self) -> None:
        """Wait for the last write; raise CheckpointError if any write failed (on every call: close is safe to repeat)."""
        self._closed = True
        self.wait()
        if self.errors:
            raise CheckpointError("; ".join(self.errors))
