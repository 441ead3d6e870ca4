"""One worker's training loop: adapt the pre-trained model on its shard with ROGOptimizer (or the DDP
baseline), worker 0 evaluating, checkpoint-writing workers saving the model they hold."""

from __future__ import annotations

import time
from pathlib import Path

from rog.codecs.codec_registry import write_codec_stats
from rog.policies.registry import has_own_runtime
from rog.schedules import setup as SS

from . import sync_options as SO
from . import topk_options as TO
from .config import BURST_BYTES
from .inject_setup import inject_streamed, wrap_batches
from .links import transport_delay_s
from .run_config import RunConfig


def run_worker(k: int, cfg: RunConfig, run_dir: Path, wl, server: tuple[str, int], rate, origin: float,
               stop_at_s: float | None = None) -> int:
    """Worker ``k``: adapt the pre-trained model on its shard with ROGOptimizer; worker 0 also evaluates.

    ``server``: the PS's address as this worker reaches it; ``rate``: its uplink's token-bucket
    rate (Mbit/s or a trace callable; None on the emulated testbed, where tc shapes)."""
    if has_own_runtime(cfg.sync.library):  # DDP: the torch.distributed gloo baseline (no token bucket: loopback runs unshaped)
        from rog.baselines.ddp import run_ddp_worker

        return run_ddp_worker(k, cfg, run_dir, wl, server, origin, stop_at_s=stop_at_s)
    import torch
    import torch.nn.functional as F

    from rog.optim import ROGOptimizer, WorkerOptions
    from rog.runtime import EventLog, events_file_name, worker_rank

    from rog.device.choice import resolve_device

    torch.set_num_threads(1)
    device = torch.device(resolve_device(cfg.device.device, "config.yaml device"))
    print(f"worker {k}: device {device}", flush=True)
    torch.manual_seed(cfg.workload.seed * 1000 + k)  # stochastic depth
    model = wl.pretrained_model(cfg.workload.model).to(device)
    E = cfg.workload.batch_multiple
    batches = wl.worker_batches(k, cfg.workload.base_batch, seed=cfg.workload.seed)
    if device.type == "cuda":  # one-time CUDA costs before the join, not in the first timed iteration
        from rog.device.warmup import warm_up

        first = next(wl.worker_batches(k, cfg.workload.base_batch, seed=cfg.workload.seed))  # a separate iterator
        print(f"worker {k}: CUDA warm-up {warm_up(model, first, device):.2f} s (before joining)", flush=True)
    losses: list[float] = []
    ck = cfg.faults.checkpoint
    writer = ck_sched = None
    t_sched0 = 0.0
    with EventLog(run_dir / events_file_name(worker_rank(k)), worker_rank(k), cfg.output.run_id, origin) as events:
        batches = wrap_batches(cfg, k, wl, batches, run_dir, server, events)  # --inject-alpha/--inject-beta
        costs = SS.layer_costs(cfg, model, wl, k, events)  # --pacing layer: this machine's per-layer compute (before the join)
        opt = ROGOptimizer(model.parameters(), server=server, worker_id=k, lr=cfg.workload.lr, policy=cfg.sync.library,
                           threshold=cfg.sync.threshold, compression=cfg.compression.codec, momentum=cfg.workload.momentum,
                           weight_decay=cfg.workload.weight_decay, policy_options=SO.policy_options(cfg),
                           codec_options=TO.codec_options(cfg),
                           options=WorkerOptions(
                               rate_mbit=rate, compute_target_s=SO.worker_compute_s(cfg, k), events=events,
                               chunk_share=cfg.links.chunk_share,
                               transport_options=dict(burst_bytes=BURST_BYTES, link_delay_s=transport_delay_s(cfg)),
                               reconnect_timeout_s=cfg.faults.faults.reconnect_timeout_s,
                               clock_sync=True))  # the PS records this host's clock offset (clock_offsets.json)
        if stop_at_s is not None and cfg.workload.time_budget_s is not None:
            # the budget is training time: count it from the join (every worker connected), so a slow
            # start-up (model load, a loaded machine) does not eat into one system's budget more than another's
            stop_at_s = max(stop_at_s, time.monotonic() + float(cfg.workload.time_budget_s))

        sched = paper_lr_schedule(opt)  # the artifact's step halving, an explicit scheduler
        trainer = SS.make_trainer(cfg, model, opt, wl, k, costs)  # None: sequential (the plain optimizer step)
        paced = SS.make_paced_passes(model, costs) if trainer is None else None  # the plain loop, paced per layer

        def evaluate(flushed: bool = False) -> None:
            if trainer is not None:
                trainer.settle()  # the last pull overlaps the next forward pass: apply it before testing
            t0 = time.monotonic()
            m = wl.test_metrics(model)  # eval mode, no grad, streamed in batches; training flag restored
            loss, acc = float(m["loss"]), float(m["accuracy"])
            train_loss = sum(losses) / len(losses) if losses else None
            losses.clear()
            # the record starts when the test started (ROGOptimizer.record_eval stamps the end; the energy
            # timeline needs event starts, or the eval would overlap the next compute)
            events.write("eval", events.at(t0), iteration=opt.iteration, accuracy=acc, loss=loss,
                         duration_s=time.monotonic() - t0, worker=k, flushed=flushed, train_loss=train_loss)

        if k in ck.workers:  # after the join: every worker's schedule starts together
            from rog.checkpoint import CheckpointSchedule, CheckpointWriter, checkpoint_dir

            writer = CheckpointWriter(checkpoint_dir(run_dir), worker=k, meta=dict(
                model=cfg.workload.model, workload=cfg.workload.name, run_id=cfg.output.run_id))
            if ck.every_s > 0:
                ck_sched = CheckpointSchedule(ck.every_s, ck.triple_every, ck.time_scale)
            t_sched0 = time.monotonic()
            writer.submit(model, iteration=0, t_s=events.now_s(), block=True)  # the starting model
        if k == 0:
            evaluate()
        feed = None
        if cfg.stream:  # ScaDLES streaming: the batch waits on the arrival clock (data_wait), before compute
            from .stream_feed import StreamFeed

            feed = StreamFeed(cfg, k, wl, events, opt.engine.local)
        for n in range(1, cfg.workload.iterations + 1):
            if trainer is not None:  # a layer-segment schedule: its pulls and pushes overlap the passes
                x, y = next(batches)
                losses.append(trainer.iteration(x.to(device), y.to(device), F.cross_entropy))
            else:
                streamed = inject_streamed(batches, feed.take(n) if feed is not None else None)  # beta of its own batch
                if streamed is not None and feed.pacer is not None:  # the pass over b samples costs a + c b
                    opt.engine.compute_target_s = feed.compute_target_s(sum(len(y) for _, y in streamed))
                sizes = [len(y) for _, y in streamed] if streamed is not None else [1] * E
                losses.append(plain_iteration(model, opt, streamed or (next(batches) for _ in range(E)), sizes,
                                              device, paced))
            step_schedule(sched)
            # the iteration boundary: the last one when the count is reached or the time budget has run out
            last = n == cfg.workload.iterations or (stop_at_s is not None and time.monotonic() >= stop_at_s)
            if k == 0 and (n % cfg.workload.eval_every == 0 or last):
                evaluate()
            if writer is not None and (last or (ck_sched is not None and ck_sched.due(time.monotonic() - t_sched0))):
                if trainer is not None:
                    trainer.settle()
                # the model this worker holds after its pull of iteration n (parameters and its own BN buffers)
                writer.submit(model, iteration=n, t_s=events.now_s(), block=last)
            if last:
                break
        if trainer is not None:
            trainer.close()
        if paced is not None:
            paced.remove()
        opt.close()
        write_codec_stats(run_dir, worker_rank(k), opt.engine.codec)  # --compression topk: CNC, floats, bytes
        if writer is not None:
            writer.close()  # waits for the last write; raises CheckpointError if any write failed
        if k == 0:
            evaluate(flushed=True)
    return 0


