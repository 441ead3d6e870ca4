"""TensorBoard scalars of a run, written as it goes under ``<result-dir>/<run-id>/tb/`` (``tensorboard --logdir
result`` follows a plan live and compares runs); ``run.py --no-tensorboard`` turns it off.

A view, not a record: the event logs stay the source of truth; this process tails them (as the progress
line does) and writes, with tensorboard's own event-file writer (no torch), one point per iteration (step = the iteration) of

* per worker ``w<k>/``: ``time/compute_s``, ``time/push_s``, ``time/pull_s``, ``time/stall_s`` and
  ``time/iteration_s`` (their sum: the iteration's time composition), ``bytes/pushed``, ``bytes/pulled``,
  ``staleness/max``, ``staleness/mean`` (where the system logs it) and ``link/planned_rate_mbit`` (the rate the
  replay schedule of the worker's link holds when its iteration ends, counted from ``links.ready``; trace and
  constant-rate runs; the rates ``tc`` applied, a fraction of a second later, are in ``replay-w<k>-up.csv``);
* per run ``run/``: ``eval_accuracy`` (worker 0's tests), ``global_loss`` and ``global_accuracy`` (the PS's
  global model, ``--global-eval-every-s``; step = the evaluation's index) and, once the checkpoints are
  tested (:mod:`rog.checkpoint_accuracy`), ``checkpoint_accuracy/w<k>``.

The launcher starts it as its own process (``python -m rog.experiment.tensorboard_feed RUN_DIR``, niced, so
the launcher stays torch-free; the feed does not import torch either) and ends it by closing its stdin: it then reads the logs to their end and exits.
"""

from __future__ import annotations

import bisect
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from rog.tb_scalars import TB_DIR, ScalarWriter, missing

from .progress import TIME_KINDS, Tail
from .rundir import GO_FILE

POLL_S = 1.0  # how often the feed reads the logs
STOP_WAIT_S = 30.0  # how long the launcher waits for the feed's last pass


class IterationScalars:
    """Turns one worker's event records into per-iteration scalars: ``(tag, value, iteration, t_s)`` tuples,
    emitted when the iteration's ``pull`` (its last record) arrives."""

    def __init__(self, worker: int, rate_at=None) -> None:
        """``rate_at(t_s)``: the worker link's replayed rate (Mbit/s) at event time ``t_s``, or None."""
        self.worker, self.rate_at = worker, rate_at
        self.sums = {k: 0.0 for k in TIME_KINDS}
        self.pushed = 0
        self.staleness: dict | None = None

    def add(self, rec: dict) -> list[tuple[str, float, int, float]]:
        kind = rec.get("kind")
        if kind in self.sums:
            self.sums[kind] += float(rec.get("duration_s", 0.0))
        if kind == "push":
            self.pushed += int(rec.get("bytes", 0))
        elif kind == "staleness":
            self.staleness = rec
        if kind != "pull":
            return []
        it, t = int(rec["iteration"]), float(rec["t_s"]) + float(rec.get("duration_s", 0.0))
        p = f"w{self.worker}/"
        out = [(f"{p}time/{k}_s", v, it, t) for k, v in self.sums.items()]
        out += [(f"{p}time/iteration_s", sum(self.sums.values()), it, t), (f"{p}bytes/pushed", float(self.pushed), it, t),
                (f"{p}bytes/pulled", float(rec.get("bytes", 0)), it, t)]
        if self.staleness is not None:
            out += [(f"{p}staleness/max", float(self.staleness["max"]), it, t),
                    (f"{p}staleness/mean", float(self.staleness["mean"]), it, t)]
        rate = self.rate_at(t) if self.rate_at is not None else None
        if rate is not None:
            out.append((f"{p}link/planned_rate_mbit", float(rate), it, t))
        self.sums = {k: 0.0 for k in TIME_KINDS}
        self.pushed, self.staleness = 0, None
        return out


def run_scalars(rec: dict, n_global: int) -> list[tuple[str, float, int, float]]:
    """Per-run scalars of one record: worker 0's evaluations, the PS's global model (``n_global``: its index)."""
    kind, t = rec.get("kind"), float(rec.get("t_s", 0.0))
    if kind == "eval" and not rec.get("flushed") and int(rec.get("worker", 0)) == 0:
        return [("run/eval_accuracy", float(rec["accuracy"]), int(rec["iteration"]), t)]
    if kind == "global_eval":
        return [("run/global_loss", float(rec["loss"]), n_global, t), ("run/global_accuracy", float(rec["accuracy"]), n_global, t)]
    return []


