"""The reference user baseline: plain PyTorch ``DistributedDataParallel`` over gloo (CPU).

What a user would run without ROG: every worker holds the model wrapped in ``DDP`` (backend gloo),
computes its gradient on its own shard, and the float32 gradients are all-reduced (averaged) every
iteration before ``torch.optim.SGD`` steps, so every worker holds the same model (BSP semantics,
no compression, no deadlines).  ``scripts/run.py --library DDP`` runs it with the same launcher,
workload, data split, links and traces as the ROG workers.

Fair comparison with the ROG workers' local update (:mod:`rog.local_update`): the same pre-trained
model, each worker's same non-IID shard and batch order (``worker_batches(k, base_batch, seed)``),
``-b`` as gradient accumulation (``ddp.no_sync()`` on all but the last mini-batch), the same
per-worker torch seed (stochastic depth), and ``torch.optim.SGD(lr, momentum 0.9, nesterov,
weight_decay 5e-4)`` with the same step-halving schedule (:class:`rog.local_update.StepHalving`).
That SGD steps along exactly DEFSGDM's direction; momentum is linear, so averaging the gradients
and then applying one momentum rule equals BSP with compression off (every worker's momentum
update averaged).  The differences are the system's own: float32 gradients instead of 1-bit rows,
a ring all-reduce between workers instead of a parameter server, and no deadline.

One iteration, as logged (:mod:`rog.runtime.events`, the same kinds and boundaries as ROG's
workers, so :mod:`rog.analysis` and ``run.py``'s summary read it unchanged):

* ``compute``: forward and backward of every mini-batch, plus the compute-pacing sleep
  (``sleep_s``, docs/design.md#quick-regime) up to ``compute_s``;
* ``stall`` (``reason="gate"``): a one-element ``all_reduce`` barrier: the time waiting for the
  slowest worker (plus one small ring round trip); the element carries worker 0's stop decision;
* ``pull``: the gradient all-reduce of every bucket DDP built (float32, averaged), DDP copying the
  result into ``.grad`` and the optimizer step: the transfer after which the worker's model
  changes.  DDP has no separate push, so no ``push`` record is written; ``bytes`` is the float32
  gradient payload (parameters x 4: what the ring delivers to every worker), ``rows_*`` the model's
  rows (:mod:`rog.rows`), all delivered, no deadline, ``frames_planned`` DDP's gradient buckets.
* ``staleness`` (always 0: every worker holds every update), ``eval`` (worker 0, as ROG's
  worker 0), ``run_start`` / ``run_end``.

How the split is done inside real DDP: a communication hook (``register_comm_hook``) receives
every gradient bucket when it is ready; it defers all of them until the last bucket of the
iteration (``GradBucket.is_last``), which DDP hands over when backward has produced every
gradient.  Then it paces, runs the barrier, all-reduces every deferred bucket and completes their
futures before DDP finalises backward.  So the all-reduce does not overlap backward (DDP's usual
overlap would hide communication inside compute and make the decomposition meaningless; with the
compute pacing, compute is a sleep anyway).  ``init_sync=False``: every worker loads the same
pre-trained model, so instead of DDP's initial broadcast of every parameter (megabytes through
worker 0's shaped uplink before the first iteration: minutes in a trace's deep drop) one checksum
all-reduce checks that they agree.  ``broadcast_buffers=False``: each worker keeps its own
batch-norm statistics, as ROG's workers do (the default would broadcast worker 0's buffers inside
every forward, a hidden barrier inside compute).  DDP's one-off bucket rebuild after iteration 1
broadcasts a few integers inside iteration 2's forward; it is counted as compute.

Time budget (``--budget-s``: ``stop_at_s``, counted by the launcher from ``links.ready``):
worker 0 alone decides, at its barrier of iteration ``n``, whether the budget has run out; the
decision rides on the barrier's element (sum > 0), so every worker finishes iteration ``n`` and
stops: all agree, on the same iteration (ROG's workers each stop at their own first boundary).

Network: :mod:`rog.baselines.netpath` (forwarding in the PS namespace, routes in the worker
namespaces, so gloo's ring crosses the shaped links as through a hotspot).  The PS does no
training: it hosts the rendezvous (``TCPStore``) and waits until every worker has finished.
Loopback: gloo bypasses the ROG transport's token bucket, so a trace or ``--rate-mbit`` cannot
shape it there: :func:`check_ddp_config` refuses such a run (an unshaped one runs).
The store and gloo are not authenticated (as a user would run them): run on trusted networks.

Limits (:mod:`rog.baselines.ddp_watch`): the store connect, the process group's init and the first
all-reduce each fail within two minutes with an error naming the stage and the addresses; a training
collective within a limit sized from the shaped rate; a stage that outlives its limit (a wait torch
does not bound) has every thread's stack written to the worker's log and ends the worker.  Teardown
order matters: the collectives run inside backward, and the last reference to their work handles must
not be dropped by a gloo thread while the process group is destroyed (:class:`IterationSync`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from datetime import timedelta
from pathlib import Path

from rog.errors import ConfigError
from rog.experiment.run_config import RunConfig

from .ddp_watch import JOIN_TIMEOUT_S, TEARDOWN_TIMEOUT_S, StageWatch, collective_timeout_s

DDP_LIBRARY = "DDP"  # the --library name
GRADIENT_DTYPE = "float32"
DONE_KEY = "rog/ddp/done/{k}"  # a worker sets it after leaving the process group


class DDPConfigError(ConfigError):
    """A run configuration the DDP baseline cannot honour (the message says how to fix it)."""


def check_ddp_config(cfg: RunConfig) -> None:
    """Refuse what DDP cannot do: shaped loopback links (gloo ignores the token bucket), thresholds."""
    if cfg.sync.threshold not in (None, 0):
        raise DDPConfigError(f"--threshold {cfg.sync.threshold}: DDP is synchronous (threshold 0); drop --threshold")
    shaped = cfg.links.trace is not None or cfg.links.rate_mbit is not None
    if cfg.testbed.kind == "loopback" and shaped:
        why = f" (the emulated testbed fell back: {cfg.testbed.fallback_reason})" if cfg.testbed.fallback_reason else ""
        raise DDPConfigError(
            "--library DDP on the loopback testbed cannot be shaped: gloo's sockets bypass the ROG transport's token "
            f"bucket{why}. Run as root on the emulated testbed (tc shapes the links), or pass -c none (and no "
            "--rate-mbit) for an unshaped loopback run")


# ----------------------------------------------------------------------------- the parameter server's part
def serve_rendezvous(cfg: RunConfig, run_dir: Path, port: int, origin: float | None) -> int:
    """The PS child of a DDP run: forwarding on (emulated), the ``TCPStore`` on ``port``, ``ps.port``,
    then wait until every worker has set its done key.  No training, no torch model."""
    import torch.distributed as dist

    from rog.experiment.rundir import PS_PORT_FILE, write_atomic
    from rog.runtime import EventLog, events_file_name

    from .netpath import enable_forwarding

    emulated = cfg.testbed.kind == "emulated"
    if emulated:  # this process runs inside the PS namespace
        enable_forwarding()
    host = "0.0.0.0" if cfg.testbed.kind in ("emulated", "hosts") else "127.0.0.1"
    n = int(cfg.testbed.workers)
    store = dist.TCPStore(host, int(port), n + 1, True, timeout=timedelta(seconds=JOIN_TIMEOUT_S),
                          wait_for_workers=False)
    with EventLog(run_dir / events_file_name("ps"), "ps", cfg.output.run_id, origin) as events:
        events.write("run_start", policy=DDP_LIBRARY, threshold=0, n_workers=n)
        write_atomic(run_dir / PS_PORT_FILE, str(store.port))
        keys = [DONE_KEY.format(k=k) for k in range(n)]
        while not store.check(keys):
            time.sleep(0.2)
        events.write("run_end", status="ok", reason="every worker finished")
    return 0


# ----------------------------------------------------------------------------- the workers
class IterationSync:
    """DDP communication hook: defer every bucket to the last one, then pace, barrier, all-reduce.

    Writes the iteration's ``compute`` and ``stall`` records; :attr:`comm_started` is when the
    gradient all-reduce began (the ``pull`` record starts there), :attr:`stop` whether worker 0
    asked every worker to stop after this iteration.  ``watch`` (a :class:`StageWatch`) and
    ``limit_s``: each iteration's barrier and all-reduce run as a watched stage.

    Every collective's work handle is kept (:attr:`retained`) until :meth:`release`, called after
    the process group is gone (:func:`_leave`).  The collectives run inside backward, so each work
    captures the autograd engine's thread-local state, which holds a Python object (torch stashes a
    ``contextvars`` context there), and Python tensors; whoever drops a work's last reference must
    take the GIL.  Left to gloo, a worker thread of the group drops it after the work completes; if
    that thread had not run yet (a loaded machine) when the main thread, holding the GIL, destroyed
    the group (which joins those threads; freeing the DDP module's reducer does so with the GIL
    held), each waited for the other forever.  Kept here, the last reference is always dropped by
    the main thread, and gloo's threads never need the GIL.
    """

    def __init__(self, world_size: int, events, worker: int, compute_target_s: float | None, decide_stop,
                 allreduce=None, watch: StageWatch | None = None, limit_s: float | None = None) -> None:
        self.world_size = int(world_size)
        self.allreduce = allreduce or _world_allreduce  # (tensor) -> work with .wait(): an async sum over workers
        self.events = events
        self.worker = int(worker)
        self.compute_target_s = compute_target_s
        self.decide_stop = decide_stop  # () -> bool, consulted by worker 0 only
        self.iteration = 0
        self.compute_started = 0.0
        self.comm_started: float | None = None
        self.synced = 0  # last iteration whose buckets were all-reduced
        self.stop = False
        self.buckets = 0  # buckets all-reduced in the last iteration
        self.watch, self.limit_s = watch, limit_s
        self.retained: list = []  # every collective's work handle, until release()
        self._pending: list = []

    def begin(self, iteration: int, compute_started: float) -> None:
        """A new iteration's compute starts now (``time.monotonic()`` value)."""
        self.iteration, self.compute_started, self.comm_started = iteration, compute_started, None

    def hook(self, _state, bucket):
        """The comm hook (``ddp.register_comm_hook(None, sync.hook)``): a future per bucket, all set at the last."""
        import torch

        fut = torch.futures.Future()
        self._pending.append((bucket.buffer(), fut))
        if bucket.is_last():
            self._sync()
        return fut

    def release(self) -> None:
        """Drop the kept work handles (after the process group is destroyed)."""
        self.retained.clear()

    def _sync(self) -> None:
        if self.watch is None or self.limit_s is None:
            self._sync_now()
            return
        with self.watch.stage(f"iteration {self.iteration}: barrier and gradient all-reduce", self.limit_s, quiet=True):
            self._sync_now()

    def _sync_now(self) -> None:
        import torch

        n, ev = self.iteration, self.events
        sleep_s = 0.0
        if self.compute_target_s is not None:
            sleep_s = max(0.0, self.compute_target_s - (time.monotonic() - self.compute_started))
            time.sleep(sleep_s)
        t_gate = time.monotonic()
        ev.write("compute", ev.at(self.compute_started), iteration=n, duration_s=t_gate - self.compute_started,
                 sleep_s=sleep_s, worker=self.worker)
        flag = torch.tensor([1.0 if (self.worker == 0 and self.decide_stop()) else 0.0])
        barrier = self.allreduce(flag)
        self.retained.append(barrier)
        barrier.wait()  # the barrier: everyone has computed iteration n
        t_comm = time.monotonic()
        ev.write("stall", ev.at(t_gate), iteration=n, duration_s=t_comm - t_gate, reason="gate", worker=self.worker)
        works = [self.allreduce(buf) for buf, _ in self._pending]
        self.retained.extend(works)
        for w in works:
            w.wait()
        for buf, fut in self._pending:
            buf.div_(self.world_size)
            fut.set_result(buf)
        self.buckets = len(self._pending)
        self._pending.clear()
        self.comm_started, self.synced, self.stop = t_comm, n, float(flag.item()) > 0