def paper_lr_schedule(opt):
    """The artifact's learning-rate schedule as a torch scheduler on ``opt``: ``MultiStepLR(milestones=[800, 1600,
    2400, 3200], gamma=0.5)``.  Iteration ``n`` runs at the scheduler's epoch ``n`` (iterations count from 1:
    iteration 800 is the first at half rate, as :class:`rog.local_update.StepHalving`), so it starts at epoch 1
    and :func:`step_schedule` steps it after every iteration."""
    import torch

    from rog.local_update import PAPER_MILESTONES

    for g in opt.param_groups:
        g.setdefault("initial_lr", g["lr"])
    return torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(PAPER_MILESTONES), gamma=0.5, last_epoch=0)


def step_schedule(sched) -> None:
    """Step ``sched`` at the end of an iteration (a segmented schedule steps the engine, not ``opt.step()``:
    torch's warning about the order is then not about this loop)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
        sched.step()


def plain_iteration(model, opt, passes, pass_samples: list[int], device, paced=None) -> float:
    """One iteration of the plain engine (every schedule but the segmented ones): forward and backward of
    each of ``passes`` (gradient accumulation; ``pass_samples`` their sizes or weights), then the optimizer's
    step (push, gate, pull).  ``paced`` (:class:`rog.schedules.pacing.PacedPasses`) paces each layer; without
    it the engine sleeps at the end of the compute.  Returns the iteration's loss."""
    import torch.nn.functional as F

    opt.zero_grad(set_to_none=False)  # autograd accumulates into the flat gradient buffer: no copy at the step
    total = 0.0
    n_mb = len(pass_samples)
    if paced is not None:  # the iteration's target, spread over its passes by their samples
        paced.begin_iteration(opt.engine.compute_target_s, pass_samples)
    for i, (x, y) in enumerate(passes):  # -b: gradient accumulation over the passes
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        if paced is not None:
            paced.begin_pass(i)
        loss = F.cross_entropy(model(x), y) / n_mb
        if paced is not None:
            paced.end_forward()
        loss.backward()
        if paced is not None:
            paced.end_backward()
        total += float(loss.detach())
    if paced is not None:
        opt.engine.paced_s = paced.take_slept()  # the compute record's sleep_s holds every sleep
    opt.step()
    if paced is not None:
        paced.end_iteration(opt.engine)
    return total
