"""The DynaComm sweep's table and rules (rog.papers.dynacomm.sweep) on results made by hand."""

import json

from rog.papers.dynacomm.sweep import load_sweep, sweep_lines, sweep_point, sweep_rules


def _write(root, model, ratio, delay, it, dt=0.01):
    d = root / "dynacomm" / f"sweep-{model}-r{ratio:g}-d{delay:g}"
    d.mkdir(parents=True)
    ps = {s: dict(median_iteration_s=v, median_dt_s=dt, median_fwd_segments=2, median_bwd_segments=3)
          for s, v in it.items()}
    (d / "result.json").write_text(json.dumps(dict(model=model, per_schedule=ps, rate_mbit=10.0, other_busy_cores=0.5)))


def test_sweep_rules_by_hand(tmp_path):
    # vgg_mini ratio 1: lead (LBL - DynaComm) / Sequential = (1.5 - 1.4) / 2 = 0.05 at 0 ms,
    # (1.8 - 1.4) / 2 = 0.20 at 20 ms: rule 1 holds (0.20 > 0.05 + 0.02)
    _write(tmp_path, "vgg_mini", 1, 0, dict(sequential=2.0, lbl=1.5, ibatch=1.45, dynacomm=1.4))
    _write(tmp_path, "vgg_mini", 1, 20, dict(sequential=2.0, lbl=1.8, ibatch=1.5, dynacomm=1.4))
    # resnet_mini ratio 1: 0 ms lead (1.0 - 1.0) / 2 = 0; 20 ms lead (1.1 - 1.1) / 2 = 0: rule 1 fails;
    # rule 2 at 20 ms: 0 >= 0.20 - 0.02 fails
    _write(tmp_path, "resnet_mini", 1, 0, dict(sequential=2.0, lbl=1.0, ibatch=1.2, dynacomm=1.0))
    _write(tmp_path, "resnet_mini", 1, 20, dict(sequential=2.0, lbl=1.1, ibatch=1.05, dynacomm=1.1))
    sweep = load_sweep(tmp_path)
    assert sorted(sweep) == ["resnet_mini", "vgg_mini"]
    q = sweep_point(sweep["vgg_mini"][(1.0, 20.0)])
    assert abs(q["lead"] - 0.2) < 1e-12 and abs(q["norm"]["dynacomm"] - 0.7) < 1e-12
    rules = {r: ok for r, ok, _ in sweep_rules(sweep)}
    assert rules["1 Δt: vgg_mini, ratio 1: lead at 20 ms > lead at 0 ms + 0.02"] is True
    # resnet 20 ms: DynaComm 1.1 = LBL 1.1 -> lead 0.0, rule 1: 0.0 > 0.0 + 0.02 fails
    assert rules["1 Δt: resnet_mini, ratio 1: lead at 20 ms > lead at 0 ms + 0.02"] is False
    assert rules["2 depth: ratio 1, 20 ms: lead on resnet_mini >= on vgg_mini - 0.02"] is False
    # resnet 20 ms: DynaComm 1.1 vs best baseline iBatch 1.05: 1.1 > 1.0815 fails; vgg 20 ms: 1.4 <= 1.03 x 1.5
    assert rules["3 check: resnet_mini, ratio 1, 20 ms: DynaComm <= 1.03 x best baseline"] is False
    assert rules["3 check: vgg_mini, ratio 1, 20 ms: DynaComm <= 1.03 x best baseline"] is True
    text = "\n".join(sweep_lines(tmp_path))
    assert "### vgg_mini" in text and "| 1 | 20 | 10.0 |" in text and "FAILS" in text


