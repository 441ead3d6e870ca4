"""One process of a runtime fault scenario: the parameter server or one worker, over real TCP.

    python -m benchmarks.faults.runtime_node ps     --dir D [--resume]
    python -m benchmarks.faults.runtime_node worker --dir D --worker K [--rejoin] [--kill-at N:P]

``D/scenario.json`` is the configuration (written by :mod:`benchmarks.faults.runtime_scenarios`); the
shared secret comes from ``ROG_SECRET``.  The model is a flat float32 vector with a fixed layout
(no torch: processes start in a fraction of a second) and every worker follows a quadratic
objective with deterministic noise, so the parameters a worker ends with can be checked against a
reference computed from the workers' own records:

* ``committed-w<k>-i<incarnation>.npy`` (float64, written atomically after every iteration): the sum
  of this incarnation's updates minus what it still holds undelivered: exactly what its
  acknowledged pushes carried (a push is only committed when acknowledged);
  ``magnitude-w<k>-i<incarnation>.npy`` (float64, written with it): the sum of the absolute values of
  those updates (the scale of the float32 rounding the conservation oracle allows);
* ``final-w<k>.npy`` (after the flush): the parameters it holds; ``residual-w<k>.npy``: its
  accumulator (the error-feedback residual, zero without compression); ``grad-w<k>.npy``: its last
  gradient; ``residual-w<k>-i<incarnation>.csv``: per iteration, the norms of the accumulator
  (undelivered updates plus compression residual) and of the gradient; ``pending.npy`` (PS, at the
  end): the PS's pending buffers.

Faults injected here: ``--kill-at N:P`` SIGKILLs this worker process while it writes piece ``P`` of
its push of iteration ``N`` (mid-push, before the PS can acknowledge it); the link outage of
``scenario.json`` ``outage`` sets worker ``k``'s link to 0 Mbit/s in both directions for
``duration_s`` from the time the scenario writes into ``D/outage.start`` (token buckets on both
ends, :class:`OutageRate`; CLOCK_MONOTONIC is shared by the processes of one machine).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

from rog.codecs.codec_registry import make_codec
from rog.local_update import LocalUpdate, LocalUpdateConfig
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import EventLog, ParameterServer, WorkerEngine, aligned_zeros, events_file_name
from rog.runtime.ps_checkpoint import ps_checkpoint_dir
from rog.transport import Listener, TransportConfig, connect, load_secret
from rog.transport.ratelimit import TokenBucket

PIECE_TYPE = 17  # rog.transport.messages.Piece.TYPE
SHAPES = [("fc1", (24, 64)), ("b1", (24,)), ("fc2", (16, 48)), ("b2", (16,)), ("head", (10, 40))]  # 5 tensors


def partition() -> RowPartition:
    """The scenario model's layout (rows: 24 + 1 + 16 + 1 + 1)."""
    return RowPartition.from_shapes(SHAPES)


def initial_params(seed: int) -> np.ndarray:
    """w0, the same in every process."""
    return np.random.default_rng(seed).standard_normal(partition().n_elements).astype(np.float32)


def gradient(seed: int, worker: int, w: np.ndarray, iteration: int) -> np.ndarray:
    """Worker ``worker`` pulls towards its own target, plus deterministic noise per (worker, iteration)."""
    target = np.random.default_rng(10_000 + seed * 100 + worker).standard_normal(w.size).astype(np.float32)
    eps = np.random.default_rng(1_000_000 + seed * 10_000 + worker * 1000 + iteration).standard_normal(w.size)
    return (w - target) + np.float32(0.1) * eps.astype(np.float32)


class OutageRate:
    """``base_mbit`` except 0 Mbit/s for ``duration_s`` from the CLOCK_MONOTONIC time written (by the
    scenario, when it decides the outage starts) into ``start_file``."""

    def __init__(self, start_file: Path, duration_s: float, base_mbit: float) -> None:
        self.start_file, self.duration_s, self.base_mbit = Path(start_file), float(duration_s), float(base_mbit)
        self.start: float | None = None
        self._next_look = 0.0

    def __call__(self, _t_s: float) -> float:
        now = time.monotonic()
        if self.start is None and now >= self._next_look:
            self._next_look = now + 0.02
            try:
                self.start = float(self.start_file.read_text())
            except (OSError, ValueError):
                pass
        if self.start is not None and self.start <= now < self.start + self.duration_s:
            return 0.0
        return self.base_mbit


