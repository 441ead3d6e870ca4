"""SIGINT and SIGTERM at seeded random moments to the toolkit's long-running commands.

* ``scripts/tc_replay.py`` on a veth pair named with the scenario's prefix (root): the qdiscs of
  both ends are back to what they were, no ifb device of the replay is left, the exit status is
  ``128 + signal``, and the same command runs again to completion.
* ``scripts/testbed.py create`` interrupted while it builds namespaces (root): nothing of the
  prefix is left (or, if create had finished, ``destroy`` removes everything), and a rerun works.
* ``scripts/run.py`` (loopback, and emulated as root): the run folder keeps its partial results
  (config, event logs) and says ``INCOMPLETE`` with the reason, no child process of the run is
  left, the emulated testbed's prefix left nothing, and the same command then completes (``DONE``).
* ``scripts/run_all.sh`` (the wrapper over ``scripts/run_items.py``): interrupted mid-item, the
  current run is marked INCOMPLETE and nothing of the testbed is left (checked when it exists).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

from .registry import ScenarioContext, result

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "configs" / "traces" / "outdoors-synth.csv"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _default_signals() -> None:  # pragma: no cover - runs in the child between fork and exec
    """A child starts with SIGINT/SIGTERM at their defaults, as from a terminal, even when this process
    was started in the background (where a shell makes it, and so its children, ignore SIGINT)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def _is_root() -> bool:
    return os.geteuid() == 0


