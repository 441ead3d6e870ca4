"""Power and energy: the state model, sample integration, RAPL/jtop/NVML sources, the sampler and its CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

from rog.power import (
    CsvSampleWriter,
    EnergyReport,
    JtopSource,
    NvmlSource,
    PowerSamples,
    PowerSourceUnavailable,
    RaplSource,
    detect_power_source,
    integrate_energy_j,
    merge_by_priority,
    model_energy_j,
    model_power_w,
    probe_power_sources,
    read_samples_csv,
    render_model_samples,
    report_from_events,
    report_from_samples,
    run_sampler,
    state_durations_s,
    timeline_from_events,
    write_samples_csv,
)
from rog.power.sources import jtop_total_w
from rog.testbed.profiles import load_profile

ROOT = Path(__file__).resolve().parent.parent
NX = {"compute": 13.35, "communication": 4.25, "stall": 4.04}  # Table III


# ---------------------------------------------------------------------------------------------
# the state-based model


def test_model_energy_hand_computed():
    # 2 s compute at 13.35 W + 1 s stall at 4.04 W = 26.70 + 4.04 = 30.74 J
    assert model_energy_j([(0, 2, "compute"), (2, 3, "stall")], NX, 0, 3) == pytest.approx(30.74, abs=1e-12)


def test_model_energy_counts_uncovered_time_as_idle_at_stall_watts():
    tl = [(0.0, 1.5, "compute"), (1.5, 2.0, "communication"), (2.5, 3.0, "stall")]
    # compute 1.5 s x 13.35 = 20.025; communication 0.5 x 4.25 = 2.125; stall 0.5 x 4.04 = 2.02;
    # idle (2.0-2.5 and 3.0-4.0) = 1.5 s x 4.04 = 6.06  -> 30.23 J
    assert model_energy_j(tl, NX, 0, 4) == pytest.approx(30.23, abs=1e-12)
    assert state_durations_s(tl, 0, 4) == pytest.approx({"compute": 1.5, "communication": 0.5, "stall": 0.5,
                                                         "idle": 1.5})
    # idle told otherwise: 30.23 - 6.06 + 1.5 x 1.0
    assert model_energy_j(tl, NX, 0, 4, idle_w=1.0) == pytest.approx(25.67, abs=1e-12)
    assert model_energy_j(tl, {**NX, "idle": 0.0}, 0, 4) == pytest.approx(24.17, abs=1e-12)


def test_model_energy_clips_to_the_interval():
    tl = [(0, 2, "compute"), (2, 3, "stall")]
    # [1, 2.5]: 1 s compute + 0.5 s stall = 13.35 + 2.02
    assert model_energy_j(tl, NX, 1, 2.5) == pytest.approx(15.37, abs=1e-12)
    # entirely after the timeline: idle
    assert model_energy_j(tl, NX, 10, 12) == pytest.approx(2 * 4.04, abs=1e-12)
    assert model_energy_j(tl, NX, 1, 1) == 0.0
    assert model_energy_j([], NX, 0, 2) == pytest.approx(8.08, abs=1e-12)


def test_model_energy_takes_a_profile_for_watts():
    j = load_profile("jetson-xavier-nx")
    assert model_energy_j([(0, 2, "compute"), (2, 3, "stall")], j, 0, 3) == pytest.approx(30.74, abs=1e-12)


@pytest.mark.parametrize("timeline, fragment", [
    ([(0, 2, "compute"), (1, 3, "stall")], "overlap by 1"),
    ([(2, 3, "stall"), (0, 2, "compute")], "sorted by start_s"),
    ([(0, -1, "compute")], "ends at -1 s before it starts"),
    ([(0, 1, "sleeping")], "unknown state 'sleeping'"),
    ([(0, float("nan"), "compute")], "finite number"),
    ([(0, 1)], "(start_s, end_s, state)"),
])
def test_bad_timelines_are_rejected(timeline, fragment):
    with pytest.raises(ValueError) as err:
        model_energy_j(timeline, NX, 0, 3)
    assert fragment in str(err.value)


def test_bad_window_and_watts_are_rejected():
    with pytest.raises(ValueError, match="ends before it starts"):
        model_energy_j([], NX, 3, 1)
    with pytest.raises(ValueError, match=r"misses state\(s\) \['stall'\]"):
        model_energy_j([], {"compute": 1.0, "communication": 1.0}, 0, 1)
    with pytest.raises(ValueError, match="watts\\['stall'\\]"):
        model_energy_j([], {**NX, "stall": -2}, 0, 1)


def test_durations_partition_the_interval():
    rng = np.random.default_rng(5)
    edges = np.cumsum(rng.uniform(0.0, 1.0, 41))
    states = ["compute", "communication", "stall"]
    tl = [(edges[i], edges[i] + rng.uniform(0, edges[i + 1] - edges[i]), states[i % 3]) for i in range(40)]
    t0, t1 = edges[3] + 0.2, edges[30]
    d = state_durations_s(tl, t0, t1)
    assert sum(d.values()) == pytest.approx(t1 - t0, rel=1e-12)
    assert model_energy_j(tl, NX, t0, t1) == pytest.approx(sum(d[s] * NX.get(s, 4.04) for s in d), rel=1e-12)


def test_model_power_at_times_is_half_open():
    tl = [(0, 2, "compute"), (2, 3, "communication")]
    p = model_power_w(tl, NX, [-1, 0, 1.999, 2, 2.5, 3, 4])
    assert p.tolist() == [4.04, 13.35, 13.35, 4.25, 4.25, 4.04, 4.04]


# ---------------------------------------------------------------------------------------------
# the event log -> timeline


def _rec(kind, t, d, **kw):
    return {"kind": kind, "t_s": t, "duration_s": d, "iteration": 1, **kw}


def test_timeline_from_worker_events():
    recs = [{"kind": "run_start", "t_s": 0.0}, _rec("compute", 0.0, 1.0), _rec("stall", 1.0, 0.25),
            _rec("push", 1.25, 0.5), {"kind": "staleness", "t_s": 1.8, "iteration": 1, "max": 0, "mean": 0.0},
            _rec("stall", 1.75 - 1e-4, 1.0), _rec("pull", 2.75, 0.25), _rec("eval", 3.5, 0.5),
            {"kind": "eval", "t_s": 4.5, "iteration": 1}]  # no duration: skipped
    tl = timeline_from_events(recs)
    # the push ran 1e-4 s into the stall (clock jitter): trimmed to the stall's start
    want = [(0.0, 1.0, "compute"), (1.0, 1.25, "stall"), (1.25, 1.7499, "communication"),
            (1.7499, 2.7499, "stall"), (2.75, 3.0, "communication"), (3.5, 4.0, "compute")]
    assert [x[2] for x in tl] == [x[2] for x in want]
    assert np.array([x[:2] for x in tl]) == pytest.approx(np.array([x[:2] for x in want]), abs=1e-12)


def test_timeline_from_events_rejects_real_overlap_or_merges_by_priority():
    recs = [_rec("push", 0.0, 2.0, worker=0), _rec("push", 1.0, 2.0, worker=1), _rec("compute", 2.5, 0.2),
            _rec("stall", 2.6, 1.4)]
    with pytest.raises(ValueError, match=r"events overlap by 1 s: push at t_s=0.0.*merge='priority'"):
        timeline_from_events(recs)
    assert timeline_from_events(recs, merge="priority") == [
        (0.0, 2.5, "communication"), (2.5, 2.7, "compute"), (2.7, 3.0, "communication"), (3.0, 4.0, "stall")]
    assert merge_by_priority([(0, 1, "stall"), (1, 2, "stall")]) == [(0.0, 2.0, "stall")]


def test_report_from_events_integrates_the_real_timeline(tmp_path):
    from rog.runtime.events import EventLog

    path = tmp_path / "events-w0.jsonl"
    xfer = dict(iteration=1, rows_planned=10, rows_delivered=10, bytes=100, deadline_s=None,
                delivered_share=1.0, mandatory_s=None)
    with EventLog(path, "w0", "run-1") as log:
        log.write("run_start", 0.0, policy="ROG")
        log.write("compute", 0.0, iteration=1, duration_s=2.0)
        log.write("push", 2.0, duration_s=0.5, **xfer)
        log.write("stall", 2.5, iteration=1, duration_s=1.0, reason="gate")
        log.write("pull", 3.5, duration_s=0.5, **xfer)
        log.write("run_end", 5.0, status="ok")
    rep = report_from_events(path, load_profile("jetson-xavier-nx"))
    # 2 x 13.35 + 0.5 x 4.25 + 1 x 4.04 + 0.5 x 4.25 + idle 1 x 4.04 = 39.03 J over 5 s
    assert rep.energy_j == pytest.approx(39.03, abs=1e-9)
    assert rep.mean_w == pytest.approx(7.806, abs=1e-9)
    assert (rep.device, rep.t0_s, rep.t1_s, rep.source, rep.is_model) == ("w0", 0.0, 5.0, "model:jetson-xavier-nx", True)
    d = rep.to_dict()
    assert d["source"] == "model:jetson-xavier-nx" and d["is_model"] is True and "not a measurement" in d["note"]
    assert d["state_s"] == pytest.approx({"compute": 2.0, "communication": 1.0, "stall": 1.0, "idle": 1.0})


def test_energy_report_names_a_known_source():
    with pytest.raises(ValueError, match="model:<profile name>"):
        EnergyReport("w0", 1.0, 0.0, 1.0, "guess")
    with pytest.raises(ValueError, match="model:<profile name>"):
        EnergyReport("w0", 1.0, 0.0, 1.0, "model:")
    r = EnergyReport("w0", 10.0, 1.0, 5.0, "rapl")
    assert r.mean_w == 2.5 and not r.is_model and r.to_dict()["interval_s"] == 4.0


# ---------------------------------------------------------------------------------------------
# integrating samples


def test_constant_power_integrates_exactly():
    t = np.arange(0, 10.01, 0.1)
    assert integrate_energy_j(np.c_[t, np.full_like(t, 5.0)], 2.05, 7.3) == pytest.approx(5.0 * 5.25, rel=1e-12)


def test_linear_ramp_is_exact_with_clipping_inside_segments():
    a, b = 3.0, 0.7  # p(t) = a + b t
    t = np.arange(0, 10.01, 0.1)
    t0, t1 = 1.234, 7.891
    exact = a * (t1 - t0) + b / 2 * (t1 ** 2 - t0 ** 2)
    assert integrate_energy_j(np.c_[t, a + b * t], t0, t1) == pytest.approx(exact, rel=1e-12)


def test_piecewise_linear_pulse_cut_mid_segment():
    # 0 W at t=0, 10 W at t=1, 0 W at t=2, 0 W at t=3; integrate over [0.5, 2.5]:
    # rising half 0.5..1: (5 + 10)/2 x 0.5 = 3.75; falling 1..2: 5; 2..2.5: 0 -> 8.75 J
    s = [(0, 0.0), (1, 10.0), (2, 0.0), (3, 0.0)]
    assert integrate_energy_j(s, 0.5, 2.5) == pytest.approx(8.75, abs=1e-12)


def test_gaps_are_errors_unless_bridged():
    s = [(0.0, 4.0), (0.1, 4.0), (2.1, 8.0), (2.2, 8.0)]  # a 2 s hole
    with pytest.raises(ValueError, match=r"no power sample for 2.000 s between t=0.100 s and t=2.100 s"):
        integrate_energy_j(s, 0.0, 2.2)
    # bridged linearly: 0.1 x 4 + 2 x 6 + 0.1 x 8 = 13.2 J
    assert integrate_energy_j(s, 0.0, 2.2, max_gap_s=None) == pytest.approx(13.2, abs=1e-12)
    # an interval that avoids the hole is fine
    assert integrate_energy_j(s, 2.1, 2.2) == pytest.approx(0.8, abs=1e-12)


def test_edges_hold_the_nearest_sample_within_max_gap():
    t = np.arange(0.5, 9.51, 0.1)
    s = np.c_[t, np.full_like(t, 5.0)]
    assert integrate_energy_j(s, 0.0, 10.0) == pytest.approx(50.0, rel=1e-12)
    with pytest.raises(ValueError, match=r"no power sample for 2.500 s between t=-2.000 s and t=0.500 s"):
        integrate_energy_j(s, -2.0, 10.0)


@pytest.mark.parametrize("samples, fragment", [
    ([(0, 1.0), (0, 2.0)], "increase strictly"),
    ([(1, 1.0), (0, 2.0)], "increase strictly"),
    ([(0, 1.0), (1, -2.0)], ">= 0 W"),
    ([], "no power samples"),
    ([(0, float("nan"))], "finite"),
])
def test_bad_samples_are_rejected(samples, fragment):
    with pytest.raises(ValueError) as err:
        integrate_energy_j(PowerSamples.from_rows(samples, "rapl"), 0, 1)
    assert fragment in str(err.value)


def test_samples_csv_round_trip_and_errors(tmp_path):
    s = PowerSamples(np.array([0.0, 0.1, 0.2]), np.array([4.0, 5.5, 6.25]), "nvml")
    write_samples_csv(tmp_path / "p.csv", s)
    back = read_samples_csv(tmp_path / "p.csv")
    assert back.source == "nvml" and back.t_s.tolist() == [0.0, 0.1, 0.2] and back.power_w.tolist() == [4.0, 5.5, 6.25]
    rep = report_from_samples("w1", back, 0.0, 0.2)
    assert rep.energy_j == pytest.approx(0.1 * 4.75 + 0.1 * 5.875) and rep.source == "nvml"
    bad = tmp_path / "bad.csv"
    bad.write_text("t_s,power_w,source\n0.0,4.0,rapl\n0.1,x,rapl\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: t_s and power_w must be numbers"):
        read_samples_csv(bad)
    bad.write_text("t_s,power_w,source\n0.0,4.0,rapl\n0.1,4.0,nvml\n")
    with pytest.raises(ValueError, match=r"bad.csv:3: source 'nvml' differs"):
        read_samples_csv(bad)
    bad.write_text("t_s,power_w,source\n0.0,4.0,magic\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: source must be one of"):
        read_samples_csv(bad)


def test_render_model_samples_on_the_grid():
    j = load_profile("jetson-xavier-nx")
    s = render_model_samples([(0.0, 0.2, "compute"), (0.2, 0.3, "stall")], j, 0.0, 0.35)
    assert s.source == "model:jetson-xavier-nx"
    assert s.t_s == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.35])
    assert s.power_w.tolist() == [13.35, 13.35, 4.04, 4.04, 4.04]


# ---------------------------------------------------------------------------------------------
# RAPL on a fake sysfs tree


def _zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "name").write_text(label + "\n")
    (d / "energy_uj").write_text(f"{energy_uj}\n")
    (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return d


class FakeClock:
    def __init__(self, t=100.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def rapl_tree(tmp_path):
    root = tmp_path / "powercap"
    zones = {
        "p0": _zone(root, "intel-rapl:0", "package-0", 999_000_000, 1_000_000_000),
        "p1": _zone(root, "intel-rapl:1", "package-1", 5_000_000, 262_143_328_850),
        "core": _zone(root, "intel-rapl:0:0", "core", 1, 1_000_000_000),  # sub-domain: ignored
        "psys": _zone(root, "intel-rapl:2", "psys", 1, 1_000_000_000),  # platform: ignored (double count)
    }
    return root, zones


def _set(zone: Path, uj: int) -> None:
    (zone / "energy_uj").write_text(f"{uj}\n")


def test_rapl_sums_packages_and_undoes_counter_wrap(rapl_tree):
    root, z = rapl_tree
    clock = FakeClock()
    src = RaplSource(root, clock=clock)
    assert src.domains == ["intel-rapl:0", "intel-rapl:1"]
    # +0.5 s: package-0 +0.6 J (999.0 -> 999.6 J), package-1 +0.4 J; core and psys move a lot (ignored)
    _set(z["p0"], 999_600_000), _set(z["p1"], 5_400_000), _set(z["core"], 10**8), _set(z["psys"], 10**8)
    clock.t += 0.5
    assert src.read_w() == pytest.approx(2.0)  # 1.0 J / 0.5 s
    # +0.25 s: package-0 wraps at 1000 J: 999.6 -> 0.1 J is +0.5 J; package-1 +0.25 J
    _set(z["p0"], 100_000), _set(z["p1"], 5_650_000)
    clock.t += 0.25
    assert src.read_w() == pytest.approx(3.0)  # 0.75 J / 0.25 s
    assert src.energy_j() == pytest.approx(1.75)
    assert src.read_w() is None  # no time passed


def test_rapl_absent_or_without_packages(tmp_path):
    with pytest.raises(PowerSourceUnavailable, match="does not exist"):
        RaplSource(tmp_path / "nothing")
    _zone(tmp_path / "pc", "intel-rapl:0", "psys", 1, 10)
    with pytest.raises(PowerSourceUnavailable, match="no RAPL package domain"):
        RaplSource(tmp_path / "pc")


def test_detect_prefers_rapl_when_readable_else_model(rapl_tree, tmp_path):
    root, _ = rapl_tree
    assert detect_power_source(["jtop", "rapl", "nvml", "model"], sysfs_root=root, jetson_root=tmp_path) == "rapl"
    assert detect_power_source(["rapl", "model"], sysfs_root=tmp_path / "none") == "model"
    assert detect_power_source(["rapl"], sysfs_root=tmp_path / "none") == "model"  # the model is always last
    with pytest.raises(ValueError, match="unknown power source 'gps'"):
        detect_power_source(["gps"])


# ---------------------------------------------------------------------------------------------
# jtop and NVML: absent -> clean fallback; present (faked) -> read correctly


def test_jtop_absent_falls_back_to_the_model(tmp_path, monkeypatch):
    reasons = probe_power_sources(["jtop"], jetson_root=tmp_path)
    assert "not a Jetson" in reasons["jtop"]
    assert detect_power_source(["jtop", "model"], jetson_root=tmp_path) == "model"
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/nv_tegra_release").write_text("# R35 (release)\n")
    monkeypatch.setitem(sys.modules, "jtop", None)  # a Jetson without jetson-stats
    reasons = probe_power_sources(["jtop"], jetson_root=tmp_path)
    assert "jetson-stats is not installed" in reasons["jtop"]
    assert detect_power_source(["jtop", "model"], jetson_root=tmp_path) == "model"


def test_jtop_reads_total_board_power_in_mw():
    class FakeJtop:
        def __init__(self, interval):
            self.interval, self.closed = interval, 0
            self.power = {"rail": {"VDD_IN": {"power": 9000}}, "tot": {"power": 13350, "volt": 5000}}

        def start(self):
            pass

        def close(self):
            self.closed += 1

    src = JtopSource(interval_s=0.1, factory=FakeJtop)
    assert src.read_w() == pytest.approx(13.35) and src._jetson.interval == 0.1
    src.close(), src.close()
    assert src._jetson.closed == 1
    with pytest.raises(PowerSourceUnavailable, match=r"power\['tot'\]\['power'\]"):
        jtop_total_w((13350, {}))  # the 3.x tuple layout


def _fake_nvml(count=2, mw=(50_000, 25_000), init_error=None):
    calls = {"shutdown": 0}

    def init():
        if init_error:
            raise init_error

    def shutdown():
        calls["shutdown"] += 1

    mod = types.SimpleNamespace(nvmlInit=init, nvmlShutdown=shutdown, nvmlDeviceGetCount=lambda: count,
                                nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetPowerUsage=lambda h: mw[h])
    return mod, calls


def test_nvml_sums_gpus_and_falls_back_cleanly(monkeypatch):
    mod, calls = _fake_nvml()
    with NvmlSource(module=mod) as src:
        assert src.read_w() == pytest.approx(75.0)
    assert calls["shutdown"] == 1
    mod, calls = _fake_nvml(count=0)
    with pytest.raises(PowerSourceUnavailable, match="no GPU"):
        NvmlSource(module=mod)
    assert calls["shutdown"] == 1  # shut down again after a failed open
    with pytest.raises(PowerSourceUnavailable, match="NVML cannot start"):
        NvmlSource(module=_fake_nvml(init_error=RuntimeError("Driver Not Loaded"))[0])
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert "pynvml is not installed" in probe_power_sources(["nvml"])["nvml"]
    assert detect_power_source(["nvml", "model"]) == "model"


# ---------------------------------------------------------------------------------------------
# the sampler loop on a fake clock


class FakeSource:
    name = "rapl"

    def __init__(self, clock, read_cost_s=0.0):
        self.clock, self.read_cost_s = clock, read_cost_s

    def read_w(self):
        w = 10.0 + self.clock.t
        self.clock.t += self.read_cost_s
        return w


def _run(tmp_path, read_cost_s):
    clock = FakeClock(50.0)

    def wait(dt):
        clock.t += dt

    with CsvSampleWriter(tmp_path / "s.csv") as w:
        span = run_sampler(FakeSource(clock, read_cost_s), w, threading.Event(), duration_s=1.0, period_s=0.1,
                           origin_monotonic_s=49.0, clock=clock, wait=wait)
    return span, read_samples_csv(tmp_path / "s.csv")


def test_sampler_writes_one_row_per_tick_on_the_run_clock(tmp_path):
    (t0, t1), s = _run(tmp_path, 0.0)
    assert (t0, t1) == pytest.approx((1.0, 2.0))
    assert s.source == "rapl"
    assert s.t_s == pytest.approx(1.0 + 0.1 * np.arange(10), abs=1e-6)  # 10 Hz for 1 s, origin 49 s
    assert s.power_w == pytest.approx(10.0 + 50.0 + 0.1 * np.arange(10), abs=1e-3)


def test_sampler_skips_missed_ticks_instead_of_bunching(tmp_path):
    _, s = _run(tmp_path, 0.25)  # every read takes 2.5 periods: ticks 0, 0.3, 0.6, 0.9
    assert s.t_s == pytest.approx([1.0, 1.3, 1.6, 1.9], abs=1e-6)


# ---------------------------------------------------------------------------------------------
# the CLI


def _cli(*args, **kw):
    return subprocess.run([sys.executable, str(ROOT / "scripts/power_sampler.py"), *args], capture_output=True,
                          text=True, timeout=120, **kw)


def _events_in_stall(path: Path, origin: float) -> None:
    """An event file whose device stalls from 5 s before the origin until long after."""
    lines = [
        {"kind": "header", "schema": 1, "rank": "w2", "run_id": "t", "origin_monotonic_s": origin, "origin_unix_s": 0.0},
        {"kind": "run_start", "t_s": -10.0},
        {"kind": "compute", "t_s": -10.0, "iteration": 1, "duration_s": 5.0},
        {"kind": "stall", "t_s": -5.0, "iteration": 1, "duration_s": 1e5, "reason": "gate"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_cli_model_with_events_for_a_short_duration(tmp_path):
    events = tmp_path / "events-w2.jsonl"
    _events_in_stall(events, time.monotonic())
    out = tmp_path / "power-w2.csv"
    r = _cli("--out", str(out), "--profile", "quick-cpu", "--events", str(events), "--duration-s", "0.3")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["source"] == "model:quick-cpu" and rep["is_model"] is True and rep["device"] == "w2"
    assert rep["t0_s"] > 0 and rep["interval_s"] > 0
    assert rep["energy_j"] == pytest.approx(4.04 * rep["interval_s"], rel=1e-9)  # stalled all along
    assert rep["state_s"]["stall"] == pytest.approx(rep["interval_s"], rel=1e-9)
    s = read_samples_csv(out)
    assert s.source == "model:quick-cpu" and set(s.power_w.tolist()) == {4.04} and rep["rows"] == len(s.t_s)
    assert s.t_s[0] == pytest.approx(rep["t0_s"], abs=1e-6) and s.t_s[-1] == pytest.approx(rep["t1_s"], abs=1e-6)


def test_cli_with_a_fake_rapl_tree(rapl_tree):
    root, _ = rapl_tree
    out = root.parent / "rapl.csv"
    r = _cli("--out", str(out), "--sysfs-root", str(root), "--duration-s", "0.3")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    s = read_samples_csv(out)
    assert rep["source"] == "rapl" and rep["is_model"] is False and s.source == "rapl"
    assert rep["rows"] == len(s.t_s) >= 1 and rep["energy_j"] == 0.0  # the fake counters do not move


def test_cli_stops_cleanly_on_sigterm(tmp_path):
    out = tmp_path / "p.csv"
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts/power_sampler.py"), "--out", str(out),
                             "--profile", "jetson-xavier-nx", "--source", "model"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert out.exists(), proc.stderr.read() if proc.poll() is not None else "no CSV yet"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    rep = json.loads(stdout.strip().splitlines()[-1])
    assert rep["source"] == "model:jetson-xavier-nx" and rep["rows"] >= 1
    assert "idle" in stderr  # no --events: told that the model sees an idle device
    assert rep["energy_j"] == pytest.approx(4.04 * rep["interval_s"], rel=1e-9)


def test_cli_without_sensor_or_profile_says_what_to_do(tmp_path):
    r = _cli("--out", str(tmp_path / "x.csv"), "--sysfs-root", str(tmp_path / "none"), "--duration-s", "0.1")
    if r.returncode == 0:  # pragma: no cover - a Jetson or an NVIDIA GPU is present
        pytest.skip("a real power sensor exists on this machine")
    assert r.returncode == 2 and "pass --profile NAME" in r.stderr
