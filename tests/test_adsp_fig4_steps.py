"""ADSP's Figs. 4c and 4d (rog.papers.adsp.fig4_steps): steps counted from the workers' compute records on the
global model's grid, against hand-computed counts, and the verdict rules of docs/adsp.md."""

from __future__ import annotations

import pandas as pd
import pytest

from rog.analysis.load import ITERATION_COLUMNS, RunData
from rog.papers.adsp.fig4_steps import fig4cd_markdown, fig4cd_rows, grid_origin_s, steps_at

ORIGIN_S = 5.0  # every worker joined 5 s into the run clock; the grid starts there


def _run(tmp_path, system, seed, loss_step, worker_rates):
    losses = [max(2.0 - loss_step * i, 1.0) for i in range(43)]  # every 2 s of grid time, 0 to 84 s
    ps = pd.DataFrame.from_records([dict(kind="global_eval", t_s=ORIGIN_S + 2.0 * i + 0.01, t_grid_s=2.0 * i, loss=l,
                                         accuracy=100 - 10 * l, duration_s=0.05, cpu_s=0.04)
                                    for i, l in enumerate(losses)])
    events = {"ps": ps}
    for w, rate in enumerate(worker_rates):  # mini-batch k runs from ORIGIN + k / rate to ORIGIN + (k + 1) / rate
        n = int(90 * rate)
        events[f"w{w}"] = pd.DataFrame.from_records(
            [dict(kind="compute", t_s=ORIGIN_S + k / rate, duration_s=1.0 / rate, iteration=k + 1) for k in range(n)])
    row = dict.fromkeys(ITERATION_COLUMNS, 0.0)
    row.update(worker=0, iteration=1, t_start_s=0.0, t_end_s=1.0, span_s=1.0, compute_s=1.0)
    name = f"{system}{seed}"
    return RunData(tmp_path / name, name, dict(note="fig1", seed=seed, library=system), "done", 0.0, None,
                   events=events, iterations=pd.DataFrame.from_records([row]))


def _runs(tmp_path):
    # as test_global_eval's Fig. 4: target loss 1.2, reached at 16 s (ADSP), 64 s (BSP), 32 s (SSP, ADACOMM);
    # two workers each, steps per second in total: ADSP 20, BSP 8, SSP 11, Fixed ADACOMM 12
    spec = {"ADSP": (0.1, (10, 10)), "BSP": (0.025, (4, 4)), "SSP": (0.05, (5.5, 5.5)), "ADACOMM": (0.05, (6, 6))}
    return [_run(tmp_path, s, seed, d, rates) for seed in (0, 1, 2) for s, (d, rates) in spec.items()]


def test_steps_are_counted_on_the_grid_from_the_ps_origin(tmp_path):
    run = _runs(tmp_path)[0]  # ADSP, 10 + 10 steps per second from the origin
    assert grid_origin_s(run) == pytest.approx(ORIGIN_S + 0.01)
    # a step counts once done; at grid time t about 20 t steps (the 10 ms wake latency of the grid adds none here)
    assert steps_at(run, [0.0, 0.05, 1.0, 16.0]).tolist() == [0, 0, 20, 320]


def test_fig4c_and_4d_rows_and_verdicts(tmp_path):
    d = fig4cd_rows(_runs(tmp_path))
    s0 = d["seeds"][0]
    assert s0["steps_to_target"] == {"ADSP": 320, "BSP": 512, "SSP": 352, "ADACOMM": 384}
    assert s0["steps_by_adsp_time"] == {"ADSP": 320, "BSP": 128, "SSP": 176, "ADACOMM": 192}
    assert s0["step_rate_per_s"]["ADSP"] == pytest.approx(1680 / 84) and s0["step_rate_per_s"]["BSP"] == pytest.approx(8)
    v = d["verdicts"]
    assert v["c_step_rate"] == "agrees"  # 20 >= 1.2 x 12
    assert v["d_better_than_bsp_ssp"] == "agrees"  # 320 < 352 and < 512
    assert v["d_slightly_below_fixed_adacomm"] == "does not agree"  # Fixed ADACOMM's 384 > ADSP's 320
    md = "\n".join(fig4cd_markdown(d))
    assert "| ADSP | 20.0 | 20.0 to 20.0 | 320 |" in md and "seed 2: steps done by ADSP's time" in md


def test_a_system_that_missed_the_target_makes_4d_not_decidable():
    from rog.papers.adsp.fig4_steps import _verdicts

    rate = {k: dict(median=m) for k, m in (("ADSP", 20.0), ("BSP", 8.0), ("SSP", 17.0), ("ADACOMM", 12.0))}
    steps = {k: dict(median=m, missing=0) for k, m in (("ADSP", 400), ("BSP", 500), ("SSP", 450), ("ADACOMM", 300))}
    v = _verdicts(rate, steps)
    assert v == {"c_step_rate": "does not agree",  # 20 < 1.2 x 17
                 "d_better_than_bsp_ssp": "agrees", "d_slightly_below_fixed_adacomm": "agrees"}  # 300 <= 400 <= 450
    steps["BSP"]["missing"] = 1
    assert _verdicts(rate, steps)["d_better_than_bsp_ssp"] == "not decidable"
    assert _verdicts(rate, steps)["d_slightly_below_fixed_adacomm"] == "agrees"
