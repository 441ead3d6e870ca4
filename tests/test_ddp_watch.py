"""The DDP baseline's time limits, stage errors, watchdog and work-handle retention (rog.baselines.ddp_watch).

Expected limits are worked out by hand from the ring all-reduce's traffic: each of N workers sends
2(N-1)/N of the payload through its own link.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ddp_fakes import FakeBucket

from rog.baselines.ddp import IterationSync, ddp_collective_timeout_s
from rog.baselines.ddp_watch import (COLLECTIVE_FLOOR_S, TRACE_COLLECTIVE_TIMEOUT_S, DDPStageError, StageWatch,
                                     collective_timeout_s, ring_transfer_s)

ROOT = Path(__file__).resolve().parents[1]
S = 843_272  # the quick model's float32 gradient (bytes), as the emulated DDP run logs it


def test_ring_transfer_by_hand():
    assert ring_transfer_s(S, 2, 20.0) == pytest.approx(843_272 * 8 / 20e6)  # N = 2: S through each link
    assert ring_transfer_s(1_000_000, 4, 8.0) == pytest.approx(1.5)  # 2*3/4 * 8 Mbit / 8 Mbit/s
    assert ring_transfer_s(S, 1, 20.0) == 0.0  # one worker: no ring


def test_collective_timeout_sizing():
    assert collective_timeout_s(S, 2, 20.0) == COLLECTIVE_FLOOR_S == 300.0  # 10 x 0.34 s is below the floor
    assert collective_timeout_s(S, 2, 0.1) == pytest.approx(10 * 843_272 * 8 / 1e5)  # 674.6 s: 10 x the transfer
    assert collective_timeout_s(S, 2, 20.0, cap_mbit=0.2) == pytest.approx(10 * 843_272 * 8 / 1e5)  # cap shared by 2
    assert collective_timeout_s(S, 2, None) == 300.0  # unshaped
    assert collective_timeout_s(S, 2, 0.1, traced=True) == TRACE_COLLECTIVE_TIMEOUT_S == 600.0


def test_run_config_limit(run_config):
    base = run_config(["--library", "DDP", "--workers", "2"])
    assert ddp_collective_timeout_s(base, S) == 300.0
    slow = base.replace(testbed="emulated", rate_mbit=0.1)
    assert ddp_collective_timeout_s(slow, S) == pytest.approx(674.6176)  # 10 x 843272 B x 8 / 0.1 Mbit/s
    assert ddp_collective_timeout_s(slow.replace(workers=4), S) == pytest.approx(1.5 * 674.6176)  # 2*3/4 of S
    assert ddp_collective_timeout_s(slow.replace(trace={"path": "x"}), S) == 600.0


def test_stage_error_names_stage_limit_and_addresses(tmp_path):
    where = "store 10.213.1.1:29500, gloo interface rgv1w (10.213.1.2)"
    with open(tmp_path / "w1.log", "w") as log:
        watch = StageWatch(1, where=where, log=log)
        with pytest.raises(DDPStageError) as e:
            with watch.stage("store connect", 120.0):
                time.sleep(0.05)
                raise TimeoutError("no answer\nException raised from connect at socket.cpp:1\nframe #0: ...")
        with watch.stage("iteration 3: barrier and gradient all-reduce", 300.0, quiet=True):
            pass
    msg = str(e.value)
    m = re.fullmatch(r"worker 1: DDP stage 'store connect' failed after (\d+\.\d) s \(limit 120 s; "
                     + re.escape(where) + r"\): TimeoutError: no answer", msg)
    assert m, msg
    assert float(m.group(1)) >= 0.05
    assert isinstance(e.value.__cause__, TimeoutError)
    assert (tmp_path / "w1.log").read_text() == f"worker 1: DDP stage 'store connect' ({where}), limit 120 s\n"


def test_watchdog_dumps_the_stacks_and_exits_when_a_stage_hangs():
    """A stage stuck past limit + grace (here in a sleep, as in a destructor torch does not bound) ends the
    process with status 1 and every thread's stack in its log; a finished stage's watchdog is cancelled."""
    script = textwrap.dedent("""
        import time
        from rog.baselines.ddp_watch import StageWatch

        def stuck_in_teardown():
            time.sleep(30)

        w = StageWatch(0, where="here", grace_s=0.3)
        with w.stage("quick", 0.2):
            pass
        time.sleep(1.0)  # past the first stage's limit + grace: its watchdog must be gone
        print("after the quick stage", flush=True)
        with w.stage("teardown", 0.2):
            stuck_in_teardown()
        print("not reached", flush=True)
    """)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(ROOT), timeout=60,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    wall_s = time.monotonic() - t0
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert wall_s < 20  # not the 30 s sleep
    assert "after the quick stage" in p.stdout and "not reached" not in p.stdout
    err = p.stderr
    assert "worker 0: DDP stage 'teardown' (here), limit 0.2 s" in err
    assert "Timeout (0:00:00" in err and "stuck_in_teardown" in err, err
    assert err.index("DDP stage 'teardown'") < err.index("stuck_in_teardown")


class _Work:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def wait(self):
        self.log.append(self.name)


def test_iteration_sync_keeps_every_work_handle_until_release(tmp_path):
    """The barrier's and every bucket's work handle stay referenced across iterations until release()."""
    from rog.runtime import EventLog

    waited: list = []
    issued: list = []

    def allreduce(t):
        w = _Work(f"w{len(issued)}", waited)
        issued.append(w)
        return w

    with EventLog(tmp_path / "events-w0.jsonl", "w0", "t") as ev:
        sync = IterationSync(1, ev, 0, None, lambda: False, allreduce=allreduce)
        for n in (1, 2):
            sync.begin(n, time.monotonic())
            sync.hook(None, FakeBucket([1.0], last=False))
            sync.hook(None, FakeBucket([2.0], last=True))
    assert waited == ["w0", "w1", "w2", "w3", "w4", "w5"]  # per iteration: barrier, then two buckets
    assert [id(w) for w in sync.retained] == [id(w) for w in issued]
    sync.release()
    assert sync.retained == []


def test_leave_destroys_the_group_before_dropping_the_kept_works(monkeypatch):
    """_leave: the process group goes first (its threads joined), then the kept work handles."""
    import torch.distributed as dist

    from rog.baselines import ddp as ddp_mod

    order: list = []

    class Sync:
        def release(self):
            order.append("release")

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: order.append("destroy"))
    ddp_mod._leave(Sync())
    assert order == ["destroy", "release"]
    order.clear()
    monkeypatch.setattr(dist, "is_initialized", lambda: False)  # the join failed: nothing to destroy
    ddp_mod._leave(Sync())
    assert order == ["release"]
