"""--parallel N: the slot scheduler (simulated clock, no processes), slot prefixes, the default N rule."""

from __future__ import annotations

import json
import re

import pytest

from rog.experiment import parallel as P
from rog.experiment.emulated import PREFIX_LEN
from rog.testbed.netns import netns_names


class SimClock:
    """Jobs are (name, duration); a handle ends once the simulated clock passed its end."""

    def __init__(self):
        self.now = 0.0
        self.live: dict[str, tuple[int, str]] = {}  # job -> (slot, prefix)
        self.max_live = 0
        self.log: list[tuple[float, str, str]] = []

    def start(self, job, slot):
        name, dur = job
        tag = P.slot_tag(slot, "rg")
        prefix = tag + "f" * (PREFIX_LEN - len(tag))  # the random part at its worst: equal for every run
        names = {f"{prefix}ps", *(f"{prefix}w{k}" for k in range(1, 9))}
        for other, (oslot, opref) in self.live.items():
            onames = {f"{opref}ps", *(f"{opref}w{k}" for k in range(1, 9))}
            assert not names & onames, f"{name} and {other} would share namespace names"
            assert oslot != slot
        self.live[name] = (slot, prefix)
        self.max_live = max(self.max_live, len(self.live))
        self.log.append((self.now, "start", name))
        return (name, self.now + dur)

    def poll(self, handle):
        name, end = handle
        return "ok" if self.now >= end - 1e-9 else None

    def done(self, job, slot, res):
        assert self.live.pop(job[0])[0] == slot
        self.log.append((self.now, "end", job[0]))

    def sleep(self, s):
        self.now += s


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_scheduler_respects_n_and_never_shares_namespace_names(n):
    jobs = [(f"r{i}", d) for i, d in enumerate([3, 1, 4, 1, 5, 9, 2, 6, 5, 3])]
    clk = SimClock()
    P.run_slots(jobs, n, clk.start, clk.poll, clk.done, sleep=clk.sleep, tick_s=0.5)
    assert clk.max_live == min(n, len(jobs))
    assert not clk.live
    assert [e[2] for e in clk.log if e[1] == "start"] == [j[0] for j in jobs]  # plan order
    assert sorted(e[2] for e in clk.log if e[1] == "end") == sorted(j[0] for j in jobs)
    # the makespan is the list schedule's (to the 0.5 s tick)
    assert clk.now == pytest.approx(P.estimate_at([d for _, d in jobs], n), abs=0.5 * len(jobs))


def test_stop_starts_nothing_more_and_waits_for_the_live_runs():
    clk = SimClock()
    jobs = [(f"r{i}", 4.0) for i in range(6)]
    P.run_slots(jobs, 2, clk.start, clk.poll, clk.done, stopping=lambda: clk.now >= 1.0, sleep=clk.sleep)
    started = [e[2] for e in clk.log if e[1] == "start"]
    assert started == ["r0", "r1"]
    assert [e[2] for e in clk.log if e[1] == "end"] == ["r0", "r1"]


def test_slot_tags_are_distinct_valid_and_of_equal_length():
    tags = [P.slot_tag(s, "rg") for s in range(len(P.SLOT_CHARS))]
    assert len(set(tags)) == len(tags) and {len(t) for t in tags} == {3}
    for t in tags:
        assert re.fullmatch(r"[a-z][a-z0-9]{1,4}", t)  # what emulated.new_prefix accepts
        prefix = t + "0" * (PREFIX_LEN - len(t))
        assert netns_names(prefix).match(prefix + "ps")
    assert P.slot_tag(3, "abcde") == "abcd3"
    with pytest.raises(ValueError):
        P.slot_tag(36, "rg")
    with pytest.raises(ValueError, match="--parallel"):
        P.check_parallel(0)


