"""ScaDLES's fresh-seed rule read over seeds (rog.papers.scadles.seeds) on hand-made per-seed numbers: Fig. 6's
medians per set, Table V's median CNC per cell with the trivial gates beside, and a reading with a seed missing."""

from __future__ import annotations

from rog.analysis.grades import AGREES, BUILT_IN, DOES_NOT, NOT_DECIDABLE
from rog.papers.scadles import seeds as SD


def _set(speedup, fixed, proportional):
    return dict(speedup=speedup, plateau_fixed=fixed, plateau_proportional=proportional)


FIG6 = {
    11: {"S1": _set(2.0, 70.0, 71.0), "S1p": _set(1.2, 60.0, 59.0), "S2": _set(1.0, 80.0, 79.0), "S2p": _set(1.0, 75.0, 76.0)},
    12: {"S1": _set(0.8, 70.0, 69.0), "S1p": _set(0.9, 60.0, 58.0), "S2": _set(1.1, 80.0, 82.0), "S2p": _set(0.9, 75.0, 72.0)},
    13: {"S1": _set(1.5, 70.0, 72.0), "S1p": _set(1.1, 60.0, 63.0), "S2": _set(0.9, 80.0, 79.5), "S2p": _set(1.2, 75.0, 76.5)},
}


def test_fig6_medians_per_set_by_hand():
    f6 = SD.fig6_over_seeds(FIG6)
    # S1: speed-ups 2.0, 0.8, 1.5 -> 1.5; differences +1, -1, +2 -> +1
    assert f6["S1"]["speedup_median"] == 1.5 and f6["S1"]["plateau_diff_median"] == 1.0 and f6["S1"]["decided"]
    assert dict(f6["S1"]["verdicts"])["ordering"].startswith("agrees")
    assert dict(f6["S1"]["verdicts"])["magnitude"] == "1.50x is below the paper's 1.92x-3.33x"
    # S2: differences -1, +2, -0.5 -> -0.5: the fixed batch ends higher, as the paper says
    assert f6["S2"]["plateau_diff_median"] == -0.5
    # S2': differences +1, -3, +1.5 -> +1.0: within 2 points, "similar"
    assert f6["S2p"]["plateau_diff_median"] == 1.0
    assert f6["S1"]["per_seed"] == {11: (2.0, 1.0), 12: (0.8, -1.0), 13: (1.5, 2.0)}


def test_fig6_rows_judge_the_medians_and_s1p_needs_both_parts():
    rows = {r.claim.split(":")[0]: r for r in SD.fig6_graded_rows(SD.fig6_over_seeds(FIG6))}
    assert rows["Fig. 6 S1"].outcome == AGREES and rows["Fig. 6 S2"].outcome == AGREES
    assert rows["Fig. 6 S2p"].outcome == AGREES
    # S1': speed-up median 1.1 (faster) but difference median -1.0 (not more accurate): does not agree
    assert rows["Fig. 6 S1p"].outcome == DOES_NOT
    assert rows["Fig. 6 S1"].seeds == "seeds 11, 12, 13"


def test_fig6_with_one_seed_says_so_and_decides_nothing():
    f6 = SD.fig6_over_seeds({11: FIG6[11]})
    rows = SD.fig6_graded_rows(f6)
    assert {r.outcome for r in rows} == {NOT_DECIDABLE}
    assert rows[0].seeds == "seed 11 only (of 11, 12, 13)"
    assert f6["S1"]["speedup_median"] == 2.0  # the one seed's figure is still shown


def test_fig6_neither_reading_of_s2p_does_not_agree():
    fixed_ahead = {s: {"S2p": _set(1.0, 75.0, 70.0)} for s in (11, 12, 13)}
    (row,) = [r for r in SD.fig6_graded_rows(SD.fig6_over_seeds(fixed_ahead)) if "S2p" in r.claim]
    assert row.outcome == DOES_NOT


# CNC per seed; the medians: (0.1, 0.3) 0.95, (0.1, 0.4) 0.97, every CR 0.01 cell and (0.1, 0.1) 0.0
CNC = {
    11: {(0.1, 0.1): 0.0, (0.1, 0.3): 0.95, (0.1, 0.4): 0.2, (0.01, 0.1): 0.0, (0.01, 0.2): 0.0, (0.01, 0.3): 0.0},
    12: {(0.1, 0.1): 0.0, (0.1, 0.3): 0.5, (0.1, 0.4): 0.97, (0.01, 0.1): 0.0, (0.01, 0.2): 0.0, (0.01, 0.3): 0.0},
    13: {(0.1, 0.1): 0.1, (0.1, 0.3): 1.0, (0.1, 0.4): 0.99, (0.01, 0.1): 0.0, (0.01, 0.2): 0.0, (0.01, 0.3): 0.0},
}


def test_table_v_median_per_cell_and_the_never_opening_gate_keeps_it_built_in():
    tv = SD.table_v_over_seeds(CNC)
    assert tv["cnc"][(0.1, 0.3)] == 0.95 and tv["cnc"][(0.1, 0.4)] == 0.97 and tv["cnc"][(0.1, 0.1)] == 0.0
    assert tv["decided"] and tv["seeds"] == [11, 12, 13]
    row = SD.table_v_graded_row(tv)
    # every judged cell agrees (6 of 6), but a gate that never opens agrees in 4 of 6, a majority too
    assert row.ours == "6 of 6 cells" and row.outcome == AGREES and row.grade == BUILT_IN
    assert {n.name: n.value for n in row.nulls} == {"a gate that never opens": "4 of 6 cells",
                                                     "a gate that always opens": "2 of 6 cells"}


def test_table_v_telling_cells_on_their_own_line():
    line = SD.telling_line(SD.table_v_over_seeds(CNC))
    assert ("CR 0.1, delta 0.3: median CNC 0.95 (11: 0.95, 12: 0.50, 13: 1.00): **agrees** (a gate that never opens: "
            "does not agree; a gate that always opens: agrees)") in line
    assert "CR 0.1, delta 0.4: median CNC 0.97" in line


def test_table_v_with_a_seed_missing_is_not_decided():
    tv = SD.table_v_over_seeds({11: CNC[11], 12: {(0.1, 0.3): 0.9}})
    assert not tv["decided"] and tv["seeds"] == [11]
    row = SD.table_v_graded_row(tv)
    assert row.outcome == NOT_DECIDABLE and row.seeds.startswith("seed 11 only (of 11, 12, 13)")


def test_seed_markdown_and_rows_from_empty_folders(tmp_path):
    assert SD.graded_rows(tmp_path) == []
    (tmp_path / "scadles" / "seed11").mkdir(parents=True)
    assert SD.found_seeds(tmp_path) == [11]
    rows = SD.graded_rows(tmp_path)
    assert len(rows) == 4 and {r.outcome for r in rows} == {NOT_DECIDABLE}
    md = SD.seed_markdown(tmp_path, [11])
    assert "Fig. 6 and Table V on seeds 11, 12, 13" in md and "not decided (a seed is missing)" in md