def test_deep_model_rules_by_hand(tmp_path):
    # resnet_mini ratio 1, 10 ms: lead (1.2 - 1.0) / 2 = 0.10; resnet152_mini: (3.0 - 1.5) / 2.5 = 0.60:
    # rule 2 (0.60 >= 0.10 - 0.02) holds, rule 5 (0.60 > 0.10) holds
    _write(tmp_path, "resnet_mini", 1, 10, dict(sequential=2.0, lbl=1.2, ibatch=1.1, dynacomm=1.0))
    _write(tmp_path, "resnet152_mini", 1, 10, dict(sequential=2.5, lbl=3.0, ibatch=2.0, dynacomm=1.5))
    # resnet152_mini ratio 4, 10 ms: lead (4.0 - 4.0) / 5 = 0 against resnet_mini's (3.0 - 2.5) / 4 = 0.125: fails
    _write(tmp_path, "resnet_mini", 4, 10, dict(sequential=4.0, lbl=3.0, ibatch=2.9, dynacomm=2.5))
    _write(tmp_path, "resnet152_mini", 4, 10, dict(sequential=5.0, lbl=4.0, ibatch=4.2, dynacomm=4.0))
    # inception_mini at 10 ms: ratio 1 spread (1.30 - 1.20) / 2 = 0.05 holds; ratio 4 (3.0 - 2.4) / 4 = 0.15 fails;
    # the 20 ms point is not judged by rule 4
    _write(tmp_path, "inception_mini", 1, 10, dict(sequential=2.0, lbl=1.3, ibatch=1.25, dynacomm=1.2))
    _write(tmp_path, "inception_mini", 4, 10, dict(sequential=4.0, lbl=3.0, ibatch=2.6, dynacomm=2.4))
    _write(tmp_path, "inception_mini", 1, 20, dict(sequential=2.0, lbl=2.0, ibatch=1.0, dynacomm=1.0))
    rules = {r: ok for r, ok, _ in sweep_rules(load_sweep(tmp_path))}
    assert rules["2 depth: ratio 1, 10 ms: lead on resnet152_mini >= on resnet_mini - 0.02"] is True
    assert rules["2 depth: ratio 4, 10 ms: lead on resnet152_mini >= on resnet_mini - 0.02"] is False
    assert rules["5 deepest: resnet152_mini, ratio 1, 10 ms: lead over LBL > 0.1"] is True
    four = {r: ok for r, ok in rules.items() if r.startswith("4 ")}
    assert four == {"4 similar: inception_mini, ratio 1, 10 ms: LBL, iBatch, DynaComm within 0.1 of Sequential": True,
                    "4 similar: inception_mini, ratio 4, 10 ms: LBL, iBatch, DynaComm within 0.1 of Sequential": False}


def test_sweep_graded_with_the_delay_null(tmp_path):
    from rog.analysis.grades import AGREES, BUILT_IN, DOES_NOT, REDUCED
    from rog.papers.dynacomm.grading import graded_rows

    # resnet152_mini at ratio 1 and 10 ms: lead (2.0 - 0.9) / 1.0 = 1.1 > 0.10 (rule 5); the L x delay null alone
    # gives 2 x 155 x 0.010 / 1.0 = 3.1 > 0.10: built in
    _write(tmp_path, "resnet152_mini", 1, 10, dict(sequential=1.0, lbl=2.0, ibatch=1.5, dynacomm=0.9))
    # resnet_mini at the same point: lead (0.5 - 0.45) / 0.5 = 0.1; the null 2 x 23 x 0.01 / 0.5 = 0.92
    _write(tmp_path, "resnet_mini", 1, 10, dict(sequential=0.5, lbl=0.5, ibatch=0.48, dynacomm=0.45))
    rows = {r.claim.split(":")[0]: r for r in graded_rows(tmp_path)}
    r5 = rows["Sweep rule 5"]
    assert (r5.outcome, r5.grade, r5.nulls[0].value) == (AGREES, BUILT_IN, "lead +3.100")
    r2 = rows["Sweep rule 2"]  # 1.1 >= 0.1 - 0.02 holds; the null 3.1 >= 0.92 - 0.02 too
    assert r2.outcome == AGREES and r2.grade == BUILT_IN
    r1 = rows["Sweep rule 1"]  # one delay per (model, ratio): nothing to compare
    assert r1.outcome == "not decidable" and r1.grade == REDUCED
    # rule 3: DynaComm 0.9 <= 1.03 x 1.0 and 0.45 <= 1.03 x 0.48; the null (DynaComm = Sequential) holds too
    assert rows["Sweep rule 3"].outcome == AGREES and rows["Sweep rule 3"].grade == BUILT_IN
    _write(tmp_path, "vgg_mini", 1, 10, dict(sequential=1.0, lbl=0.8, ibatch=0.7, dynacomm=1.2))
    assert {r.claim.split(":")[0]: r for r in graded_rows(tmp_path)}["Sweep rule 3"].outcome == DOES_NOT
