"""The evaluation-item driver: item planning, run naming, skip/resume decisions, signal handling,
and per-item targets in summary.json (values computed by hand from synthetic event logs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rog.experiment import cli, driver, links
from rog.experiment import config as runcfg
from rog.experiment import RUN_SEMANTICS
from rog.experiment import items as I
from rog.experiment import resume as R

ROOT = Path(__file__).resolve().parents[1]
FAKE = Path(__file__).with_name("fake_run_py.py")
CACHE = ROOT / "result" / ".cache"  # the quick workload's cache: the payload size run.py's resolution reads


# ----------------------------------------------------------------------------- planning and naming
def test_default_plan_shares_runs_between_items():
    runs = I.plan_runs(I.items_for(None))
    ids = [r.run_id for r in runs]
    assert len(ids) == len(set(ids)) == 24  # 7 + 7 end-to-end + batch 4 + threshold 2 + workers 4 new ones
    by = {r.run_id: r.items for r in runs}
    assert by["ROG4-outdoors-artifact-b1-w4-seed0"] == ["outdoors", "batch", "threshold", "workers"]
    assert by["BSP-outdoors-artifact-b1-w4-seed0"] == ["outdoors", "batch", "threshold", "workers"]
    assert by["ROG20-outdoors-artifact-b1-w4-seed0"] == ["outdoors", "threshold"]
    assert by["ROG4-outdoors-artifact-b1-w8-seed0"] == ["workers"]
    assert by["ROG4-outdoors-recorded-b1-w4-seed0"] == ["recorded"]
    e2e, rec = I.ITEMS["outdoors"].runs, I.ITEMS["recorded"].runs
    for item in (e2e, rec):
        assert sorted(s.system for s in item) == sorted(["BSP", "SSP-4", "SSP-20", "FLOWN", "ROG-4", "ROG-20", "DDP"])
    assert {s.replay_mode for s in e2e} == {"artifact"} and {s.replay_mode for s in rec} == {"recorded"}
    # a shared run runs for the longest budget of its items; each item keeps its own
    prof = I.PROFILES["quick"]
    budget = {r.run_id: r.budget_s for r in runs}
    assert budget["ROG4-outdoors-artifact-b1-w4-seed0"] == prof.budget_for("outdoors") > prof.budget_for("workers")
    assert budget["ROG4-outdoors-artifact-b1-w8-seed0"] == prof.budget_for("workers") == prof.budget_s
    assert budget["ROG30-outdoors-artifact-b1-w4-seed0"] == prof.budget_for("threshold")
    assert I.item_budgets(I.items_for(["outdoors", "workers"]), prof) == {
        "outdoors": prof.budget_for("outdoors"), "workers": prof.budget_s}
    assert prof.budget_for("outdoors:my_trace") == prof.budget_for("outdoors")  # --traces items keep theirs
    assert {r.budget_s for r in I.plan_runs(I.items_for(None), profile=prof, budget_override_s=33)} == {33.0}
    for name in ("batch", "threshold", "workers"):  # the paper's items run in artifact mode
        assert {s.replay_mode for s in I.ITEMS[name].runs} == {"artifact"}
    with pytest.raises(ValueError, match="unknown item"):
        I.items_for(["outdoor"])


def test_default_plan_fits_the_hour():
    prof = I.PROFILES["quick"]
    runs = I.plan_runs(I.items_for(None), profile=prof)
    est = I.estimate_plan_s(runs, prof)
    # by hand: 20 four-worker runs, 2 six-worker, 2 eight-worker; start-up + budget + tail each; the
    # end-to-end item's 7 artifact-mode runs (BSP and ROG-4 shared with the sensitivity items) for the
    # outdoors budget, the other 17 for the short one; DDP's two runs with the longer DDP tail
    long_s, short_s = prof.budget_for("outdoors"), prof.budget_s
    startup_s = 20 * (I.STARTUP_S + 4 * I.STARTUP_PER_WORKER_S) + 2 * (I.STARTUP_S + 6 * I.STARTUP_PER_WORKER_S) \
        + 2 * (I.STARTUP_S + 8 * I.STARTUP_PER_WORKER_S)
    runs_s = startup_s + 7 * long_s + 17 * short_s + 22 * I.TAIL_S + 2 * I.DDP_TAIL_S
    assert est["runs_s"] == pytest.approx(runs_s)
    assert est["total_s"] == pytest.approx(est["runs_s"] + est["ckpt_s"] + est["post_s"])
    assert est["total_s"] <= I.DEADLINE_S
    # what is already complete costs nothing but its checkpoint test
    some = {runs[0].run_id}
    assert I.estimate_plan_s(runs, prof, some)["runs_s"] == pytest.approx(I.estimate_run_s(runs[0].spec, long_s))


@pytest.mark.parametrize("spec, workload", [
    (I.RunSpec("ROG", 4, "artifact"), "quick"),
    (I.RunSpec("BSP", None, "recorded", batch_multiple=2, workers=6, seed=3), "quick"),
    (I.RunSpec("DDP", None, "artifact"), "quick"),
    (I.RunSpec("SSP", 20, "artifact", control="custom", trace="/x/my trace.csv"), "quick"),
    (I.RunSpec("FLOWN", None, "recorded"), "cruda"),
])
def test_run_ids_are_run_py_s(spec, workload):
    """items.run_id must name the folder exactly as scripts/run.py's run_id does."""
    cfg = dict(library=spec.library, threshold=spec.resolved_threshold, control=spec.control,
               replay_mode=spec.replay_mode, workload=workload, batch_multiple=spec.batch_multiple,
               workers=spec.workers, seed=spec.seed, note=spec.note)
    assert I.run_id(spec, workload) == runcfg.run_id(cfg)


