"""--testbed hosts: each worker host's device profile decides its pacing and the regime's compute time
(rog.experiment.host_pacing): a Jetson (compute time measured on the device) computes at its own speed,
a laptop or an emulated robot (a target compute time) is paced; the trace time scale follows the mean
compute time of the run's workers, as on the emulated testbed; config.yaml records each host's profile."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rog.experiment import cli
from rog.experiment import config as runcfg
from rog.experiment import sync_options as SO
from rog.experiment.traceplan import PAPER
from rog.testbed.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "configs" / "hosts.example.yaml"  # a laptop PS and four jetson-xavier-nx workers
CACHE = ROOT / "result" / ".cache"
JETSON_S = load_profile("jetson-xavier-nx").compute_s_per_iteration  # 1.12, measured on the board
LAPTOP_S = load_profile("laptop").compute_s_per_iteration  # 1.12, derived: paced to the Jetson's
QUICK_S = load_profile("quick-cpu").compute_s_per_iteration  # 0.28, derived: an emulated robot


def _cfg(tmp_path, hosts: Path, *extra: str):
    a = cli.parse_args(["--testbed", "hosts", "--hosts", str(hosts), "-c", "outdoors", "--result-dir",
                        str(tmp_path / "r"), "--cache-dir", str(CACHE), *extra])
    return runcfg.resolve(a)


def _mixed_hosts(tmp_path) -> Path:
    doc = yaml.safe_load(EXAMPLE.read_text())
    profiles = {"robot1": "jetson-xavier-nx", "robot2": "laptop", "robot3": "quick-cpu", "robot4": "jetson-xavier-nx"}
    for h in doc["hosts"]:
        if h["name"] in profiles:
            h["device_profile"] = profiles[h["name"]]
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_jetsons_compute_at_their_own_speed(tmp_path):
    cfg = _cfg(tmp_path, EXAMPLE)
    pacing = cfg.testbed.hosts["pacing"]
    assert [(w["host"], w["profile"], w["paced"], w["compute_s"]) for w in pacing["workers"]] == [
        (f"robot{k + 1}", "jetson-xavier-nx", False, None) for k in range(4)]
    assert [SO.worker_compute_s(cfg, k) for k in range(4)] == [None] * 4  # no pacing sleep on any worker
    assert cfg.device.compute_s is None
    # the regime follows the Jetsons' measured 1.12 s: the paper's own compute time, so trace time x1
    assert cfg.links.regime["compute_s"] == pytest.approx(JETSON_S)
    assert cfg.links.time_scale == pytest.approx(JETSON_S / PAPER["compute_s"])
    assert {d["device_profile"] for n, d in cfg.testbed.hosts["devices"].items() if n != "ps"} == {"jetson-xavier-nx"}


def test_mixed_team_paces_only_the_hosts_whose_profile_asks(tmp_path):
    hosts = _mixed_hosts(tmp_path)
    for b in (1, 2):
        cfg = _cfg(tmp_path, hosts, "-b", str(b))
        rows = cfg.testbed.hosts["pacing"]["workers"]
        assert [w["paced"] for w in rows] == [False, True, True, False]
        got = [SO.worker_compute_s(cfg, k) for k in range(4)]
        assert got[0] is None and got[3] is None
        assert got[1] == pytest.approx(LAPTOP_S * b) and got[2] == pytest.approx(QUICK_S * b)
        assert [w["expected_compute_s"] for w in rows] == pytest.approx([JETSON_S * b, LAPTOP_S * b, QUICK_S * b, JETSON_S * b])
        assert cfg.device.compute_s is None  # no one target for the team
        mean_s = (JETSON_S + LAPTOP_S + QUICK_S + JETSON_S) / 4  # per mini-batch: -b does not rescale the links
        assert cfg.links.regime["compute_s"] == pytest.approx(mean_s)
        assert cfg.links.time_scale == pytest.approx(mean_s / PAPER["compute_s"])


def test_a_run_on_the_first_workers_uses_their_profiles_only(tmp_path):
    cfg = _cfg(tmp_path, _mixed_hosts(tmp_path), "--workers", "3")
    assert [w["profile"] for w in cfg.testbed.hosts["pacing"]["workers"]] == ["jetson-xavier-nx", "laptop", "quick-cpu"]
    assert cfg.links.regime["compute_s"] == pytest.approx((JETSON_S + LAPTOP_S + QUICK_S) / 3)


def test_explicit_profile_or_compute_s_keeps_one_pace_for_all(tmp_path):
    cfg = _cfg(tmp_path, EXAMPLE, "--profile", "quick-cpu")
    assert cfg.testbed.hosts["pacing"] is None
    assert [SO.worker_compute_s(cfg, k) for k in range(4)] == pytest.approx([QUICK_S] * 4)
    cfg = _cfg(tmp_path, EXAMPLE, "--compute-s", "0.5")
    assert cfg.testbed.hosts["pacing"] is None and SO.worker_compute_s(cfg, 2) == pytest.approx(0.5)

