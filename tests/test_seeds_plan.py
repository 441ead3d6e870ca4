"""``--seeds`` on every paper item, on the plan only (no run): honoured per seed (folders and run ids per seed,
nothing shared between seeds), refused with the item's reason, or one line naming the seed a part runs."""

from __future__ import annotations

import pytest

from rog.experiment import items as I
from rog.papers.scadles import item as SI
from rog.papers.scadles import seeds as SD
from rog.papers.scadles import stream_steps as SS
from rog.papers.scadles import table5_steps as T5


def _flag(argv, name):
    return argv[argv.index(name) + 1]


def test_scadles_seeds_plan_fig6_and_table_v_per_seed_in_their_own_folders(tmp_path):
    steps = SD.steps(tmp_path, [11, 12, 13])
    per_seed = len(SS.FIG6_STEPS) + len(T5.cells())
    assert len(steps) == 3 * per_seed == 57
    folders = [f for f, _ in steps]
    assert len(set(folders)) == len(folders)  # nothing overwritten
    assert len({_flag(a, "-n") for _, a in steps}) == len(steps)  # run names per seed
    for k, seed in enumerate((11, 12, 13)):
        mine = steps[k * per_seed:(k + 1) * per_seed]
        assert {_flag(a, "--seed") for _, a in mine} == {str(seed)}
        assert all(f"/scadles/seed{seed}/" in f for f, _ in mine)
    # Fig. 6's runs are the item's own flags with the seed added; S2-fixed is the persistence-buffer run
    s2 = next(a for f, a in steps if f.endswith("seed11/S2-fixed"))
    assert _flag(s2, "--stream-buffer") == "persistence" and _flag(s2, "--stream-set") == "S2"
    # Table V: the 8 gated cells at the fixed reading, the two static references and the dense one
    t5 = [a for f, a in steps if "seed12/table5/" in f]
    gated = [a for a in t5 if "--topk-gate-delta" in a and _flag(a, "--topk-gate-delta") != "0"]
    assert len(t5) == 11 and len(gated) == 8 and {_flag(a, "--topk-gate-statistic") for a in gated} == {"norm"}


def test_every_seeded_step_parses_as_run_py_flags(tmp_path):
    from rog.experiment.cli import parse_args

    for _, argv in SD.steps(tmp_path, [11])[:2] + SD.steps(tmp_path, [11])[-2:]:
        assert parse_args(argv[2:]).seed == 11


def test_unseeded_steps_are_unchanged(tmp_path):
    assert all(_flag(a, "--seed") == str(T5.SEED) for _, a in T5.steps(tmp_path))
    assert all("/scadles/table5/" in f for f, _ in T5.steps(tmp_path))


def test_scadles_dry_run_with_seeds_notes_the_other_parts_and_resumes_per_seed(tmp_path, capsys):
    done = SS.seed_folders(tmp_path, 12)["S1-fixed"] / "RUN"
    done.mkdir(parents=True)
    (done / "DONE").write_text("{}")
    assert SI.main(["--result-dir", str(tmp_path), "--dry-run", "--seeds", "11,12,13"]) == 0
    out = capsys.readouterr().out.splitlines()
    notes = [ln for ln in out if "not run per seed" in ln]
    assert len(notes) == len(SD.NOT_PER_SEED) and any("Table VI (seeds 1, 2, 3" in ln for ln in notes)
    skipped = [ln for ln in out if "skip (done)" in ln]
    assert len(skipped) == 1 and "seed12/S1-fixed" in skipped[0]  # seed 11's and 13's S1-fixed still run
    assert sum("seed11/S1-fixed" in ln or "seed13/S1-fixed" in ln for ln in out) == 2
    assert out[-1] == f"[scadles] estimate {SD.estimate_s([11, 12, 13]) / 60:.0f} min (3 seed(s))"


def test_scadles_seeds_are_validated():
    with pytest.raises(SystemExit):
        SI.main(["--dry-run", "--seeds", "11,11"])


def test_module_items_take_seeds_by_their_flag_or_are_refused_with_a_reason():
    assert I.module_item_seeds("scadles", [11, 12]) == ["--seeds", "11,12"]
    assert I.module_item_seeds("intradp", [11]) == ["--replicate-seeds", "11"]
    assert I.module_item_seeds("intradp-streaming", [5]) == ["--seeds", "5"]
    for name, why in (("dynacomm", "rounds"), ("scadles-figs", "no training run"), ("simulate", "traces")):
        with pytest.raises(ValueError, match=f"item '{name}' cannot run per seed .*{why}"):
            I.module_item_seeds(name, [11])


