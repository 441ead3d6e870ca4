"""Runtime fault scenarios over real processes: a link outage, a worker killed
mid-push and restarted, a worker evicted and rejoining late, a parameter-server crash and restart.

Each scenario starts a parameter server and W workers as separate processes
(:mod:`benchmarks.faults.runtime_node`: the real :class:`~rog.runtime.ParameterServer` and
:class:`~rog.runtime.WorkerEngine` over authenticated loopback TCP, a small numpy model so processes
start fast), injects its fault, waits for the run to finish and checks conservation: every worker's
final parameters against ``w0 - sum(committed pushes) / W``, where the committed sums come from the
workers' own files (never from the PS), within the float32 rounding bound of
:mod:`.conservation` (derived from the number of updates).  ``rows_lost`` counts the rows where
some worker differs from that reference beyond it.  With compression on, the PS's pending
residual is part of the reference and the error-feedback residual is reported relative to the
gradient norm.

The outage is a token bucket at 0 Mbit/s on both ends of one worker's link (no ``tc`` here).
Lengths: the full outage lasts 60 s with a compute time of 0.28 s per iteration (the quick-cpu
profile); ``quick`` scales both by 0.05 (3 s, 0.014 s -> 0.05 s floor) and runs fewer iterations.
Every process a scenario starts is killed (by its pid) when the scenario ends.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np

from rog.runtime.events import EventLogError, read_events
from .conservation import rows_off, tolerance
from .registry import ScenarioContext, result
from .runtime_node import initial_params, partition

OUTAGE_FULL_S = 60.0  # a worker at 0 Mbit/s for a minute
COMPUTE_FULL_S = 0.28  # quick-cpu profile: compute time per iteration
QUICK_SCALE = 0.05  # quick versions: times x this
_ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """The processes of one scenario (started with ``ctx.python``; all killed by pid in :meth:`close`)."""

    def __init__(self, ctx: ScenarioContext, name: str, cfg: dict) -> None:
        self.d = Path(ctx.work_dir) / name
        self.d.mkdir(parents=True, exist_ok=True)
        self.python = ctx.python
        self.origin = time.monotonic()
        self.cfg = dict(cfg, port=_free_port(), origin_monotonic_s=self.origin, seed=ctx.seed)
        (self.d / "scenario.json").write_text(json.dumps(self.cfg, indent=1) + "\n")
        self.env = dict(os.environ, ROG_SECRET=secrets.token_hex(32), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
        self.env["PYTHONPATH"] = os.pathsep.join([str(_ROOT)] + ([self.env["PYTHONPATH"]] if self.env.get("PYTHONPATH") else []))
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: list = []
        self.marks: dict[str, float] = {}  # named moments, seconds since the origin

    def now_s(self) -> float:
        return time.monotonic() - self.origin

    def spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.d / f"{name}.log", "ab")
        self._logs.append(log)
        proc = subprocess.Popen([self.python, "-m", "benchmarks.faults.runtime_node", *args, "--dir", str(self.d)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                                cwd=str(_ROOT))
        self.procs[name] = proc
        return proc

    def ps(self, resume: bool = False) -> subprocess.Popen:
        (self.d / "ps.ready").unlink(missing_ok=True)
        proc = self.spawn("ps", "ps", *(["--resume"] if resume else []))
        self.wait(lambda: (self.d / "ps.ready").exists(), 60, "the parameter server to listen", proc)
        return proc

    def worker(self, k: int, *, rejoin: bool = False, kill_at: tuple[int, int] | None = None,
               name: str | None = None) -> subprocess.Popen:
        args = ["worker", "--worker", str(k)]
        if rejoin:
            args.append("--rejoin")
        if kill_at is not None:
            args += ["--kill-at", f"{kill_at[0]}:{kill_at[1]}"]
        return self.spawn(name or f"w{k}", *args)

    def wait(self, cond, timeout_s: float, what: str, proc: subprocess.Popen | None = None) -> None:
        end = time.monotonic() + timeout_s
        while not cond():
            if proc is not None and proc.poll() not in (None, 0):
                raise RuntimeError(f"waiting for {what}: process exited with code {proc.returncode}: {self.tail(proc)}")
            if time.monotonic() > end:
                raise TimeoutError(f"waited {timeout_s} s for {what}")
            time.sleep(0.02)

    def tail(self, proc: subprocess.Popen) -> str:
        for name, p in self.procs.items():
            if p is proc:
                try:
                    return " | ".join((self.d / f"{name}.log").read_text(errors="replace").strip().splitlines()[-4:])
                except OSError:
                    return "(no log)"
        return ""

    def kill(self, name: str) -> None:
        """SIGKILL one of this scenario's processes and reap it."""
        proc = self.procs[name]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    def finish(self, names, timeout_s: float) -> None:
        """Wait for these processes to exit 0."""
        end = time.monotonic() + timeout_s
        for name in names:
            proc = self.procs[name]
            try:
                proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"{name} still running after {timeout_s} s (deadlock?): {self.tail(proc)}") from None
            if proc.returncode != 0:
                raise RuntimeError(f"{name} exited with code {proc.returncode}: {self.tail(proc)}")

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        for log in self._logs:
            log.close()

    # ------------------------------------------------------------------ reading results
    def events(self, rank: str) -> list[dict]:
        """Records of ``ps`` or ``w<k>`` (all incarnations of a worker), in file order."""
        files = [self.d / "events-ps.jsonl"] if rank == "ps" else sorted(self.d.glob(f"events-{rank}-i*.jsonl"))
        out = []
        for f in files:
            if f.exists():
                try:
                    out += read_events(f, allow_partial_last_line=True)[1]
                except EventLogError:
                    pass
        return out

    def iteration(self, k: int) -> int:
        """Iterations worker ``k`` completed (its newest pull record)."""
        return max((r["iteration"] for r in self.events(f"w{k}") if r["kind"] == "pull"), default=0)

    def faults(self, event: str) -> list[dict]:
        return [r for r in self.events("ps") if r["kind"] == "fault" and r["event"] == event]

    def ps_noticed(self, worker: int, t_cut_s: float, problems: list[str]) -> float | None:
        """Seconds from a cut of ``worker``'s link (the scenario's only one) to the PS's first ``worker_lost``
        record of it (by the link's own thread or the worker's rejoin, whichever saw it first; negative when the
        PS saw the break before the scenario's poll did); no record is a problem (the fault was lost)."""
        lost = [r for r in self.faults("worker_lost") if r["worker"] == worker]
        if not lost:
            problems.append(f"the PS recorded no loss of worker {worker}'s cut link")
        return (lost[0]["t_s"] - t_cut_s) if lost else None


