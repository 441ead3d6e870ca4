"""Trace replay: schedules, the replay loop (virtual clock), and scripts/tc_replay.py end to end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rog.testbed.netns import have_root_netns
from rog.testbed.replay import LOG_HEADER, ReplayHandle, ReplayOptions, Replayer, Schedule, build_schedule
from rog.testbed.tc import Shaper, Target, save_state
from rog.traces import Trace

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "tc_replay.py"
needs_root = pytest.mark.skipif(not have_root_netns(), reason="needs root and working 'ip netns' (CI runs as root)")


def tri() -> Trace:
    """10 Mbit/s for 1 s, an outage for 1 s, 10 Mbit/s for 1 s (period 3 s)."""
    return Trace(np.array([0.0, 1.0, 2.0]), np.array([10.0, 0.0, 10.0]), "tri", 1.0)


def test_schedule_plain_and_scaled():
    s = build_schedule(tri(), ReplayOptions())
    assert s.changes == ((0.0, 10.0), (1.0, 0.0), (2.0, 10.0)) and s.end_s == 3.0
    s = build_schedule(tri(), ReplayOptions(time_scale=0.5, rate_scale=2.0))
    assert s.changes == ((0.0, 20.0), (0.5, 0.0), (1.0, 20.0)) and s.end_s == 1.5


def test_schedule_offset_wraps_and_merges_repeats():
    # from trace second 1: [1,2) 0, [2,3) 10, then the wrapped [0,1) 10 merges with it
    s = build_schedule(tri(), ReplayOptions(start_offset_s=1.0))
    assert s.changes == ((0.0, 0.0), (1.0, 10.0)) and s.end_s == 3.0


def test_schedule_loop_and_duration():
    s = build_schedule(tri(), ReplayOptions(loop=True, duration_s=7.0))
    # second pass starts with 10 again (same as the last rate): not repeated
    assert list(s.iter_changes()) == [(0.0, 10.0), (1.0, 0.0), (2.0, 10.0), (4.0, 0.0), (5.0, 10.0)]
    assert s.end_s == 7.0 and s.rate_at(4.5) == 0.0
    forever = build_schedule(tri(), ReplayOptions(loop=True))
    assert forever.end_s == float("inf") and forever.period_s == 3.0
    cut = build_schedule(tri(), ReplayOptions(duration_s=1.5))
    assert cut.changes == ((0.0, 10.0), (1.0, 0.0)) and cut.end_s == 1.5
    longer = build_schedule(tri(), ReplayOptions(duration_s=10.0))  # no loop: never past the trace's end
    assert longer.end_s == 3.0


def test_artifact_mode_only_when_asked():
    rec = build_schedule(tri(), ReplayOptions())
    art = build_schedule(tri(), ReplayOptions(replay_mode="artifact", seed=3))
    assert art.end_s >= rec.end_s and [r for _, r in art.changes] == [r for _, r in rec.changes]


@pytest.mark.parametrize("field,value", [("time_scale", 0), ("rate_scale", -1), ("start_offset_s", -2),
                                         ("duration_s", 0), ("replay_mode", "held")])
def test_bad_options(field, value):
    with pytest.raises(ValueError, match=field):
        ReplayOptions(**{field: value})


class FakeTime:
    """A clock that only moves when the replay waits (stop.wait) or a command 'takes' time."""

    def __init__(self):
        self.t = 100.0

    def now(self):
        return self.t

    def wait(self, dt):
        self.t += max(dt, 0.0)
        return False

    def is_set(self):
        return False


def test_replayer_applies_in_order_and_logs(tmp_path):
    ft = FakeTime()
    ran = []
    sched = Schedule(((0.0, 5.0), (0.5, 0.0), (1.25, 7.5)), end_s=2.0)
    rep = Replayer([Shaper(Target("v0", "n"))], sched, tmp_path / "log.csv", runner=ran.append,
                   clock=ft.now, wall=lambda: 1000.0 + ft.t)
    st = rep.run(ft)
    assert [a[4] for a in ran] == ["replace", "change", "change"]
    assert [a[-5] for a in ran] == ["5000000bit", "10000bit", "7500000bit"]
    lines = (tmp_path / "log.csv").read_text().splitlines()
    assert lines[0] == LOG_HEADER == "t_s,wall_time,rate_mbit"
    rows = [tuple(float(x) for x in ln.split(",")) for ln in lines[1:]]
    assert [(r[0], r[2]) for r in rows] == [(0.0, 5.0), (0.5, 0.0), (1.25, 7.5)]  # the trace's 0 is logged as 0
    assert rows[1][1] == pytest.approx(1100.5)
    assert st.applied == 3 and st.skipped == 0 and ft.t == pytest.approx(102.0)  # waited until end_s
    # with a run's clock origin (monotonic 90.0), t_s is on that clock
    ft2 = FakeTime()
    Replayer([Shaper(Target("v0"))], sched, tmp_path / "o.csv", runner=ran.append, clock=ft2.now,
             origin_monotonic_s=90.0).run(ft2)
    assert [float(x.split(",")[0]) for x in (tmp_path / "o.csv").read_text().splitlines()[1:]] == [10.0, 10.5, 11.25]


def test_replayer_skips_a_stale_change():
    ft = FakeTime()
    applied = []

    def slow_runner(argv):  # the first change's tc takes 1.5 s: the change due at 1.0 is then stale
        applied.append(argv[-5])
        if len(applied) == 2:
            ft.t += 1.5

    sched = Schedule(((0.0, 1.0), (0.5, 2.0), (1.0, 3.0), (1.6, 4.0)), end_s=2.0)
    st = Replayer([Shaper(Target("v0"))], sched, None, runner=slow_runner, clock=ft.now).run(ft)
    assert applied == ["1000000bit", "2000000bit", "4000000bit"]
    assert st.skipped == 1 and st.max_late_s == pytest.approx(0.4)


def test_wait_first_returns_once_the_first_rate_is_in_place(tmp_path):
    release = threading.Event()
    ran = []

    def held_runner(argv):  # the first tc call blocks until the test releases it
        release.wait(10.0)
        ran.append(argv[-5])

    sched = Schedule(((0.0, 3.0), (30.0, 4.0)), end_s=60.0)
    h = ReplayHandle(Replayer([Shaper(Target("v0"))], sched, tmp_path / "log.csv", runner=held_runner)).start()
    try:
        assert h.wait_first(0.2) is False and ran == []  # tc has not returned: no rate yet
        release.set()
        assert h.wait_first(10.0) is True
        assert ran == ["3000000bit"]
        assert len((tmp_path / "log.csv").read_text().splitlines()) == 2  # header and the first rate, logged
    finally:
        h.stop()
    # a replay that ended without applying anything (stopped at once) does not keep a waiter hanging
    stopped = ReplayHandle(Replayer([Shaper(Target("v0"))], Schedule(((5.0, 1.0),), end_s=9.0), None,
                                    runner=ran.append))
    stopped.stop_event.set()
    stopped.start()
    assert stopped.wait_first(10.0) is True and ran == ["3000000bit"]


def run_script(*args, **kw):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, **kw)


def test_dry_run_prints_exact_commands(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("t_s,mbps\n0,10\n0.5,0\n1.0,25.5\n")
    p = run_script("--dev", "rogzz0", "--netns", "rogzzns", "--trace", str(trace), "--dry-run")
    assert p.returncode == 0, p.stderr
    cmds = [ln for ln in p.stdout.splitlines() if not ln.startswith("#")]
    assert cmds == [
        "tc -n rogzzns qdisc replace dev rogzz0 root handle 1: tbf rate 10000000bit burst 3028 limit 25000",
        "tc -n rogzzns qdisc change dev rogzz0 root handle 1: tbf rate 10000bit burst 3028 limit 12112",
        "tc -n rogzzns qdisc change dev rogzz0 root handle 1: tbf rate 25500000bit burst 6375 limit 63750",
        "tc -n rogzzns qdisc del dev rogzz0 root",
    ]
    assert "# t=0.500 rate_mbit=0" in p.stdout


def test_dry_run_ingress_and_scales(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("t_s,mbps\n0,10\n2,20\n")
    p = run_script("--dev", "rogzz0", "--trace", str(trace), "--dry-run", "--direction", "ingress",
                   "--time-scale", "0.5", "--rate-scale", "0.5")
    assert p.returncode == 0, p.stderr
    ifb = [ln.split()[3] for ln in p.stdout.splitlines() if ln.startswith("ip link add")][0]
    cmds = [ln for ln in p.stdout.splitlines() if not ln.startswith("#")]
    assert cmds[2:] == [
        "tc qdisc add dev rogzz0 handle ffff: ingress",
        f"tc filter add dev rogzz0 parent ffff: protocol all prio 1 u32 match u32 0 0 action mirred egress "
        f"redirect dev {ifb}",
        f"tc qdisc replace dev {ifb} root handle 1: tbf rate 5000000bit burst 3028 limit 12500",
        f"tc qdisc change dev {ifb} root handle 1: tbf rate 10000000bit burst 3028 limit 25000",
        "tc qdisc del dev rogzz0 ingress",
        f"ip link del dev {ifb}",
        "tc qdisc del dev rogzz0 root",
    ]
    assert "# t=1.000 rate_mbit=10" in p.stdout  # trace second 2 at time scale 0.5


@pytest.mark.parametrize("body,line,what", [
    ("t_s,mbps\n0,10\n0.5,-1\n", 3, "negative rate"),
    ("t_s,mbps\n0,10\n1,5\n0.5,5\n", 4, "backwards"),
    ("t_s,mbps\n0,10\n1,fast\n", 3, "non-numeric"),
    ("", 1, "empty"),
])
def test_bad_trace_rejected_with_file_and_line(tmp_path, body, line, what):
    bad = tmp_path / "bad.csv"
    bad.write_text(body)
    p = run_script("--dev", "rogzz0", "--trace", str(bad), "--dry-run")
    assert p.returncode == 2
    assert f"{bad}:{line}:" in p.stderr and what in p.stderr
    assert p.stdout == ""  # nothing printed as a command


def test_missing_trace_and_bad_flags(tmp_path):
    p = run_script("--dev", "rogzz0", "--trace", str(tmp_path / "none.csv"), "--dry-run")
    assert p.returncode == 2 and "none.csv" in p.stderr
    good = tmp_path / "t.csv"
    good.write_text("t_s,mbps\n0,1\n1,2\n")
    p = run_script("--dev", "rogzz0", "--trace", str(good), "--dry-run", "--time-scale", "0")
    assert p.returncode == 2 and "time_scale" in p.stderr
    p = run_script("--dev", "rogzz0", "--trace", str(good), "--direction", "ingress", "--ingress-via", "peer",
                   "--dry-run")
    assert p.returncode == 2 and "--peer-dev" in p.stderr


def test_not_root_is_a_clear_error(tmp_path, monkeypatch, capsys):
    """The command's own check (euid faked to non-root in-process; nothing is touched)."""
    from rog.testbed import replay_command as mod

    monkeypatch.setattr(mod, "is_root", lambda: False)
    good = tmp_path / "t.csv"
    good.write_text("t_s,mbps\n0,1\n1,2\n")
    assert mod.main(["--dev", "lo", "--trace", str(good)]) == 1
    assert "needs root" in capsys.readouterr().err


