"""The child processes of a run (``python -m rog.experiment --child ps|workers|local-worker|worker|prepare``).

* ``ps``: the parameter server (no torch: the model layout comes from ``layout.json``);
* ``workers``: the worker host of the local launcher: starts one fresh interpreter per worker
  (``local-worker``; never a fork) and builds the workload once (pre-training, layout) meanwhile;
* ``local-worker``: one worker of the local launcher (enters its namespace first on the emulated testbed);
* ``worker``: one worker on its own device or namespace (``--launcher fabric``, real devices);
* ``prepare``: pre-train / load the model and write ``layout.json`` (``--serve-only``, Fabric runs).

Every child reads the run's configuration from ``config.yaml`` in ``--run-dir`` only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rog.chunks import chunk_bytes_for_share
from rog.codecs.codec_registry import write_codec_stats
from rog.errors import ConfigError
from rog.policies.registry import has_own_runtime

from . import sync_options as SO
from . import topk_options as TO
from .config import BURST_BYTES, JOIN_TIMEOUT_S, ROOT, RUN_MODULE
from .inject_setup import start_relay as start_inject_relay
from .links import budget_end, fallback_rates, links_ready, transport_delay_s
from .rundir import (CLOCK_OFFSETS_FILE, GO_FILE, LAYOUT_FILE, PS_PORT_FILE, PS_RESTARTS_FILE, WORKER_READY_FILE,
                     WORKERS_READY_FILE, local_worker_ready_file, read_config, wait_for, write_atomic)
from .supervise import set_pdeathsig, tail_text
from .worker_loop import run_worker
from .run_config import RunConfig


def child_ps(a: argparse.Namespace) -> int:
    """The parameter server (no torch here: the layout comes from layout.json, written by the worker host)."""
    from rog.codecs.codec_registry import make_codec
    from rog.policies import make_policy
    from rog.rows import RowPartition
    from rog.runtime import EventLog, ParameterServer, events_file_name
    from rog.runtime.clock_sync import write_clock_offsets
    from rog.transport import Listener, TransportConfig, load_secret

    run_dir = Path(a.run_dir)
    cfg = read_config(run_dir)
    if has_own_runtime(cfg.sync.library):  # DDP, the gloo baseline: the PS hosts only the rendezvous (rog.baselines.ddp)
        from rog.baselines.ddp import serve_rendezvous

        return serve_rendezvous(cfg, run_dir, a.port, a.origin)
    layout = json.loads(wait_for(run_dir / LAYOUT_FILE, "worker 0 to write the model layout").read_text())
    partition = RowPartition.from_shapes(zip(layout["names"], layout["shapes"]))
    # emulated: this process already runs inside the PS namespace; hosts: a real device; both: tc shapes
    emulated = cfg.testbed.kind in ("emulated", "hosts")
    rate = cfg.links.rate_mbit if not emulated and cfg.links.shape == "both" else None
    config = TransportConfig(secret=load_secret(), rate_mbit_at=rate, burst_bytes=BURST_BYTES,
                             link_delay_s=transport_delay_s(cfg))  # --link-delay-ms: the PS's sends
    host = "0.0.0.0" if emulated else "127.0.0.1"
    with Listener(host, a.port, config=config, worker_ids=set(range(cfg.testbed.workers))) as listener:
        write_atomic(run_dir / PS_PORT_FILE, str(listener.address[1]))
        source = listener
        if not emulated and cfg.links.trace is not None and cfg.links.shape == "both":  # fallback: downlinks follow the traces
            from rog.experiment.emulated import PerWorkerShaping

            source = PerWorkerShaping(listener, lambda: fallback_rates(cfg, links_ready(run_dir)["monotonic_s"]),
                                      BURST_BYTES)  # workers connect only after links.ready exists
        faults = cfg.faults.faults
        with EventLog(run_dir / events_file_name("ps"), "ps", cfg.output.run_id, a.origin, append=a.resume_ps) as events:
            codec = make_codec(cfg.compression.codec, **TO.codec_options(cfg, ps_workers=cfg.testbed.workers))
            policy = make_policy(cfg.sync.library, cfg.sync.threshold, **SO.policy_options(cfg))
            global_loss = evaluate = None
            every_s = cfg.workload.global_eval_every_s
            if policy.scheduler_period_s is not None or every_s:  # the global model's loss (torch): ADSP, --global-eval
                from .global_loss import make_global_eval

                evaluate = make_global_eval(fabric_host_config(cfg, run_dir))
                if policy.scheduler_period_s is not None:
                    global_loss = lambda total: evaluate(total)[0]  # noqa: E731
            ps = ParameterServer(partition, cfg.testbed.workers, policy, codec, global_loss=global_loss,
                                 events=events, join_timeout_s=JOIN_TIMEOUT_S,
                                 evict_after_s=faults.evict_after_s,
                                 # as every worker computes it; a config older than chunk_share: 32 KB
                                 chunk_bytes=chunk_bytes_for_share(codec.row_wire_bytes(partition),
                                                                   cfg.links.chunk_share))
            _ps_faults(ps, run_dir, faults, a.resume_ps)
            eval_thread = None
            if every_s:  # the same time grid for every system (rog.runtime.global_eval)
                from rog.runtime.global_eval import start_global_eval

                eval_thread = start_global_eval(ps, evaluate, every_s)
            relay = start_inject_relay(cfg, run_dir, host, listener.address[1])  # --inject-mode network: samples via the PS namespace
            try:
                ps.serve(source)
            finally:
                write_clock_offsets(run_dir / CLOCK_OFFSETS_FILE, ps.clock_offsets, events.origin_unix_s)
                if evaluate is not None:  # torch threads out before the interpreter exits
                    from rog.runtime.global_eval import stop_global_eval

                    stop_global_eval(ps, eval_thread)
            write_codec_stats(run_dir, "ps", codec)  # --compression topk: the gate's decisions
            if relay is not None:
                relay.close()
    return 0


def _ps_faults(ps, run_dir: Path, faults: dict, resume: bool) -> None:
    """--resume-ps: restore the latest PS checkpoint (recorded in ps-restarts.jsonl); start PS checkpoints."""
    from rog.runtime.ps_checkpoint import ps_checkpoint_dir

    if resume:
        info = ps.checkpoints.resume(ps_checkpoint_dir(run_dir))
        rec = dict(resumed_unix_s=time.time(), checkpoint=info["seq"], checkpoint_unix_s=info["wall_s"],
                   since_checkpoint_s=time.time() - info["wall_s"])
        with open(run_dir / PS_RESTARTS_FILE, "a") as f:
            f.write(json.dumps(rec) + "\n")
    if faults.ps_checkpoint_every_s > 0:
        ps.checkpoints.start(ps_checkpoint_dir(run_dir), faults.ps_checkpoint_every_s)


def child_workers(a: argparse.Namespace) -> int:
    """The worker host: starts one fresh interpreter per worker (``--child local-worker``, never a fork: a
    forked child of a process that used torch dies on its first backward with a CUDA build of torch), builds
    the workload once (pre-trains if the cache is cold, writes the layout) while they import, writes
    ``workers.ready`` once every worker is ready to connect, and waits for them."""
    run_dir = Path(a.run_dir)
    cfg = read_config(run_dir)
    procs: dict = {}
    for k in range(cfg.testbed.workers):  # first: their imports overlap the pre-training below
        with open(run_dir / f"w{k}.log", "wb") as log:
            procs[k] = subprocess.Popen(
                [sys.executable, "-m", RUN_MODULE, "--run-dir", str(run_dir), "--origin", repr(a.origin),
                 "--child", "local-worker", "--worker-id", str(k)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(ROOT))
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    # pre-trains once if the cache is cold; the workers wait for the PS's port, written after this layout
    write_layout(cfg, run_dir, make_workload(cfg.to_dict()))
    failed = None
    ready = False
    while procs:
        if not ready and all((run_dir / local_worker_ready_file(k)).exists() for k in range(cfg.testbed.workers)):
            # the links start replaying when the workers are ready to connect, so every run's training
            # sees its traces from the configured offsets, however long the start-up took
            write_atomic(run_dir / WORKERS_READY_FILE, "1\n")
            ready = True
        for k, proc in list(procs.items()):
            code = proc.poll()
            if code is None:
                continue
            del procs[k]
            if code != 0 and failed is None:
                failed = (k, code)
                for other in procs.values():  # the run is lost: do not leave the others waiting
                    other.kill()
        time.sleep(0.05)
    if failed is not None:
        k, code = failed
        print(f"worker {k} exited with code {code}: {tail_text(run_dir / f'w{k}.log')}", file=sys.stderr)
        return 1
    return 0


def child_local_worker(a: argparse.Namespace) -> int:
    """One worker started by the worker host (``--launcher local``): a fresh interpreter that enters its
    namespace (emulated) before anything starts a thread, imports torch, builds the workload, writes
    ``w<k>.ready`` and trains once the links start."""
    set_pdeathsig()
    run_dir = Path(a.run_dir)
    if os.getppid() == 1:  # the worker host died before the death signal was armed
        return 1
    cfg = read_config(run_dir)
    k = int(a.worker_id)
    emulated = cfg.testbed.kind == "emulated"
    if emulated:  # into this worker's namespace before any socket (or thread) exists
        from rog.experiment.emulated import enter_netns

        enter_netns(cfg.testbed.emulated["hosts"][f"w{k}"]["netns"])
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    wl = make_workload(cfg.to_dict())
    pay_lazy_imports()
    port = int(wait_for(run_dir / PS_PORT_FILE, "the parameter server to listen").read_text())
    write_atomic(run_dir / local_worker_ready_file(k), f"{time.monotonic()!r}\n")
    links = links_ready(run_dir)
    if emulated:
        server, rate = (cfg.testbed.emulated["hosts"][f"w{k}"]["ps_address"], port), None
    else:
        server, rate = ("127.0.0.1", port), fallback_rates(cfg, links["monotonic_s"]).get(k, cfg.links.rate_mbit)
    return run_worker(k, cfg, run_dir, wl, server, rate, a.origin, stop_at_s=budget_end(cfg, links))


def child_worker(a: argparse.Namespace) -> int:
    """One worker on its own device (--testbed hosts): ``config.yaml`` in ``--run-dir``, the PS at
    ``--ps-address``:``--port``, the links shaped by tc on the device (no token bucket here)."""
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    run_dir = Path(a.run_dir)
    cfg = read_config(run_dir)
    if not 0 <= a.worker_id < cfg.testbed.workers:
        raise ConfigError(f"--worker-id {a.worker_id} must lie in [0, {cfg.testbed.workers}) (config.yaml workers)")
    cfg = fabric_host_config(cfg, run_dir)
    wl = make_workload(cfg.to_dict())
    fabric_gate(cfg.testbed.launcher, run_dir)  # --launcher fabric: wait until every worker is ready and the links start
    # a real device has its own clock: the budget runs from this worker's start (after the gate)
    return run_worker(a.worker_id, cfg, run_dir, wl, (a.ps_address, a.port), None, a.origin,
                      stop_at_s=budget_end(cfg, {"monotonic_s": time.monotonic()}))


def fabric_host_config(cfg: RunConfig, run_dir: Path) -> RunConfig:
    """--launcher fabric: the launcher shipped the pre-trained weights into this host's run folder
    (``deploy.weights_in_run_dir``), so the workload's cache is the run folder, not the launcher's path."""
    if cfg.testbed.launcher == "fabric" and (cfg.testbed.deploy or {}).get("weights_in_run_dir"):
        return cfg.replace(cache_dir=str(run_dir))
    return cfg


def fabric_gate(launcher: str | None, run_dir: Path, timeout_s: float = 900.0) -> None:
    """``launcher`` fabric (config.yaml's ``launcher``): write ``worker.ready`` once the expensive start-up is done, then wait for the
    launcher's ``links.ready`` (written on every host when all workers are ready, releasing the held
    trace replays at the same moment), so training meets the traces at their configured offsets."""
    if launcher != "fabric":
        return
    pay_lazy_imports()
    write_atomic(run_dir / WORKER_READY_FILE, f"{time.monotonic()!r}\n")
    wait_for(run_dir / GO_FILE, "the launcher's go (every worker ready, links started)", timeout_s)


def pay_lazy_imports() -> None:
    """Import what a worker would otherwise import after the links start: the engine, and ``torch._dynamo``,
    which ``torch.optim.Optimizer.__init__`` imports on its first call (about 2 s of CPU per process).
    Paid after the go, it delayed every worker's join by 6-14 s on 2 cores, while the traces were
    already replaying: training met them that much past their configured offsets, by a different
    amount in every run."""
    import torch

    import rog.optim  # noqa: F401

    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def child_prepare(a: argparse.Namespace) -> int:
    """--serve-only: pre-train / load the model and write the layout (what the worker host does in a full run)."""
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    run_dir = Path(a.run_dir)
    cfg = read_config(run_dir)
    write_layout(cfg, run_dir, make_workload(cfg.to_dict()))
    return 0


def write_layout(cfg: RunConfig, run_dir: Path, wl) -> None:
    """Pre-train the quick model (or load it from the cache) and save its parameter layout for the PS."""
    import torch

    from rog.rows import RowPartition

    wl.pretrained_state(cfg.workload.model)
    with torch.random.fork_rng(devices=[]):
        part = RowPartition.from_module(wl.make_model(cfg.workload.model))
    write_atomic(run_dir / LAYOUT_FILE, json.dumps(dict(names=part.names, shapes=part.shapes)) + "\n")