def rate_functions(run_dir: Path) -> dict:
    """Worker -> ``rate_at(t_s)`` (event clock) of its link: the replay schedule from ``links.ready``'s start
    (trace runs), the constant rate (``--rate-mbit``), or nothing (unshaped)."""
    import json

    from .links import link_schedules
    from .rundir import read_config

    cfg = read_config(run_dir)
    if cfg.links.trace is None:
        rate = cfg.links.rate_mbit
        return {} if rate is None else {k: (lambda t, r=float(rate): r) for k in range(cfg.testbed.workers)}
    try:
        start = float(json.loads((run_dir / GO_FILE).read_text())["t_s"])
    except (OSError, ValueError, KeyError):
        return {}

    def rate_of(sched):
        times, rates = [t for t, _ in sched.changes], [float(r) for _, r in sched.changes]
        return lambda t: rates[max(0, bisect.bisect_right(times, t - start) - 1)] if rates else None

    return {k: rate_of(s) for k, s in link_schedules(cfg).items()}


def feed(run_dir: Path, stop: threading.Event, poll_s: float = POLL_S) -> int:
    """Tail the run's event logs into ``tb/`` until ``stop`` is set, then read them to their end; returns
    the number of points written."""
    from .rundir import read_config

    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    n_workers, remote = cfg.testbed.workers, cfg.testbed.launcher == "fabric"  # fabric: links.ready is on the hosts
    tails = {k: Tail(run_dir / f"events-w{k}.jsonl") for k in range(n_workers)}
    ps = Tail(run_dir / "events-ps.jsonl")
    per: dict[int, IterationScalars] = {}
    origin: dict[int | str, float] = {}
    written, n_global = 0, 0
    rated: dict = {}  # worker -> rate_at, once links.ready is there (fabric: written by the launcher at the go)
    writer = ScalarWriter(run_dir / TB_DIR, flush_secs=5)
    try:
        while True:
            last = stop.is_set()
            if not per and (remote or last or (run_dir / GO_FILE).exists()):
                per = {k: IterationScalars(k) for k in range(n_workers)}
            if not rated and (run_dir / GO_FILE).exists():  # the link rates need the links' start
                rated = rate_functions(run_dir)
                for k, r in rated.items():
                    per[k].rate_at = r
                rated = rated or {"-": None}  # read once
            points = []
            for key, tail in [*tails.items(), ("ps", ps)]:
                if not per:
                    break
                for rec in tail.read():
                    if rec.get("kind") == "header":
                        origin[key] = float(rec.get("origin_unix_s", 0.0))
                        continue
                    if key != "ps":
                        points += [(key, *p) for p in per[key].add(rec)]
                    got = run_scalars(rec, n_global)
                    n_global += rec.get("kind") == "global_eval"
                    points += [(key, *p) for p in got]
            for key, tag, value, step, t in points:
                writer.add_scalar(tag, value, global_step=step, walltime=origin.get(key, time.time()) + t)
            written += len(points)
            if last:
                return written
            stop.wait(poll_s)
    finally:
        writer.close()


class Feed:
    """The launcher's handle on the feed process."""

    def __init__(self, run_dir: Path, env: dict) -> None:
        log = open(Path(run_dir) / "tb.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "rog.experiment.tensorboard_feed", str(run_dir)],
                                     stdin=subprocess.PIPE, stdout=log, stderr=log, env=env)
        log.close()

    def stop(self) -> None:
        """Close its stdin (the stop), wait for its last pass (at most :data:`STOP_WAIT_S`)."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=STOP_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def start(run_dir: Path, env: dict, enabled: bool) -> Feed | None:
    """The feed of a run (None with ``--no-tensorboard``, or with a warning line when a package is missing)."""
    if not enabled:
        return None
    why = missing()
    if why:
        print(f"warning: no TensorBoard scalars for this run: {why}; --no-tensorboard silences this",
              file=sys.stderr, flush=True)
        return None
    return Feed(run_dir, env)


def main(argv=None) -> int:
    """``python -m rog.experiment.tensorboard_feed RUN_DIR``: feed until stdin closes."""
    args = sys.argv[1:] if argv is None else argv
    try:
        os.nice(10)  # a view: it must not slow the run it watches
    except OSError:
        pass
    stop = threading.Event()

    def wait_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_eof, daemon=True).start()
    n = feed(Path(args[0]), stop)
    print(f"tensorboard: {n} points in {Path(args[0]) / TB_DIR}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
