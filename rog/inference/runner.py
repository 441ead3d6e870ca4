"""The launcher of live inference runs: profile, plan, then robot and server on a replayed netns link.

:func:`prepare` captures the model, profiles its units here and builds every planner's plan table.
:class:`LiveSession` creates a one-link testbed (robot = worker 1, server = the PS namespace;
:class:`rog.experiment.emulated.EmulatedNetwork`, prefix ``rgi`` + random hex), turns off TCP's
slow start after idle in both namespaces (one connection carries every inference), starts the
server and the robot (:mod:`rog.inference.live`) inside their namespaces and drives them:
:meth:`LiveSession.run_trace` replays a trace from its start on both directions of the link (the
training's replay machinery, :mod:`rog.testbed.replay`) while the robot runs one planner;
:meth:`LiveSession.run_fixed` holds the link at a fixed rate and runs one fixed plan (Fig. 1).
:meth:`LiveSession.close` (always, also on Ctrl-C or SIGTERM) stops the processes and replays,
destroys the namespaces and reports anything left.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rog.errors import SignalExit
from rog.inference.costmodel import DeviceTimes, cut_plan, flows, simulate, with_overhead
from rog.inference.graph import Graph, capture
from rog.inference.models import INPUT_SHAPE, MODELS, build_model
from rog.inference.loss import MultiPlan, multi_flows, simulate_multi_sim
from rog.inference.planners import KNOWN_PLANNERS, PLANNERS, Candidates, TableRow, check_grid, plan_table
from rog.inference.profiler import profile
from rog.paths import repo_root

__all__ = ["Prepared", "prepare", "resolve_server_device", "SERVER_DEVICES", "LiveSession", "predict", "ROBOT_FACTOR", "SERVER_FACTOR", "PORT"]

# The emulated devices (stated in every result): the robot computes every unit in ROBOT_FACTOR x the
# time profiled on one thread of this machine, the server in SERVER_FACTOR x; so the server is
# ROBOT_FACTOR / SERVER_FACTOR = 10x faster than the robot (the notes put a Jetson Xavier NX at
# 10-20x slower than the paper's 2080 Ti).  The server's 3x leaves it headroom against other load
# on a shared 2-core machine, so that its paced times hold.
ROBOT_FACTOR = 30.0
SERVER_FACTOR = 3.0
PORT = 47622
SERVER_DEVICES = ("cpu", "cuda")
# Both emulated devices (and the launcher's replay thread) run with real-time priority (SCHED_FIFO at
# this level): their paced compute is short bursts (the robot's real compute is 1/ROBOT_FACTOR of its
# emulated time), and other load on a shared machine would otherwise stretch those bursts past their
# emulated times.  Their CPU use stays bounded: paced, and the kernel's real-time throttling
# (sched_rt_runtime_us) keeps 5 % of every second for everything else.
RT_PRIORITY = 10
READY_TIMEOUT_S = 120.0


@dataclass
class Prepared:
    """A model ready to run: its graph, the profile, candidate plans and plan tables."""

    model: str
    graph: Graph
    times: DeviceTimes
    cands: Candidates
    tables: dict[str, list[TableRow]]
    grid_mbit: tuple[float, ...]


def resolve_server_device(requested: str) -> tuple[str, str | None]:
    """``(device, note)``: ``cuda`` when asked for and available; otherwise ``cpu`` (the paced CPU server),
    with a one-line note when CUDA was asked for but is missing."""
    if requested not in SERVER_DEVICES:
        raise ValueError(f"--server-device {requested!r} is unknown: choose cpu or cuda")
    if requested == "cuda":
        import torch

        if torch.cuda.is_available():
            return "cuda", None
        return "cpu", ("--server-device cuda: no CUDA device here (torch.cuda.is_available() is False); "
                       f"the server runs on this CPU, paced to {SERVER_FACTOR:g} x its profile")
    return "cpu", None


def prepare(model: str, planners: Sequence[str] = PLANNERS, grid_mbit: Sequence[float] = (),
            robot_factor: float = ROBOT_FACTOR, server_factor: float = SERVER_FACTOR, seed: int = 0,
            repeats: int = 7, split_costs: str = "measured", server_device: str = "cpu",
            times: DeviceTimes | None = None) -> Prepared:
    """Capture, profile and plan ``model`` (``grid_mbit`` checked: not empty, every level > 0).
    ``split_costs``: ``measured`` (per-unit curves over row shares) or ``linear`` (the ablation);
    ``server_device``: ``cpu`` (paced) or ``cuda`` (profiled on the GPU, unpaced; must be available);
    ``times``: a profile made before (:func:`rog.inference.profiler.load_times`), used instead of profiling."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose one of {', '.join(MODELS)}")
    bad = [p for p in planners if p not in KNOWN_PLANNERS]
    if bad:
        raise ValueError(f"unknown planner {bad[0]!r}; choose from {', '.join(KNOWN_PLANNERS)}")
    grid = check_grid(grid_mbit)
    graph = capture(build_model(model, seed), INPUT_SHAPE)
    if server_device == "cuda":
        from rog.inference.live import exact_cuda

        exact_cuda()
    if times is None:
        times = profile(graph, robot_factor, server_factor, repeats=repeats, split_costs=split_costs,
                        server_device=server_device)
    elif len(times.cpu_s) != len(graph):
        raise ValueError(f"the profile has {len(times.cpu_s)} units, {model} has {len(graph)}: profile this model")
    cands = Candidates(graph)
    tables = {p: plan_table(p, cands, times, grid) for p in planners}
    return Prepared(model, graph, times, cands, tables, grid)


