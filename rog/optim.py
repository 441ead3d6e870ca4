"""ROG as a drop-in ``torch.optim`` optimizer: replace the application's optimizer, keep calling ``step()``.

::

    opt = ROGOptimizer(model.parameters(), server=("10.0.0.1", 5555), worker_id=2, lr=0.01)
    for x, y in batches:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()        # gradients -> local update -> accumulate -> push -> pull -> apply
    opt.close()           # flush everything, leave

The constructor composes four parts (the shape of ``torch.distributed.optim.PostLocalSGDOptimizer``):
a local update rule (:class:`~rog.local_update.LocalUpdate`: DEFSGDM Nesterov momentum and weight
decay, each param group's own, its ``lr`` read at every step), a synchronisation policy (:func:`~rog.policies.make_policy`),
a transport connection (:func:`~rog.transport.connect`, authenticated with the shared secret) and
a codec (:func:`~rog.codecs.codec_registry.make_codec`), and hands them to a
:class:`~rog.runtime.WorkerEngine`.  The model's parameters are re-pointed to views of one flat
float32 buffer, so a pull updates the model in place, and their ``.grad`` to views of one flat gradient
buffer, so backward accumulates there and a step copies no gradient (a ``.grad`` the application
replaces, or sets to None, is copied in once and re-pointed; ``zero_grad(set_to_none=False)`` keeps the views).

Parameters on a CUDA device stay there: the flat buffer, the gradient, the momentum and the
accumulator are device tensors, the codec is the device codec (:mod:`rog.codecs.device_codec`, frames
identical to the numpy codec's) and only the packed bits and scales of the rows sent cross to
the host.  CPU parameters use numpy buffers (``flat_backend="torch"`` runs the device path on
CPU tensors, for tests and cross-checks).

Compute time (logged per iteration) runs from the last ``zero_grad()`` (or the end of the
previous ``step()``) to the start of the push, so time spent between ``step()`` and
``zero_grad()`` (evaluation, logging) is not counted as compute.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import torch

from .chunks import ARTIFACT_CHUNK_SHARE, chunk_bytes_for_share
from .codecs.codec_registry import make_codec
from .local_update import GroupedRules, GroupRule, LocalUpdate, LocalUpdateConfig, check_hyper
from .policies import make_policy
from .rows import RowPartition
from .runtime.events import EventLog
from .runtime.worker import IterationStats, RuntimeFailure, WorkerEngine, aligned_zeros
from .transport import Connection, TransportConfig, connect, load_secret


@dataclass(frozen=True)
class WorkerOptions:
    """What an experiment (rather than the application) sets on a worker: link shaping, compute pacing,
    chunking, the event log, time-outs, recovery and the buffer backend.  Every field has a default, so an
    application passes none; :mod:`rog.experiment.worker_loop` builds one from the run configuration."""

    rate_mbit: float | Any | None = None  # shape this worker's pushes (a number, or a live rate with .get())
    compute_target_s: float | None = None  # pace compute: sleep the rest of this many seconds per iteration
    events: EventLog | None = None  # receives this worker's event records
    chunk_share: float | None = ARTIFACT_CHUNK_SHARE  # a chunk holds this share of the full payload; None: 32 KB
    chunk_bytes: int | None = None  # or exactly this many payload bytes per chunk
    timeout_s: float = 600.0  # join and per-exchange wait
    transport_options: Mapping | None = None  # to rog.transport.TransportConfig
    reconnect_timeout_s: float | None = 600.0  # survive a broken link this long (None or 0: the run ends)
    rejoin: bool = False  # a crashed worker restarting: the PS resends everything committed
    flat_backend: str = "auto"  # auto (numpy on CPU, torch on a GPU), numpy, or torch (device path on CPU)
    clock_sync: bool = False  # estimate this host's clock offset with the PS at join and flush

    def __post_init__(self) -> None:
        if self.flat_backend not in ("auto", "numpy", "torch"):
            raise ValueError(f"WorkerOptions.flat_backend must be 'auto', 'numpy' or 'torch', got {self.flat_backend!r}")
        if not (self.timeout_s > 0):
            raise ValueError(f"WorkerOptions.timeout_s must be > 0, got {self.timeout_s!r}")
        if self.compute_target_s is not None and not (self.compute_target_s >= 0):
            raise ValueError(f"WorkerOptions.compute_target_s must be >= 0 or None, got {self.compute_target_s!r}")
        if self.chunk_bytes is not None and not (int(self.chunk_bytes) == self.chunk_bytes and self.chunk_bytes > 0):
            raise ValueError(f"WorkerOptions.chunk_bytes must be a positive integer or None, got {self.chunk_bytes!r}")


_OPTION_FIELDS = frozenset(f.name for f in dataclasses.fields(WorkerOptions))


class ROGOptimizer(torch.optim.Optimizer):
    """A worker of a ROG (or BSP/SSP/FLOWN) parameter server, behind the ``torch.optim.Optimizer`` API.

    ``params``: tensors or param groups (dicts), as for any torch optimizer; each group may set its own
    ``lr``, ``momentum``, ``weight_decay`` and ``nesterov``, and the local update reads them at every step,
    so ``torch.optim.lr_scheduler`` schedulers work as on SGD.  Parameters without ``requires_grad`` are
    not rows: never synchronised, never stepped.  Defaults, next to ``torch.optim.SGD``'s:

    =================  ==================  ======================
    setting            ROGOptimizer        torch.optim.SGD
    =================  ==================  ======================
    ``lr``             required            1e-3
    ``momentum``       0.9 (DEFSGDM)       0
    ``nesterov``       True                False
    ``weight_decay``   5e-4 (L2, coupled)  0
    ``dampening``      0 (fixed)           0
    schedule           none (constant)     none (constant)
    =================  ==================  ======================

    ``local_update``: ``"DEFSGDM"`` (the paper's rule, :mod:`rog.local_update`) or a ``torch.optim.Optimizer``
    class (e.g. ``torch.optim.AdamW``, with ``local_options`` for its constructor) whose step becomes the
    update ``u`` that ROG accumulates and pushes (:mod:`rog.optim_local`).

    ``server`` is ``(host, port)`` of the parameter server (or an already connected
    :class:`~rog.transport.Connection`, e.g. from :func:`~rog.transport.inproc_pair`).
    ``threshold=None`` takes the policy's default (ROG 4, SSP 4, FLOWN 4, BSP 0).  ``secret``
    (bytes or str) defaults to the ``ROG_SECRET`` environment variable.  ``policy_options`` go to the
    policy's constructor, ``codec_options`` to :func:`~rog.codecs.codec_registry.make_codec` (e.g. ``ratio`` and
    ``gate`` for ``compression="topk"``).  ``initial_model``: ``"team"`` (default) takes the team's starting
    parameters from the PS at join (the first worker's, or a file given to the server) wherever this worker's
    differ, so robots need not start identical; ``"own"`` keeps this worker's and is refused at join if they
    differ from the team's.

    Everything an experiment sets beside that comes as one :class:`WorkerOptions` (``options``): link
    shaping (``rate_mbit``), compute pacing, the chunk size (a chunk, the unit a cut transmission delivers
    or drops, holds ``chunk_share`` of the full payload, by default the original artifact's
    :data:`~rog.chunks.ARTIFACT_CHUNK_SHARE`, about 3 %), the event log, time-outs, reconnection for up to
    ``reconnect_timeout_s`` after a broken link, ``rejoin`` (a crashed worker restarts from the initial
    model and the PS sends it everything committed so far, :mod:`rog.runtime.worker`; then
    :meth:`load_state_dict` its last state) and ``clock_sync`` (the clock offset with the PS at join and
    flush, :mod:`rog.runtime.clock_sync`).
    """

    def __init__(
        self,
        params: Iterable,
        *,
        server: tuple[str, int] | Connection,
        worker_id: int,
        lr: float,
        policy: str = "ROG",
        threshold: int | None = None,
        compression: str = "sign",
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
        nesterov: bool = True,
        local_update: str | type = "DEFSGDM",
        local_options: Mapping | None = None,
        initial_model: str = "team",
        secret: bytes | str | None = None,
        policy_options: Mapping | None = None,
        codec_options: Mapping | None = None,
        options: WorkerOptions | None = None,
        **unknown,
    ) -> None:
        if unknown:
            moved = sorted(set(unknown) & _OPTION_FIELDS)
            if moved:
                raise TypeError(f"ROGOptimizer: {', '.join(moved)} belong(s) to WorkerOptions: pass "
                                f"options=WorkerOptions({moved[0]}=...)")
            if "milestones" in unknown:
                raise TypeError("ROGOptimizer: milestones: the step halving is a scheduler now: attach "
                                "torch.optim.lr_scheduler.MultiStepLR(opt, milestones, gamma=0.5)")
            raise TypeError(f"ROGOptimizer got unexpected keyword arguments {sorted(unknown)}")
        o = options if options is not None else WorkerOptions()
        if not isinstance(o, WorkerOptions):
            raise TypeError(f"options must be a rog.optim.WorkerOptions, got {type(o).__name__}")
        flat_backend, chunk_bytes, rate_mbit = o.flat_backend, o.chunk_bytes, o.rate_mbit
        transport_options = dict(o.transport_options or {})
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov))
        for i, g in enumerate(self.param_groups):
            check_hyper(g["lr"], g["momentum"], g["weight_decay"], g["nesterov"],
                        f"param_groups[{i}]: " if len(self.param_groups) > 1 else "")
        every = [p for g in self.param_groups for p in g["params"]]
        self.frozen = [i for i, p in enumerate(every) if not p.requires_grad]  # indices: not rows, never stepped
        self._row_index = [i for i, p in enumerate(every) if p.requires_grad]  # row tensor -> index in param_groups
        tensors = [every[i] for i in self._row_index]
        if not tensors:
            raise ValueError("params: no parameter requires a gradient; ROGOptimizer has nothing to synchronise")
        self.row_params = tensors  # the row tensors, in the flat buffer's order (param groups in order)
        sizes = [sum(1 for p in g["params"] if p.requires_grad) for g in self.param_groups]
        self._group_tensors = [(sum(sizes[:i]), sum(sizes[: i + 1])) for i in range(len(sizes))]
        self.device = tensors[0].device
        for i, p in zip(self._row_index, tensors):
            if p.dtype != torch.float32 or p.device != self.device:
                raise ValueError(f"params[{i}] is {p.dtype} on {p.device}; ROGOptimizer needs float32 parameters "
                                 f"all on one device (the first is on {self.device})")
        if flat_backend == "numpy" and self.device.type != "cpu":
            raise ValueError(f"flat_backend='numpy' needs CPU parameters; these are on {self.device}")
        self.on_device = flat_backend == "torch" or self.device.type != "cpu"
        self.partition = _partition(self._row_index, tensors)
        sync = make_policy(policy, threshold, **(policy_options or {}))
        g0 = self.param_groups[0]
        rule = LocalUpdateConfig(lr=g0["lr"], momentum=g0["momentum"], nesterov=g0["nesterov"],
                                 weight_decay=g0["weight_decay"])
        if self.on_device:
            from .device.torch_update import TorchLocalUpdate
            from .codecs.device_codec_registry import make_device_codec

            codec = make_device_codec(compression, self.device, **(codec_options or {}))
            self.flat = _adopt_torch(tensors, self.partition, self.device)
            self._grad = torch.zeros(self.partition.n_elements, dtype=torch.float32, device=self.device)
        else:
            codec = make_codec(compression, **(codec_options or {}))
            self.flat = _adopt(tensors, self.partition)
            self._grad = np.zeros(self.partition.n_elements, dtype=np.float32)
        if local_update == "DEFSGDM":
            local = (TorchLocalUpdate(self.partition.n_elements, rule, self.device) if self.on_device
                     else LocalUpdate(self.partition.n_elements, rule))
        else:
            from .optim_local import TorchOptimizerUpdate

            local = TorchOptimizerUpdate(local_update, self.partition, self._groups_for_local(), self.device,
                                         self.on_device, **(local_options or {}))
        # every parameter's .grad is its view of the flat gradient buffer: autograd accumulates there in place,
        # so step() gathers nothing (a .grad replaced by the application is copied in and re-pointed)
        grad_t = self._grad if self.on_device else torch.from_numpy(self._grad)
        off = self.partition.tensor_offset.tolist()
        self._grad_views = [grad_t[off[i] : off[i + 1]].view(p.shape) for i, p in enumerate(tensors)]
        for p, v in zip(tensors, self._grad_views):
            if p.grad is not None:
                v.copy_(p.grad.detach())
            p.grad = v
        self._no_grad: set[int] = set()  # row tensors whose .grad was None at the last step (skipped, as SGD does)
        if chunk_bytes is None:
            chunk_bytes = chunk_bytes_for_share(codec.row_wire_bytes(self.partition), o.chunk_share)
        self.chunk_bytes = int(chunk_bytes)
        conn = server if isinstance(server, Connection) else _connect(server, worker_id, secret, rate_mbit,
                                                                      transport_options)
        reconnect = None  # a broken link ends the run unless the optimizer can dial the PS again
        if not isinstance(server, Connection) and o.reconnect_timeout_s:
            reconnect = lambda: _connect(server, worker_id, secret, rate_mbit, transport_options)  # noqa: E731
        if conn.worker_id != worker_id:
            raise ValueError(f"worker_id={worker_id} but the connection belongs to worker {conn.worker_id}")
        try:
            self.engine = WorkerEngine(conn, self.partition, self.flat, sync, codec, local, events=o.events,
                                       compute_target_s=o.compute_target_s, chunk_bytes=chunk_bytes,
                                       wait_timeout_s=o.timeout_s, reconnect=reconnect,
                                       reconnect_timeout_s=o.reconnect_timeout_s or 600.0, rejoin=o.rejoin,
                                       clock_sync=o.clock_sync, initial_model=initial_model)
            self.engine.join(o.timeout_s)
        except RuntimeFailure as e:
            conn.abort()
            raise RuntimeFailure(str(e) + self._frozen_note()) from None
        except BaseException:
            conn.abort()
            raise
        self.schedulers: list = []  # schedulers whose position state_dict() carries (attach())
        self.last_stats: IterationStats | None = None
        self._closed = False
        self._compute_started = time.monotonic()

    def _frozen_note(self) -> str:
        """What to add to a refused join: the frozen parameters this worker left out of its rows."""
        if not self.frozen:
            return ""
        every = [p for g in self.param_groups for p in g["params"]]
        listed = ", ".join(f"params[{i}] {tuple(every[i].shape)}" for i in self.frozen)
        return (f" (this worker leaves out {len(self.frozen)} frozen parameter(s) with requires_grad=False: {listed}; "
                f"they are not rows and are never synchronised: serve the layout of the trainable parameters, "
                f"e.g. rog.serve(model))")

    @property
    def iteration(self) -> int:
        """Iterations completed."""
        return self.engine.iteration

    def attach(self, scheduler):
        """Have :meth:`state_dict` carry ``scheduler``'s position (and :meth:`load_state_dict` restore it);
        returns it: ``sched = opt.attach(torch.optim.lr_scheduler.StepLR(opt, 100))``."""
        if getattr(scheduler, "optimizer", None) is not self:
            raise ValueError("attach(scheduler): the scheduler must have been built on this optimizer")
        self.schedulers.append(scheduler)
        return scheduler

    def _groups_for_local(self) -> list[tuple[int, int, dict]]:
        """``(first tensor, end tensor, hyper-parameters)`` of each group, in row-tensor indices."""
        return [(a, b, {k: v for k, v in g.items() if k != "params"})
                for (a, b), g in zip(self._group_tensors, self.param_groups)]

    def sync_groups(self) -> None:
        """Hand every group's current hyper-parameters (a scheduler may have changed ``lr``) to the local update;
        row tensors whose ``.grad`` was None are skipped (u = 0, momentum kept), as ``torch.optim.SGD`` skips them."""
        local = self.engine.local
        if not isinstance(local, GroupedRules):
            local.set_groups(self._groups_for_local(), self._no_grad)
            return
        off = self.partition.tensor_offset.tolist()
        rules = []
        for i, ((a, b), g) in enumerate(zip(self._group_tensors, self.param_groups)):
            check_hyper(g["lr"], g["momentum"], g["weight_decay"], g["nesterov"], f"param_groups[{i}]: ")
            t = a
            while t < b:  # runs of consecutive tensors that have gradients
                if t in self._no_grad:
                    t += 1
                    continue
                e = t
                while e < b and e not in self._no_grad:
                    e += 1
                rules.append(GroupRule(off[t], off[e], float(g["lr"]), float(g["momentum"]),
                                       float(g["weight_decay"]), bool(g["nesterov"])))
                t = e
        local.set_groups(rules)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients and mark the start of the next iteration's compute.

        ``set_to_none=True`` (torch's default) sets every ``.grad`` to None, as torch does: a parameter that
        gets no gradient before the next step is skipped.  ``set_to_none=False`` zeroes the flat gradient
        buffer that every ``.grad`` is a view of, so backward accumulates there and the step copies nothing
        (the faster path, used by the experiments)."""
        if set_to_none:
            for p in self.row_params:
                p.grad = None
        else:
            for p, v in zip(self.row_params, self._grad_views):
                if p.grad is not v:
                    p.grad = v
            if self.on_device:
                self._grad.zero_()
            else:
                self._grad.fill(0.0)
        self._compute_started = time.monotonic()

    def _gradients_into_flat(self) -> None:
        """Make the flat buffer hold every gradient: nothing to do for a ``.grad`` that is still its view (autograd
        accumulated into it); a replaced one is copied in (zeros for None, remembered as skipped) and re-pointed."""
        params = self.row_params
        stray = [i for i, (p, v) in enumerate(zip(params, self._grad_views)) if p.grad is not v]
        self._no_grad = {i for i in stray if params[i].grad is None}
        if not stray:
            return
        off = self.partition.tensor_offset
        if self.on_device and len(stray) == len(params):  # all replaced (e.g. model.zero_grad()): one batched copy
            torch.cat([p.grad.detach().reshape(-1) if p.grad is not None
                       else self._grad.new_zeros(int(off[i + 1] - off[i])) for i, p in enumerate(params)], out=self._grad)
        else:
            for i in stray:
                g = params[i].grad
                if g is None:
                    self._grad_views[i].zero_()
                else:
                    self._grad_views[i].copy_(g.detach())
        for i in stray:
            params[i].grad = self._grad_views[i]

    @torch.no_grad()
    def step(self, closure=None):
        """Gradients -> local update (each group's current hyper-parameters) -> accumulate -> push ->
        (staleness gate) -> pull -> apply to the model."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._gradients_into_flat()
        self.sync_groups()
        self.last_stats = self.engine.step(self._grad, self._compute_started)
        self._compute_started = time.monotonic()
        return loss

    def state_dict(self) -> dict:
        """torch's format (``state``: per parameter index ``momentum_buffer``, ``error_feedback`` (this worker's
        undelivered updates) and ``step``; ``param_groups``: hyper-parameters and indices), plus ``rog``: the
        iteration, the push/pull counts the PS checks at a rejoin, row versions and attached schedulers."""
        from .optim_state import optimizer_state

        return optimizer_state(self)

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`'s output: groups' hyper-parameters, momentum, error feedback, iteration and
        attached schedulers.  On a fresh join (nothing exchanged yet) the iteration is taken as saved; after a
        rejoin it must equal the PS's count (else a push after this state would be applied twice)."""
        from .optim_state import load_optimizer_state

        load_optimizer_state(self, state_dict)

    def record_eval(self, accuracy: float, loss: float, *, duration_s: float | None = None, flushed: bool = False,
                    train_loss: float | None = None) -> None:
        """Log a test of this worker's current model (``eval`` record at the current iteration)."""
        if self.engine.events is not None:
            fields = dict(worker=self.engine.worker, flushed=flushed, train_loss=train_loss)
            if duration_s is not None:
                fields["duration_s"] = float(duration_s)
            self.engine.events.write("eval", iteration=self.iteration, accuracy=float(accuracy), loss=float(loss),
                                     **fields)

    def close(self, flush: bool = True) -> None:
        """Flush (every worker's model then holds every update) and leave; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if flush:
                self.engine.flush()
        finally:
            self.engine.close("done" if flush else "left without flushing")

    def __enter__(self) -> "ROGOptimizer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(flush=exc_type is None)


def row_layout(params) -> RowPartition:
    """The rows a :class:`ROGOptimizer` built on ``params`` synchronises, for its parameter server: the parameters
    that require a gradient, in order (param groups in order).  ``params`` as given to the optimizer (tensors or
    param groups), or a ``torch.nn.Module`` (its parameters in registration order, as ``model.parameters()``)."""
    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    groups = list(params)
    if groups and isinstance(groups[0], dict):
        every = [p for g in groups for p in g["params"]]
    else:
        every = groups
    if not all(isinstance(p, torch.Tensor) for p in every):
        raise TypeError("row_layout: give a torch.nn.Module, tensors or param groups (dicts with 'params')")
    index = [i for i, p in enumerate(every) if p.requires_grad]
    return _partition(index, [every[i] for i in index])


def _partition(index: list[int], tensors: list[torch.Tensor]) -> RowPartition:
    return RowPartition.from_shapes((f"p{i}", tuple(p.shape)) for i, p in zip(index, tensors))


def _adopt(tensors: list[torch.Tensor], partition: RowPartition) -> np.ndarray:
    """Copy the parameters into one aligned flat buffer and re-point each to its view of it."""
    flat = aligned_zeros(partition.n_elements)
    off = partition.tensor_offset
    for i, p in enumerate(tensors):
        view = flat[off[i] : off[i + 1]]
        view[:] = p.detach().reshape(-1).numpy()
        p.data = torch.from_numpy(view).view(p.shape)
    return flat


def _adopt_torch(tensors: list[torch.Tensor], partition: RowPartition, device: torch.device) -> torch.Tensor:
    """Copy the parameters into one flat float32 tensor on ``device`` and re-point each to its view of it."""
    flat = torch.zeros(partition.n_elements, dtype=torch.float32, device=device)
    off = partition.tensor_offset.tolist()
    for i, p in enumerate(tensors):
        view = flat[off[i] : off[i + 1]]
        view.copy_(p.detach().reshape(-1))
        p.data = view.view(p.shape)
    return flat


def _connect(server, worker_id: int, secret, rate_mbit, options: dict) -> Connection:
    try:
        host, port = server
    except (TypeError, ValueError):
        raise ValueError(f"server must be (host, port) or a Connection, got {server!r}") from None
    if secret is None:
        key = load_secret()
    else:
        key = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    cfg = TransportConfig(secret=key, rate_mbit_at=rate_mbit, **options)
    return connect(str(host), int(port), worker_id=int(worker_id), config=cfg)
