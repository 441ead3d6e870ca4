"""The global model on one time grid for every system (rog.runtime.global_eval): grid times, what the
evaluator sees, skipping rather than running late, the --global-eval-every-s flag, and Figs. 1/4 read
from the records (rog.papers.adsp.global_curve)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from rog.papers.adsp.global_curve import eval_cost, fig1_seed_rows, fig4_rows, global_curve, global_markdown
from rog.analysis.load import ITERATION_COLUMNS, RunData
from rog.runtime import read_events
from rog.runtime.global_eval import start_global_eval

from benchmarks.timing import global_eval as TG
from test_adsp import _run

EVERY_S = 0.1


@pytest.mark.parametrize("name, threshold", [("BSP", 0), ("ADACOMM", 3)])
def test_global_eval_on_the_grid_for_any_system(tmp_path, name, threshold):
    seen = []

    def evaluate(total):
        seen.append(float(np.abs(total).sum()))
        return seen[-1], 50.0

    ps, engines, _, _ = _run(name, threshold, {}, [30, 30, 30], 0.02, events_dir=tmp_path,
                             on_ps=lambda ps: start_global_eval(ps, evaluate, EVERY_S))
    recs = ps.global_evals
    assert len(recs) >= 3
    grid = [r["t_grid_s"] for r in recs]
    skipped = [r["skipped"] for r in recs]
    # the grid: multiples of EVERY_S from 0, increasing; every point between two evaluations was skipped and
    # counted (a loaded machine may skip some; at this cost a quiet one skips none: benchmarks/timing, bench)
    assert all(g == pytest.approx(round(g / EVERY_S) * EVERY_S) for g in grid)
    assert grid[0] == pytest.approx(EVERY_S * skipped[0]) and all(b > a for a, b in zip(grid, grid[1:]))
    assert all(round((b - a) / EVERY_S) == 1 + (sb - sa) for a, b, sa, sb in zip(grid, grid[1:], skipped, skipped[1:]))
    # every update moves each coordinate towards its worker's target from the same side (lr 0.05, no overshoot):
    # the global model's distance from the start only grows, and never beyond what was finally committed
    losses = [r["loss"] for r in recs]
    assert all(b >= a - 1e-6 for a, b in zip(losses, losses[1:]))
    assert losses[-1] <= float(np.abs(ps.state.total).sum()) + 1e-6 and losses[-1] > 0
    assert all(r["cpu_s"] >= 0 and r["duration_s"] >= 0 for r in recs)
    _, log = read_events(tmp_path / "events-ps.jsonl")
    assert len([r for r in log if r["kind"] == "global_eval"]) == len(recs)


def test_a_slow_evaluation_skips_grid_points_never_runs_late(tmp_path):
    def evaluate(total):
        time.sleep(0.25)  # 2.5 grid steps
        return 1.0, 10.0

    ps, _, _, _ = _run("BSP", 0, {}, [40, 40, 40], 0.02, on_ps=lambda ps: start_global_eval(ps, evaluate, EVERY_S))
    recs = ps.global_evals
    assert len(recs) >= 2 and recs[-1]["skipped"] >= 1
    grid = [r["t_grid_s"] for r in recs]
    assert all(round((b - a) / EVERY_S) >= 2 for a, b in zip(grid, grid[1:]))  # the points in between were skipped


@pytest.mark.bench
def test_bench_a_cheap_evaluation_skips_no_grid_point():
    for f in TG.grid_figures():
        assert f["ok"], f


def test_bad_every_s():
    with pytest.raises(ValueError, match="every_s"):
        start_global_eval(object(), lambda t: (0.0, 0.0), 0.0)


def test_flag_checked():
    from rog.errors import ConfigError
    from rog.experiment.cli import build_parser
    from rog.experiment.sync_options import check

    for flags in ([], ["--global-eval-every-s", "2"]):
        check(build_parser().parse_args(flags))
    with pytest.raises(ConfigError, match="--global-eval-every-s"):
        check(build_parser().parse_args(["--global-eval-every-s", "-1"]))


def _run_data(tmp_path, name, system, seed, losses, every_s=2.0, comm=0.0, stall=0.0):
    ps = pd.DataFrame.from_records([dict(kind="global_eval", t_s=i * every_s, t_grid_s=i * every_s, loss=l,
                                         accuracy=100 - 10 * l, duration_s=0.05, cpu_s=0.04)
                                    for i, l in enumerate(losses)])
    row = dict.fromkeys(ITERATION_COLUMNS, 0.0)
    row.update(worker=0, iteration=1, t_start_s=0.0, t_end_s=1.0, span_s=1.0, compute_s=1.0 - comm - stall,
               comm_s=comm, stall_s=stall)
    it = pd.DataFrame.from_records([row])
    return RunData(tmp_path / name, name, dict(note="fig1", seed=seed, library=system), "done", 0.0, None,
                   events={"ps": ps}, iterations=it)


def test_fig4_from_the_global_model(tmp_path):
    # loss falls linearly from 2.0 by d per sample (every 2 s) to a floor of 1.0, which every system reaches
    # and holds for two samples; smoothing over 3 samples keeps the straight parts straight.  Target
    # (fraction 0.8 of the way from 2.0 to the highest lowest loss, 1.0): 1.2, crossed at sample 0.8 / d
    dec = {"ADSP": 0.1, "BSP": 0.025, "SSP": 0.05, "ADACOMM": 0.05}
    runs = []
    for seed in (0, 1, 2):
        for s, d in dec.items():
            runs.append(_run_data(tmp_path, f"{s}{seed}", s, seed, [max(2.0 - d * i, 1.0) for i in range(43)]))
    f4 = fig4_rows(runs)
    assert len(f4["seeds"]) == 3
    seed0 = f4["seeds"][0]
    assert seed0["target_loss"] == pytest.approx(1.2)
    assert seed0["time_to_target_s"]["ADSP"] == pytest.approx(16.0)  # sample 8
    assert seed0["time_to_target_s"]["BSP"] == pytest.approx(64.0)  # sample 32
    pb = f4["per_baseline"]
    assert pb["BSP"]["median"] == pytest.approx(0.75) and pb["BSP"]["verdict"] == "agrees"  # paper 80 %
    assert pb["SSP"]["median"] == pytest.approx(0.5) and pb["SSP"]["verdict"] == "agrees"  # paper 53 %
    assert pb["ADACOMM"]["median"] == pytest.approx(0.5) and pb["ADACOMM"]["verdict"] == "does not agree"  # 33 %
    # the other reading, speed-up T_b / T_ADSP - 1: 64 / 16 - 1 = 300 % vs BSP, 32 / 16 - 1 = 100 % vs SSP and ADACOMM
    assert pb["BSP"]["speedup_median"] == pytest.approx(3.0) and pb["BSP"]["speedup_verdict"] == "does not agree"
    assert pb["SSP"]["speedup_median"] == pytest.approx(1.0) and pb["SSP"]["speedup_verdict"] == "does not agree"
    md = "\n".join(global_markdown(dict(fig4=f4, eval_cost=eval_cost(runs))))
    assert "| BSP | 80.0 % | 75.0 %" in md and "of one core" in md and "| 300.0 % |" in md
    c = eval_cost(runs)
    assert c["cpu_s_median"] == pytest.approx(0.04) and c["core_share"] == pytest.approx(0.02)


def test_fig1_over_seeds_median_rule(tmp_path):
    runs = [_run_data(tmp_path, f"b{s}", "BSP", s, [1.0, 0.9], comm=0.3, stall=w) for s, w in enumerate((0.25, 0.22, 0.1))]
    runs += [_run_data(tmp_path, f"s{s}", "SSP", s, [1.0, 0.9], comm=0.3, stall=w) for s, w in enumerate((0.25, 0.21, 0.1))]
    f1 = fig1_seed_rows(runs)
    assert f1["systems"]["BSP"]["median"] == pytest.approx(0.52) and f1["verdict"] == "agrees"
    runs[4] = _run_data(tmp_path, "s1", "SSP", 1, [1.0, 0.9], comm=0.3, stall=0.2)  # SSP median exactly 50 %
    assert fig1_seed_rows(runs)["verdict"] == "does not agree"
    assert fig1_seed_rows(runs[:3])["verdict"] == "not decidable"  # no SSP runs
    assert global_curve(runs[0])["time_s"].tolist() == [0.0, 2.0]


def test_stop_waits_for_the_evaluator_to_leave(tmp_path):
    # the PS process exits right after serve(): an evaluator still inside torch would abort it, so the
    # run stops it and waits; here an evaluation takes 0.3 s and must be over when stop returns
    from rog.runtime.global_eval import stop_global_eval

    holder = {}

    def evaluate(total):
        time.sleep(0.3)
        return 1.0, 10.0

    def on_ps(ps):
        holder["t"] = start_global_eval(ps, evaluate, EVERY_S)

    ps, _, _, _ = _run("BSP", 0, {}, [10, 10, 10], 0.02, on_ps=on_ps)
    t0 = time.monotonic()
    stop_global_eval(ps, holder["t"])
    assert not holder["t"].is_alive() and time.monotonic() - t0 < 2.0