@pytest.fixture
def scratch_ns():
    ns = f"rogt{os.getpid()}rp"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "rva", "type", "veth", "peer", "name", "rvb"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "dev", "rva", "up"], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def wait_for(cond, timeout_s=20.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


@needs_root
def test_sigterm_restores_state(tmp_path, scratch_ns):
    trace = tmp_path / "t.csv"
    trace.write_text("t_s,mbps\n0,10\n0.2,20\n0.4,0\n")
    log = tmp_path / "log.csv"
    p = subprocess.Popen([sys.executable, str(SCRIPT), "--netns", scratch_ns, "--dev", "rva", "--trace", str(trace),
                          "--direction", "both", "--loop", "--log", str(log)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: log.is_file() and len(log.read_text().splitlines()) >= 4), "replay never started"
        during = save_state(Target("rva", scratch_ns))
        assert during.root["kind"] == "tbf" and during.ingress is not None
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    after = save_state(Target("rva", scratch_ns))
    assert [(q["kind"], q["handle"]) for q in after.qdiscs] == [("noqueue", "0:")]
    links = subprocess.run(["ip", "-n", scratch_ns, "-o", "link"], capture_output=True, text=True).stdout
    assert "rogi" not in links
    rates = [float(ln.split(",")[2]) for ln in log.read_text().splitlines()[1:]]
    assert rates[0] == 10.0 and _in_trace_order(rates, [10.0, 20.0, 0.0]), rates


def _in_trace_order(applied, cycle) -> bool:
    """Each applied rate is a later step of the looping trace than the one before (a late step may be skipped,
    never applied out of order; with distinct rates the step is known from its rate)."""
    steps = [cycle.index(r) for r in applied]
    return all(0 < (b - a) % len(cycle) for a, b in zip(steps, steps[1:]))


@needs_root
def test_error_midway_restores_state(tmp_path, scratch_ns):
    # an existing ingress qdisc makes ingress shaping refuse before changing anything
    subprocess.run(["tc", "-n", scratch_ns, "qdisc", "add", "dev", "rva", "handle", "ffff:", "ingress"], check=True)
    trace = tmp_path / "t.csv"
    trace.write_text("t_s,mbps\n0,10\n0.2,20\n")
    p = run_script("--netns", scratch_ns, "--dev", "rva", "--trace", str(trace), "--direction", "both",
                   "--log", str(tmp_path / "l.csv"))
    assert p.returncode == 1 and "ingress" in p.stderr
    after = save_state(Target("rva", scratch_ns))
    assert sorted(q["kind"] for q in after.qdiscs) == ["ingress", "noqueue"]
    # a missing interface is named
    p = run_script("--netns", scratch_ns, "--dev", "nosuch0", "--trace", str(trace))
    assert p.returncode == 1 and "nosuch0" in p.stderr


@needs_root
def test_short_replay_runs_to_the_end(tmp_path, scratch_ns):
    trace = tmp_path / "t.csv"
    trace.write_text("t_s,mbps\n0,10\n0.1,3\n0.2,4\n")
    log = tmp_path / "log.csv"
    p = run_script("--netns", scratch_ns, "--dev", "rva", "--trace", str(trace), "--qdisc", "htb", "--log", str(log))
    assert p.returncode == 0, p.stderr
    applied = [float(x.split(",")[2]) for x in log.read_text().splitlines()[1:]]
    # a loaded machine may find the 0.1 s step already stale when the next is due: it is skipped (never applied
    # out of order); the first and the last rate always are
    assert applied in ([10.0, 3.0, 4.0], [10.0, 4.0]), applied
    assert [q["kind"] for q in save_state(Target("rva", scratch_ns)).qdiscs] == ["noqueue"]


@needs_root
def test_start_after_holds_the_replay_until_the_file_exists(tmp_path, scratch_ns):
    trace = tmp_path / "t.csv"
    trace.write_text("t_s,mbps\n0,10\n0.1,3\n")
    log, go = tmp_path / "log.csv", tmp_path / "go"
    p = subprocess.Popen([sys.executable, str(SCRIPT), "--netns", scratch_ns, "--dev", "rva", "--trace", str(trace),
                          "--log", str(log), "--start-after", str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: "tc_replay:" in (p.stderr.readline() or "")), "the replay never got ready"
        time.sleep(0.5)
        assert p.poll() is None and not log.exists()  # prepared, waiting: nothing applied yet
        assert [q["kind"] for q in save_state(Target("rva", scratch_ns)).qdiscs] == ["noqueue"]
        go.write_text("{}")
        _, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert [float(x.split(",")[2]) for x in log.read_text().splitlines()[1:]] == [10.0, 3.0]
    assert [q["kind"] for q in save_state(Target("rva", scratch_ns)).qdiscs] == ["noqueue"]


@needs_root
def test_netem_only_where_the_kernel_has_it(tmp_path, scratch_ns):
    from rog.testbed.tc import netem_available

    if netem_available():
        pytest.skip("this kernel has netem; the refusal path is not reachable")
    trace = tmp_path / "t.csv"
    trace.write_text("t_s,mbps\n0,10\n0.2,20\n")
    p = run_script("--netns", scratch_ns, "--dev", "rva", "--trace", str(trace), "--qdisc", "netem")
    assert p.returncode == 1 and "no netem" in p.stderr
    assert [q["kind"] for q in save_state(Target("rva", scratch_ns)).qdiscs] == ["noqueue"]