def test_run_id_by_hand_and_run_args():
    spec = I.RunSpec("ROG", 20, "recorded", batch_multiple=4, workers=8)
    assert I.run_id(spec) == "ROG20-outdoors-recorded-b4-w8-seed0"
    assert I.run_id(I.RunSpec("BSP", control="none")) == "BSP-none-b1-w4-seed0"
    args = I.run_args(spec, I.PROFILES["quick"], 42.0, "res", "batch")
    assert "--no-progress" in args
    pairs = {f: args[i + 1] for i, f in enumerate(args[:-1]) if f.startswith("-") and f not in ("--no-progress", "--json")}
    assert pairs["--budget-s"] == "42" and pairs["--threshold"] == "20" and pairs["-b"] == "4"
    assert pairs["--workers"] == "8" and pairs["--replay-mode"] == "recorded" and pairs["-c"] == "outdoors"
    assert pairs["--testbed"] == "emulated" and pairs["--item"] == "batch" and pairs["--workload"] == "quick"


def test_run_py_accepts_the_time_budget(tmp_path):
    a = cli.parse_args(["--testbed", "loopback", "--time-budget-s", "12.5", "--result-dir", str(tmp_path)])
    assert a.time_budget_s == 12.5
    with pytest.raises(SystemExit):
        cli.parse_args(["--time-budget-s", "0"])
    from rog.experiment.config import resolve

    assert links.budget_end(resolve(a), {"monotonic_s": 100.0}) == 112.5
    no_budget = resolve(cli.parse_args(["--testbed", "loopback", "--result-dir", str(tmp_path)]))
    assert links.budget_end(no_budget, {"monotonic_s": 100.0}) is None


def test_traces_dir_gives_one_run_per_trace(tmp_path):
    (tmp_path / "a.csv").write_text("t_s,mbps\n0,10\n1,20\n2,5\n")
    (tmp_path / "b rec.txt").write_text("0.0 12\n0.5 8\n1.0 30\n")
    files = driver.trace_files(str(tmp_path))
    items = I.items_for(["threshold"], files)
    assert [it.name for it in items] == ["threshold:a", "threshold:b_rec"]
    ids = [r.run_id for r in I.plan_runs(items)]
    assert "ROG30-custom-artifact-b1-w4-seed0-a" in ids and "BSP-custom-artifact-b1-w4-seed0-b_rec" in ids
    (tmp_path / "bad.csv").write_text("t_s,mbps\n0,ten\n")
    with pytest.raises(ValueError, match="bad.csv"):
        driver.trace_files(str(tmp_path))


# ----------------------------------------------------------------------------- skip / resume
def _argv(spec: I.RunSpec, budget: float) -> list[str]:
    return I.run_args(spec, I.PROFILES["quick"], budget, "res", "threshold") + ["--cache-dir", str(CACHE)]