def predict(prep: Prepared, plan, rate_mbit: float, overhead_s: float | None = None):
    """The cost model's inference of ``plan`` (one-segment or per-layer) at ``rate_mbit`` (``overhead_s``:
    the measured fixed cost of one message, replacing the profile's)."""
    times = prep.times if overhead_s is None else with_overhead(prep.times, overhead_s)
    if isinstance(plan, MultiPlan):
        if plan.bands > 1:
            from rog.inference.stream import simulate_stream_sim

            return simulate_stream_sim(prep.graph, times, plan, rate_mbit)
        return simulate_multi_sim(prep.graph, times, multi_flows(prep.graph, plan), rate_mbit)
    return simulate(prep.graph, times, flows(prep.graph, plan), rate_mbit)


def rt_prefix() -> list[str]:
    """``chrt -f RT_PRIORITY`` when real-time priority can be had here, else nothing (said once on stderr;
    ``rt_priority`` in the result then reads None)."""
    global RT_PRIORITY
    try:
        ok = RT_PRIORITY is not None and subprocess.run(["chrt", "-f", str(RT_PRIORITY), "true"],
                                                        capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok and RT_PRIORITY is not None:
        print("run_inference.py: chrt -f (real-time priority) is not allowed here: the robot and server run at "
              "normal priority", file=sys.stderr)
        RT_PRIORITY = None
    return ["chrt", "-f", str(RT_PRIORITY)] if ok else []


def _sysctl_in(ns: str, key: str, value: str) -> None:
    from rog.testbed.tc import run_argv

    run_argv(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}"], check=False)


class LiveSession:
    """Robot and server processes on a one-link testbed (see the module docstring)."""

    def __init__(self, prep: Prepared, run_dir: Path, trace: str | None = None, estimate: str = "passive",
                 seed: int = 0, trace_duration_s: float = 600.0, tcp_cc: str | None = None,
                 period_s: float = 0.0) -> None:
        from rog.experiment.emulated import EmulatedNetwork

        self.prep, self.run_dir = prep, Path(run_dir)
        self.trace, self.estimate, self.seed, self.tcp_cc = trace, estimate, seed, tcp_cc
        self.period_s = float(period_s)
        self.replay = {"loop": True, "duration_s": float(trace_duration_s)}
        self.net = EmulatedNetwork(1, prefix="rgi" + secrets.token_hex(3)[:5], shape="both")
        self.server = self.robot = None
        self.overhead_s = None
        self.reference = None
        self._handle = None
        self._old = {}

    # ---- lifecycle
    def __enter__(self) -> "LiveSession":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                self._old[sig] = signal.signal(sig, _raise_exit)
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        left = self.close()
        for sig, h in self._old.items():
            signal.signal(sig, h)
        if left:
            print(f"warning: left after the run: {', '.join(left)}", file=sys.stderr)

    def _config(self, role: str) -> Path:
        p = self.prep
        cfg = {
            "model": p.model, "seed": self.seed, "port": PORT, "server": self.net.testbed.ps_address(1),
            "times": p.times.to_dict(),
            "tables": {name: [r.to_dict() for r in rows] for name, rows in p.tables.items()},
            "trace": str(self.trace) if self.trace else None, "replay": self.replay, "estimate": self.estimate,
            "records": str(self.run_dir / "records.jsonl"), "tcp_cc": self.tcp_cc, "period_s": self.period_s,
        }
        path = self.run_dir / f"config-{role}.json"
        path.write_text(json.dumps(cfg))
        return path

    def open(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.net.open()
        tb = self.net.testbed
        for ns in tb.namespaces:
            _sysctl_in(ns, "net.ipv4.tcp_slow_start_after_idle", "0")
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join([str(repo_root())] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        py = rt_prefix() + [sys.executable, "-m", "rog.inference.live"]
        try:  # the replay thread (started from this thread later) inherits the policy; restored in close()
            self._policy = (os.sched_getscheduler(0), os.sched_getparam(0))
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
        except (OSError, AttributeError, TypeError):
            self._policy = None
        self.server = subprocess.Popen(tb.exec_argv(tb.netns_of("ps"), py + ["--role", "server", "--config",
                                       str(self._config("server"))]), stdout=subprocess.PIPE, text=True, env=env)
        _expect(self.server, "READY")
        self.robot = subprocess.Popen(tb.exec_argv(tb.netns_of(1), py + ["--role", "robot", "--config",
                                      str(self._config("robot"))]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, env=env)
        words = _expect(self.robot, "READY").split()
        self.overhead_s, self.reference = float(words[1]), float(words[2])

    def close(self) -> list[str]:
        """Stop robot, server and replays, destroy the testbed; returns what is left (should be [])."""
        if getattr(self, "_policy", None) is not None:
            os.sched_setscheduler(0, *self._policy)
            self._policy = None
        for p in (self.robot, self.server):
            if p is None or p.poll() is not None:
                continue
            try:
                if p is self.robot:
                    p.stdin.write("QUIT\n")
                    p.stdin.flush()
                p.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                p.kill()
                p.wait()
        return self.net.close()

    # ---- runs
    def _go(self, planner: str, origin: float, duration_s: float, max_n: int) -> int:
        self.robot.stdin.write(f"GO {planner} {origin:.6f} {duration_s:g} {max_n}\n")
        self.robot.stdin.flush()
        return int(_expect(self.robot, "DONE", timeout_s=duration_s + 300).split()[1])

    def run_trace(self, planner: str, duration_s: float, max_n: int = 10 ** 9) -> int:
        """Replay the trace from its start on both directions while the robot runs ``planner``."""
        tb = self.net.testbed
        tb.stop_replays()
        from rog.testbed.replay import ReplayOptions, build_schedule
        from rog.traces import load_trace

        sched = build_schedule(load_trace(self.trace), ReplayOptions(**self.replay))
        h = tb.start_replay(1, "both", sched, self.run_dir / f"replay-{planner}.csv")
        if not h.wait_first(10.0):
            raise RuntimeError("trace replay applied no rate within 10 s")
        n = self._go(planner, h.replayer.stats.start_monotonic, duration_s, max_n)
        tb.stop_replays()
        if h.error is not None:
            raise RuntimeError(f"trace replay failed: {h.error}")
        return n

    def run_fixed(self, plan, rate_mbit: float, n: int) -> int:
        """Hold both directions at ``rate_mbit`` and run ``n`` inferences of ``plan`` (a :class:`Plan` or
        a per-layer :class:`rog.inference.loss.MultiPlan`)."""
        self.net.testbed.stop_replays()
        self.net.testbed.set_rate(1, "both", rate_mbit)
        if isinstance(plan, MultiPlan):
            d = {k: v for k, v in plan.to_dict().items() if k != "label"}
            spec = "mplan:" + json.dumps(d, separators=(",", ":"))
        else:
            spec = f"plan:{plan.i},{plan.j},{plan.x:g},{plan.merge}"
        return self._go(spec, time.monotonic(), 1e9, n)


def _raise_exit(signum, frame):
    raise SignalExit(signum)


def _expect(p: subprocess.Popen, word: str, timeout_s: float = READY_TIMEOUT_S) -> str:
    box: list[str] = []

    def read() -> None:
        while True:
            line = p.stdout.readline()
            if not line or line.startswith(word):
                box.append(line)
                return

    th = threading.Thread(target=read, daemon=True)
    th.start()
    th.join(timeout_s)
    if not box or not box[0].startswith(word):
        raise RuntimeError(f"{' '.join(p.args[-4:])}: no {word} within {timeout_s:g} s (exit {p.poll()})")
    return box[0].strip()


def fig1_cuts(graph: Graph) -> list[int]:
    """Cut points of the Fig. 1 sweep: every boundary not directly before an element-wise unit (after a
    layer's activation, pooling, block or linear), plus 0 (all-offload) and ``L`` (local)."""
    from rog.inference.graph import Elementwise

    n = len(graph)
    return [c for c in range(n + 1) if c in (0, n) or not isinstance(graph.units[c].node, Elementwise)]


def read_records(path: Path) -> list[dict]:
    """The robot's per-inference records."""
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


__all__ += ["fig1_cuts", "read_records", "cut_plan"]
