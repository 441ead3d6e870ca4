"""docs/fleet.md's isolation rule (rog.experiment.isolation) on hand-made stall errors."""

from __future__ import annotations

import json

import pytest

from rog.experiment import isolation as ISO

ON = {c: 0.30 for c in ISO.CELLS}  # e_on 30 % in every cell


def _off(*values):
    return dict(zip(ISO.CELLS, values))


def test_main_cause_needs_the_mean_halved_and_two_thirds_of_the_cells():
    v = ISO.isolation_verdict(_off(0.10, 0.10, 0.10, 0.10, 0.40, 0.05), ON)  # mean 0.15 = 0.5 x 0.30; 5 of 6 halved
    assert v["verdict"] == ISO.MAIN and v["cells_halved"] == 5 and v["cells_needed"] == 4
    assert v["mean_e_off"] == pytest.approx(0.85 / 6) and v["share"] == pytest.approx(0.85 / 6 / 0.30)
    # the mean halved, but only 3 of 6 cells at or below half their e_on: not "main", and below 0.5 not "a cause"
    v = ISO.isolation_verdict(_off(0.0, 0.0, 0.0, 0.30, 0.30, 0.30), ON)
    assert v["cells_halved"] == 3 and v["verdict"] == ISO.NOT_SHOWN


def test_a_cause_between_half_and_four_fifths_and_not_shown_above():
    assert ISO.isolation_verdict(_off(*[0.21] * 6), ON)["verdict"] == ISO.CAUSE  # share 0.70
    assert ISO.isolation_verdict(_off(*[0.24] * 6), ON)["verdict"] == ISO.CAUSE  # share 0.80: the bound is inclusive
    assert ISO.isolation_verdict(_off(*[0.25] * 6), ON)["verdict"] == ISO.NOT_SHOWN  # share 0.83
    assert ISO.isolation_verdict(_off(*[0.60] * 6), ON)["verdict"] == ISO.NOT_SHOWN  # worse with it off


def test_fewer_than_four_cells_give_no_verdict_and_two_thirds_rounds_up():
    v = ISO.isolation_verdict(_off(0.0, 0.0, 0.0), ON)
    assert v["verdict"] == ISO.NO_VERDICT and "3 of 6" in v["reason"]
    v = ISO.isolation_verdict(_off(0.0, 0.0, 0.0, 0.0, 0.6), ON)  # 5 cells: 4 needed (3.33 up); mean 0.12 <= 0.15
    assert v["n"] == 5 and v["cells_needed"] == 4 and v["verdict"] == ISO.MAIN


def test_seed_1_errors_come_from_the_documented_stalls():
    e = {c: ISO.stall_error(*ISO.SEED1_NO_AP_STALL[c]) for c in ISO.CELLS}
    assert e[("FLOWN", 4)] == pytest.approx(0.005 / 0.211) and e[("SSP-4", 8)] == pytest.approx(0.048 / 0.222)
    assert ISO.stall_error(0.0, 0.1) == float("inf")


def test_main_prints_the_table_and_the_verdict(monkeypatch, capsys, tmp_path):
    cells = {c: dict(emu_stall_s=0.2, sim_stall_s=0.19, emu_time_s=1.0, sim_time_s=0.9, time_err=-0.1, e=0.05)
             for c in ISO.CELLS}
    monkeypatch.setattr(ISO, "cell_errors", lambda sim, emu: cells)
    assert ISO.main([str(tmp_path), str(tmp_path), "--control", str(tmp_path), str(tmp_path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    got = json.loads(out[-1])
    # e_on of seed 1 (by hand): FLOWN 4 2.4 %, ROG-4 4 12.6 %, SSP-4 4 16.1 %, FLOWN 8 5.5 %, ROG-4 8 4.2 %,
    # SSP-4 8 21.6 %: mean 10.4 %; e_off 5 % everywhere: share 0.48, but e_off <= 0.5 e_on in 3 cells only (4 needed)
    want_on = [ISO.stall_error(*ISO.SEED1_NO_AP_STALL[c]) for c in ISO.CELLS]
    assert got["mean_e_on"] == pytest.approx(0.1040, abs=5e-4)
    assert got["mean_e_on"] == pytest.approx(sum(want_on) / 6)
    assert got["cells_halved"] == 3 and got["verdict"] == ISO.NOT_SHOWN
    assert any(line.startswith("| 4 | SSP-4 | 0.200 | 0.190 | 5 %") for line in out)
    assert any(line.startswith("Verdict: **") for line in out)
