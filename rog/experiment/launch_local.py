"""The local launcher: the parameter server and a worker host (one fresh interpreter per worker) as child processes of this
machine (``--launcher local``; loopback runs and ``--serve-only`` always use it), with the emulated
testbed's namespaces and tc replays when the run has them."""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

from rog.errors import ConfigError

from .config import ROOT
from . import tensorboard_feed
from .finalize import finalise, mark, report_end, summarise, write_run_manifest
from .links import link_schedules, start_links
from .progress import for_run as progress_of
from .rundir import PS_PORT_FILE, WORKERS_READY_FILE
from .supervise import Children, incomplete_reason, raise_on_termination
from .run_config import RunConfig, slow_start_after_idle


def launch_local(cfg: RunConfig, run_dir: Path, progress: bool, serve_only: bool = False, port: int = 0,
                 command: list[str] | None = None, json_out: bool = False, tensorboard: bool = True) -> int:
    """Start the PS (and the worker host, or ``prepare`` with ``serve_only``) here, supervise them with a
    progress line (and the TensorBoard feed), then summarise, finalise and mark the run; ends with
    :func:`rog.experiment.finalize.report_end`."""
    env = dict(os.environ)
    if serve_only:
        if "ROG_SECRET" not in env:
            raise ConfigError("--serve-only needs ROG_SECRET in the environment (share it with your workers)")
        from rog.transport import load_secret

        try:
            load_secret()  # checked before anything starts: a short secret is refused here, not in a child
        except ValueError as e:
            raise ConfigError(f"--serve-only: {e}") from None
    else:
        env["ROG_SECRET"] = secrets.token_hex(32)  # per run; children read it from their environment only
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t_start, start_unix = time.monotonic(), time.time()
    children = Children(run_dir, env, t_start)
    raise_on_termination()  # a killed launcher still cleans up and marks INCOMPLETE
    status, reason = "incomplete", "not started"
    prog = progress_of(cfg, run_dir)
    feed = None
    net = None  # the emulated testbed (EmulatedNetwork) while it exists
    schedules: dict = {}
    left: list[str] = []
    replay_stats: dict = {}
    links = None  # {"t_s", "monotonic_s"}: when the links started replaying (event clock / monotonic)
    try:
        ps_wrap = None
        schedules = link_schedules(cfg) if not serve_only else {}
        if progress and not serve_only:
            prog.open_bar(sys.stderr)
        feed = tensorboard_feed.start(run_dir, env, tensorboard)
        if cfg.testbed.kind == "emulated":
            prog.phase = "testbed (namespaces, tc)"
            prog.show()
            from rog.experiment.emulated import EmulatedNetwork

            em = cfg.testbed.emulated
            net = EmulatedNetwork(cfg.testbed.workers, em["prefix"], cap_mbit=cfg.links.cap_mbit, shape=cfg.links.shape,
                                  rate_mbit=cfg.links.rate_mbit, slow_start_after_idle=slow_start_after_idle(em))
            net.open()
            ps_wrap = lambda argv: net.testbed.exec_argv("ps", argv)  # noqa: E731
        prog.phase = "parameter server starting"
        children.spawn("ps", ["--child", "ps", "--port", str(port)], wrap=ps_wrap)
        if serve_only:
            children.spawn("prepare", ["--child", "prepare"])
            port_file = run_dir / PS_PORT_FILE
            while not port_file.exists():
                if children.failed():
                    raise RuntimeError(children.failed())
                time.sleep(0.05)
            print(f"parameter server listening on 127.0.0.1:{port_file.read_text()} for {cfg.testbed.workers} worker(s)", flush=True)
        else:
            children.spawn("workers", ["--child", "workers"])
        while True:
            why = children.failed()
            if why:
                raise RuntimeError(why)
            if links is None and (run_dir / WORKERS_READY_FILE).exists():
                links = start_links(run_dir, net, schedules, t_start)
            if net is not None:
                net.check()
            if children.all_done():
                break
            prog.update()
            prog.show()  # tqdm redraws at most twice a second
            time.sleep(0.25 if links is not None else 0.02)
        prog.update()
        status, reason = "done", ""
    except (KeyboardInterrupt, Exception) as e:  # noqa: BLE001 - recorded in INCOMPLETE
        reason = incomplete_reason(e)
    finally:
        prog.update()
        prog.close()
        children.kill_all()
        if feed is not None:
            feed.stop()  # its last pass reads the logs to their end
        if net is not None:
            replay_stats = net.replay_stats()
            try:
                left = net.close()
            except Exception as e:  # noqa: BLE001 - reported, the run's results are still written
                left = [f"cleanup failed: {type(e).__name__}: {e}"]
    end_t_s, end_unix = time.monotonic() - t_start, time.time()
    if cfg.testbed.kind == "loopback" and schedules and links is not None:  # the fallback's replay logs
        from rog.experiment.emulated import write_planned_log
        from rog.experiment.tracking import replay_log_name

        for k, sched in schedules.items():
            for d in (("up", "down") if cfg.links.shape == "both" else ("up",)):
                write_planned_log(run_dir / replay_log_name(k, d), sched, links["t_s"], end_t_s, start_unix)
    summary = summarise(run_dir, cfg, end_t_s)
    summary.update(status=status, testbed=cfg.testbed.kind)
    if not serve_only:
        summary.update(finalise(run_dir, cfg))
    if left:
        summary["leftovers"] = left
        print(f"warning: the testbed {cfg.testbed.emulated['prefix']} left {left}", file=sys.stderr)
    mark(run_dir, status, reason, summary)
    write_run_manifest(run_dir, cfg, command or sys.argv, start_unix, end_unix, status, reason, left, replay_stats,
              None if links is None else links["t_s"])
    report_end(summary, status, reason, run_dir, json_out)
    return 0 if status == "done" and not left else 1