def outage_rate(cfg: dict, worker: int, d: Path):
    """Rate of worker ``worker``'s link: ``rate_mbit`` (None: unshaped), with its outage if it has one."""
    rate = cfg.get("rate_mbit")
    out = cfg.get("outage")
    if out is None or out["worker"] != worker:
        return rate
    return OutageRate(d / "outage.start", out["duration_s"], rate or 1000.0)


def _save(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)


class _Shaped:
    """Listener wrapper: each accepted connection's writes (pulls) follow that worker's rate."""

    def __init__(self, listener: Listener, cfg: dict, d: Path) -> None:
        self.listener, self.cfg, self.d = listener, cfg, d

    @property
    def refused(self):
        return self.listener.refused

    def accept(self, timeout_s=None):
        conn = self.listener.accept(timeout_s)
        rate = outage_rate(self.cfg, conn.worker_id, self.d)
        if rate is not None:
            conn.limiter = TokenBucket(rate, burst_bytes=self.cfg.get("burst_bytes", 4096), clock=conn.clock)
        return conn


def run_ps(d: Path, resume: bool) -> int:
    cfg = json.loads((d / "scenario.json").read_text())
    part = partition()
    config = TransportConfig(secret=load_secret(), io_timeout_s=cfg.get("io_timeout_s", 60.0))
    with Listener("127.0.0.1", cfg["port"], config=config, worker_ids=set(range(cfg["workers"]))) as listener:
        with EventLog(d / events_file_name("ps"), "ps", "faults", cfg["origin_monotonic_s"], append=resume) as events:
            ps = ParameterServer(part, cfg["workers"], make_policy(cfg["policy"], cfg["threshold"]),
                                 make_codec(cfg["codec"]), events=events, join_timeout_s=cfg.get("join_timeout_s", 60.0),
                                 evict_after_s=cfg["evict_after_s"], chunk_bytes=cfg.get("chunk_bytes", 512))
            if resume:
                ps.checkpoints.resume(ps_checkpoint_dir(d))
            if cfg.get("ps_checkpoint_every_s"):
                ps.checkpoints.start(ps_checkpoint_dir(d), cfg["ps_checkpoint_every_s"])
            (d / "ps.ready").write_text(str(os.getpid()))
            try:
                ps.serve(_Shaped(listener, cfg, d))
            finally:
                _save(d / "pending.npy", np.stack(ps.state.pending))
    return 0