def _sh(argv: list[str], check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def _qdiscs(dev: str) -> str:
    """The qdisc state of ``dev`` without handles' statistics (comparable before/after)."""
    out = _sh(["tc", "-j", "qdisc", "show", "dev", dev]).stdout or "[]"
    keep = ("kind", "handle", "parent", "root")
    return json.dumps(sorted(({k: q.get(k) for k in keep} for q in json.loads(out)), key=json.dumps))


def _processes_with(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (our own children, found through /proc)."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmd:
            found.append(int(p.name))
    return found


def _send_after(proc: subprocess.Popen, sig: int, delay_s: float, ready=None, ready_timeout_s: float = 120.0,
                group: bool = False) -> dict:
    """Wait for ``ready()`` (if given) then ``delay_s``, send ``sig`` (to the process group with ``group``, as a
    terminal's Ctrl-C does); returns when and whether it landed."""
    t0 = time.monotonic()
    if ready is not None:
        while not ready():
            if proc.poll() is not None or time.monotonic() - t0 > ready_timeout_s:
                break
            time.sleep(0.05)
    t_ready = time.monotonic() - t0
    end = time.monotonic() + delay_s
    while time.monotonic() < end and proc.poll() is None:
        time.sleep(0.01)
    landed = proc.poll() is None
    if landed:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    return {"signal": signal.Signals(sig).name, "ready_after_s": round(t_ready, 3), "delay_s": round(delay_s, 3),
            "at_s": round(time.monotonic() - t0, 3), "landed": landed}


# ----------------------------------------------------------------------------- tc_replay
def _veth(prefix: str) -> tuple[str, str]:
    a, b = f"{prefix}sa", f"{prefix}sb"
    _sh(["ip", "link", "del", a])
    _sh(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    _sh(["ip", "link", "set", a, "up"], check=True)
    _sh(["ip", "link", "set", b, "up"], check=True)
    return a, b


def signals_tc_replay(ctx: ScenarioContext) -> dict:
    """tc_replay.py (egress + ingress via ifb, looping) interrupted at random moments, then rerun."""
    if not _is_root():
        return result("signals_tc_replay", False, error="needs root (tc, ip link): not covered on this machine")
    from rog.testbed.tc import Target, ifb_name_for

    rng = random.Random(ctx.seed)
    trials = 2 if ctx.quick else 6
    dev, peer = _veth(ctx.prefix)
    ifb = ifb_name_for(Target(dev=dev, netns=None))
    argv = [ctx.python, str(ROOT / "scripts" / "tc_replay.py"), "--dev", dev, "--trace", str(TRACE),
            "--direction", "both", "--time-scale", "0.02", "--loop", "--log", str(ctx.work_dir / "replay.csv")]
    runs, problems, rerun_ok = [], [], False
    try:
        before = (_qdiscs(dev), _qdiscs(peer))
        log = ctx.work_dir / "replay.csv"
        for k in range(trials):
            sig = SIGNALS[k % 2]
            phase = "running" if k % 4 < 2 else "startup"  # mid-replay, or anywhere from the launch on
            log.unlink(missing_ok=True)
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=_default_signals)
            if phase == "running":
                info = _send_after(proc, sig, rng.uniform(0.0, 1.0), ready=log.exists, ready_timeout_s=60.0)
            else:
                info = _send_after(proc, sig, rng.uniform(0.0, 1.5))
            info["phase"] = phase
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                problems.append(f"trial {k}: tc_replay did not exit within 30 s of {info['signal']}")
            info["exit"] = proc.returncode
            after = (_qdiscs(dev), _qdiscs(peer))
            ifb_left = _sh(["ip", "link", "show", ifb]).returncode == 0
            info.update(restored=after == before, ifb_left=ifb_left)
            runs.append(info)
            if after != before:
                problems.append(f"trial {k} ({info['signal']} at {info['at_s']} s): qdiscs not restored: {after} vs {before}")
            if ifb_left:
                problems.append(f"trial {k}: ifb device {ifb} left behind")
            # before its handlers exist the interpreter dies of the signal (-sig, or 1 when it lands inside an
            # import): it had changed nothing yet; the restored state is what matters then
            exit_ok = proc.returncode == 128 + sig if phase == "running" else proc.returncode != 0
            allowed = 128 + sig if phase == "running" else "non-zero"
            if info["landed"] and not exit_ok:
                problems.append(f"trial {k} ({phase}): exit status {proc.returncode}, expected {allowed}; stderr: {err[-300:]}")
        rerun = _sh([a for a in argv if a != "--loop"] + ["--duration-s", "0.5"])
        rerun_ok = rerun.returncode == 0 and (_qdiscs(dev), _qdiscs(peer)) == before
        if not rerun_ok:
            problems.append(f"rerun failed: exit {rerun.returncode}: {rerun.stderr[-300:]}")
    finally:
        _sh(["ip", "link", "del", dev])
        _sh(["ip", "link", "del", ifb])
    details = {"trials": runs, "rerun_ok": rerun_ok}
    return result("signals_tc_replay", not problems, details, error="; ".join(problems) or None)


# ----------------------------------------------------------------------------- testbed.py create
def _prefix_left(prefix: str) -> list[str]:
    from rog.experiment.emulated import leftovers

    return leftovers(prefix)


def _has_netns(prefix: str) -> bool:
    return any(line.startswith(prefix) for line in _sh(["ip", "netns", "list"]).stdout.splitlines())


def signals_testbed(ctx: ScenarioContext) -> dict:
    """testbed.py create interrupted at random moments: nothing of the prefix left; a rerun works."""
    if not _is_root():
        return result("signals_testbed", False, error="needs root (ip netns): not covered on this machine")
    rng = random.Random(ctx.seed + 1)
    prefix = f"{ctx.prefix}t"
    script = str(ROOT / "scripts" / "testbed.py")
    create = [ctx.python, script, "create", "--workers", "2", "--prefix", prefix, "--rate-mbit", "50"]
    destroy = [ctx.python, script, "destroy", "--prefix", prefix]
    trials = 2 if ctx.quick else 6
    runs, problems = [], []
    try:
        for k in range(trials):
            sig = SIGNALS[k % 2]
            phase = "building" if k % 4 < 2 else "startup"  # once namespaces exist, or anywhere from the launch
            proc = subprocess.Popen(create, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    preexec_fn=_default_signals)
            if phase == "building":
                info = _send_after(proc, sig, rng.uniform(0.0, 0.3), ready=lambda: _has_netns(prefix), ready_timeout_s=60.0)
            else:
                info = _send_after(proc, sig, rng.uniform(0.05, 1.5))
            info["phase"] = phase
            out = ""
            try:
                out, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
                problems.append(f"trial {k}: create did not exit within 60 s of {info['signal']}")
            info["exit"] = proc.returncode
            left = _prefix_left(prefix)
            # create finished before the signal (exit 0, or killed by it after its handlers were restored,
            # having printed that the testbed was created): the testbed stands, by design
            finished = proc.returncode == 0 or (proc.returncode == -sig and "testbed: created" in (out or ""))
            if info["landed"] and phase == "building" and not finished and proc.returncode != 128 + sig:
                problems.append(f"trial {k}: interrupted create exited {proc.returncode}, expected {128 + sig}")
            if finished:
                info["finished_first"] = True
                _sh(destroy)
                left = _prefix_left(prefix)
            info["left"] = left
            runs.append(info)
            if left:
                problems.append(f"trial {k} ({info['signal']} at {info['at_s']} s, exit {proc.returncode}): left {left}")
                _sh(destroy)
        ok = _sh(create).returncode == 0 and not _sh(destroy).returncode and not _prefix_left(prefix)
        if not ok:
            problems.append("create + destroy after the interrupted trials failed")
    finally:
        _sh(destroy)
    return result("signals_testbed", not problems, {"trials": runs, "interrupted": sum(1 for r in runs if not r.get("finished_first"))},
                  error="; ".join(problems) or None)


# ----------------------------------------------------------------------------- run.py
def _cache_dir(ctx: ScenarioContext) -> Path:
    """Pre-trained weights: the project's cache if it has them (read), else one cache for all trials."""
    shared = ROOT / "result" / ".cache"
    return shared if any(shared.glob("pretrained-*.pt")) else ctx.work_dir / "cache"


def _run_py(ctx: ScenarioContext, testbed: str, result_dir: Path, iterations: int) -> list[str]:
    return [ctx.python, str(ROOT / "scripts" / "run.py"), "--testbed", testbed, "--workers", "2",
            "--iterations", str(iterations), "--eval-every", "5", "--result-dir", str(result_dir),
            "--cache-dir", str(_cache_dir(ctx)), "--no-progress", "--seed", str(ctx.seed)]


def _run_dirs(result_dir: Path) -> list[Path]:
    return sorted(p for p in result_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) if result_dir.exists() else []


def _training_started(run_dir: Path) -> bool:
    """The workers are up: ``workers.ready`` (--launcher local) or a worker's event log, which the
    Fabric launcher mirrors into the local run folder while the run goes on."""
    return (run_dir / "workers.ready").exists() or (run_dir / "events-w0.jsonl").exists()


def interrupt_run(ctx: ScenarioContext, testbed: str, sig: int, delay_s: float, result_dir: Path,
                  iterations: int = 400) -> tuple[dict, list[str]]:
    """One run.py run interrupted ``delay_s`` after its workers are ready; checks what it left."""
    argv = _run_py(ctx, testbed, result_dir, iterations)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=_default_signals)

    def ready() -> bool:
        return any(_training_started(d) for d in _run_dirs(result_dir))

    info = _send_after(proc, sig, delay_s, ready=ready, ready_timeout_s=180.0)
    problems = []
    try:  # generous: cleanup under a load of 40 on 2 cores took over 90 s; a SIGKILL here would itself leave state
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        problems.append(f"run.py did not exit within 300 s of {info['signal']}")
    info["exit"] = proc.returncode
    dirs = _run_dirs(result_dir)
    if len(dirs) != 1:
        return info, problems + [f"expected one run folder in {result_dir}, found {[d.name for d in dirs]}"]
    run_dir = dirs[0]
    info["run_dir"] = run_dir.name
    marker = run_dir / "INCOMPLETE"
    info["incomplete"] = marker.exists() and marker.read_text().strip()
    kept = sorted(p.name for p in run_dir.iterdir())
    info["kept"] = [k for k in kept if k.startswith(("config", "events", "metrics", "manifest"))]
    if not marker.exists():
        problems.append(f"{run_dir.name}: no INCOMPLETE marker after {info['signal']} (files: {kept})")
    if (run_dir / "DONE").exists():
        problems.append(f"{run_dir.name}: marked DONE although interrupted")
    if not (run_dir / "config.yaml").exists() or not any(k.startswith("events") for k in kept):
        problems.append(f"{run_dir.name}: partial results not kept (files: {kept})")
    time.sleep(0.5)
    stray = _processes_with(str(result_dir))
    if stray:
        problems.append(f"child processes of the run still alive: {stray}")
        for pid in stray:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if testbed == "emulated":
        import yaml

        cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
        prefix = cfg.get("emulated", {}).get("prefix")
        left = _prefix_left(prefix) if prefix else ["no prefix recorded in config.yaml"]
        info["prefix"], info["left"] = prefix, left
        if left:
            problems.append(f"emulated testbed {prefix} left {left}")
    if proc.returncode == 0:
        problems.append("run.py exited 0 although interrupted")
    info["stderr_tail"] = err.strip().splitlines()[-2:] if err else []
    return info, problems


def _signals_run(ctx: ScenarioContext, name: str, testbed: str) -> dict:
    if testbed == "emulated" and not _is_root():
        return result(name, False, error="needs root (network namespaces): not covered on this machine")
    rng = random.Random(ctx.seed + (2 if testbed == "loopback" else 3))
    trials = [signal.SIGTERM] if ctx.quick else [signal.SIGINT, signal.SIGTERM]
    runs, problems = [], []
    for k, sig in enumerate(trials):
        result_dir = ctx.work_dir / f"{testbed}-{k}"
        info, probs = interrupt_run(ctx, testbed, sig, rng.uniform(0.0, 3.0), result_dir)
        runs.append(info)
        problems += [f"{info['signal']}: {p}" for p in probs]
    # the same command again (fewer iterations would change the run id: same arguments, rerun to the end)
    result_dir = ctx.work_dir / f"{testbed}-rerun"
    first, probs = interrupt_run(ctx, testbed, signal.SIGINT, rng.uniform(0.0, 1.0), result_dir, iterations=6)
    argv = _run_py(ctx, testbed, result_dir, 6)
    rerun = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600)
    dirs = _run_dirs(result_dir)
    done = len(dirs) == 1 and (dirs[0] / "DONE").exists() and not (dirs[0] / "INCOMPLETE").exists()
    details = {"trials": runs, "rerun_first": first, "rerun_exit": rerun.returncode, "rerun_done": done}
    if first.get("landed") and not first.get("incomplete"):
        problems.append("the run before the rerun was not marked INCOMPLETE")
    if rerun.returncode != 0 or not done:
        problems.append(f"rerun with the same arguments did not complete: exit {rerun.returncode}: "
                        f"{rerun.stderr.strip()[-300:]}")
    return result(name, not problems, details, error="; ".join(problems) or None)


