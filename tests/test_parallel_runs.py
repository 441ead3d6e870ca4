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
    # the busy cores (90th percentile) replace the mean when recorded: 2.5 cores over 5 processes
    P.record_cpu(tmp_path, "a", 150.0, 100.0, 4, 1, busy_cores_p90=2.5)
    P.record_cpu(tmp_path, "b", 120.0, 100.0, 5, 1, busy_cores_p90=3.0)
    assert P.cpu_per_process(tmp_path) == (pytest.approx(0.5), 2)  # median of 0.5 and 0.5
    assert P.default_parallel(None, tmp_path, [4], n_cores=2)[0] == 1  # floor(2 / 2.5) -> at least 1


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
