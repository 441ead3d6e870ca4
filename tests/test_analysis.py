"""Results analysis on synthetic run folders whose compositions, targets and energies are computed by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rog.analysis import load_run
from rog.analysis.load import find_runs, iteration_table
from rog.analysis.metrics import (
    JETSON_WATTS,
    MODEL_SOURCE,
    SUMMARY_KEYS,
    accuracy_at_iteration,
    accuracy_at_time,
    composition,
    compute_metrics,
    cumulative_model_energy_j,
    equal_iteration_count,
    select_target,
    team_energy_j,
    time_to_target_s,
    worker_timeline,
)
from rog.analysis.summary import write_summary
from rog.papers.rog.claims import claim_rows
from rog.power.energy import model_energy_j
from rog.runtime.events import EventLog

ROOT = Path(__file__).resolve().parents[1]

# per iteration: (compute, push, gate stall, pull) seconds
W0 = (1.0, 0.5, 2.0, 0.5)  # -> compute 1.0, comm 1.0, stall 2.0, iteration 4.0 s
W1 = (1.0, 1.0, 0.5, 1.0)  # -> compute 1.0, comm 2.0, stall 0.5, iteration 3.5 s


def make_run(root: Path, name: str, *, system: str = "ROG", threshold: int = 4, workers=(W0, W1),
             iterations: int = 10, evals=((0, 0.50), (5, 0.60), (10, 0.70)), replay_mode: str | None = "artifact",
             batch_multiple: int = 1, done: bool = True, admission_s: float = 0.0, share: float = 1.0,
             replay: list[tuple[float, float]] | None = None, partial_last: bool = False) -> Path:
    """A run folder written with rog.runtime.events' writer: worker k repeats its (compute, push,
    stall, pull) pattern back to back from t=0; worker 0 tests at iteration n at t = n x its span."""
    d = root / name
    d.mkdir(parents=True)
    cfg = dict(run_id=name, library=system, threshold=threshold, workers=len(workers), batch_multiple=batch_multiple,
               seed=0, replay_mode=replay_mode, testbed="loopback")
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    origin = 1000.0
    with EventLog(d / "events-ps.jsonl", "ps", name, origin_monotonic_s=origin) as ps:
        ps.write("run_start", 0.0, policy=system, threshold=threshold, n_workers=len(workers))
    for k, (c, p, s, l) in enumerate(workers):
        span = admission_s + c + p + s + l
        with EventLog(d / f"events-w{k}.jsonl", f"w{k}", name, origin_monotonic_s=origin) as log:
            log.write("run_start", 0.0, policy=system, threshold=threshold, n_workers=len(workers), worker=k)
            if k == 0:
                ev = dict(evals)
                if 0 in ev:
                    log.write("eval", 0.0, iteration=0, accuracy=ev[0], loss=1.0)
            for n in range(1, iterations + 1):
                t = (n - 1) * span
                log.write("compute", t, iteration=n, duration_s=c, sleep_s=0.0)
                log.write("stall", t + c, iteration=n, duration_s=admission_s, reason="admission")
                tp = t + c + admission_s
                planned = 100
                log.write("push", tp, iteration=n, rows_planned=planned, rows_delivered=int(share * planned),
                          bytes=int(1e6 * p), deadline_s=None, delivered_share=share, duration_s=p, mandatory_s=None)
                log.write("staleness", tp + p, iteration=n, max=n % 3, mean=(n % 3) / 2)
                log.write("stall", tp + p, iteration=n, duration_s=s, reason="gate")
                log.write("pull", tp + p + s, iteration=n, rows_planned=planned, rows_delivered=planned,
                          bytes=1000, deadline_s=None, delivered_share=1.0, duration_s=l, mandatory_s=None)
                if k == 0 and n in dict(evals) and n > 0:
                    log.write("eval", n * span, iteration=n, accuracy=dict(evals)[n], loss=1.0)
            if partial_last:
                log._file.write('{"kind":"compute","t_s":99')  # a line still being written
            else:
                log.write("run_end", iterations * span, status="ok", iterations=iterations)
    if replay is not None:
        lines = ["t_s,wall_time,rate_mbit"]
        origin_unix = json.loads((d / "events-w0.jsonl").read_text().splitlines()[0])["origin_unix_s"]
        lines += [f"{t:.3f},{origin_unix + t:.6f},{r}" for t, r in replay]
        (d / "replay-w0.csv").write_text("\n".join(lines) + "\n")
    (d / ("DONE" if done else "INCOMPLETE")).write_text("{}\n")
    return d


# ----------------------------------------------------------------------------- composition
def test_iteration_table_and_composition_by_hand(tmp_path):
    run = load_run(make_run(tmp_path, "ROG4-a"))
    it = run.iterations
    assert set(it["worker"]) == {0, 1} and len(it) == 20
    w0 = it[it["worker"] == 0]
    assert w0["compute_s"].tolist() == [1.0] * 10
    assert w0["comm_s"].tolist() == [1.0] * 10
    assert w0["stall_s"].tolist() == [2.0] * 10
    assert w0["span_s"].tolist() == pytest.approx([4.0] * 10)
    comp = composition(run)
    per = comp["per_worker"].set_index("worker")
    assert per.loc[1, "comm_s"] == pytest.approx(2.0) and per.loc[1, "stall_s"] == pytest.approx(0.5)
    assert per.loc[1, "iter_s"] == pytest.approx(3.5)
    # means over workers: compute (1+1)/2, comm (1+2)/2, stall (2+0.5)/2, iteration (4+3.5)/2
    assert comp["compute_s"] == pytest.approx(1.0)
    assert comp["comm_s"] == pytest.approx(1.5)
    assert comp["stall_s"] == pytest.approx(1.25)
    assert comp["iter_s"] == pytest.approx(3.75)
    assert comp["other_s"] == pytest.approx(0.0, abs=1e-9)
    assert comp["iterations"] == 10


def test_admission_stall_counts_as_stall(tmp_path):
    run = load_run(make_run(tmp_path, "FLOWN4-a", system="FLOWN", admission_s=0.25))
    comp = composition(run)
    assert comp["stall_s"] == pytest.approx((2.25 + 0.75) / 2)
    assert run.iterations["stall_admission_s"].tolist() == [0.25] * 20


def test_partial_iteration_and_partial_line_are_skipped(tmp_path):
    d = make_run(tmp_path, "BSP-a", system="BSP", threshold=0, iterations=3, partial_last=True, done=False)
    run = load_run(d)
    assert run.status == "incomplete"
    assert sorted(run.iterations[run.iterations["worker"] == 0]["iteration"]) == [1, 2, 3]
    import pandas as pd

    ev = pd.DataFrame([{"kind": "compute", "t_s": 0.0, "iteration": 1, "duration_s": 1.0}])
    assert iteration_table(ev).empty  # no pull, no push: nothing complete


def test_push_share_and_staleness_columns(tmp_path):
    run = load_run(make_run(tmp_path, "ROG4-b", share=0.3))
    w0 = run.iterations[run.iterations["worker"] == 0].sort_values("iteration")
    assert w0["push_share"].tolist() == pytest.approx([0.3] * 10)
    assert w0["push_rows"].tolist() == [30] * 10
    assert w0["staleness_max"].tolist() == [n % 3 for n in range(1, 11)]
    assert w0["push_t_s"].tolist() == pytest.approx([4.0 * (n - 1) + 1.0 for n in range(1, 11)])


# ----------------------------------------------------------------------------- accuracy and targets
def test_accuracy_from_eval_records_in_percent_and_seconds(tmp_path):
    run = load_run(make_run(tmp_path, "ROG4-a"))
    assert run.accuracy_source == "eval records of w0"
    assert run.accuracy["accuracy_pct"].tolist() == pytest.approx([50.0, 60.0, 70.0])
    assert run.accuracy["time_s"].tolist() == pytest.approx([0.0, 20.0, 40.0])


def test_accuracy_csv_takes_precedence(tmp_path):
    d = make_run(tmp_path, "ROG4-a")
    (d / "accuracy.csv").write_text("time,iteration,accuracy\n0,0,0.4\n30,7,0.8\n")
    run = load_run(d)
    assert run.accuracy_source.startswith("accuracy.csv")
    assert run.accuracy["accuracy_pct"].tolist() == pytest.approx([40.0, 80.0])


def test_time_to_target_interpolates_between_tests(tmp_path):
    run = load_run(make_run(tmp_path, "ROG4-a"))
    # 60 % at 20 s, 70 % at 40 s -> 65 % at 30 s
    assert time_to_target_s(run.accuracy, 65.0) == pytest.approx(30.0)
    assert time_to_target_s(run.accuracy, 60.0) == pytest.approx(20.0)
    assert time_to_target_s(run.accuracy, 50.0) == pytest.approx(0.0)
    assert time_to_target_s(run.accuracy, 70.1) is None
    assert accuracy_at_time(run.accuracy, 30.0) == pytest.approx(65.0)
    assert accuracy_at_time(run.accuracy, 41.0) is None


def test_select_target_rule_and_equal_iterations(tmp_path):
    a = load_run(make_run(tmp_path, "ROG4-a"))
    b = load_run(make_run(tmp_path, "BSP-a", system="BSP", threshold=0, iterations=8,
                          evals=((0, 0.50), (4, 0.55), (8, 0.60))))
    target, rule = select_target([a.accuracy, b.accuracy], 0.8, ["ROG4-a", "BSP-a"])
    # start 50, lowest peak 60 (BSP-a) -> 50 + 0.8 x 10 = 58
    assert target == pytest.approx(58.0)
    assert "BSP-a" in rule and "0.8" in rule
    # BSP-a: 55 % at 16 s (4 x 4 s), 60 % at 32 s -> 58 % at 16 + 3/5 x 16 = 25.6 s
    assert time_to_target_s(b.accuracy, target) == pytest.approx(25.6)
    assert time_to_target_s(a.accuracy, target) == pytest.approx(16.0)
    eq = equal_iteration_count([a.accuracy, b.accuracy])
    assert eq == 8
    # ROG4-a: 60 % at 5, 70 % at 10 -> 66 % at 8
    assert accuracy_at_iteration(a.accuracy, eq) == pytest.approx(66.0)
    assert accuracy_at_iteration(b.accuracy, eq) == pytest.approx(60.0)


def test_a_reference_baseline_is_measured_but_does_not_set_the_target(tmp_path):
    from rog.analysis.metrics import compute_metrics

    a = load_run(make_run(tmp_path, "ROG4-a"))
    b = load_run(make_run(tmp_path, "BSP-a", system="BSP", threshold=0, iterations=8,
                          evals=((0, 0.50), (4, 0.55), (8, 0.60))))
    d = load_run(make_run(tmp_path, "DDP-a", system="DDP", threshold=0, iterations=2,
                          evals=((0, 0.50), (1, 0.52), (2, 0.53))))
    ms, target, rule, eq = compute_metrics([a, b, d], smooth_tests=1)  # raw tests: values by hand
    # as without DDP: start 50, lowest peak 60 (BSP-a) -> 58 %; equal iterations 8 (BSP-a), not DDP's 2
    assert target == pytest.approx(58.0) and "DDP-a" not in rule and eq == 8
    by = {m.run.run_id: m for m in ms}
    assert by["DDP-a"].time_to_target_s is None  # never reaches 58 %: measured against the target
    assert by["ROG4-a"].time_to_target_s == pytest.approx(16.0)


def test_no_common_target_when_a_run_never_improves(tmp_path):
    a = load_run(make_run(tmp_path, "ROG4-a"))
    b = load_run(make_run(tmp_path, "BSP-a", system="BSP", threshold=0, evals=((0, 0.5), (5, 0.45), (10, 0.5))))
    target, rule = select_target([a.accuracy, b.accuracy])
    assert target is None and "no common target" in rule
    with pytest.raises(ValueError, match="fraction"):
        select_target([a.accuracy], 1.5)


# ----------------------------------------------------------------------------- energy
def test_energy_to_target_by_hand(tmp_path):
    run = load_run(make_run(tmp_path, "ROG4-a"))
    # target 65 % at 30 s.  Worker 0 (4 s iterations): 7 x (13.35 + 1.0 x 4.25 + 2.0 x 4.04) = 179.76 J,
    # then 2 s of iteration 8: 1 s compute 13.35 + 0.5 s push 2.125 + 0.5 s stall 2.02 -> 197.255 J.
    # Worker 1 (3.5 s): 8 x (13.35 + 2 x 4.25 + 0.5 x 4.04) = 190.96 J, then 2 s: 13.35 + 1 s push 4.25.
    expected = 197.255 + 190.96 + 13.35 + 4.25
    assert team_energy_j(run, 30.0, MODEL_SOURCE) == pytest.approx(expected)
    metrics, target, _, _ = compute_metrics([run], target_fraction=0.75, smooth_tests=1)  # 50 + 0.75 x 20 = 65
    assert target == pytest.approx(65.0)
    assert metrics[0].time_to_target_s == pytest.approx(30.0)
    assert metrics[0].energy_to_target_j == pytest.approx(expected)
    assert metrics[0].energy_source == MODEL_SOURCE == "model:jetson-xavier-nx"


def test_cumulative_energy_matches_the_power_helper(tmp_path):
    run = load_run(make_run(tmp_path, "ROG4-a", admission_s=0.1))
    iv = [(s - run.t0_s, e - run.t0_s, st) for s, e, st in worker_timeline(run.events["w0"])]
    times = [0.0, 0.3, 1.05, 7.77, 22.2, 41.0, 60.0]  # 60 s lies after the last event: idle at the stall watts
    mine = cumulative_model_energy_j(iv, 0.0, times)
    ref = [model_energy_j(iv, JETSON_WATTS, 0.0, t, idle_w=JETSON_WATTS["idle"]) for t in times]
    assert mine == pytest.approx(ref)


def test_idle_time_is_counted_at_stall_watts():
    # 1 s compute, a 1 s gap, 1 s stall: 13.35 + 4.04 + 4.04
    iv = [(0.0, 1.0, "compute"), (2.0, 3.0, "stall")]
    assert cumulative_model_energy_j(iv, 0.0, [3.0])[0] == pytest.approx(13.35 + 2 * 4.04)


# ----------------------------------------------------------------------------- replay logs
def test_replay_log_is_put_on_the_run_clock(tmp_path):
    run = load_run(make_run(tmp_path, "ROG4-a", replay=[(0.0, 50.0), (2.5, 10.0)]))
    assert run.replay["worker"].tolist() == [0, 0]
    assert run.replay["time_s"].tolist() == pytest.approx([0.0, 2.5], abs=1e-5)
    assert run.replay["rate_mbit"].tolist() == [50.0, 10.0]


# ----------------------------------------------------------------------------- summary
def _item(tmp_path):
    make_run(tmp_path, "BSP-a", system="BSP", threshold=0, workers=((1.0, 1.0, 3.0, 1.0),) * 2,
             evals=((0, 0.5), (5, 0.6), (10, 0.65)))
    make_run(tmp_path, "SSP4-a", system="SSP", threshold=4, workers=((1.0, 1.0, 2.0, 1.0),) * 2,
             evals=((0, 0.5), (5, 0.6), (10, 0.66)))
    make_run(tmp_path, "ROG4-a", system="ROG", threshold=4, workers=((1.0, 0.5, 1.0, 0.5),) * 2,
             evals=((0, 0.5), (5, 0.6), (10, 0.66)))


def test_each_run_is_measured_once_whatever_the_target(tmp_path, monkeypatch):
    """compute_metrics reads a run's composition and smoothed curve once (rog.analysis.metrics.run_measures), however
    many readings (targets, items) ask; a run whose accuracy table is replaced is measured again."""
    import rog.analysis.metrics as M

    _item(tmp_path)
    runs = [load_run(d) for d in find_runs(tmp_path)]
    calls: list[str] = []
    real = M.composition
    monkeypatch.setattr(M, "composition", lambda r: calls.append(r.run_id) or real(r))
    at_08, t_08, _, _ = M.compute_metrics(runs, 0.8, smooth_tests=1)
    at_05, t_05, _, _ = M.compute_metrics(runs, 0.5, smooth_tests=1)
    assert sorted(calls) == sorted(r.run_id for r in runs)  # once per run, not once per reading
    assert t_05 < t_08  # two readings: two targets over the same measures
    # the measures a fresh load computes from scratch (new run objects) are the cached ones
    fresh, _, _, _ = M.compute_metrics([load_run(d) for d in find_runs(tmp_path)], 0.8, smooth_tests=1)
    for a, b in zip(at_08, fresh):
        assert (a.iter_s, a.stall_s, a.acc_final, a.time_to_target_s) == (b.iter_s, b.stall_s, b.acc_final, b.time_to_target_s)
    assert len(calls) == 2 * len(runs)
    runs[0].accuracy = runs[0].accuracy.copy()  # a replaced table: measured again
    M.compute_metrics(runs, 0.8, smooth_tests=1)
    assert len(calls) == 2 * len(runs) + 1 and calls[-1] == runs[0].run_id


def test_summary_json_has_exactly_the_issue_keys(tmp_path):
    _item(tmp_path)
    js, md = write_summary(tmp_path, smooth_tests=1)
    data = json.loads(js.read_text())
    assert set(data) == {"target_acc", "target_rule", "runs", "target_sensitivity", "atp", "robustness", "grades"}
    # ROG's claims with a bound, graded (rog.analysis.grades): the stall claim ROG-4 / BSP = 1/3 <= 0.5 agrees
    g = {r["claim"]: r for r in data["grades"]["ROG"]["rows"]}
    assert g["stall / iteration, ROG-4 / BSP"]["outcome"] == "agrees"
    assert g["stall / iteration, ROG-4 / BSP"]["grade"] == "consistent at reduced scale"
    assert data["grades"]["all"]["rows"] == len(g) and "## Grades across papers" in md.read_text()
    assert set(data["atp"]) == {"ROG4-a"}  # ATP statistics of the ROG runs (rog.papers.rog.atp)
    assert "## ATP: speculative budgets and delivered shares" in md.read_text()
    stall = next(e for e in data["robustness"] if e["claim"] == "stall / iteration, ROG-4 / BSP")
    # one trace, one seed: one replica; ROG-4 1 s / BSP 3 s of stall per iteration, bound <= 0.5
    assert stall["of"] == 1 and stall["holds"] == 1 and stall["median"] == pytest.approx(1 / 3)
    assert stall["run_ids"] == ["BSP-a", "ROG4-a"]
    assert [r["fraction"] for r in data["target_sensitivity"]] == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert set(data["runs"]) == {"BSP-a", "SSP4-a", "ROG4-a"}
    expected_keys = ["system", "threshold", "control", "replay_mode", "workers", "batch_multiple", "iterations",
                     "iter_s", "compute_s", "comm_s", "stall_s", "data_wait_s", "time_to_target_s",
                     "energy_to_target_j", "energy_source", "acc_final", "acc_at_equal_iters"]
    assert list(SUMMARY_KEYS) == expected_keys
    for entry in data["runs"].values():
        assert list(entry) == expected_keys
    rog = data["runs"]["ROG4-a"]
    assert rog["system"] == "ROG" and rog["threshold"] == 4 and rog["replay_mode"] == "artifact"
    assert rog["stall_s"] == pytest.approx(1.0) and rog["comm_s"] == pytest.approx(1.0)
    assert rog["iter_s"] == pytest.approx(3.0) and rog["iterations"] == 10
    assert rog["data_wait_s"] == 0.0  # no stream: no time waiting for data, and it is never stall
    # start 50, lowest peak 65 (BSP) -> target 62 %; BSP: 60 % at 30 s, 65 % at 60 s -> 42 s
    assert data["target_acc"] == pytest.approx(62.0)
    assert data["runs"]["BSP-a"]["time_to_target_s"] == pytest.approx(42.0)
    assert rog["acc_at_equal_iters"] == pytest.approx(66.0)
    assert rog["energy_source"] == "model:jetson-xavier-nx"
    assert md.exists()


def test_claim_rows_compute_ratios_and_verdicts(tmp_path):
    _item(tmp_path)
    metrics, _, _, _ = compute_metrics([load_run(d) for d in find_runs(tmp_path)], smooth_tests=1)
    rows = {c.name: c for c in claim_rows(metrics)}
    c = rows["stall / iteration, ROG-4 / BSP"]
    assert c.ours == pytest.approx(1.0 / 3.0)  # 1 s vs 3 s
    assert c.verdict() == "pass"  # <= 0.5
    assert "inside the paper's range" in c.sentence() and "meets" in c.sentence()
    c = rows["stall / iteration, ROG-4 / SSP-4"]
    assert c.ours == pytest.approx(0.5) and c.verdict() == "pass"
    c = rows["time / iteration, ROG-4 / BSP"]
    assert c.ours == pytest.approx(3.0 / 6.0)
    c = rows["stall / iteration, ROG-20 / SSP-20"]
    # a missing input is not a zero: the claim says what is missing and is not judged
    assert c.ours is None and c.verdict() == "not decidable"
    assert c.sentence() == "Not decidable: no run of ROG-20, SSP-20."
    c = rows["accuracy at equal iterations, ROG-4 - BSP"]
    assert c.ours == pytest.approx(66.0 - 65.0) and c.verdict() == "pass"
    # equal time = 30 s (ROG-4's last test): ROG-4 66 %; BSP 60 % (iteration 5 at 30 s); SSP-4 (5 s
    # iterations) 60 % at 25 s and 66 % at 50 s -> 61.2 % at 30 s; gain over the best = 4.8 points
    (c,) = [c for name, c in rows.items() if name.startswith("accuracy at equal time (30 s")]
    assert c.ours == pytest.approx(66.0 - 61.2)
    assert "below the paper's range +4.90 to +6.50 points" in c.sentence()


def test_summary_markdown_has_the_tables(tmp_path):
    _item(tmp_path)
    _, md = write_summary(tmp_path)
    text = md.read_text()
    for part in ("## Runs", "## Time composition next to the artifact's logs", "## Claims", "## Replay modes",
                 "model:jetson-xavier-nx", "| ROG-4 |", "7.41"):
        assert part in text
    # the model is labelled where the energy source is named, not merely somewhere in the file
    energy = [ln for ln in text.splitlines() if ln.startswith("- Energy source: model:jetson-xavier-nx (")]
    assert len(energy) == 1 and "model:jetson-xavier-nx = state-based model, NOT a measurement:" in energy[0]


def test_replay_paragraph_compares_the_modes(tmp_path):
    for mode, stall in (("artifact", 3.0), ("recorded", 1.0)):
        make_run(tmp_path, f"BSP-{mode}", system="BSP", threshold=0, replay_mode=mode,
                 workers=((1.0, 1.0, stall, 1.0),) * 2)
        make_run(tmp_path, f"SSP4-{mode}", system="SSP", replay_mode=mode, workers=((1.0, 1.0, stall / 2, 1.0),) * 2)
    _, md = write_summary(tmp_path)
    text = md.read_text()
    assert "BSP stalls 3.000 s per iteration in `artifact` mode and 1.000 s in `recorded` mode" in text
    assert "SSP-4 removes 50 % of BSP's stall in `artifact` mode and 50 % in `recorded` mode" in text


def test_summarize_cli_writes_only_summary_files(tmp_path):
    _item(tmp_path)
    before = {p for p in tmp_path.rglob("*")}
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize.py"), "--result-dir", str(tmp_path),
                          "--runs", "ROG*", "--runs", "BSP*"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    after = {p for p in tmp_path.rglob("*")}
    assert after - before == {tmp_path / "summary.json", tmp_path / "summary.md"}
    assert set(json.loads((tmp_path / "summary.json").read_text())["runs"]) == {"ROG4-a", "BSP-a"}
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "summarize.py"), "--result-dir", str(tmp_path),
                          "--runs", "nothing*"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "no run folder" in bad.stderr


def test_bad_inputs_raise_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="result_dir"):
        find_runs(tmp_path / "missing")
    d = make_run(tmp_path, "ROG4-a")
    (d / "accuracy.csv").write_text("t,acc\n1,2\n")
    with pytest.raises(ValueError, match="time,iteration,accuracy"):
        load_run(d)


def test_sensor_power_logs_on_real_devices(tmp_path):
    d = make_run(tmp_path, "ROG4-a")
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    for k in (0, 1):  # 10 W flat on worker 0, a ramp 0 -> 60 W over 60 s on worker 1 (t_s on the run clock)
        rows = "\n".join(f"{t:.1f},{10.0 if k == 0 else t:.3f},jtop" for t in range(0, 61))
        (d / f"power-w{k}.csv").write_text("t_s,power_w,source\n" + rows + "\n")
    # on the loopback testbed the workers share one machine: the model is used, not the logs
    m, *_ = compute_metrics([load_run(d)], target_fraction=0.75, smooth_tests=1)
    assert m[0].energy_source == MODEL_SOURCE
    cfg["testbed"] = "hosts"
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    m, *_ = compute_metrics([load_run(d)], target_fraction=0.75, smooth_tests=1)
    # target 65 % at 30 s: 10 W x 30 s + ramp integral 30^2 / 2 = 300 + 450 J
    assert m[0].energy_source == "jtop"
    assert m[0].energy_to_target_j == pytest.approx(750.0)
    with pytest.raises(ValueError, match="every worker"):
        (d / "power-w1.csv").unlink()
        from rog.analysis.metrics import energy_source

        energy_source(load_run(d), "sensor")


def test_compared_runs_never_mix_sensor_and_model_energy(tmp_path):
    """Two runs on the hosts testbed: both with jtop logs for every worker -> jtop for both; one without ->
    the model for both (with a note on the run whose logs were set aside)."""
    runs = []
    for name in ("ROG4-a", "BSP-b"):
        d = make_run(tmp_path, name, system=name.split("-")[0].rstrip("4"), threshold=4 if name.startswith("ROG") else 0)
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        (d / "config.yaml").write_text(yaml.safe_dump(dict(cfg, testbed="hosts")))
        for k in (0, 1):
            (d / f"power-w{k}.csv").write_text("t_s,power_w,source\n" + "\n".join(f"{t},5.0,jtop" for t in range(61)) + "\n")
        runs.append(d)
    m, *_ = compute_metrics([load_run(d) for d in runs], target_fraction=0.75, smooth_tests=1)
    assert [x.energy_source for x in m] == ["jtop", "jtop"]
    # 2 workers x 5 W flat until the target (65 % at 30 s on both synthetic runs): 300 J each
    assert [x.energy_to_target_j for x in m] == pytest.approx([300.0, 300.0])
    (runs[1] / "power-w1.csv").unlink()  # one worker of one run has no sensor log
    m, *_ = compute_metrics([load_run(d) for d in runs], target_fraction=0.75, smooth_tests=1)
    assert [x.energy_source for x in m] == [MODEL_SOURCE, MODEL_SOURCE]
    assert any("never mixes" in n for n in m[0].notes) and not any("never mixes" in n for n in m[1].notes)
    alone, *_ = compute_metrics([load_run(runs[0])], target_fraction=0.75, smooth_tests=1)
    assert alone[0].energy_source == "jtop"  # on its own the run keeps its sensor readings


def test_smoothing_reads_targets_and_crossings_from_centred_means():
    from rog.analysis.metrics import smooth_accuracy, time_to_target_s

    acc = pd.DataFrame({"time_s": [0.0, 10.0, 20.0, 30.0, 40.0], "iteration": [0, 1, 2, 3, 4],
                        "accuracy_pct": [50.0, 62.0, 56.0, 65.0, 68.0]})
    s = smooth_accuracy(acc.sample(frac=1.0, random_state=0))  # any row order
    # by hand: the first test kept; then (62+56)/2, (62+56+65)/3, (56+65+68)/3, (65+68)/2
    assert s["accuracy_pct"].tolist() == pytest.approx([50.0, 59.0, 61.0, 63.0, 66.5])
    # the raw curve crosses 60 % on the way to the 62 % spike (50 -> 62 over 0-10 s: at 8.33 s); the
    # smoothed one between 10 s (59 %) and 20 s (61 %), at 15 s
    assert time_to_target_s(acc, 60.0) == pytest.approx(10 * 10 / 12)
    assert time_to_target_s(s, 60.0) == pytest.approx(15.0)
    assert smooth_accuracy(acc, 1)["accuracy_pct"].tolist() == acc["accuracy_pct"].tolist()
    with pytest.raises(ValueError, match="odd"):
        smooth_accuracy(acc, 2)


def test_crossing_table_names_the_iteration_and_the_first_iteration(tmp_path):
    from rog.papers.rog.claims import crossing_paragraph, crossing_table, first_iteration_s, iteration_at_target

    run = load_run(make_run(tmp_path, "ROG4-a"))
    ms, target, _, _ = compute_metrics([run], target_fraction=0.75, smooth_tests=1)  # 65 % at 30 s (see above)
    m = ms[0]
    # worker 0 spans 4 s per iteration and tests at 0, 5, 10 (t = 0, 20, 40 s): 30 s is iteration 7.5
    assert iteration_at_target(m) == pytest.approx(7.5)
    assert first_iteration_s(m) == pytest.approx(4.0)  # its first compute, push, stall and pull: 1 + 0.5 + 2 + 0.5 s
    rows = crossing_table(ms)
    assert rows[2] == "| ROG4-a | 30.0 | 7.5 | 4.0 | 3.750 |"  # s/iter: mean of the workers' 4.0 and 3.5 s
    assert "ROG-4 at iteration 7.5 after 30.0 s (its first iteration took 4.0 s, 13 % of that)" in \
        crossing_paragraph(ms, target)


def test_team_accuracy_is_the_mean_over_tested_workers_on_worker_0s_schedule(tmp_path):
    d = make_run(tmp_path, "ROG4-a")
    # worker 0 tested at 0, 10, 20 s; worker 1 at 0, 12, 24 s (its own checkpoint clock, a bit late)
    (d / "accuracy.csv").write_text("time,iteration,accuracy,worker,checkpoint\n"
                                    "0,0,0.50,0,a\n10,2,0.60,0,b\n20,4,0.62,0,c\n"
                                    "0,0,0.50,1,d\n12,6,0.74,1,e\n24,12,0.80,1,f\n")
    run = load_run(d)
    assert run.accuracy_source.endswith("team mean over workers 0, 1")
    assert sorted(run.accuracy_tests["worker"].unique().tolist()) == [0, 1]
    # by hand: worker 1 at 10 s = 50 + (74 - 50) * 10/12 = 70, iteration 5; at 20 s = 74 + 6 * 8/12 = 78,
    # iteration 6 + 6 * 8/12 = 10
    assert run.accuracy["time_s"].tolist() == pytest.approx([0.0, 10.0, 20.0])
    assert run.accuracy["accuracy_pct"].tolist() == pytest.approx([50.0, (60 + 70) / 2, (62 + 78) / 2])
    assert run.accuracy["iteration"].tolist() == pytest.approx([0.0, (2 + 5) / 2, (4 + 10) / 2])
    # one tested worker: its tests as they are
    (d / "accuracy.csv").write_text("time,iteration,accuracy,worker,checkpoint\n0,0,0.5,1,a\n9,3,0.7,1,b\n")
    one = load_run(d)
    assert one.accuracy_source.endswith("; worker 1")
    assert one.accuracy["accuracy_pct"].tolist() == pytest.approx([50.0, 70.0])


def test_summary_reads_the_team_curve_and_reports_worker_0_alone(tmp_path):
    _item(tmp_path)
    curves = {"BSP-a": ((50, 60, 65), (50, 60, 65)), "SSP4-a": ((50, 58, 64), (50, 62, 70)),
              "ROG4-a": ((50, 55, 63), (50, 65, 73))}
    for name, per_worker in curves.items():
        rows = ["time,iteration,accuracy,worker,checkpoint"]
        rows += [f"{t},{3 * k},{acc / 100},{w},c{w}{k}" for w, accs in enumerate(per_worker)
                 for k, (t, acc) in enumerate(zip((0, 10, 20), accs))]
        (tmp_path / name / "accuracy.csv").write_text("\n".join(rows) + "\n")
    js, md = write_summary(tmp_path, smooth_tests=1)
    data = json.loads(js.read_text())
    # team: 50 / 60 / 65, 67, 68 -> lowest peak 65 (BSP), target 50 + 0.8 x 15 = 62;
    # BSP 60 -> 65 over 10-20 s: 14 s; ROG-4 60 -> 68: 12.5 s
    assert data["target_acc"] == pytest.approx(62.0)
    assert data["runs"]["BSP-a"]["time_to_target_s"] == pytest.approx(14.0)
    assert data["runs"]["ROG4-a"]["time_to_target_s"] == pytest.approx(12.5)
    assert data["runs"]["ROG4-a"]["acc_final"] == pytest.approx(68.0)
    # worker 0 alone: lowest peak 63 (ROG-4), target 60.4; BSP 10.8 s, SSP-4 14.0 s, ROG-4 16.75 s
    w0 = data["worker0"]
    assert w0["worker"] == 0 and w0["target_acc"] == pytest.approx(60.4)
    assert w0["runs"]["BSP-a"]["time_to_target_s"] == pytest.approx(10.8)
    assert w0["runs"]["SSP4-a"]["time_to_target_s"] == pytest.approx(14.0)
    assert w0["runs"]["ROG4-a"]["time_to_target_s"] == pytest.approx(16.75)
    assert w0["runs"]["ROG4-a"]["acc_final"] == pytest.approx(63.0)
    (ttt,) = [c for c in w0["claims"] if c["comparison"].startswith("time to target, ROG-4 / min")]
    assert ttt["ours"] == pytest.approx(16.75 / 10.8) and ttt["verdict"] == "FAIL"
    text = md.read_text()
    assert "team mean over workers 0, 1" in text and "## Worker 0's model alone (the artifact's measure)" in text
