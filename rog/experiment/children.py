"""The child processes of a run (``scripts/run.py --child ps|workers|worker|prepare``).

* ``ps``: the parameter server (no torch: the model layout comes from ``layout.json``);
* ``workers``: the worker host of the local launcher: imports torch and builds the workload once,
  then forks one process per worker;
* ``worker``: one worker on its own device or namespace (``--launcher fabric``, real devices);
* ``prepare``: pre-train / load the model and write ``layout.json`` (``--serve-only``, Fabric runs).

Every child reads the run's configuration from ``config.yaml`` in ``--run-dir`` only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from rog.chunks import chunk_bytes_for_share

from .config import BURST_BYTES, JOIN_TIMEOUT_S
from .links import budget_end, fallback_rates, links_ready
from .rundir import (GO_FILE, LAYOUT_FILE, PS_PORT_FILE, PS_RESTARTS_FILE, WORKER_READY_FILE, WORKERS_READY_FILE,
                     read_config, wait_for, write_atomic)
from .supervise import set_pdeathsig, tail_text
from .worker_loop import run_worker


def child_ps(a: argparse.Namespace) -> int:
    """The parameter server (no torch here: the layout comes from layout.json, written by the worker host)."""
    from rog.compression import make_codec
    from rog.policies import make_policy
    from rog.rows import RowPartition
    from rog.runtime import EventLog, ParameterServer, events_file_name
    from rog.transport import Listener, TransportConfig, load_secret

    run_dir = Path(a.run_dir)
    cfg = read_config(run_dir)
    if cfg["library"] == "DDP":  # the gloo baseline: the PS hosts only the rendezvous (rog.baselines.ddp)
        from rog.baselines.ddp import serve_rendezvous

        return serve_rendezvous(cfg, run_dir, a.port, a.origin)
    layout = json.loads(wait_for(run_dir / LAYOUT_FILE, "worker 0 to write the model layout").read_text())
    partition = RowPartition.from_shapes(zip(layout["names"], layout["shapes"]))
    # emulated: this process already runs inside the PS namespace; hosts: a real device; both: tc shapes
    emulated = cfg["testbed"] in ("emulated", "hosts")
    rate = cfg["rate_mbit"] if not emulated and cfg["shape"] == "both" else None
    config = TransportConfig(secret=load_secret(), rate_mbit_at=rate, burst_bytes=BURST_BYTES)
    host = "0.0.0.0" if emulated else "127.0.0.1"
    with Listener(host, a.port, config=config, worker_ids=set(range(cfg["workers"]))) as listener:
        write_atomic(run_dir / PS_PORT_FILE, str(listener.address[1]))
        source = listener
        if not emulated and cfg["trace"] is not None and cfg["shape"] == "both":  # fallback: downlinks follow the traces
            from rog.experiment.emulated import PerWorkerShaping

            source = PerWorkerShaping(listener, lambda: fallback_rates(cfg, links_ready(run_dir)["monotonic_s"]),
                                      BURST_BYTES)  # workers connect only after links.ready exists
        faults = cfg.get("faults", {})
        with EventLog(run_dir / events_file_name("ps"), "ps", cfg["run_id"], a.origin, append=a.resume_ps) as events:
            codec = make_codec(cfg["compression"])
            ps = ParameterServer(partition, cfg["workers"], make_policy(cfg["library"], cfg["threshold"]),
                                 codec, events=events, join_timeout_s=JOIN_TIMEOUT_S,
                                 evict_after_s=faults.get("evict_after_s", 0.0),
                                 # as every worker computes it; a config older than chunk_share: 32 KB
                                 chunk_bytes=chunk_bytes_for_share(codec.row_wire_bytes(partition),
                                                                   cfg.get("chunk_share")))
            _ps_faults(ps, run_dir, faults, a.resume_ps)
            ps.serve(source)
    return 0


def _ps_faults(ps, run_dir: Path, faults: dict, resume: bool) -> None:
    """--resume-ps: restore the latest PS checkpoint (recorded in ps-restarts.jsonl); start PS checkpoints."""
    from rog.runtime.ps_checkpoint import ps_checkpoint_dir

    if resume:
        info = ps.resume(ps_checkpoint_dir(run_dir))
        rec = dict(resumed_unix_s=time.time(), checkpoint=info["seq"], checkpoint_unix_s=info["wall_s"],
                   since_checkpoint_s=time.time() - info["wall_s"])
        with open(run_dir / PS_RESTARTS_FILE, "a") as f:
            f.write(json.dumps(rec) + "\n")
    if faults.get("ps_checkpoint_every_s", 0) > 0:
        ps.start_checkpoints(ps_checkpoint_dir(run_dir), faults["ps_checkpoint_every_s"])


def child_workers(a: argparse.Namespace) -> int:
    """The worker host: imports torch and builds the workload once, then forks one process per worker.

    (Imports cost seconds of CPU per process on a small machine; forked workers share them.
    Each forked worker is a separate process with its own connection, log and event file.)
    """
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    run_dir = Path(a.run_dir)
    cfg = read_config(run_dir)
    wl = make_workload(cfg)
    write_layout(cfg, run_dir, wl)  # pre-trains once if the cache is cold
    pay_lazy_imports()  # once here, shared by the forked workers
    emulated = cfg["testbed"] == "emulated"
    port = int(wait_for(run_dir / PS_PORT_FILE, "the parameter server to listen").read_text())
    # the links start replaying when the workers are ready to connect, so every run's training sees
    # its traces from the configured offsets, however long the start-up took
    write_atomic(run_dir / WORKERS_READY_FILE, "1\n")
    links = links_ready(run_dir)
    rates = fallback_rates(cfg, links["monotonic_s"]) if not emulated else {}
    sys.stdout.flush()
    sys.stderr.flush()
    pids: dict[int, int] = {}
    for k in range(cfg["workers"]):
        pid = os.fork()
        if pid == 0:  # the worker process
            code = 1
            try:
                set_pdeathsig()
                log = os.open(run_dir / f"w{k}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                if emulated:  # into this worker's namespace before any socket exists
                    from rog.experiment.emulated import enter_netns

                    host = cfg["emulated"]["hosts"][f"w{k}"]
                    enter_netns(host["netns"])
                    server, rate = (host["ps_address"], port), None
                else:
                    server, rate = ("127.0.0.1", port), rates.get(k, cfg["rate_mbit"])
                code = run_worker(k, cfg, run_dir, wl, server, rate, a.origin, stop_at_s=budget_end(cfg, links))
            except BaseException:  # noqa: BLE001 - reported in the worker's log and exit code
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids[pid] = k
    failed = None
    while pids:
        pid, status = os.wait()
        k = pids.pop(pid)
        code = exit_code(status)
        if code != 0 and failed is None:
            failed = (k, code)
            for other in pids:  # the run is lost: do not leave the others waiting
                os.kill(other, signal.SIGKILL)
    if failed is not None:
        k, code = failed
        print(f"worker {k} exited with code {code}: {tail_text(run_dir / f'w{k}.log')}", file=sys.stderr)
        return 1
    return 0


def exit_code(status: int) -> int:
    """``os.waitstatus_to_exitcode`` (Python 3.9+) for Python 3.8 too: exit code, or -signal if killed."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def child_worker(a: argparse.Namespace) -> int:
    """One worker on its own device (--testbed hosts): ``config.yaml`` in ``--run-dir``, the PS at
    ``--ps-address``:``--port``, the links shaped by tc on the device (no token bucket here)."""
    import torch

    torch.set_num_threads(1)
    from rog.workloads.registry import make_workload

    run_dir = Path(a.run_dir)
    cfg = read_config(run_dir)
    if not 0 <= a.worker_id < cfg["workers"]:
        raise SystemExit(f"run.py: error: --worker-id {a.worker_id} must lie in [0, {cfg['workers']}) (config.yaml workers)")
    fabric_host_config(cfg, run_dir)
    wl = make_workload(cfg)
    fabric_gate(cfg, run_dir)  # --launcher fabric: wait until every worker is ready and the links start
    # a real device has its own clock: the budget runs from this worker's start (after the gate)
    return run_worker(a.worker_id, cfg, run_dir, wl, (a.ps_address, a.port), None, a.origin,
                      stop_at_s=budget_end(cfg, {"monotonic_s": time.monotonic()}))