def test_default_n_from_measured_cpu(tmp_path):
    # no measurement: 0.5 core per process, 4 workers + PS = 2.5 cores per run
    assert P.default_parallel(None, tmp_path, [4], n_cores=2)[0] == 1
    assert P.default_parallel(None, tmp_path, [4], n_cores=16)[0] == 6  # floor(16 / 2.5)
    # two completed runs: 150 CPU s over 100 s with 4 workers (0.3 / process), 120 over 100 with 5 (0.2);
    # one incomplete run (no DONE) is not counted
    for rid in ("a", "b"):
        (tmp_path / rid).mkdir()
        (tmp_path / rid / "DONE").write_text("")
    (tmp_path / "c").mkdir()
    P.record_cpu(tmp_path, "a", 150.0, 100.0, 4, 1)
    P.record_cpu(tmp_path, "b", 120.0, 100.0, 5, 1)
    P.record_cpu(tmp_path, "c", 10.0, 100.0, 4, 1)
    P.record_cpu(tmp_path, "d", 10.0, 20.0, 4, 1)  # under 30 s: a run that ended at start, not counted
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "DONE").write_text("")
    per, n = P.cpu_per_process(tmp_path)
    assert n == 2 and per == pytest.approx(0.25)  # median of 0.3 and 0.2
    # largest run of the plan: 8 workers -> 9 x 0.25 = 2.25 cores per run
    assert P.default_parallel(None, tmp_path, [4, 8], n_cores=16)[0] == 7
    assert P.default_parallel(None, tmp_path, [4], n_cores=2)[0] == 1  # floor(2 / 1.25) = 1
    assert P.default_parallel(3, tmp_path, [4], n_cores=2)[0] == 3  # given: taken as is
    assert json.loads((tmp_path / P.CPU_FILE).read_text())["a"]["cpu_s"] == 150.0
    # the busy cores (peak) replace the mean when recorded: 2.5 cores over 5 processes
    P.record_cpu(tmp_path, "a", 150.0, 100.0, 4, 1, busy_cores_peak=2.5, busy_cores_p90=0.1)
    P.record_cpu(tmp_path, "b", 120.0, 100.0, 5, 1, busy_cores_peak=3.0)
    assert P.cpu_per_process(tmp_path) == (pytest.approx(0.5), 2)  # median of 0.5 and 0.5
    assert P.default_parallel(None, tmp_path, [4], n_cores=2)[0] == 1  # floor(2 / 2.5) -> at least 1
    # a run measured on a saturated machine (95 % busy) is not counted: only b's 3.0 / 6 = 0.5 is left
    P.record_cpu(tmp_path, "a", 150.0, 100.0, 4, 1, busy_cores_peak=0.5, machine_busy_share=0.95)
    assert P.cpu_per_process(tmp_path) == (pytest.approx(0.5), 1)
    P.record_cpu(tmp_path, "b", 120.0, 100.0, 5, 1, busy_cores_peak=3.0, machine_busy_share=0.99)
    n, why = P.default_parallel(None, tmp_path, [4], n_cores=16)
    assert n == 6 and "2 run(s) measured on a saturated machine, left out" in why  # back to 2.5 cores per run


def test_p90_by_hand():
    from rog.experiment.cpu_meter import p90

    assert p90([]) is None and p90([3.0]) == 3.0
    assert p90(list(range(1, 11))) == 9  # nearest rank: ceil(0.9 x 10) = 9th value
    assert p90([5, 1, 4, 2, 3]) == 5  # ceil(4.5) = 5th of 1..5


def test_estimate_at_by_hand():
    assert P.estimate_at([10, 10, 10, 10], 1) == 40
    assert P.estimate_at([10, 10, 10, 10], 2) == 20
    # 10 -> slot 0 (ends 10), 5 -> slot 1 (5), 5 -> slot 1 (10), 10 -> slot 0 (the first of two free at 10: 20)
    assert P.estimate_at([10, 5, 5, 10], 2) == 20
    assert P.estimate_at([10, 5, 5, 3], 2) == 13