def signals_run_loopback(ctx: ScenarioContext) -> dict:
    """run.py --testbed loopback interrupted (SIGINT, SIGTERM) mid-run, then rerun to DONE."""
    return _signals_run(ctx, "signals_run_loopback", "loopback")


def signals_run_emulated(ctx: ScenarioContext) -> dict:
    """run.py --testbed emulated interrupted mid-run: namespaces and qdiscs gone, INCOMPLETE, rerun to DONE."""
    return _signals_run(ctx, "signals_run_emulated", "emulated")


def signals_run_all(ctx: ScenarioContext) -> dict:
    """run_all.sh (run_items.py) interrupted during its first run: that run INCOMPLETE, nothing of the testbed left."""
    script = ROOT / "scripts" / "run_items.py"
    if not script.exists():
        return result("signals_run_all", False, error="not covered: scripts/run_items.py does not exist yet")
    rng = random.Random(ctx.seed + 4)
    result_dir = ctx.work_dir / "items"
    argv = ["bash", str(ROOT / "scripts" / "run_all.sh"), "outdoors", "--budget-s", "30",
            "--result-dir", str(result_dir), "--figure-dir", str(ctx.work_dir / "figure"),
            "--cache-dir", str(_cache_dir(ctx))]
    env = dict(os.environ, ROG_VENV=str(Path(ctx.python).resolve().parent.parent))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                            start_new_session=True, preexec_fn=_default_signals)

    def ready() -> bool:
        return any(_training_started(d) for d in _run_dirs(result_dir))

    sig = signal.SIGINT if ctx.seed % 2 == 0 else signal.SIGTERM
    # Ctrl-C reaches the whole foreground group (bash defers its own SIGINT until its child exits);
    # SIGTERM goes to the command alone, as `kill PID` does
    info = _send_after(proc, sig, rng.uniform(0.0, 3.0), ready=ready, ready_timeout_s=600.0,
                       group=sig == signal.SIGINT)
    problems = []
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        problems.append(f"run_all.sh did not exit within 300 s of {info['signal']}")
    info["exit"] = proc.returncode
    started = [d for d in _run_dirs(result_dir) if (d / "config.yaml").exists()]
    info["runs"] = {d.name: sorted(m for m in ("DONE", "INCOMPLETE") if (d / m).exists()) for d in started}
    if not info["landed"]:
        problems.append("run_all.sh ended before the signal")
    elif not any("INCOMPLETE" in v for v in info["runs"].values()):
        problems.append(f"no run marked INCOMPLETE after {info['signal']}: {info['runs']}; stderr: {err[-300:]}")
    for d in started:
        try:
            import yaml

            prefix = (yaml.safe_load((d / "config.yaml").read_text()) or {}).get("emulated", {}).get("prefix")
        except Exception:  # noqa: BLE001 - a config we cannot read names no prefix
            prefix = None
        if prefix and _prefix_left(prefix):
            problems.append(f"{d.name}: testbed {prefix} left {_prefix_left(prefix)}")
    time.sleep(0.5)
    stray = _processes_with(str(result_dir))
    if stray:
        problems.append(f"processes still alive: {stray}")
        for pid in stray:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if proc.returncode == 0:
        problems.append("run_all.sh exited 0 although interrupted")
    return result("signals_run_all", not problems, info, error="; ".join(problems) or None)


SCENARIOS = {
    "signals_tc_replay": signals_tc_replay,
    "signals_testbed": signals_testbed,
    "signals_run_loopback": signals_run_loopback,
    "signals_run_emulated": signals_run_emulated,
    "signals_run_all": signals_run_all,
}
