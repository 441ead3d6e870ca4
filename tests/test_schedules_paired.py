"""The paired DynaComm measurement: which schedule governs which iteration, a live rotation over the
unchanged PS (segments as the rotation says, weights equal to Sequential's), and its summary and check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rog.papers.dynacomm.paired import paired_checks
from rog.papers.dynacomm.bench import SCHEDULE_NAMES, main as bench_main, paired_summary
from rog.runtime import read_events
from rog.schedules.paired import PairedTrainer, is_measured, rotation_schedule
from tests.test_schedules_runtime import conv_model, run


def test_rotation_by_hand():
    # cold 1, profiling 2 and 3 (first plan after 3); then turns of 2: a a b b c c a ...
    got = [rotation_schedule(k, "abc", 2) for k in range(1, 12)]
    assert got == [None, None, None, "a", "a", "b", "b", "c", "c", "a", "a"]
    assert [k for k in range(1, 12) if is_measured(k, 2)] == [5, 7, 9, 11]
    assert [k for k in range(1, 8) if is_measured(k, 1)] == [4, 5, 6, 7]


def test_bad_names_and_block():
    model = conv_model()
    with pytest.raises(ValueError, match="names"):
        PairedTrainer(model, None, ("lbl",), torch.zeros(1, 3, 8, 8))
    with pytest.raises(ValueError, match="names"):
        PairedTrainer(model, None, ("lbl", "nope"), torch.zeros(1, 3, 8, 8))
    with pytest.raises(ValueError, match="block"):
        PairedTrainer(model, None, ("lbl", "ibatch"), torch.zeros(1, 3, 8, 8), block=0)


def test_live_rotation_segments_and_weights(tmp_path):
    names = ("sequential", "lbl")

    def paired(model, opt, _schedule, sample, epoch_iterations):
        return PairedTrainer(model, opt, names, sample, block=1, epoch_iterations=epoch_iterations)

    got = run("paired", n_iter=7, tmp_path=tmp_path, make_trainer=paired)
    ref = run("sequential", n_iter=7)
    for k in ref:  # scheduling changes time, not arithmetic
        np.testing.assert_allclose(got[k][0], ref[k][0], rtol=1e-6, atol=1e-7)
    recs = [r for r in read_events(tmp_path / "paired-w0.jsonl")[1] if r["kind"] == "overlap"]
    # 3 layers: sequential = 1 segment each way, lbl = 3; iteration k's pull (its forward gating) and
    # push both follow rotation_schedule(k)
    assert [r["schedule"] for r in recs[3:]] == ["sequential", "lbl", "sequential", "lbl"]
    assert [r["bwd_segments"] for r in recs[3:]] == [1, 3, 1, 3]
    assert [r["fwd_segments"] for r in recs[3:]] == [1, 3, 1, 3]


def test_paired_summary_and_check_by_hand():
    # block 1, five schedules: iterations 4..8 are cycle 0, 9..13 cycle 1; two workers
    it = {"sequential": 1.0, "lbl": 0.60, "ibatch": 0.62, "dynacomm": 0.61, "dynacomm-iter": 0.70}
    rows = []
    for w in range(2):
        for c in range(2):
            for i, s in enumerate(SCHEDULE_NAMES):
                slow = 0.10 if (c == 1 and s == "dynacomm") else 0.0
                rows.append(dict(iteration=4 + 5 * c + i, schedule=s, measured=True, iteration_s=it[s] + slow + 0.01 * w,
                                 fwd_s=0.3, bwd_s=0.3))
    rows.append(dict(iteration=2, schedule=None, measured=False, iteration_s=5.0))  # profiling: ignored
    d = dict(paired_summary(rows, ("iteration_s", "fwd_s", "bwd_s"), 1), model="m")
    assert d["per_schedule"]["lbl"]["samples"] == 4
    assert d["per_schedule"]["lbl"]["median_iteration_s"] == pytest.approx(0.605)
    assert d["per_schedule"]["dynacomm"]["median_iteration_s"] == pytest.approx((0.61 + 0.62 + 0.71 + 0.72) / 4)
    assert d["cycles"][0]["dynacomm"] == pytest.approx(0.615) and d["cycles"][1]["dynacomm"] == pytest.approx(0.715)
    chk = paired_checks(d)
    assert chk["dynacomm"]["ratio"] == pytest.approx(0.665 / 0.605)
    assert chk["dynacomm"]["met"] is False and chk["dynacomm"]["best"] == "lbl"
    assert chk["dynacomm"]["cycles"] == (1, 2)  # cycle 0: 0.615 <= 1.03 x 0.605; cycle 1: 0.715 is not
    assert chk["dynacomm-iter"]["met"] is False and chk["dynacomm-iter"]["cycles"] == (0, 2)


def test_bench_refuses_a_bad_block(capsys):
    with pytest.raises(SystemExit):
        bench_main(["--model", "resnet_mini", "--schedule", "paired", "--paired-block", "0", "--out", "/tmp/x"])
    assert "--paired-block must be >= 1" in capsys.readouterr().err