def conservation(cl: Cluster) -> dict:
    """Final parameters of every worker against the reference from the workers' committed sums."""
    part, W = partition(), cl.cfg["workers"]
    w0 = initial_params(cl.cfg["seed"]).astype(np.float64)
    committed = sum((np.load(f).astype(np.float64) for f in sorted(cl.d.glob("committed-w*-i*.npy"))),
                    np.zeros(part.n_elements))
    reference = w0 - committed / W
    pending = np.load(cl.d / "pending.npy").astype(np.float64)
    compressed = cl.cfg["codec"] != "none"
    magnitude = np.abs(w0) + sum((np.load(f) for f in sorted(cl.d.glob("magnitude-w*-i*.npy"))),
                                 np.zeros(part.n_elements)) / W
    incarnations = len(list(cl.d.glob("committed-w*-i*.npy")))  # every incarnation runs at most all iterations
    n_updates = incarnations * int(cl.cfg["iterations"])
    scale = float(np.abs(reference).max())
    lost = np.zeros(part.n_rows, dtype=bool)
    max_rel, worst = 0.0, 0.0
    for k in range(W):
        final = np.load(cl.d / f"final-w{k}.npy").astype(np.float64)
        expect = reference + (pending[k] if compressed else 0.0)  # 1-bit: the PS still holds its residual
        bound = tolerance(n_updates, magnitude + (np.abs(pending[k]) if compressed else 0.0))
        rows, ratio = rows_off(final, expect, bound, part.row_start)
        lost[rows] = True
        worst = max(worst, ratio)
        max_rel = max(max_rel, float(np.abs(final - expect).max()) / scale)
    out = dict(rows_lost=int(lost.sum()), rows=int(part.n_rows), max_rel_error=max_rel, max_error_over_bound=worst,
               max_abs_pending_after_flush=float(np.abs(pending).max()))
    if compressed:
        res = [np.linalg.norm(np.load(cl.d / f"residual-w{k}.npy")) / max(np.linalg.norm(np.load(cl.d / f"grad-w{k}.npy")), 1e-30)
               for k in range(W)]
        out["final_residual_over_grad_norm_max"] = float(max(res))
        ratios = [np.loadtxt(f, delimiter=",", ndmin=2) for f in sorted(cl.d.glob("residual-w*-i*.csv"))]
        r = np.concatenate([x[:, 1] / np.maximum(x[:, 2], 1e-30) for x in ratios if x.size])
        q = max(1, r.size // 4)
        out["residual_over_grad_norm_during_run"] = dict(max=float(r.max()), mean_second_quarter=float(r[q:2 * q].mean()),
                                                         mean_last_quarter=float(r[-q:].mean()))
        out["ps_residual_over_grad_norm_max"] = float(max(
            np.linalg.norm(pending[k]) / max(np.linalg.norm(np.load(cl.d / f"grad-w{k}.npy")), 1e-30) for k in range(W)))
    return out


def _base(ctx: ScenarioContext, **over) -> dict:
    q = ctx.quick
    cfg = dict(workers=3, iterations=40 if q else 150, policy="ROG", threshold=2, codec="none",
               compute_s=max(0.05, COMPUTE_FULL_S * QUICK_SCALE) if q else COMPUTE_FULL_S, rate_mbit=20.0,
               evict_after_s=60.0, ps_checkpoint_every_s=None, io_timeout_s=60.0, reconnect_timeout_s=180.0,
               wait_timeout_s=600.0, chunk_bytes=512, lr=0.05,
               burst_bytes=256)  # token-bucket burst: small, so an outage at 0 Mbit/s lets (almost) nothing through
    cfg.update(over)
    return cfg


def _run(name: str, ctx: ScenarioContext, cfg: dict, body) -> dict:
    cl = Cluster(ctx, name, cfg)
    try:
        details = body(cl)
        cons = conservation(cl)
        details.update(cons)
        problems = details.pop("problems", [])
        if cons["rows_lost"]:
            problems.append(f"{cons['rows_lost']} rows differ from the reference (max relative error {cons['max_rel_error']:.3g})")
        details["folder"] = str(cl.d)
        (cl.d / "result.json").write_text(json.dumps(details, indent=1) + "\n")
        return result(name, not problems, details, rows_lost=cons["rows_lost"], error="; ".join(problems) or None)
    except Exception as e:  # noqa: BLE001 - a failed scenario, with what was measured so far
        return result(name, False, {"folder": str(cl.d), "marks": cl.marks}, error=f"{type(e).__name__}: {e}")
    finally:
        cl.close()


# ----------------------------------------------------------------------------- scenarios
def outage(ctx: ScenarioContext, compression: str = "none", name: str = "runtime_outage") -> dict:
    """Worker 1's link at 0 Mbit/s (both directions) mid-run: the others run until the staleness
    threshold and wait, nothing deadlocks, worker 1 catches up, no row is lost."""
    duration_s = OUTAGE_FULL_S * (QUICK_SCALE if ctx.quick else 1.0)
    cfg = _base(ctx, codec=compression, outage=dict(worker=1, duration_s=duration_s))
    s = cfg["threshold"]

    def body(cl: Cluster) -> dict:
        cl.ps()
        for k in range(cfg["workers"]):
            cl.worker(k)
        # cut worker 1 at a moment it is level with (or ahead of) one of the others, so some worker has room under
        # the bound and the no-deadlock rule below is exercised; past a third of the run, cut it wherever it is
        late = max(6, cfg["iterations"] // 3)

        def ready() -> bool:
            it1 = cl.iteration(1)
            return it1 >= 5 and (it1 >= late or it1 >= min(cl.iteration(0), cl.iteration(2)))

        cl.wait(ready, 120, "worker 1 to complete 5 iterations, level with another worker", cl.procs["w1"])
        start = time.monotonic() + 0.05
        (cl.d / "outage.start").write_text(repr(start))
        t0, t1 = start - cl.origin, start - cl.origin + duration_s
        cl.finish(["w0", "w1", "w2", "ps"], duration_s + 600)
        ev = {k: cl.events(f"w{k}") for k in range(cfg["workers"])}

        def done_by(k, t):  # iterations worker k completed by event time t
            return max((r["iteration"] for r in ev[k] if r["kind"] == "pull" and r["t_s"] + r["duration_s"] <= t), default=0)

        during = {k: done_by(k, t1) - done_by(k, t0) for k in range(cfg["workers"])}
        w1_at_end = done_by(1, t1)
        others_ahead = max(done_by(k, t1) for k in (0, 2)) - w1_at_end
        after = [r["t_s"] + r["duration_s"] for r in ev[1] if r["kind"] == "pull" and r["t_s"] + r["duration_s"] > t1]
        catch_up_s = (min(after) - t1) if after else None
        stall = max((r["duration_s"] for k in (0, 2) for r in ev[k] if r["kind"] == "stall" and r["reason"] == "gate"
                     and t0 <= r["t_s"] <= t1), default=0.0)
        reconnects = sum(1 for k in ev for r in ev[k] if r["kind"] == "fault" and r["event"] == "reconnected")
        problems = []
        links_lost = [r for r in ev[1] if r["kind"] == "fault" and r["event"] == "link_lost"]
        # a link at 0 Mbit/s may outlive the outage (TCP waits); where worker 1's link broke, the PS records it once
        ps_noticed_after_s = cl.ps_noticed(1, t0, problems) if links_lost else None
        if during[1] > 1:
            problems.append(f"the cut worker completed {during[1]} iterations during its outage")
        # the team must not deadlock: some worker that had room under the bound when the link went down moves
        # on.  Not every one: a worker already ahead of the cut one may wait the whole outage on ROG's row gate
        # (both failures seen had the worker 0 iterations ahead progress and the one 1 ahead wait).  So the rule is
        # asked of the workers level with (or behind) the cut one when the link went down; when the others had
        # both moved one ahead by then (the cut starts 0.05 s after the level moment, longer on a loaded machine:
        # {0: 1, 2: 1} and nobody moving was seen in CI under load) it is not exercised and says so
        ahead_at_start = {k: done_by(k, t0) - done_by(1, t0) for k in (0, 2)}
        level = [k for k in (0, 2) if ahead_at_start[k] <= 0]
        if level and max(during[k] for k in level) < 1:
            problems.append(f"no worker level with the cut one made progress during the outage ({during}, "
                            f"ahead of the cut worker at its start {ahead_at_start}, threshold {s})")
        if others_ahead > s + 1:
            problems.append(f"the others ran {others_ahead} iterations ahead of the cut worker (threshold {s})")
        if catch_up_s is None:
            problems.append("worker 1 never completed an iteration after the outage")
        return dict(outage_s=duration_s, threshold=s, iterations_during_outage={str(k): v for k, v in during.items()},
                    no_deadlock_rule_exercised=bool(level),
                    ahead_at_outage_start={str(k): v for k, v in ahead_at_start.items()},
                    others_ahead_at_outage_end=others_ahead, longest_gate_stall_s=stall,
                    catch_up_s=catch_up_s, reconnects=reconnects, links_lost=len(links_lost),
                    ps_noticed_after_s=ps_noticed_after_s, problems=problems)

    return _run(name, ctx, cfg, body)


def outage_sign(ctx: ScenarioContext) -> dict:
    """The outage with 1-bit compression: conservation up to the PS's residual; residual norms reported."""
    return outage(ctx, compression="sign", name="runtime_outage_sign")


def worker_crash(ctx: ScenarioContext) -> dict:
    """Worker 1 SIGKILLed in the middle of a push, restarted at once: it rejoins fresh (initial model +
    everything committed); its un-pushed updates are lost with it, nothing committed is."""
    cfg = _base(ctx, evict_after_s=60.0)
    kill_iter = cfg["iterations"] // 3

    def body(cl: Cluster) -> dict:
        cl.ps()
        cl.worker(0), cl.worker(1, kill_at=(kill_iter, 2)), cl.worker(2)
        cl.wait(lambda: cl.procs["w1"].poll() is not None, 300, "worker 1 to die mid-push")
        t_kill = cl.now_s()
        if cl.procs["w1"].returncode != -signal.SIGKILL:
            raise RuntimeError(f"worker 1 exited with {cl.procs['w1'].returncode}, not SIGKILL: {cl.tail(cl.procs['w1'])}")
        cl.worker(1, rejoin=True, name="w1-restarted")
        cl.finish(["w0", "w1-restarted", "w2", "ps"], 600)
        rej = cl.faults("worker_rejoined")
        problems = []
        if not (rej and rej[0]["worker"] == 1 and rej[0]["fresh"]):
            problems.append(f"no fresh rejoin of worker 1 in the PS events ({rej})")
        return dict(killed_at_iteration=kill_iter, kill_t_s=t_kill,
                    ps_noticed_after_s=cl.ps_noticed(1, t_kill, problems),
                    rejoin_after_kill_s=(rej[0]["t_s"] - t_kill) if rej else None,
                    evictions=len(cl.faults("worker_evicted")), problems=problems)

    return _run("runtime_worker_crash", ctx, cfg, body)


def eviction(ctx: ScenarioContext) -> dict:
    """Worker 2 SIGKILLed mid-push and not restarted for a while: after --evict-after-s it is evicted
    (warning), the others run on past the threshold; restarted later, it rejoins and finishes."""
    evict_s = 1.0 if ctx.quick else 10.0
    cfg = _base(ctx, evict_after_s=evict_s, iterations=60 if ctx.quick else 150)
    s, kill_iter = cfg["threshold"], 8

    def body(cl: Cluster) -> dict:
        cl.ps()
        cl.worker(0), cl.worker(1), cl.worker(2, kill_at=(kill_iter, 2))
        cl.wait(lambda: cl.procs["w2"].poll() is not None, 300, "worker 2 to die mid-push")
        t_kill = cl.now_s()
        cl.wait(lambda: cl.faults("worker_evicted"), evict_s + 120, "the eviction of worker 2", cl.procs["ps"])
        goal = kill_iter + s + 3  # the others must get well past the threshold without it
        cl.wait(lambda: min(cl.iteration(0), cl.iteration(1)) >= goal, 300, f"workers 0 and 1 to reach {goal}", cl.procs["ps"])
        t_back = cl.now_s()
        at_return = [cl.iteration(0), cl.iteration(1)]
        cl.worker(2, rejoin=True, name="w2-restarted")
        cl.finish(["w0", "w1", "w2-restarted", "ps"], 600)
        ev = (cl.faults("worker_evicted") or [None])[0]
        rej = cl.faults("worker_rejoined")
        problems = []
        if ev is None or ev.get("level") != "warning" or ev.get("worker") != 2:
            problems.append(f"no warning event evicting worker 2 ({ev})")
        ps_noticed_after_s = cl.ps_noticed(2, t_kill, problems)
        if not (rej and rej[0]["evicted"] and rej[0]["worker"] == 2):
            problems.append(f"worker 2 did not rejoin as an evicted worker ({rej})")
        return dict(evict_after_s=evict_s, killed_at_iteration=kill_iter, ps_noticed_after_s=ps_noticed_after_s,
                    evicted_after_kill_s=(ev["t_s"] - t_kill) if ev else None,
                    others_iterations_at_return=at_return, absent_s=t_back - t_kill,
                    rejoined_at_iteration=rej[0]["iteration"] if rej else None,
                    rejoin_after_restart_s=(rej[0]["t_s"] - t_back) if rej else None, problems=problems)

    return _run("runtime_eviction", ctx, cfg, body)


def ps_crash(ctx: ScenarioContext) -> dict:
    """The parameter server SIGKILLed mid-run and restarted from its latest checkpoint: the workers
    reconnect with backoff, re-send what the checkpoint lacks, and lose nothing."""
    every_s = 1.0 if ctx.quick else 5.0
    gap_s = 1.0 if ctx.quick else 10.0
    cfg = _base(ctx, ps_checkpoint_every_s=every_s, iterations=50 if ctx.quick else 150)

    def body(cl: Cluster) -> dict:
        cl.ps()
        for k in range(cfg["workers"]):
            cl.worker(k)
        half = cfg["iterations"] // 2

        def moment() -> bool:
            """Past half-way, worker 0 pushed after the newest checkpoint, and the next one is far off:
            the restarted PS will lack pushes and pulls the workers must re-send."""
            if cl.iteration(0) < half:
                return False
            ck = [r["t_s"] for r in cl.events("ps") if r["kind"] == "checkpoint"]
            pushes = [r["t_s"] for r in cl.events("w0") if r["kind"] == "push" and r["rows_delivered"] > 0]
            return bool(ck and pushes) and pushes[-1] > ck[-1] and cl.now_s() - ck[-1] < 0.5 * every_s

        cl.wait(moment, 600, f"worker 0 past iteration {half} with a push after the newest PS checkpoint", cl.procs["ps"])
        cl.kill("ps")
        t_kill = cl.now_s()
        last_before = {k: cl.iteration(k) for k in range(cfg["workers"])}
        time.sleep(gap_s)  # the PS is down: workers retry with backoff
        cl.ps(resume=True)
        t_restart = cl.now_s()
        cl.finish([f"w{k}" for k in range(cfg["workers"])] + ["ps"], 600)
        resumed = cl.faults("ps_resumed")
        rej = [r for r in cl.faults("worker_rejoined") if r["t_s"] >= t_restart - 1e-3]
        pulls_after = [r["t_s"] + r["duration_s"] for k in range(cfg["workers"]) for r in cl.events(f"w{k}")
                       if r["kind"] == "pull" and r["t_s"] >= t_kill]
        problems = []
        if not resumed:
            problems.append("the restarted PS logged no ps_resumed")
        if sorted(r["worker"] for r in rej) != list(range(cfg["workers"])):
            problems.append(f"not every worker rejoined the restarted PS ({[r['worker'] for r in rej]})")
        return dict(checkpoint_every_s=every_s, ps_down_s=t_restart - t_kill, kill_t_s=t_kill,
                    iterations_at_kill={str(k): v for k, v in last_before.items()}, resumed_checkpoint=resumed[0]["checkpoint"] if resumed else None,
                    checkpoint_age_at_resume_s=resumed[0].get("since_checkpoint_s") if resumed else None,
                    gap_s=(min(pulls_after) - t_kill) if pulls_after else None,  # kill -> first completed iteration
                    rejoin_s=(max(r["t_s"] for r in rej) - t_restart) if rej else None,
                    resent_push_frames=sum(r["push_frames"] for r in rej), resent_pull_frames=sum(r["pull_frames"] for r in rej),
                    problems=problems)

    return _run("runtime_ps_crash", ctx, cfg, body)


SCENARIOS = {
    "runtime_outage": outage,
    "runtime_outage_sign": outage_sign,
    "runtime_worker_crash": worker_crash,
    "runtime_eviction": eviction,
    "runtime_ps_crash": ps_crash,
}