def test_driver_parallel_stop_reaches_every_live_run_and_resume_finishes_the_rest(tmp_path):
    """run_items.py --parallel 2 with the fake run.py: two runs hang side by side in distinct slots;
    SIGINT reaches each exactly once, nothing else starts; the same command again runs only what is missing."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from rog.experiment import items as I

    root = Path(__file__).resolve().parents[1]
    ids = [I.run_id(s) for s in I.ITEMS["threshold"].runs]  # BSP, ROG4, ROG20, ROG30, ROG40
    log, res = tmp_path / "calls.log", tmp_path / "res"

    def driver(hang: str | None = None):
        env = dict(os.environ, FAKE_LOG=str(log))
        env.pop("ROG_TESTBED_PREFIX", None)
        if hang:
            env["FAKE_HANG_ON"] = hang
        cmd = [sys.executable, str(root / "scripts" / "run_items.py"), "threshold", "--budget-s", "5", "--no-post",
               "--parallel", "2", "--run-py", str(root / "tests" / "fake_run_py.py"), "--result-dir", str(res),
               "--figure-dir", str(tmp_path / "fig"), "--allow-loopback",  # also without root
               "--cache-dir", str(root / "result" / ".cache")]  # the fake's payload size from the shared cache
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(root))

    proc = driver(f"{ids[1]},{ids[2]}")
    end = time.monotonic() + 60
    while not all((res / i / "started").exists() for i in ids[1:3]):
        assert proc.poll() is None and time.monotonic() < end, proc.stderr.read() if proc.poll() is not None else "timeout"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    calls = [c.split() for c in log.read_text().splitlines()]
    assert sorted(c[2] for c in calls if c[0] == "signal") == sorted(ids[1:3])  # one signal each
    assert [c[1] for c in calls if c[0] == "signal"] == ["SIGINT", "SIGINT"]
    assert sorted(c[1] for c in calls if c[0] == "start") == sorted(ids[:3])  # nothing started after the stop
    tags = {c[2]: c[1] for c in calls if c[0] == "tag"}
    assert tags[ids[1]] != tags[ids[2]] and set(tags.values()) <= {"rg0", "rg1"}
    assert all((res / i / "INCOMPLETE").exists() for i in ids[1:3]) and (res / ids[0] / "DONE").exists()
    log.unlink()
    proc = driver()  # the restart, side by side again
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    calls = [c.split() for c in log.read_text().splitlines()]
    assert sorted(c[1] for c in calls if c[0] == "start") == sorted(ids[1:])  # only what was missing
    assert all((res / i / "DONE").exists() for i in ids)
    assert (res / f"{ids[1]}.incomplete-1" / "INCOMPLETE").exists()  # the partial runs are kept


def test_cpu_meter_sees_a_busy_process():
    import subprocess
    import sys

    from rog.experiment.cpu_meter import NetnsCpuMeter

    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 2.0: pass"])
    m = NetnsCpuMeter("zzq", period_s=0.25, root_pid=child.pid).start()  # no namespace has this tag
    child.wait()
    m.stop()
    peak, q90 = m.busy_cores()
    assert not m.ticks  # no namespace process
    # one busy loop: at most one core (slack for interval timing); something even on a loaded machine
    assert peak is not None and 0.05 < peak <= 1.3 and q90 <= peak
    share = m.machine_busy_share()  # the busy loop alone keeps 1 of the machine's cores busy
    assert share is not None and 0.0 < share <= 1.0


def test_exit_code_of_a_wait_status_by_hand():
    """os.wait4 statuses of a real exit and a real signal, read as Popen's returncode would be."""
    import os
    import signal
    import subprocess
    import sys

    from rog.experiment.parallel import exit_code

    p = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    _, status, _ = os.wait4(p.pid, 0)
    assert exit_code(status) == 3
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    p.send_signal(signal.SIGTERM)
    _, status, _ = os.wait4(p.pid, 0)
    assert exit_code(status) == -signal.SIGTERM