def _fake_run(root: Path, spec: I.RunSpec, marker: str | None, budget: float = 80.0, **override) -> Path:
    """A run folder as run.py leaves it for ``spec``: its config.yaml resolved by run.py's own code from the
    planned run's flags (then ``override``: dotted entry -> value), and ``marker`` (DONE, INCOMPLETE or none)."""
    d = root / I.run_id(spec)
    d.mkdir(parents=True)
    cfg = runcfg.resolve_config(cli.parse_args(_argv(spec, budget)))
    for key, val in override.items():
        cur = cfg
        *parents, leaf = key.split(".")
        for part in parents:
            cur = cur[part]
        cur[leaf] = val
    (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    if marker:
        (d / marker).write_text("interrupted (Ctrl-C)\n" if marker == "INCOMPLETE" else "{}\n")
    return d


def test_skip_and_resume_decisions(tmp_path):
    spec = I.RunSpec("ROG", 4)
    exp = R.planned_config(_argv(spec, 80.0))
    assert R.decide(tmp_path / "nothing", exp).action == "run"
    d = _fake_run(tmp_path / "done", spec, "DONE")
    assert R.decide(d, exp).action == "skip"
    d = _fake_run(tmp_path / "other", spec, "DONE", budget=60.0)  # same id, another budget
    dec = R.decide(d, exp)
    assert dec.action == "rerun" and dec.aside_as == "stale"
    assert dec.why == "complete but with another config (time_budget_s: found 60.0, planned 80.0)"
    d = _fake_run(tmp_path / "trace", spec, "DONE", **{"trace.sha256": "xyz"})
    assert R.decide(d, exp).action == "rerun" and "trace.sha256: found 'xyz', planned '" in R.decide(d, exp).why
    d = _fake_run(tmp_path / "elsewhere", spec, "DONE", **{"trace.path": "/another/checkout/outdoors.csv"})
    assert R.decide(d, exp).action == "skip"  # the same trace (sha256) from another folder
    d = _fake_run(tmp_path / "older", spec, "DONE", run_semantics=RUN_SEMANTICS - 1)  # older code, same flags
    dec = R.decide(d, exp)
    assert dec.action == "rerun" and dec.aside_as == "stale"
    assert f"(run_semantics: found {RUN_SEMANTICS - 1}, planned {RUN_SEMANTICS})" in dec.why
    d = _fake_run(tmp_path / "inc", spec, "INCOMPLETE")
    dec = R.decide(d, exp)
    assert dec.action == "rerun" and dec.aside_as == "incomplete" and "Ctrl-C" in dec.why
    d = _fake_run(tmp_path / "bare", spec, None)
    assert R.decide(d, exp).action == "rerun"
    first = R.set_aside(d, "incomplete")
    assert first.name == I.run_id(spec) + ".incomplete-1" and first.is_dir() and not d.exists()
    d.mkdir()
    assert R.set_aside(d, "incomplete").name == I.run_id(spec) + ".incomplete-2"
    assert first.is_dir()  # kept


# ----------------------------------------------------------------------------- the driver and signals
def _driver(tmp_path: Path, log: Path, hang_on: str | None = None) -> subprocess.Popen:
    env = dict(os.environ, FAKE_LOG=str(log))
    if hang_on:
        env["FAKE_HANG_ON"] = hang_on
    cmd = [sys.executable, str(ROOT / "scripts" / "run_items.py"), "threshold", "--budget-s", "5", "--no-post",
           "--run-py", str(FAKE), "--result-dir", str(tmp_path / "res"), "--figure-dir", str(tmp_path / "fig"),
           "--allow-loopback", "--cache-dir", str(CACHE)]  # the driver under test, also where runs would fall back (no root)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_the_current_run_and_a_restart_finishes_only_what_is_missing(tmp_path, sig):
    ids = [I.run_id(s) for s in I.ITEMS["threshold"].runs]  # BSP, ROG4, ROG20, ROG30, ROG40
    log = tmp_path / "calls.log"
    res = tmp_path / "res"
    proc = _driver(tmp_path, log, hang_on=ids[2])
    end = time.monotonic() + 60
    while not (res / ids[2] / "started").exists():
        assert proc.poll() is None and time.monotonic() < end, proc.stderr.read() if proc.poll() is not None else "timeout"
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    calls = log.read_text().split("\n")
    # the hanging run got exactly one signal, the one sent to the driver, and nothing started after it
    assert [c for c in calls if c.startswith("signal")] == [f"signal {signal.Signals(sig).name} {ids[2]}"]
    assert [c.split()[1] for c in calls if c.startswith("start")] == ids[:3]
    assert (res / ids[2] / "INCOMPLETE").exists() and not (res / ids[3]).exists()
    assert "run the same command again" in out
    log.unlink()
    proc = _driver(tmp_path, log)  # the restart
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    calls = log.read_text().split("\n")
    assert [c.split()[1] for c in calls if c.startswith("start")] == ids[2:]  # only what was missing
    assert all((res / i / "DONE").exists() for i in ids)
    kept = res / f"{ids[2]}.incomplete-1"
    assert (kept / "INCOMPLETE").exists() and (kept / "started").exists()  # the partial run is kept
    plan = json.loads((res / "plan.json").read_text())
    assert plan["items"] == {"threshold": ids} and plan["budgets_s"] == {"threshold": 5.0}
    assert plan["run_budgets_s"] == {i: 5.0 for i in ids}
    if sig != signal.SIGINT:
        return
    log.unlink()
    proc = _driver(tmp_path, log)  # everything complete: nothing runs
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and not log.exists() and out.count(" skip ") == 5


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    rc = driver.main(["outdoors", "--dry-run", "--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f")])
    out = capsys.readouterr().out
    assert rc == 0 and not (tmp_path / "r").exists()
    assert "7 distinct runs, 7 to run" in out and "estimate:" in out and "DDP-outdoors-artifact-b1-w4-seed0" in out
    assert f"budgets outdoors {I.OUTDOORS_BUDGET_S:g} s" in out


