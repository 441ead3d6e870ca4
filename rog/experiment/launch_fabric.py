"""The Fabric launcher (``--launcher fabric``): the run deployed with :mod:`rog.deploy` over SSH, to
the hosts file's devices (``--testbed hosts``) or to the emulated testbed's namespaces, one sshd
each (:class:`rog.experiment.emulated.EmulatedHosts`)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import sys
import time
from pathlib import Path

from .config import DEFAULT_PS_PORT, ROOT, RUN_MODULE
from . import tensorboard_feed
from .finalize import finalise, mark, report_end, summarise, write_run_manifest
from .progress import for_run as progress_of
from .rundir import CONFIG_FILE, GO_FILE, LAYOUT_FILE, PS_PORT_FILE, WORKER_READY_FILE, write_atomic, write_config
from .supervise import Children, Terminated, incomplete_reason, raise_on_termination, tail_text
from .run_config import RunConfig, slow_start_after_idle


def deploy_plan(cfg: RunConfig, hosts_file, result_dir: str, origin: float | None = None, extra_files=(),
                power: bool = True):
    """The rog.deploy plan of a Fabric run (pure data: nothing is connected, nothing written).

    Every host gets the run's ``config.yaml`` (and ``layout.json``, the model layout the PS needs, plus
    ``extra_files``: the pre-trained weights) in its run folder; the PS starts ``run.py --child ps`` on
    the hosts file's port, every worker ``run.py --child worker`` for its own worker id; both read
    everything else from ``config.yaml``, so new options flow through unchanged.  Replays use the
    run's per-worker offsets and schedules (as the local launcher) and start gated: held until every
    worker wrote ``worker.ready``, then released with the workers by ``links.ready``.  ``origin``: the
    run's clock origin when all hosts share this machine's clock (emulated testbed), else None.
    ``power``: start ``scripts/power_sampler.py`` on every host (real devices; on the emulated testbed
    every device's energy is the state model computed from its events afterwards, as with the local
    launcher, so samplers there would only cost CPU)."""
    from rog.deploy.plan import CodeBundle, RunSpec, build_plan

    run_dir = Path(result_dir) / cfg.output.run_id
    child = ("{python}", "-m", RUN_MODULE, "--run-dir", "{run_dir}") + (() if origin is None else ("--origin", repr(origin)))
    files = [(str(run_dir / CONFIG_FILE), CONFIG_FILE), (str(run_dir / LAYOUT_FILE), LAYOUT_FILE)]
    files += [(str(f), Path(f).name) for f in extra_files]
    spec = RunSpec(
        run_id=cfg.output.run_id,
        ps_argv=(*child, "--child", "ps", "--port", "{ps_port}"),
        worker_argv=(*child, "--child", "worker", "--worker-id", "{worker_id}", "--ps-address", "{ps_address}",
                     "--port", "{ps_port}"),
        files=tuple(files),
        trace=None if cfg.links.trace is None else cfg.links.trace["path"],
        replay_time_scale=cfg.links.time_scale, replay_rate_scale=cfg.links.rate_scale,
        replay_mode=cfg.links.replay_mode or "recorded", replay_seed=cfg.workload.seed,
        replay_offsets_s=cfg.links.worker_offsets_s, replay_seed_per_host=False, replay_origin_monotonic_s=origin,
        power=power, worker_ready_file=WORKER_READY_FILE, go_file=GO_FILE, ps_ready_file=PS_PORT_FILE,
        ps_port=(cfg.testbed.hosts or {}).get("port", DEFAULT_PS_PORT),
        env=_host_env(origin is not None),
    )
    return build_plan(hosts_file, spec, CodeBundle.scan(ROOT), run_dir)


def _host_env(emulated: bool) -> dict:
    """Environment of every remote process; on the emulated testbed (hosts = namespaces of this machine) also
    this process's ``PATH`` and ``LD_LIBRARY_PATH``, so ``tc_replay.py`` finds the same ``tc`` (e.g. an
    unpacked iproute2, scripts/run_gpu_emulated.py --iproute2-debs) where the login shell's PATH would not."""
    env = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if emulated:
        env.update({k: os.environ[k] for k in ("PATH", "LD_LIBRARY_PATH") if os.environ.get(k)})
    return env