def _world_allreduce(tensor):
    import torch.distributed as dist

    return dist.all_reduce(tensor, async_op=True)


def _check_same_start(model, k: int) -> None:
    """Every worker must start from the same model (instead of DDP's initial broadcast of every parameter,
    which would put ~S x (N-1) bytes on worker 0's shaped uplink before the first iteration): one
    two-element all-reduce of a float64 checksum (max of s and of -s; equal models give max = min)."""
    import torch
    import torch.distributed as dist

    with torch.no_grad():
        s = sum(float(p.double().sum()) + float((p.double() ** 2).sum()) for p in model.parameters())
    t = torch.tensor([s, -s], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if float(t[0]) != -float(t[1]):
        raise RuntimeError(f"worker {k}: the workers start from different models (parameter checksums range over "
                           f"[{-float(t[1])!r}, {float(t[0])!r}]): check that every worker has the same pre-trained "
                           f"weights and config.yaml")


def ddp_collective_timeout_s(cfg: RunConfig, grad_bytes: int) -> float:
    """The gloo collective limit of this run (:func:`rog.baselines.ddp_watch.collective_timeout_s`)."""
    cap = cfg.links.cap_mbit if cfg.links.cap_applied else None
    return collective_timeout_s(grad_bytes, int(cfg.testbed.workers), cfg.links.rate_mbit, cap,
                                traced=cfg.links.trace is not None)


def _join(k: int, cfg: RunConfig, server: tuple[str, int], watch: StageWatch, collective_s: float):
    """Routes (emulated), gloo's interface, the store client and the process group, each stage limited
    to :data:`JOIN_TIMEOUT_S`; then the collectives' limit becomes ``collective_s``.  Returns the store."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from .netpath import interface_address, interface_for, route_via_ps

    host, port = server
    route = ""
    if cfg.testbed.kind == "emulated":
        me = cfg.testbed.emulated["hosts"][f"w{k}"]
        route_via_ps(cfg.testbed.emulated["subnet"], me["ps_address"], me["uplink_dev"])
        route = f", peers via {me['ps_address']}"
    ifname = os.environ.setdefault("GLOO_SOCKET_IFNAME", interface_for(host))
    watch.where = (f"store {host}:{port}, gloo interface {ifname} "
                   f"({interface_address(ifname) or 'no IPv4 address'}){route}")
    retime = getattr(c10d, "_set_pg_timeout", None)  # absent in old torch: then the join waits as long as a collective
    with watch.stage("store connect", JOIN_TIMEOUT_S):
        store = dist.TCPStore(host, int(port), int(cfg.testbed.workers) + 1, False,
                              timeout=timedelta(seconds=JOIN_TIMEOUT_S))
    with watch.stage("process group init", JOIN_TIMEOUT_S if retime else collective_s):
        dist.init_process_group("gloo", store=store, rank=k, world_size=int(cfg.testbed.workers),
                                timeout=timedelta(seconds=JOIN_TIMEOUT_S if retime else collective_s))
    if retime is not None:
        retime(timedelta(seconds=collective_s))
    print(f"worker {k}: joined; each collective is limited to {collective_s:g} s", file=watch.log, flush=True)
    return store


def _leave(sync: IterationSync | None) -> None:
    """Destroy the process group, then drop the work handles ``sync`` kept (see :class:`IterationSync`)."""
    import gc

    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()  # a DDP module caught in a reference cycle would otherwise take the process group down later
    if sync is not None:
        sync.release()


def run_ddp_worker(k: int, cfg: RunConfig, run_dir: Path, wl, server: tuple[str, int], origin: float | None,
                   stop_at_s: float | None = None) -> int:
    """Worker ``k`` of a DDP run: join the gloo group through the PS's store at ``server``, train
    ``cfg.workload.iterations`` iterations or until worker 0 passes ``stop_at_s`` (``time.monotonic()``:
    the end of the time budget; only worker 0's value counts), log events; worker 0 evaluates;
    ``cfg.faults.checkpoint`` workers write checkpoints.  Returns the exit code."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from rog.local_update import PAPER_MILESTONES, StepHalving
    from rog.rows import RowPartition
    from rog.runtime import EventLog, events_file_name, worker_rank

    check_ddp_config(cfg)
    torch.set_num_threads(1)
    torch.manual_seed(cfg.workload.seed * 1000 + k)  # stochastic depth: the same per-worker seed as ROG's workers
    model = wl.pretrained_model(cfg.workload.model)
    E = int(cfg.workload.batch_multiple)
    batches = wl.worker_batches(k, cfg.workload.base_batch, seed=cfg.workload.seed)
    rows = RowPartition.from_module(model)
    grad_bytes = rows.n_elements * 4  # float32
    lr_at = StepHalving(float(cfg.workload.lr), PAPER_MILESTONES)
    losses: list[float] = []
    ck = cfg.faults.checkpoint
    writer = sched = ddp = sync = None
    collective_s = ddp_collective_timeout_s(cfg, grad_bytes)
    watch = StageWatch(k)
    store = _join(k, cfg, server, watch, collective_s)
    try:
        with EventLog(run_dir / events_file_name(worker_rank(k)), worker_rank(k), cfg.output.run_id, origin) as events:
            with watch.stage("first all-reduce (model checksum)", JOIN_TIMEOUT_S):
                _check_same_start(model, k)
            ddp = DistributedDataParallel(model, broadcast_buffers=False, init_sync=False)
            sync = IterationSync(dist.get_world_size(), events, k, cfg.device.compute_s,
                                 lambda: stop_at_s is not None and time.monotonic() >= stop_at_s,
                                 watch=watch, limit_s=2 * collective_s)  # the barrier, then the all-reduce
            ddp.register_comm_hook(None, sync.hook)
            opt = torch.optim.SGD(ddp.parameters(), lr=float(cfg.workload.lr), momentum=float(cfg.workload.momentum),
                                  nesterov=True, weight_decay=float(cfg.workload.weight_decay))
            events.write("run_start", policy=DDP_LIBRARY, threshold=0, n_workers=dist.get_world_size(), worker=k,
                         codec=GRADIENT_DTYPE)
            n = 0

            def evaluate(flushed: bool = False) -> None:
                t0 = time.monotonic()
                m = wl.test_metrics(model)  # eval mode, no grad, in batches; training flag restored (as ROG's workers)
                loss, acc = float(m["loss"]), float(m["accuracy"])
                train_loss = sum(losses) / len(losses) if losses else None
                losses.clear()
                events.write("eval", events.at(t0), iteration=n, accuracy=acc, loss=loss,
                             duration_s=time.monotonic() - t0, worker=k, flushed=flushed, train_loss=train_loss)

            if k in ck.workers:
                from rog.checkpoint import CheckpointSchedule, CheckpointWriter, checkpoint_dir

                writer = CheckpointWriter(checkpoint_dir(run_dir), worker=k, meta=dict(
                    model=cfg.workload.model, workload=cfg.workload.name, run_id=cfg.output.run_id))
                if ck.every_s > 0:
                    sched = CheckpointSchedule(ck.every_s, ck.triple_every, ck.time_scale)
                writer.submit(model, iteration=0, t_s=events.now_s(), block=True)
            t_sched0 = time.monotonic()
            if k == 0:
                evaluate()
            while n < cfg.workload.iterations:
                n += 1
                opt.zero_grad(set_to_none=True)
                sync.begin(n, time.monotonic())
                total = 0.0
                for j in range(E):  # -b: gradient accumulation; DDP synchronises on the last mini-batch only
                    with (ddp.no_sync() if j < E - 1 else contextlib.nullcontext()):
                        x, y = next(batches)
                        loss = F.cross_entropy(ddp(x), y) / E
                        loss.backward()
                        total += float(loss.detach())
                if sync.synced != n:
                    raise RuntimeError(f"worker {k}: DDP did not synchronise iteration {n} (no gradient bucket)")
                if not math.isfinite(total):
                    raise ValueError(f"worker {k}: the loss of iteration {n} is not finite ({total})")
                losses.append(total)
                for g in opt.param_groups:
                    g["lr"] = lr_at(n)
                opt.step()
                t_end = time.monotonic()
                events.write("pull", events.at(sync.comm_started), iteration=n, rows_planned=rows.n_rows,
                             rows_delivered=rows.n_rows, bytes=grad_bytes, deadline_s=None, delivered_share=1.0,
                             duration_s=t_end - sync.comm_started, mandatory_s=None, worker=k, cut=False,
                             frames_planned=sync.buckets)
                events.write("staleness", iteration=n, max=0, mean=0.0, worker=k)
                last = n == cfg.workload.iterations or sync.stop
                if k == 0 and (n % cfg.workload.eval_every == 0 or last):
                    evaluate()
                if writer is not None and (last or (sched is not None and sched.due(time.monotonic() - t_sched0))):
                    writer.submit(model, iteration=n, t_s=events.now_s(), block=last)
                if sync.stop:
                    break
            if writer is not None:
                writer.close()
            if k == 0:  # every update is already in every model: the "flushed" test is of the same model
                evaluate(flushed=True)
            events.write("run_end", status="ok", iterations=n,
                         reason="time budget" if sync.stop else "iterations done")
    finally:
        with watch.stage("teardown (leave the process group)", TEARDOWN_TIMEOUT_S):
            ddp = None  # noqa: F841 - the reducer holds the process group: it must go before the kept works
            _leave(sync)
    store.set(DONE_KEY.format(k=k), "1")
    return 0