def test_full_profile_without_data_says_what_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROG_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(driver, "check_full_data", lambda: "no mixed_fed_cifar100_train.h5 in /nowhere")
    rc = driver.main(["--profile", "full", "outdoors", "--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f")])
    err = capsys.readouterr().err
    assert rc == 2 and "CRUDA data" in err and "mixed_fed_cifar100_train.h5" in err and not (tmp_path / "r").exists()
    rc = driver.main(["--profile", "full", "outdoors", "--dry-run", "--result-dir", str(tmp_path / "r"),
                  "--figure-dir", str(tmp_path / "f")])
    assert rc == 0 and "warning" in capsys.readouterr().err  # the plan is still printed


# ----------------------------------------------------------------------------- one target per item
def test_summary_has_one_target_per_item_by_hand(tmp_path):
    from test_analysis import make_run

    from rog.analysis.metrics import SUMMARY_KEYS
    from rog.analysis.summary import write_summary

    # worker 0's span is 4 s, so the test of iteration n is at 4n s: X at 0/20/40 s, Y and Z likewise
    make_run(tmp_path, "X", evals=((0, 0.50), (5, 0.60), (10, 0.70)))
    make_run(tmp_path, "Y", evals=((0, 0.50), (5, 0.55), (10, 0.58)))
    make_run(tmp_path, "Z", evals=((0, 0.50), (5, 0.80), (10, 0.90)))
    js, md = write_summary(tmp_path, ["X", "Y", "Z"], items={"a": ["X", "Y"], "b": ["X", "Z"]}, smooth_tests=1)
    doc = json.loads(js.read_text())
    # item a: start 50, lowest peak 58 (Y) -> 50 + 0.8 x 8 = 56.4; X reaches it at 20 x 6.4/10 = 12.8 s
    # item b: lowest peak 70 (X) -> 50 + 0.8 x 20 = 66; X at 20 + 20 x 6/10 = 32 s; Z at 20 x 16/30 s
    assert doc["items"]["a"]["target_acc"] == pytest.approx(56.4)
    assert doc["items"]["b"]["target_acc"] == pytest.approx(66.0)
    assert doc["items"]["a"]["runs"]["X"]["time_to_target_s"] == pytest.approx(12.8)
    assert doc["items"]["b"]["runs"]["X"]["time_to_target_s"] == pytest.approx(32.0)
    assert doc["items"]["b"]["runs"]["Z"]["time_to_target_s"] == pytest.approx(20 * 16 / 30)
    assert doc["target_acc"] == pytest.approx(56.4)  # the first item's, and X's entry uses its first item
    assert doc["runs"]["X"]["time_to_target_s"] == pytest.approx(12.8)
    assert doc["runs"]["Z"]["time_to_target_s"] == pytest.approx(20 * 16 / 30)
    assert doc["runs"]["Y"]["time_to_target_s"] == pytest.approx(20 + 20 * 1.4 / 3)  # 55 at 20 s, 58 at 40 s
    for entry in doc["runs"].values():
        assert tuple(entry) == SUMMARY_KEYS
    assert "## Targets per item" in md.read_text()


