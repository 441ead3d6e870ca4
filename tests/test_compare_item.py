"""The opt-in ``compare`` item: its systems, combinations and settings, its budget, the default plan untouched,
and every setting written in docs/compare.md with its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from rog.papers.compare import item as C
from rog.experiment import driver
from rog.experiment import items as I

ROOT = Path(__file__).resolve().parents[1]


def _flag(spec: I.RunSpec, name: str):
    ex = spec.flags()
    return ex[ex.index(name) + 1] if name in ex else None


def test_compare_is_opt_in_and_the_default_plan_is_unchanged():
    assert "compare" in I.ITEMS and "compare" not in I.ITEM_NAMES
    default = I.plan_runs(I.items_for(None))
    assert len(default) == 24 and not any("compare" in r.items for r in default)
    prof = I.PROFILES["quick"]
    assert prof.budget_for("compare") == prof.budget_for("outdoors") == I.OUTDOORS_BUDGET_S
    assert prof.budget_for("compare:outdoors-w1:seed1") == I.OUTDOORS_BUDGET_S


def test_the_item_runs_every_system_and_the_combination_in_the_outdoors_setting():
    runs = I.ITEMS["compare"].runs
    by_tag = {r.tag: r for r in runs}
    assert set(by_tag) == {"cmp-bsp", "cmp-ssp4", "cmp-flown4", "cmp-rog4", "cmp-adsp", "cmp-adacomm40", "cmp-dynacomm",
                           "cmp-scadles", "", "cmp-rog4-topk"}
    outdoors = {(r.library, r.resolved_threshold) for r in I.ITEMS["outdoors"].runs}
    for r in runs:  # the outdoors item's setting: control, replay mode, workers, batch, seed
        assert (r.control, r.replay_mode, r.workers, r.batch_multiple, r.seed) == ("outdoors", "artifact", 4, 1, 0)
    assert [(by_tag[t].library, by_tag[t].resolved_threshold) for t in ("cmp-bsp", "cmp-ssp4", "cmp-flown4", "cmp-rog4")] \
        == [("BSP", 0), ("SSP", 4), ("FLOWN", 4), ("ROG", 4)]
    assert {("BSP", 0), ("SSP", 4), ("FLOWN", 4), ("ROG", 4), ("DDP", 0)} <= outdoors
    # every engine system paces per layer; DDP cannot (its own runtime) and is the outdoors item's own run
    assert all(_flag(r, "--pacing") == "layer" for r in runs if r.library != "DDP")
    ddp = by_tag[""]
    assert ddp.library == "DDP" and ddp.flags() == [] and I.run_id(ddp) in {I.run_id(r) for r in I.ITEMS["outdoors"].runs}
    assert _flag(by_tag["cmp-adsp"], "--adsp-time-scale") == "0.28" and by_tag["cmp-adsp"].library == "ADSP"
    assert (by_tag["cmp-adacomm40"].library, by_tag["cmp-adacomm40"].resolved_threshold) == ("ADACOMM", 40)
    assert by_tag["cmp-dynacomm"].library == "BSP" and _flag(by_tag["cmp-dynacomm"], "--schedule") == "dynacomm"
    sc = by_tag["cmp-scadles"]
    assert sc.library == "BSP" and [_flag(sc, f) for f in ("--stream-set", "--batch-policy", "--weighted-aggregation",
                                                          "--stream-buffer", "--compression", "--topk-ratio",
                                                          "--topk-gate", "--topk-gate-delta")] \
        == ["S1", "rate_proportional", "on", "truncate", "topk", "0.1", "on", "0.3"]
    combo = by_tag["cmp-rog4-topk"]
    assert (combo.library, combo.resolved_threshold) == ("ROG", 4)
    assert [_flag(combo, f) for f in ("--compression", "--topk-ratio", "--topk-gate", "--topk-gate-delta")] \
        == ["topk", "0.1", "on", "0.3"]
    assert [e.key for e in C.entries() if e.combination] == ["rog4-topk"]
    ids = [I.run_id(r) for r in runs]
    assert len(set(ids)) == len(ids) == 10  # none collides with another item's run but DDP's


def test_every_setting_and_each_left_out_combination_is_in_the_docs():
    doc = (ROOT / "docs" / "compare.md").read_text(encoding="utf-8")
    for e in C.entries():
        assert f"`{e.key}`" in doc and e.source in doc, e.key
        for flag in e.argv():
            assert flag in doc, (e.key, flag)
    for name in C.LEFT_OUT:
        assert name in doc


def test_the_run_py_flags_of_every_run_pass_run_py_s_checks():
    from rog.experiment.cli import parse_args
    from rog.experiment.schedule_options import check as check_schedule

    prof = I.PROFILES["quick"]
    for spec in I.ITEMS["compare"].runs:
        a = parse_args(I.run_args(spec, prof, 150, "/nonexistent", "compare"))
        check_schedule(a, 0.28, "cpu")  # the segmented schedule's checks under the quick profile's pacing
        assert a.library == spec.library


def test_dry_run_prints_the_items_duration(tmp_path, capsys):
    rc = driver.main(["compare", "--dry-run", "--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f")])
    out = capsys.readouterr().out
    assert rc == 0 and not (tmp_path / "r").exists()
    assert "10 distinct runs, 10 to run" in out and "estimate:" in out
    prof = I.PROFILES["quick"]
    est = I.estimate_plan_s(I.plan_runs(I.items_for(["compare"]), profile=prof), prof)
    by_hand = 10 * (I.STARTUP_S + 4 * I.STARTUP_PER_WORKER_S + I.OUTDOORS_BUDGET_S) + 9 * I.TAIL_S + I.DDP_TAIL_S
    assert est["runs_s"] == pytest.approx(by_hand)