def fabric_host_config(cfg: dict, run_dir: Path) -> dict:
    """--launcher fabric: the launcher shipped the pre-trained weights into this host's run folder
    (``deploy.weights_in_run_dir``), so the workload's cache is the run folder, not the launcher's path."""
    if cfg.get("launcher") == "fabric" and cfg.get("deploy", {}).get("weights_in_run_dir"):
        cfg["cache_dir"] = str(run_dir)
    return cfg


def fabric_gate(cfg: dict, run_dir: Path, timeout_s: float = 900.0) -> None:
    """--launcher fabric: write ``worker.ready`` once the expensive start-up is done, then wait for the
    launcher's ``links.ready`` (written on every host when all workers are ready, releasing the held
    trace replays at the same moment), so training meets the traces at their configured offsets."""
    if cfg.get("launcher") != "fabric":
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
    write_layout(cfg, run_dir, make_workload(cfg))
    return 0


def write_layout(cfg: dict, run_dir: Path, wl) -> None:
    """Pre-train the quick model (or load it from the cache) and save its parameter layout for the PS."""
    import torch

    from rog.rows import RowPartition

    wl.pretrained_state(cfg["model"])
    with torch.random.fork_rng(devices=[]):
        part = RowPartition.from_module(wl.make_model(cfg["model"]))
    write_atomic(run_dir / LAYOUT_FILE, json.dumps(dict(names=part.names, shapes=part.shapes)) + "\n")

