"""Checkpoints of the parameter server's state, written atomically and verified when read back.

What is saved (:meth:`Checkpoints.state_arrays`): every worker's pending
buffer, the sum of every committed push (``total``), push counts, row versions, updates since
pull, the gate's ``active`` mask, who joined / flushed / finished / is gone, and each worker's
push and pull sequence numbers with the frames kept of its newest push.  Not saved: the policy's
learned measurements (a restarted ROG starts with its initial budget again).

Files in one directory (by convention ``<run_dir>/ps-checkpoints/``, :func:`ps_checkpoint_dir`):

* ``ps-<seq:06d>.npz``: ``numpy.savez`` of plain numeric arrays, read back with
  ``allow_pickle=False`` only (never pickle);
* ``ps-<seq:06d>.json``: the sidecar and commit marker (format, seq, sha256 and size of the
  ``.npz``, ``wall_s``, ``meta``: layout digest, codec, policy, number of workers).

Both are written to a temporary name, fsynced and ``os.replace``d, the sidecar last, then the
directory is fsynced; a crash in between leaves an ``.npz`` without a sidecar, which is ignored.
:func:`latest_ps_checkpoint` returns the newest checkpoint whose size and sha256 match its sidecar
(a damaged newest one is reported and the one before it used).  The last ``keep`` are kept.

:class:`Checkpoints` is the parameter server's side (``ps.checkpoints``): the periodic checkpoint thread, what
each worker's pulls and pushes the newest checkpoint covers, and :meth:`~Checkpoints.resume`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import threading
import time
from pathlib import Path

import numpy as np

from .messages import layout_digest
from .errors import RuntimeFailure

PS_CHECKPOINT_SUBDIR = "ps-checkpoints"
PS_FORMAT = "rog-ps-checkpoint"
PS_FORMAT_VERSION = 1
_NAME = re.compile(r"^ps-(\d{6,})\.json$")


class PSCheckpointError(ValueError):
    """A parameter-server checkpoint is missing, damaged or belongs to another model (names the file)."""


def ps_checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    """``<run_dir>/ps-checkpoints``."""
    return Path(run_dir) / PS_CHECKPOINT_SUBDIR


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_ps_checkpoint(directory: str | os.PathLike, seq: int, arrays: dict[str, np.ndarray], meta: dict,
                       keep: int = 2) -> tuple[Path, int]:
    """Write checkpoint ``seq`` (arrays + sidecar, atomically); returns ``(npz path, bytes)``; prunes to ``keep``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    data = buf.getvalue()
    npz = d / f"ps-{seq:06d}.npz"
    _write_atomic(npz, data)
    sidecar = dict(format=PS_FORMAT, version=PS_FORMAT_VERSION, seq=int(seq), file=npz.name,
                   sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), wall_s=time.time(), meta=meta)
    _write_atomic(d / f"ps-{seq:06d}.json", (json.dumps(sidecar, sort_keys=True) + "\n").encode())
    _fsync_dir(d)
    for old in sorted(_sidecars(d))[:-keep] if keep > 0 else []:
        s, path = old
        path.unlink(missing_ok=True)
        (d / f"ps-{s:06d}.npz").unlink(missing_ok=True)
    return npz, len(data)


def _sidecars(d: Path) -> list[tuple[int, Path]]:
    out = []
    for p in d.iterdir() if d.is_dir() else []:
        m = _NAME.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def load_ps_checkpoint(sidecar: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict]:
    """``(arrays, sidecar)`` of one checkpoint, after checking its format, size and sha256."""
    sidecar = Path(sidecar)
    try:
        info = json.loads(sidecar.read_text())
    except (OSError, ValueError) as e:
        raise PSCheckpointError(f"{sidecar}: unreadable sidecar ({e})") from None
    if not isinstance(info, dict) or info.get("format") != PS_FORMAT or info.get("version") != PS_FORMAT_VERSION:
        raise PSCheckpointError(f"{sidecar}: not a {PS_FORMAT} v{PS_FORMAT_VERSION} sidecar")
    npz = sidecar.with_name(str(info.get("file", "")))
    try:
        data = npz.read_bytes()
    except OSError as e:
        raise PSCheckpointError(f"{npz}: cannot read ({e.strerror})") from None
    if len(data) != info.get("bytes") or hashlib.sha256(data).hexdigest() != info.get("sha256"):
        raise PSCheckpointError(f"{npz}: size or sha256 differs from {sidecar.name}: the file is damaged")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError) as e:
        raise PSCheckpointError(f"{npz}: not a readable array archive ({e})") from None
    return arrays, info


def latest_ps_checkpoint(directory: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict, list[str]]:
    """The newest verified checkpoint in ``directory``: ``(arrays, sidecar, problems with newer ones)``.

    Raises :class:`PSCheckpointError` if there is none that verifies.
    """
    d = Path(directory)
    problems: list[str] = []
    for _, sidecar in reversed(_sidecars(d)):
        try:
            arrays, info = load_ps_checkpoint(sidecar)
        except PSCheckpointError as e:
            problems.append(str(e))
            continue
        return arrays, info, problems
    why = "; ".join(problems) if problems else "no ps-*.json sidecar"
    raise PSCheckpointError(f"{d}: no usable parameter-server checkpoint ({why}); start without --resume-ps")