def launch_fabric(cfg: RunConfig, run_dir: Path, progress: bool, command: list[str] | None, hosts_file,
                  json_out: bool = False, tensorboard: bool = True) -> int:
    """Run the experiment through :mod:`rog.deploy`: on --testbed hosts the hosts file's devices, on the
    emulated testbed one sshd per namespace (:class:`rog.experiment.emulated.EmulatedHosts`).  Same
    plan and runner for both: code sync, files, PS, held replays, workers, ready gate, go, wait with a
    live progress line from the remote event logs, stop, collect; then the same summary, finalise,
    manifest and DONE/INCOMPLETE as the local launcher."""
    from rog.deploy.fabric_runner import FabricRunner

    t_start, start_unix = time.monotonic(), time.time()
    raise_on_termination()  # a killed launcher still stops the hosts and marks INCOMPLETE
    emulated = cfg.testbed.kind == "emulated"
    status, reason = "incomplete", "not started"
    site = feed = prog = None
    left: list[str] = []
    go: dict = {}
    ssh_hosts: dict = {}
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("ROG_SECRET", None)
    local = Children(run_dir, env, t_start)

    def log_line(message: str) -> None:
        with open(run_dir / "deploy.log", "a", encoding="utf-8") as f:
            f.write(f"{time.monotonic() - t_start:9.3f} s  {message}\n")  # run-relative: where a slow step went

    try:
        log_line("start: TensorBoard feed, local preparation")
        feed = tensorboard_feed.start(run_dir, env, tensorboard)
        shipped = prepare_locally(cfg, run_dir, local)
        if emulated:
            from rog.experiment.emulated import EmulatedHosts, EmulatedNetwork

            net = EmulatedNetwork(cfg.testbed.workers, cfg.testbed.emulated["prefix"], cap_mbit=cfg.links.cap_mbit,
                                  shape=cfg.links.shape, rate_mbit=cfg.links.rate_mbit,
                                  slow_start_after_idle=slow_start_after_idle(cfg.testbed.emulated))
            site = EmulatedHosts(net, python=sys.executable)
            hosts_file = site.open(cfg.device.ps_profile, cfg.device.profile, "both" if cfg.links.shape == "both" else "egress",
                                   replay=cfg.links.trace is not None)
            ssh_hosts = site.ssh_info()
        plan = deploy_plan(cfg, hosts_file, str(run_dir.parent), origin=t_start if emulated else None,
                           extra_files=shipped, power=not emulated)
        ssh_hosts = {h.rank: {**ssh_hosts.get(h.rank, {}), "host": h.name, "target": h.target, "runtime": h.runtime,
                              "image": h.image, "interface": h.interface, "device_profile": h.device_profile}
                     for h in hosts_file.hosts}
        shown: dict = {}  # the progress line, once it exists

        def log(message: str) -> None:
            """A deployment step: into deploy.log, and as the bar's start-up phase (no line of its own)."""
            log_line(message)
            if shown.get("prog") is not None:
                shown["prog"].phase = message.replace("deploy: ", "deploying: ", 1)[:70]
                shown["prog"].show()

        with FabricRunner(plan, secret=secrets.token_hex(32), log=log, poll_s=1.0) as runner:
            def reader(host: str, rank: str):
                def read(offset: int) -> bytes:
                    try:
                        return runner.read_remote(host, f"events-{rank}.jsonl", offset)
                    except Exception:  # noqa: BLE001 - progress only; the status poll reports a lost host
                        return b""
                return read

            prog = progress_of(cfg, run_dir, readers={h.rank: reader(h.name, h.rank) for h in hosts_file.hosts})
            prog.phase = "deploying (code, files, parameter server)"
            if progress:
                prog.open_bar(sys.stderr)
                shown["prog"] = prog

            def on_poll(states: dict) -> None:
                prog.update()
                prog.show()  # tqdm redraws at most twice a second

            def on_phase(phase: str) -> None:
                prog.phase = {"go": "warm-up (first iteration)"}.get(phase, phase)
                if phase == "go":
                    go["t_s"] = time.monotonic() - t_start
                    if emulated and not (run_dir / GO_FILE).exists():  # the event clock here: the TensorBoard feed's link rates
                        write_atomic(run_dir / GO_FILE, json.dumps({"t_s": go["t_s"], "monotonic_s": time.monotonic()}))

            outcome = runner.run(on_poll=on_poll, on_phase=on_phase)
        if outcome.status == "done":
            status, reason = "done", ""
        elif outcome.status == "interrupted":
            reason = "interrupted (Ctrl-C)"
        elif outcome.reason.startswith(f"{Terminated.__name__}: "):
            reason = f"terminated ({outcome.reason.split(': ', 1)[1]})"
        else:
            reason = outcome.reason or "the deployment failed"
    except (KeyboardInterrupt, Exception) as e:  # noqa: BLE001 - recorded in INCOMPLETE
        reason = incomplete_reason(e)
    finally:
        # a second Ctrl-C or SIGTERM must not cut the teardown short (namespaces, sshd, keys would be left)
        held = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            log_line(f"teardown ({reason or status})")
            if prog is not None:
                prog.close()
            local.kill_all()
            if feed is not None:
                feed.stop()  # its last pass reads the mirrored logs to their end
                log_line("teardown: TensorBoard feed stopped")
            if site is not None:
                try:
                    left = site.close()
                except Exception as e:  # noqa: BLE001 - reported, the run's results are still written
                    left = [f"cleanup failed: {type(e).__name__}: {e}"]
                log_line("teardown: testbed closed")
        finally:
            for sig, handler in held.items():
                signal.signal(sig, handler)
    fabric_collected(run_dir, cfg)
    end_t_s, end_unix = time.monotonic() - t_start, time.time()
    if emulated:
        hosts = {rank: {**d, **ssh_hosts.get(rank, {})} for rank, d in cfg.testbed.emulated["hosts"].items()}
    else:
        hosts = ssh_hosts
    summary = summarise(run_dir, cfg, end_t_s)
    summary.update(status=status, testbed=cfg.testbed.kind, launcher="fabric")
    summary.update(finalise(run_dir, cfg))
    if left:
        summary["leftovers"] = left
        print(f"warning: the run left {left}", file=sys.stderr)
    mark(run_dir, status, reason, summary)
    write_run_manifest(run_dir, cfg, command or sys.argv, start_unix, end_unix, status, reason, left, {}, go.get("t_s"),
              hosts=hosts)
    report_end(summary, status, reason, run_dir, json_out)
    return 0 if status == "done" and not left else 1


