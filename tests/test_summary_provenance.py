"""What a summary says about where its numbers come from, on synthetic run folders with values by hand:
the testbed each run used (and why it fell back), one energy source per energy ratio, one modelled
energy per run (summary.md and energy.json agree), and a missing input never read as a zero."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from rog.analysis import load_run
from rog.analysis.load import find_runs
from rog.analysis.metrics import compute_metrics, team_energy_j
from rog.analysis.summary import write_summary
from rog.papers.rog.claims import claim_rows
from rog.papers.rog.references import ARTIFACT_LOGS, PAPER

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_analysis_helpers", Path(__file__).with_name("test_analysis.py"))
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
make_run = _helpers.make_run

ENERGY_ROG_BSP = "energy to target, ROG-4 / BSP"


def _edit_config(run_dir: Path, **entries) -> None:
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg.update(entries)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))


def _fallback_config(tmp_path, monkeypatch) -> dict:
    """run.py's own config for an emulated run on a machine without root: the fallback decided by
    rog.testbed.netns.root_netns_status, here made to answer as it does for a non-root user."""
    import rog.testbed.netns as N
    from rog.experiment.cli import parse_args
    from rog.experiment.config import resolve_config

    monkeypatch.setattr(N, "root_netns_status", lambda: (False, "not root (euid 1000)"))
    a = parse_args(["--library", "BSP", "--rate-mbit", "10", "--iterations", "5", "--workers", "2",
                    "--result-dir", str(tmp_path / "unused")])
    return resolve_config(a)


# ----------------------------------------------------------------------------- the testbed
def test_a_loopback_fallback_run_names_its_testbed_and_reason_in_summary_md(tmp_path, monkeypatch):
    cfg = _fallback_config(tmp_path, monkeypatch)
    assert (cfg["testbed"], cfg["testbed_requested"], cfg["fallback_reason"]) == \
        ("loopback", "emulated", "not root (euid 1000)")
    res = tmp_path / "result"
    fell = make_run(res, "BSP-a", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2)
    _edit_config(fell, **{k: cfg[k] for k in ("testbed", "testbed_requested", "fallback_reason")})
    emu = make_run(res, "ROG4-a", system="ROG", workers=((1.0, 0.5, 1.0, 0.5),) * 2)
    _edit_config(emu, testbed="emulated", testbed_requested="emulated", fallback_reason=None)
    _, md = write_summary(res, smooth_tests=1)
    lines = md.read_text().splitlines()
    assert lines[3] == ("- Testbed: emulated (1 run); loopback (fell back from emulated: not root (euid 1000)) (1 run). "
                        "Note: a loopback run shapes its links, if at all, inside the transport (a token bucket following the trace): "
                        "kernel queueing, TCP's reaction to tc and per-packet timing are not emulated.")
    at = lines.index("## Runs")
    header = lines[at + 2]
    cols = [c.strip() for c in header.strip("|").split("|")]
    rows = {ln.split("|")[1].strip(): [c.strip() for c in ln.strip("|").split("|")] for ln in lines[at + 4:at + 6]}
    k = cols.index("testbed")
    assert rows["BSP-a"][k] == "loopback (fell back from emulated: not root (euid 1000))"
    assert rows["ROG4-a"][k] == "emulated"


def test_a_testbed_not_recorded_says_so(tmp_path):
    d = make_run(tmp_path, "ROG4-a")
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    del cfg["testbed"]
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    _, md = write_summary(tmp_path, smooth_tests=1)
    assert "- Testbed: (not recorded) (1 run)." in md.read_text().splitlines()


def _fake_run_py(tmp_path) -> tuple[list[str], dict]:
    log = tmp_path / "fake.log"
    return (["--run-py", str(ROOT / "tests" / "fake_run_py.py"), "--cache-dir", str(ROOT / "result" / ".cache")],
            {"FAKE_LOG": str(log)})


def test_run_items_refuses_the_loopback_fallback_without_the_flag(tmp_path, monkeypatch, capsys):
    from rog.experiment import driver

    monkeypatch.setattr(driver, "loopback_fallback", lambda: "not root (euid 1000)")
    res = tmp_path / "r"
    argv = ["threshold", "--budget-s", "5", "--no-post", "--result-dir", str(res), "--figure-dir", str(tmp_path / "f")]
    run_py, env = _fake_run_py(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = driver.main(argv + run_py)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "not root (euid 1000)" in err[0] and "--allow-loopback" in err[0] and err[0].startswith("run_all.sh: error:")
    assert not res.exists() and not (tmp_path / "fake.log").exists()  # nothing started, nothing written
    # asked for: the runs start, and the plan says on which testbed
    rc = driver.main(argv + run_py + ["--allow-loopback"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "testbed: loopback (--allow-loopback): the emulated testbed needs root and network namespaces " \
           "(not root (euid 1000))" in out
    assert (tmp_path / "fake.log").read_text().count("start ") == 5  # BSP, ROG 4 / 20 / 30 / 40


def test_run_items_as_a_non_root_user_refuses_in_one_line(tmp_path):
    """The real decision (rog.testbed.netns.root_netns_status), no stand-in: as root the driver runs in a new
    user namespace, where its euid is the overflow uid (not root); as any other user, as itself."""
    import os
    import shutil
    import subprocess
    import sys

    run_py, env = _fake_run_py(tmp_path)  # a broken refusal starts the stand-in, not a real run
    cmd = [sys.executable, str(ROOT / "scripts" / "run_items.py"), "threshold", "--budget-s", "5", "--no-post",
           "--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f"), *run_py]
    if os.geteuid() == 0:
        assert shutil.which("unshare"), "util-linux's unshare is needed to run the driver as a non-root user"
        cmd = ["unshare", "--user", *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT), timeout=120, env={**os.environ, **env})
    err = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert len(err) == 1 and "not root (euid" in err[0] and "--allow-loopback" in err[0]
    assert not (tmp_path / "r").exists() and not (tmp_path / "fake.log").exists()


# ----------------------------------------------------------------------------- energy: one source per ratio
def _sensor_logs(run_dir: Path, watts: float) -> None:
    """A jtop log per worker at a flat ``watts`` on the run clock, 0-80 s."""
    for k in (0, 1):
        rows = "\n".join(f"{t:.1f},{watts:.3f},jtop" for t in range(0, 81))
        (run_dir / f"power-w{k}.csv").write_text("t_s,power_w,source\n" + rows + "\n")


def _energy_pair(root: Path, rog_hosts: bool, bsp_hosts: bool):
    """ROG-4 and BSP, each with jtop logs at 10 W; a run counts the logs only on --testbed hosts."""
    b = make_run(root, "BSP-a", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2,
                 evals=((0, 0.5), (5, 0.6), (10, 0.65)))
    r = make_run(root, "ROG4-a", system="ROG", workers=((1.0, 0.5, 1.0, 0.5),) * 2,
                 evals=((0, 0.5), (5, 0.6), (10, 0.66)))
    for d, hosts in ((b, bsp_hosts), (r, rog_hosts)):
        _sensor_logs(d, 10.0)
        if hosts:
            _edit_config(d, testbed="hosts")
    ms, *_ = compute_metrics([load_run(d) for d in find_runs(root)], smooth_tests=1)
    return {c.name: c for c in claim_rows(ms)}, {m.run.run_id: m for m in ms}


def test_a_mixed_source_energy_pair_reads_not_measured(tmp_path):
    """Compared runs where only one has sensor logs: the summary prices both with their model (never a mix,
    and the sensor run says why); a pair whose sources still differ reads "not measured"."""
    import dataclasses

    claims, by = _energy_pair(tmp_path, rog_hosts=True, bsp_hosts=False)
    assert by["ROG4-a"].energy_source == "model:jetson-xavier-nx" == by["BSP-a"].energy_source
    assert any("not this run's jtop logs" in n for n in by["ROG4-a"].notes)
    model_claim = claims[ENERGY_ROG_BSP]
    assert model_claim.ours is not None and model_claim.verdict() != "not measured"
    mixed = [dataclasses.replace(by["ROG4-a"], energy_source="jtop"), by["BSP-a"]]
    c = {x.name: x for x in claim_rows(mixed)}[ENERGY_ROG_BSP]
    assert c.ours is None and c.verdict() == "not measured"
    assert c.sentence() == ("Not measured: mixed energy sources (sensor / model): ROG-4 jtop, "
                            "BSP model:jetson-xavier-nx.")
    # the time claims of the same runs are unaffected
    assert {x.name: x for x in claim_rows(mixed)}["stall / iteration, ROG-4 / BSP"].ours == pytest.approx(1.0 / 3.0)


def test_a_same_source_energy_pair_is_a_ratio_by_hand(tmp_path):
    claims, by = _energy_pair(tmp_path, rog_hosts=True, bsp_hosts=True)
    # start 50, lowest peak 65 (BSP) -> target 62 %.  BSP: 6 s iterations, tests at 0 / 30 / 60 s -> 60 % at
    # 30 s, 65 % at 60 s: 62 % at 42 s.  ROG-4: 3 s iterations, 60 % at 15 s, 66 % at 30 s: 62 % at 20 s.
    # Two workers at a flat 10 W: 2 x 10 x t joules.
    assert by["BSP-a"].energy_to_target_j == pytest.approx(2 * 10 * 42.0)
    assert by["ROG4-a"].energy_to_target_j == pytest.approx(2 * 10 * 20.0)
    c = claims[ENERGY_ROG_BSP]
    assert c.ours == pytest.approx(20.0 / 42.0) and c.verdict() == "pass"


def test_the_summary_and_energy_json_give_one_modelled_energy(tmp_path):
    """A run whose workers ran as the laptop profile: energy.json (rog.experiment.energy_report, the
    power helper's integrator) and the summary (rog.analysis.metrics) both price it with the laptop's
    watts, read here from the profile file itself."""
    from rog.experiment.energy_report import write_energy_json
    from rog.testbed.profiles import load_profile

    watts = yaml.safe_load((ROOT / "configs" / "devices" / "laptop.yaml").read_text())["power_w"]
    d = make_run(tmp_path, "ROG4-a", workers=((1.0, 1.0, 2.0, 1.0),) * 2)  # 5 s iterations x 10 = 50 s each
    _edit_config(d, profile="laptop", ps_profile="laptop")
    doc = write_energy_json(d, 2, load_profile("laptop"), load_profile("laptop"))
    per_worker = 10 * (1.0 * watts["compute"] + 2.0 * watts["communication"] + 2.0 * watts["stall"])
    assert doc["devices"]["w0"]["energy_j"] == pytest.approx(per_worker)
    run = load_run(d)
    ms, *_ = compute_metrics([run], target_fraction=0.75, smooth_tests=1)
    assert ms[0].energy_source == doc["devices"]["w0"]["source"] == "model:laptop"
    workers_json = sum(v["energy_j"] for k, v in doc["devices"].items() if k.startswith("w"))
    assert team_energy_j(run, 50.0, ms[0].energy_source) == pytest.approx(workers_json) == pytest.approx(2 * per_worker)
    # target 65 % at 30 s (tests at 0 / 25 / 50 s: 50, 60, 70 %) -> 6 whole iterations per worker
    assert ms[0].time_to_target_s == pytest.approx(37.5)
    in_last = 1.0 * watts["compute"] + 1.0 * watts["communication"] + 0.5 * watts["stall"]  # 2.5 s of iteration 8
    assert ms[0].energy_to_target_j == pytest.approx(2 * (7 * per_worker / 10 + in_last))
    _, md = write_summary(tmp_path, smooth_tests=1)
    line = next(ln for ln in md.read_text().splitlines() if ln.startswith("- Energy source:"))
    assert line.startswith("- Energy source: model:laptop (model:laptop = state-based model, NOT a measurement: every "
                           "worker's compute / communication / stall time x the laptop profile's watts (35 / 10.5 / 10 W, "
                           "untracked time at 10 W; assumption: not measured;")


# ----------------------------------------------------------------------------- labels that must not go missing
def test_summary_md_labels_its_sources(tmp_path):
    """The model-energy label, the trace-source line, the testbed line and the reference columns' sources,
    each checked against text built here from the run's config and rog.papers.rog.references."""
    d = make_run(tmp_path, "ROG4-a")
    make_run(tmp_path, "BSP-a", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2)
    _edit_config(d, trace={"kind": "record", "path": "/x/data/bw_records/outdoors.txt"})
    _, md = write_summary(tmp_path, smooth_tests=1)
    lines = md.read_text().splitlines()
    assert lines[2] == "- Trace source: none (unshaped links) (1 run); recorded (outdoors.txt, 1 run)."
    assert lines[3].startswith("- Testbed: loopback (2 runs).")
    energy = next(ln for ln in lines if ln.startswith("- Energy source:"))
    assert ("model:jetson-xavier-nx = state-based model, NOT a measurement: every worker's compute / communication / "
            "stall time x the jetson-xavier-nx profile's watts (13.35 / 4.25 / 4.04 W, untracked time at 4.04 W") in energy
    ref = f"Reference columns: 'paper' = {PAPER}; 'artifact' = {ARTIFACT_LOGS};"
    claims_at = lines.index("## Claims")
    assert any(ref in ln for ln in lines[claims_at:claims_at + 4])


# ----------------------------------------------------------------------------- missing is not zero
def test_averages_over_seeds_say_how_many_reached_the_target(tmp_path):
    for s in (0, 1):
        make_run(tmp_path, f"BSP-s{s}", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2,
                 evals=((0, 0.5), (5, 0.6), (10, 0.65)))
        make_run(tmp_path, f"ROG4-s{s}", system="ROG", workers=((1.0, 0.5, 1.0, 0.5),) * 2,
                 evals=((0, 0.5), (5, 0.6), (10, 0.66)))
    # a third ROG-4 seed that stopped early and never rose: it does not set the target and never reaches it
    make_run(tmp_path, "ROG4-s2", system="ROG", workers=((1.0, 0.5, 1.0, 0.5),) * 2, done=False,
             evals=((0, 0.5), (5, 0.5), (10, 0.5)))
    ms, target, _, _ = compute_metrics([load_run(d) for d in find_runs(tmp_path)], smooth_tests=1)
    assert target == pytest.approx(62.0)  # the complete runs: start 50, lowest peak 65 (BSP)
    c = {c.name: c for c in claim_rows(ms)}["time to target, ROG-4 / min(BSP, SSP-4, FLOWN)"]
    # the mean over the two seeds that reached 62 % (20 s each) / BSP's 42 s, and said so
    assert c.ours == pytest.approx(20.0 / 42.0)
    assert c.reached() == "reached ROG-4 2 of 3, BSP 2 of 2"
    _, md = write_summary(tmp_path, smooth_tests=1)
    row = next(ln for ln in md.read_text().splitlines() if ln.startswith("| time to target, ROG-4 / min("))
    assert f"| {20 / 42:.2f}x (reached ROG-4 2 of 3, BSP 2 of 2) |" in row


def test_a_claim_whose_runs_never_reached_the_target_is_not_decidable(tmp_path):
    from rog.analysis.claim_table import Claim

    c = Claim("time to target, ROG-4 / BSP", None, None, None, "", ("<=", 0.75), "x",
              "no value for ROG-4 (no run of it reached the target, or none was tested in range)")
    assert c.verdict() == "not decidable"
    assert c.sentence().startswith("Not decidable: no value for ROG-4")


def test_robustness_reports_reached_k_of_n(tmp_path):
    from rog.papers.rog.robustness import aggregate, holds_text
    from rog.analysis.claim_table import Claim

    def claim(v):
        return Claim("time to target, ROG-4 / BSP", v, None, None, "", ("<=", 0.75), "x")

    (e,) = aggregate({"a": [claim(0.5)], "b": [claim(None)], "c": [claim(0.9)], "d": [claim(0.6)]})
    assert (e["of"], e["replicas"], e["holds"]) == (3, 4, 2)
    assert e["median"] == pytest.approx(0.6)  # over the three that reached it
    assert holds_text(e) == "on 2 of 3; reached 3 of 4"
    (e,) = aggregate({"a": [claim(None)], "b": [claim(None)]})
    assert holds_text(e) == "not decidable: no replica has a value (reached 0 of 2)"


def test_adsp_agreement_without_a_bsp_run_is_not_decidable():
    from rog.papers.adsp.summary import adsp_markdown

    def row(system, stall_s, waiting, stall_share):
        return dict(system=system, iter_s=1.0, compute_s=0.5, comm_s=0.2, stall_s=stall_s, waiting_share=waiting,
                    stall_share=stall_share, steps=10, time_to_target_s=10.0, adsp_time_reduction=0.1)

    d = dict(fig1=[row("SSP-3", 0.3, 0.55, 0.3), row("ADSP", 0.01, 0.1, 0.01)], fig1_target={"rule": "r"},
             ushape={"rows": [], "searches": []}, outdoors=[])
    text = adsp_markdown(d)
    assert "in all: not decidable: no BSP run (acceptance" in text and "the paper's picture" not in text
    d["fig1"].append(row("BSP", 0.5, 0.6, 0.5))  # ADSP 0.01 / BSP 0.5 = 0.02 x; waiting 55 and 60 % > 50 %: every bound met
    assert "in all: agrees with the paper's picture" in adsp_markdown(d)