class Checkpoints:
    """A running PS's checkpoints and its restart from one.  Owns the directory and period (``None`` until
    :meth:`start`), the checkpoint thread, ``seq`` (checkpoints written or resumed from) and what the newest
    checkpoint holds of each worker's pushes and pulls (``covered_push_seq``, ``covered_pull_seq``).  The server
    holds one (``ps.checkpoints``)."""

    def __init__(self, ps) -> None:
        self.ps = ps
        self.where: tuple[str, float] | None = None  # (directory, period_s)
        self.thread: threading.Thread | None = None
        self.seq = 0
        self.covered_push_seq = np.zeros(ps.n_workers, dtype=np.int64)
        self.covered_pull_seq = np.zeros(ps.n_workers, dtype=np.int64)

    def covered(self, r: int) -> tuple[int, int]:
        """Worker ``r``'s pushes and pulls the latest checkpoint holds (all of them without checkpoints:
        nothing can be lost then, so the worker need not keep any; the caller holds the lock)."""
        if self.where is None:
            return int(self.ps.state.push_seq[r]), int(self.ps.state.pull_seq[r])
        return int(self.covered_push_seq[r]), int(self.covered_pull_seq[r])

    def meta(self) -> dict:
        """What a checkpoint must match to be resumed: the layout, codec, policy and number of workers."""
        ps = self.ps
        return dict(n_workers=ps.n_workers, n_elements=ps.partition.n_elements, n_rows=ps.partition.n_rows,
                    digest=layout_digest(ps.partition).hex(), codec=ps.codec.name, policy=ps.policy.name,
                    threshold=ps.policy.threshold)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """A consistent copy of everything a restarted PS needs (taken under the lock)."""
        with self.ps.cond:
            return {**self.ps.state.arrays(), **self.ps.membership.masks()}

    def checkpoint_now(self) -> int:
        """Write a checkpoint of the current state (atomic, verified on load); returns its number."""
        if self.where is None:
            raise RuntimeFailure("checkpoint_now() needs start(directory, every_s) first")
        ps = self.ps
        t0 = time.monotonic()
        arrays = self.state_arrays()
        with ps.cond:
            self.seq += 1
            seq = self.seq
        path, nbytes = save_ps_checkpoint(self.where[0], seq, arrays, self.meta())
        with ps.cond:  # only now may workers drop what this checkpoint holds
            np.maximum(self.covered_push_seq, arrays["push_seq"], out=self.covered_push_seq)
            np.maximum(self.covered_pull_seq, arrays["pull_seq"], out=self.covered_pull_seq)
        ps.log("checkpoint", t0, seq=seq, bytes=nbytes, duration_s=time.monotonic() - t0, path=path.name)
        return seq

    def start(self, directory, every_s: float) -> None:
        """Checkpoint into ``directory`` every ``every_s`` seconds (a background thread) from now on."""
        if not (every_s > 0 and np.isfinite(every_s)):
            raise ValueError(f"every_s must be a positive number of seconds, got {every_s!r}")
        self.where = (str(directory), float(every_s))
        if self.thread is not None:
            return
        ps = self.ps

        def body() -> None:
            while not ps.stopping.wait(self.where[1]):
                if ps.ended:
                    return
                try:
                    self.checkpoint_now()
                except Exception as e:  # noqa: BLE001 - a failed checkpoint is reported; training goes on
                    with ps.cond:
                        ps.errors.append((-1, e))

        self.thread = threading.Thread(target=body, name="rog-ps-checkpoints", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop the checkpoint thread (at the end of the run)."""
        self.thread = None

    def resume(self, directory) -> dict:
        """Restore the newest verified checkpoint in ``directory`` (before serving); returns its sidecar.

        Workers then come back with :class:`Rejoin` and re-send what the checkpoint does not hold."""
        ps = self.ps
        arrays, info, problems = latest_ps_checkpoint(directory)
        meta = info.get("meta", {})
        if meta != self.meta():
            diff = {k: (meta.get(k), v) for k, v in self.meta().items() if meta.get(k) != v}
            raise RuntimeFailure(f"{directory}: checkpoint {info['seq']} belongs to another run (checkpoint vs now: {diff})")
        W, n = ps.n_workers, ps.partition.n_elements
        if arrays["pending"].shape != (W, n) or arrays["total"].shape != (n,):
            raise RuntimeFailure(f"{directory}: checkpoint {info['seq']} arrays have the wrong shapes")
        with ps.cond:
            ps.state.load(arrays)
            self.covered_push_seq[:] = arrays["push_seq"]
            self.covered_pull_seq[:] = arrays["pull_seq"]
            ps.membership.restore(arrays, ps.join_timeout_s)  # workers have join_timeout_s to reconnect
            self.seq = int(info["seq"])
            ps.fault("ps_resumed", checkpoint=int(info["seq"]), since_checkpoint_s=max(0.0, time.time() - info["wall_s"]),
                     reason="; ".join(problems)[:300] if problems else "")
        return info