def prepare_locally(cfg: RunConfig, run_dir: Path, children: Children) -> list[Path]:
    """Before deploying: ``layout.json`` (the PS's model layout) and the pre-trained weights to ship
    to every host (the quick workload's cache entry for this seed); records in ``config.yaml`` whether
    weights were shipped.  ``run.py --child prepare`` here (torch: seconds of CPU) produces both, unless
    ``<cache>/fabric-prepared.json`` already holds them for this model, seed and code (a hash of the
    workload, model, row and compression sources: a changed recipe or model re-prepares)."""
    import hashlib

    cache = Path(cfg.workload.cache_dir)
    cache = cache if cache.is_absolute() else ROOT / cache
    deps = sorted((ROOT / "rog" / "models").glob("*.py")) + sorted((ROOT / "rog" / "workloads").glob("*.py")) + [
        ROOT / "rog" / "rows.py"]
    h = hashlib.sha256()
    for f in deps:
        h.update(f.read_bytes())
    key = f"{cfg.workload.name}/{cfg.workload.model}/seed{cfg.workload.seed}/{h.hexdigest()[:16]}"
    index_path = cache / "fabric-prepared.json"
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        index = {}
    hit = index.get(key)
    if hit and all((cache / n).is_file() for n in hit["weights"]):
        write_atomic(run_dir / LAYOUT_FILE, hit["layout"])
        shipped = [cache / n for n in hit["weights"]]
    else:
        proc = children.spawn("prepare", ["--child", "prepare"])
        while proc.poll() is None:
            time.sleep(0.05)
        if proc.returncode != 0:
            raise RuntimeError(f"preparing the model failed: {tail_text(run_dir / 'prepare.log')}")
        best = None
        for pt in cache.glob(f"pretrained-{cfg.workload.model}-*.pt"):
            try:
                meta = json.loads(pt.with_suffix(".json").read_text())
            except (OSError, ValueError):
                continue
            if meta.get("model") == cfg.workload.model and meta.get("seed") == cfg.workload.seed:
                if best is None or pt.stat().st_mtime > best.stat().st_mtime:
                    best = pt
        shipped = [best, best.with_suffix(".json")] if best is not None else []
        if shipped:
            try:
                index[key] = {"layout": (run_dir / LAYOUT_FILE).read_text(), "weights": [q.name for q in shipped]}
                write_atomic(index_path, json.dumps(index) + "\n")
            except OSError:
                pass
    write_config(run_dir, cfg.replace(deploy={"weights_in_run_dir": bool(shipped), "weights": [q.name for q in shipped]}))
    return shipped


def fabric_collected(run_dir: Path, cfg: RunConfig) -> None:
    """After collecting: each worker's replay log (``replay-w<k>.csv``, both directions of its link changed
    together) under the names the analysis reads (``replay-w<k>-up.csv``, ``-down.csv``), and every
    host's checkpoints in ``<run>/checkpoints/``.  The hosts' own folders stay in ``hosts/``."""
    from rog.experiment.tracking import replay_log_name

    for k in range(cfg.testbed.workers):
        src = run_dir / f"replay-w{k}.csv"
        if src.is_file():
            for d in (("up", "down") if cfg.links.shape == "both" else ("up",)):
                shutil.copyfile(src, run_dir / replay_log_name(k, d))
            src.unlink()
    for ck in sorted((run_dir / "hosts").glob("*/checkpoints")):
        shutil.copytree(ck, run_dir / "checkpoints", dirs_exist_ok=True)