def test_summarize_cli_reads_the_plan(tmp_path):
    from test_analysis import make_run

    make_run(tmp_path, "X", evals=((0, 0.50), (5, 0.60), (10, 0.70)))
    make_run(tmp_path, "Z", evals=((0, 0.50), (5, 0.80), (10, 0.90)))
    (tmp_path / "plan.json").write_text(json.dumps({"items": {"only": ["X", "Z"]}}))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize.py"), "--result-dir", str(tmp_path),
                        "--items", str(tmp_path / "plan.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "summary.json").read_text())
    # default smoothing over 3 tests (the first kept): X 50, 65, 65 and Z 50, 85, 85 -> 50 + 0.8 x 15
    assert doc["items"]["only"]["target_acc"] == pytest.approx(62.0) and set(doc["runs"]) == {"X", "Z"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize.py"), "--result-dir", str(tmp_path),
                        "--items", str(tmp_path / "plan.json"), "--smooth-tests", "1"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr  # raw tests: lowest peak 70 -> 50 + 0.8 x 20
    assert json.loads((tmp_path / "summary.json").read_text())["items"]["only"]["target_acc"] == pytest.approx(66.0)
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize.py"), "--result-dir", str(tmp_path),
                        "--smooth-tests", "2"], capture_output=True, text=True)
    assert r.returncode == 2 and "--smooth-tests" in r.stderr
    (tmp_path / "bad.json").write_text("{}")
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize.py"), "--result-dir", str(tmp_path),
                        "--items", str(tmp_path / "bad.json")], capture_output=True, text=True)
    assert r.returncode == 2 and "bad.json" in r.stderr


def test_post_only_starts_no_run(tmp_path):
    log = tmp_path / "calls.log"
    env = dict(os.environ, FAKE_LOG=str(log))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_items.py"), "threshold", "--post-only", "--no-post",
                        "--run-py", str(FAKE), "--result-dir", str(tmp_path / "res"), "--figure-dir", str(tmp_path / "fig")],
                       env=env, capture_output=True, text=True, cwd=str(ROOT))
    assert r.returncode == 1 and not log.exists()  # nothing ran, and the five missing runs are reported
    assert "0/5 runs complete" in r.stdout and "not complete" in r.stdout


def test_runs_regex_plans_only_the_matching_runs(tmp_path, capsys):
    ids = [I.run_id(s) for s in I.ITEMS["threshold"].runs]  # BSP, ROG4, ROG20, ROG30, ROG40
    log = tmp_path / "calls.log"
    env = dict(os.environ, FAKE_LOG=str(log))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "run_items.py"), "threshold", "--budget-s", "5", "--no-post",
                        "--runs", "ROG4-*", "--runs-regex", "^ROG(4|30)-", "--runs", "ROG30-*", "--run-py", str(FAKE), "--result-dir", str(tmp_path / "res"),
                        "--figure-dir", str(tmp_path / "fig"), "--allow-loopback", "--cache-dir", str(CACHE)],
                       env=env, capture_output=True, text=True, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr
    wanted = [i for i in ids if i.startswith(("ROG4-", "ROG30-"))]
    started = [ln.split()[1] for ln in log.read_text().splitlines() if ln.startswith("start ")]
    assert len(wanted) == 2 and sorted(started) == sorted(wanted)  # ROG40 and ROG20 do not match
    plan = json.loads((tmp_path / "res" / "plan.json").read_text())
    assert plan["items"] == {"threshold": wanted}  # the plan (and the summary) holds what was planned
    assert driver.main(["threshold", "--runs", "zzz", "--dry-run"]) == 2
    assert "--runs 'zzz' matches no run" in capsys.readouterr().err
    assert driver.main(["threshold", "--runs", "^ROG(4|30)-", "--dry-run"]) == 2  # a regex is not a glob: says so
    assert "--runs-regex a regular expression" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        driver.main(["threshold", "--runs-regex", "(", "--dry-run"])
    assert bad.value.code == 2 and "--runs-regex '(' is not a regular expression" in capsys.readouterr().err