class _KillMidPush:
    """Pipe wrapper: SIGKILL this process while writing piece ``piece`` of the push of ``iteration``."""

    def __init__(self, inner, engine: WorkerEngine, iteration: int, piece: int) -> None:
        self.inner, self.engine, self.iteration, self.piece, self.count = inner, engine, iteration, piece, 0

    def write(self, data: bytes) -> None:
        if data[5] == PIECE_TYPE and self.engine.iteration + 1 == self.iteration:
            self.count += 1
            if self.count == self.piece:
                os.kill(os.getpid(), signal.SIGKILL)
        self.inner.write(data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def run_worker(d: Path, k: int, rejoin: bool, kill_at: tuple[int, int] | None) -> int:
    cfg = json.loads((d / "scenario.json").read_text())
    part = partition()
    incarnation = len(list(d.glob(f"committed-w{k}-i*.npy")))
    params = aligned_zeros(part.n_elements)
    params[:] = initial_params(cfg["seed"])
    tcfg = TransportConfig(secret=load_secret(), rate_mbit_at=outage_rate(cfg, k, d), io_timeout_s=cfg.get("io_timeout_s", 60.0),
                           burst_bytes=cfg.get("burst_bytes", 4096))

    def dial():
        return connect("127.0.0.1", cfg["port"], worker_id=k, config=tcfg)

    rule = LocalUpdateConfig(lr=cfg.get("lr", 0.05), momentum=0.9, nesterov=True, weight_decay=5e-4, milestones=())
    local = _Summing(part.n_elements, rule)
    updates = local.sum
    committed_path = d / f"committed-w{k}-i{incarnation}.npy"
    magnitude_path = d / f"magnitude-w{k}-i{incarnation}.npy"
    _save(committed_path, updates)
    _save(magnitude_path, local.abs_sum)
    with EventLog(d / f"events-w{k}-i{incarnation}.jsonl", f"w{k}", "faults", cfg["origin_monotonic_s"]) as events:
        conn = _dial_with_backoff(dial, cfg.get("reconnect_timeout_s", 120.0))
        eng = WorkerEngine(conn, part, params, make_policy(cfg["policy"], cfg["threshold"]), make_codec(cfg["codec"]),
                           local, events=events, compute_target_s=cfg.get("compute_s"), chunk_bytes=cfg.get("chunk_bytes", 512),
                           wait_timeout_s=cfg.get("wait_timeout_s", 600.0), reconnect=dial,
                           reconnect_timeout_s=cfg.get("reconnect_timeout_s", 120.0), rejoin=rejoin)
        eng.join(cfg.get("join_timeout_s", 60.0))
        grad = np.zeros(part.n_elements, dtype=np.float32)
        norms = open(d / f"residual-w{k}-i{incarnation}.csv", "w", buffering=1)  # iteration, |acc|, |grad|
        while eng.iteration < cfg["iterations"]:
            n = eng.iteration + 1
            if kill_at is not None and n == kill_at[0]:
                eng.conn.pipe = _KillMidPush(eng.conn.pipe, eng, kill_at[0], kill_at[1])
            grad = gradient(cfg["seed"], k, params, n)
            eng.step(grad)
            _save(committed_path, updates - eng.acc)  # every update so far minus what is still undelivered
            _save(magnitude_path, local.abs_sum)
            norms.write(f"{eng.iteration},{np.linalg.norm(eng.acc):.6g},{np.linalg.norm(grad):.6g}\n")
        eng.flush()
        _save(committed_path, updates - eng.acc)
        _save(d / f"final-w{k}.npy", params.copy())
        _save(d / f"residual-w{k}.npy", eng.acc.copy())
        _save(d / f"grad-w{k}.npy", grad)
        eng.close()
        norms.close()
    return 0


class _Summing(LocalUpdate):
    """The local rule, keeping the float64 sum of every update it returned and of their absolute values."""

    def __init__(self, n_elements: int, config: LocalUpdateConfig) -> None:
        super().__init__(n_elements, config)
        self.sum = np.zeros(int(n_elements), dtype=np.float64)
        self.abs_sum = np.zeros(int(n_elements), dtype=np.float64)

    def step(self, grad, params, iteration, out=None):
        u = super().step(grad, params, iteration, out)
        self.sum += u
        self.abs_sum += np.abs(u)
        return u


def _dial_with_backoff(dial, timeout_s: float):
    t0, delay = time.monotonic(), 0.05
    while True:
        try:
            return dial()
        except Exception:  # noqa: BLE001 - the PS may be restarting
            if time.monotonic() - t0 > timeout_s:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 1.0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=["ps", "worker"])
    p.add_argument("--dir", required=True, help="scenario folder holding scenario.json")
    p.add_argument("--worker", type=int, default=None)
    p.add_argument("--resume", action="store_true", help="ps: restart from the latest PS checkpoint")
    p.add_argument("--rejoin", action="store_true", help="worker: a restarted worker (fresh rejoin)")
    p.add_argument("--kill-at", default=None, help="worker: N:P = SIGKILL itself at piece P of its push of iteration N")
    a = p.parse_args(argv)
    d = Path(a.dir)
    if a.role == "ps":
        return run_ps(d, a.resume)
    if a.worker is None:
        p.error("worker needs --worker K")
    kill = None
    if a.kill_at:
        n, piece = (int(x) for x in a.kill_at.split(":"))
        kill = (n, piece)
    return run_worker(d, a.worker, a.rejoin, kill)


if __name__ == "__main__":
    sys.exit(main())