def test_items_with_their_own_seeds_refuse_seeds_and_one_seed_items_replicate():
    for name in ("adsp", "adsp_fig56", "adsp_fig6_fresh", "adsp_fig6_guard"):
        with pytest.raises(ValueError, match=f"item '{name}' runs its own seeds"):
            I.items_for([name], seeds=[11])
    for name in ("outdoors", "compare", "adsp_outdoors", "outdoors_long"):
        its = I.items_for([name], seeds=[11, 12])
        assert [it.name for it in its] == [f"{name}:seed11", f"{name}:seed12"]
        assert {r.seed for r in its[1].runs} == {12}


def test_run_all_passes_seeds_to_module_items_and_refuses_before_any_run():
    from rog.experiment import driver as D

    a = D.parse_args(["--seeds", "11,12,13", "scadles", "--dry-run"])
    assert a.module_seed_args == {"scadles": ["--seeds", "11,12,13"]}
    assert D.parse_args(["scadles", "--dry-run"]).module_seed_args == {"scadles": []}
    with pytest.raises(SystemExit):
        D.parse_args(["--seeds", "11", "outdoors", "dynacomm"])


def test_the_status_page_lists_the_runs_to_do_and_each_command_parses(monkeypatch):
    from rog.analysis import reproduction_status as RS
    from rog.experiment import driver as D
    from rog.papers.scadles import grading

    # every rule's runs have run (ADSP's seeds 6-8, dynacomm-scaled, ScaDLES's seeds 11-13, all on 7 Dec): no section
    assert RS.to_run_lines() == []
    assert "## To run" not in RS.status_markdown({})
    # a module's pending runs are listed by paper, and the command each line gives parses as run_all.sh's
    monkeypatch.setattr(grading, "TO_RUN", (("Fig. 6 on seed 14", "bash scripts/run_all.sh --seeds 14 scadles",
                                              "25 min"),))
    lines = [ln for ln in RS.to_run_lines() if ln.startswith("- ")]
    assert lines == ["- ScaDLES: Fig. 6 on seed 14: `bash scripts/run_all.sh --seeds 14 scadles` (about 25 min)"]
    assert "## To run" in RS.status_markdown({})
    for ln in lines:
        cmd = ln.split("`")[1].split()
        assert cmd[:2] == ["bash", "scripts/run_all.sh"]
        assert D.parse_args([*cmd[2:], "--dry-run"]).item_list is not None  # names items that exist, seeds accepted


def test_adsp_outdoors_rows_keep_every_seed(monkeypatch):
    """adsp_outdoors honours --seeds: its rows beside the outdoors runs are read per seed, not seed 0 only."""
    from pathlib import Path

    from rog.analysis.load import RunData
    from rog.papers.adsp import summary as AS

    monkeypatch.setattr(AS, "composition", lambda r: dict(iter_s=1.0, compute_s=0.5, comm_s=0.3, stall_s=0.2))

    def run(lib, seed, note=""):
        cfg = dict(control="outdoors", replay_mode="artifact", workers=4, batch_multiple=1, library=lib, threshold=4,
                   seed=seed, note=note)
        return RunData(Path("r"), f"{lib}-seed{seed}{note}", cfg, "done", 0.0, None)

    rows = AS.outdoors_rows([run("ADSP", 12), run("ROG", 11), run("ADSP", 11), run("ROG", 11, "fig1"), run("X", 11)])
    assert [(r["seed"], r["system"]) for r in rows] == [(11, "ADSP"), (11, "ROG-4"), (12, "ADSP")]


def test_run_all_refuses_traces_for_a_module_item(tmp_path):
    from rog.experiment import driver as D

    (tmp_path / "t.csv").write_text("t_s,mbps\n0,10\n1,12\n")
    with pytest.raises(SystemExit):
        D.parse_args(["--traces", str(tmp_path), "scadles", "--dry-run"])
    assert D.parse_args(["--traces", str(tmp_path), "outdoors", "--dry-run"]).trace_files
