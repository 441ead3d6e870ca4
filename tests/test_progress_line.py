"""The live progress (rog.experiment.progress): rate and ETA from training iterations only (the event clock,
the figure the summary reports as train_s / iterations), start-up phases from the run folder, redraws
throttled by tqdm, the closing sentence, and run_all.sh's status lines (a fake clock)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

from rog.experiment.driver import PlanStatus, STATUS_EVERY_S
from rog.experiment.items import ITEMS, plan_runs, PROFILES
from rog.experiment.progress import REDRAWS_PER_S, Progress, closing_line


def _write(run_dir: Path, k: int, recs: list[dict]) -> None:
    with open(run_dir / f"events-w{k}.jsonl", "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def _iteration(it: int, t: float, dur: float = 0.1, stall: float = 0.02) -> list[dict]:
    return [{"kind": "compute", "t_s": t, "iteration": it, "duration_s": dur},
            {"kind": "stall", "t_s": t + dur, "iteration": it, "duration_s": stall},
            {"kind": "pull", "t_s": t + dur + stall, "iteration": it, "duration_s": 0.03, "bytes": 10}]


def test_rate_counts_training_only_and_phases_come_first(tmp_path):
    prog = Progress(tmp_path, 2, total=10, label="run")
    prog.phase = "parameter server starting"
    prog.update()
    assert prog.current_phase().startswith("worker host")  # no layout.json yet: the worker host builds the model
    (tmp_path / "layout.json").write_text("{}")
    (tmp_path / "ps.port").write_text("1")
    assert prog.current_phase() == "workers starting (torch, data)"
    (tmp_path / "w0.ready").write_text("")
    assert prog.current_phase() == "workers 1/2 ready"
    (tmp_path / "links.ready").write_text("{}")
    assert prog.current_phase().startswith("warm-up") and prog.postfix().startswith("starting: ")
    # 25 s of start-up before training (run_start at t = 25): not counted in the rate
    _write(tmp_path, 0, [{"kind": "run_start", "t_s": 25.0}] + _iteration(1, 25.0) + _iteration(2, 25.5) + _iteration(3, 26.0))
    _write(tmp_path, 1, [{"kind": "run_start", "t_s": 25.1}] + _iteration(1, 25.1) + _iteration(2, 25.9))
    prog.update()
    assert prog.iterations == 2  # the slowest worker's
    end = 26.0 + 0.1 + 0.02 + 0.03  # worker 0's third pull ends last
    assert abs(prog.s_per_it() - (end - 25.0) / 2) < 1e-9
    assert abs(prog.stall_share() - 5 * 0.02 / (5 * 0.15)) < 1e-9
    post = prog.postfix()
    assert f"{(end - 25.0) / 2:.2f} s/it" in post and "ETA 00:05" in post  # 8 left x 0.575 s


def test_redraws_are_throttled_by_tqdm(tmp_path):
    out = io.StringIO()
    prog = Progress(tmp_path, 1, total=100000, label="run")
    prog.open_bar(out)
    _write(tmp_path, 0, [{"kind": "run_start", "t_s": 0.0}])
    t0 = time.monotonic()
    for it in range(1, 3001):  # a hot loop: every call has something new
        prog.add(0, _iteration(it, it * 0.01)[-1])
        prog.show()
    took = time.monotonic() - t0
    prog.close()
    redraws = out.getvalue().count("\r")
    assert redraws <= 3 + REDRAWS_PER_S * took + 2, (redraws, took)  # open, close, at most 2 a second between


def test_closing_line_names_run_status_iterations_time_and_folder(tmp_path):
    d = tmp_path / "ROG4-x"
    line = closing_line({"iterations": 20, "train_s": 2.4, "wall_s": 33.0}, "done", "", d)
    assert line == f"done: ROG4-x DONE, 20 iterations in 2.4 s of training (0.12 s/it), 33 s wall; results in {d}"
    bad = closing_line({"iterations": 3, "train_s": None}, "incomplete", "interrupted (Ctrl-C)", d)
    assert bad.startswith("INCOMPLETE: ROG4-x (interrupted (Ctrl-C)), 3 iterations;") and "partial results" in bad


def test_run_all_prints_a_status_line_per_run_every_period(tmp_path):
    prof = PROFILES["quick"]
    runs = plan_runs([ITEMS["threshold"]], prof.workload, prof, 20.0)
    todo = list(enumerate(runs, 1))
    now = [0.0]
    out = io.StringIO()
    st = PlanStatus(tmp_path, todo, len(runs), 1, 60.0, clock=lambda: now[0], out=out)
    k, first = todo[0]
    (tmp_path / first.run_id).mkdir()
    for t in (0.0, 4.0, STATUS_EVERY_S + 0.5, STATUS_EVERY_S + 3.0, 2 * STATUS_EVERY_S + 1.0):
        now[0] = t
        if t in (STATUS_EVERY_S + 0.5, 2 * STATUS_EVERY_S + 1.0):  # one more iteration of every worker
            for w in range(first.spec.workers):
                _write(tmp_path / first.run_id, w, [{"kind": "run_start", "t_s": 1.0}] + _iteration(1, 1.0) if t < 15
                       else _iteration(2, 2.0))
        st.tick({0: ((k, first), None)})
    lines = out.getvalue().splitlines()
    runs_lines = [ln for ln in lines if ln.startswith("[run_all] run ")]
    assert len(runs_lines) == 2  # at 10.5 s and 21 s, not at 0, 4 or 13 s
    assert runs_lines[0].startswith(f"[run_all] run 1/{len(runs)} {first.run_id}: 10 s of about")
    assert "budget 20 s" in runs_lines[0] and "1 it" in runs_lines[0] and "stall 13%" in runs_lines[0]
    assert "2 it" in runs_lines[1]
    plan = [ln for ln in lines if ln.startswith("[run_all] plan: about")]
    assert len(plan) == 2 and f"{len(runs) - 1} run(s) not started" in plan[0]


def test_a_budget_run_counts_no_iterations_and_its_eta_is_the_budget_left(tmp_path):
    prog = Progress(tmp_path, 1, total=None, label="run", budget_s=20.0)
    for rec in [{"kind": "run_start", "t_s": 3.0}] + _iteration(1, 3.0) + _iteration(2, 4.0):
        prog.add(0, rec)
    train = 4.0 + 0.1 + 0.02 + 0.03 - 3.0  # 1.15 s of training
    assert abs(prog.train_s() - train) < 1e-9
    assert f"ETA 00:{round(20.0 - train):02d}" in prog.postfix()  # 18.85 s of the budget left
