"""The compare item's table, sentences, combination rows and figure, on synthetic run data computed by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rog.papers.compare import summary as C
from rog.papers.compare.figure import plot_compare
from rog.analysis.load import RunData
from rog.analysis.metrics import RunMetrics

BSP, ROG, SCA, COMBO = "BSP", "ROG-4", "ScaDLES (BSP)", "ROG-4 + gated Top-k"
# replica -> system -> time to target (None: not reached); trace A: ROG-4 wins both; trace B: the seeds disagree
TIMES = {
    "compare:A:seed0": {BSP: 100.0, ROG: 50.0, SCA: 80.0, COMBO: 60.0},
    "compare:A:seed1": {BSP: 90.0, ROG: 40.0, SCA: None, COMBO: 56.0},
    "compare:B:seed0": {BSP: 70.0, ROG: 60.0, SCA: 65.0, COMBO: 50.0},
    "compare:B:seed1": {BSP: 70.0, ROG: 45.0, SCA: 65.0, COMBO: 50.0},
}
ACC = {BSP: 64.0, ROG: 70.0, SCA: 66.0, COMBO: 68.0}


def _rows():
    rows = []
    for rep, by in TIMES.items():
        for name, t in by.items():
            rows.append(dict(replica=rep, trace=rep.split(":")[1], system=name, combination=name == COMBO, run_id=f"{rep}-{name}",
                             time_to_target_s=t, energy_to_target_j=None if t is None else 10.0 * t, stall_share=0.1,
                             acc_equal_time=ACC[name], equal_time_s=30.0, acc_equal_iters=ACC[name], bytes_per_iter=1000.0))
    return rows


def test_system_table_medians_ranges_and_best_by_hand():
    table = {s["system"]: s for s in C.system_table(_rows())}
    rog = table[ROG]
    assert rog["time_to_target_s"] == dict(median=47.5, min=40.0, max=60.0, n=4)  # 40, 45, 50, 60
    assert rog["energy_to_target_j"]["median"] == pytest.approx(475.0)
    assert (rog["best"], rog["replicas"]) == (3, 4)  # all but B:seed0, where the combination is first
    assert (table[COMBO]["best"], table[COMBO]["combination"]) == (1, True)
    assert table[BSP]["best"] == table[SCA]["best"] == 0
    assert table[SCA]["time_to_target_s"] == dict(median=65.0, min=65.0, max=80.0, n=3)  # 80, 65, 65; one not reached


def test_winners_count_every_tie():
    rows = [dict(replica="r", system=s, time_to_target_s=t) for s, t in (("X", 5.0), ("Y", 5.0), ("Z", 7.0), ("W", None))]
    assert C.winners(rows, "r") == ["X", "Y"]
    assert C.winners([dict(replica="r", system="X", time_to_target_s=None)], "r") == []


def test_a_sentence_only_where_every_replica_agrees():
    by = {s["trace"]: s for s in C.trace_sentences(_rows())}
    a = by["A"]
    assert a["winner"] == ROG and a["replicas"] == 2
    assert a["lead"]["median"] == pytest.approx(1.3) and a["lead"]["min"] == pytest.approx(1.2)  # 60/50, 56/40
    assert a["sentence"].startswith("On trace A, ROG-4 reaches the target first on 2 of 2 replicas, 1.30x sooner")
    assert by["B"]["sentence"] is None and "no one winner" in by["B"]["why"] and "compare:B:seed0: ROG-4 + gated Top-k" in by["B"]["why"]


def test_combination_against_both_parents_by_hand():
    rows = C.combination_rows(_rows())
    by = {r["parent"]: r for r in rows}
    assert set(by) == {ROG, SCA}  # its base, and the system that carries gated Top-k
    t = by[ROG]["time_ratio"]  # 60/50, 56/40, 50/60, 50/45
    assert (t["median"], t["min"], t["max"]) == pytest.approx(((50 / 45 + 1.2) / 2, 50 / 60, 1.4))
    assert by[ROG]["energy_ratio"]["median"] == pytest.approx(t["median"])
    assert by[SCA]["time_ratio"]["n"] == 3 and by[SCA]["time_ratio"]["median"] == pytest.approx(50 / 65)
    assert by[ROG]["acc_equal_iters_diff"]["median"] == pytest.approx(-2.0)
    assert by[SCA]["acc_equal_iters_diff"]["median"] == pytest.approx(2.0)
    assert by[ROG]["best_on"] == 1


def _run(cfg: dict, events=None, iterations=None) -> RunData:
    return RunData(Path("x"), cfg.get("run_id", "r"), cfg, "done", 0.0, None, events=events or {},
                   iterations=iterations if iterations is not None else pd.DataFrame(columns=["worker", "iteration"]))


@pytest.mark.parametrize("cfg, name", [
    (dict(library="ROG", threshold=4), (ROG, False)),
    (dict(library="BSP", threshold=0, schedule=dict(name="dynacomm")), ("DynaComm (BSP)", False)),
    (dict(library="BSP", threshold=0, stream=dict(weighted_aggregation=True), compression="topk", compression_options=dict(gate=True)),
     (SCA, False)),
    (dict(library="ROG", threshold=4, compression="topk", compression_options=dict(gate=True)), (COMBO, True)),
    (dict(library="SSP", threshold=4, schedule=dict(name="lbl")), ("SSP-4 + LBL schedule", True)),
])
def test_system_names_from_the_run_config(cfg, name):
    assert C.system_name(_run(cfg)) == name


def test_bytes_per_iteration_and_replica_rows_by_hand():
    ev = {w: pd.DataFrame(dict(kind=["compute", "push", "push", "pull", "flush"], bytes=[None, 60, 40, 300, 999]))
          for w in ("w0", "w1")}
    it = pd.DataFrame(dict(worker=[0, 0, 1, 1], iteration=[1, 2, 1, 2]))
    run = _run(dict(library="BSP", threshold=0, control="outdoors"), ev, it)
    assert C.bytes_per_iteration(run) == pytest.approx(2 * 400 / 4)  # flush records are not iterations' bytes

    def metrics(r, times, accs, stall, it_s):
        curve = pd.DataFrame(dict(time_s=times, accuracy_pct=accs, iteration=range(len(times))))
        return RunMetrics(run=r, iterations=2, iter_s=it_s, compute_s=1.0, comm_s=0.5, stall_s=stall, other_s=0.0,
                          acc_start=accs[0], acc_final=accs[-1], acc_peak=max(accs), acc_at_equal_iters=61.0,
                          time_to_target_s=12.0, energy_to_target_j=99.0, energy_source="model", train_s=times[-1],
                          accuracy_curve=curve)
    other = _run(dict(library="ROG", threshold=4, control="outdoors"), ev, it)
    rows = C.replica_rows({"compare:seed0": [metrics(run, [0, 10, 20], [50, 60, 70], 0.5, 2.0),
                                            metrics(other, [0, 10, 15], [50, 55, 80], 0.0, 1.0)],
                           "outdoors": [metrics(run, [0, 1], [1, 2], 0.0, 1.0)]})  # not the compare item
    assert len(rows) == 2 and {r["trace"] for r in rows} == {"outdoors"}  # no --traces: the run's control
    bsp, rog = rows
    assert bsp["equal_time_s"] == 15.0  # the earliest last test of the replica's runs
    assert bsp["acc_equal_time"] == pytest.approx(65.0) and rog["acc_equal_time"] == pytest.approx(80.0)
    assert bsp["stall_share"] == pytest.approx(0.25) and bsp["bytes_per_iter"] == pytest.approx(200.0)
    md = C.compare_markdown(C.compare_summary({"compare:seed0": [metrics(run, [0, 10, 20], [50, 60, 70], 0.5, 2.0)]}))
    assert "| BSP | 12.0 (12.0 to 12.0) | 1/1 | 0.10 (0.10 to 0.10) | 25.0 (25.0 to 25.0) |" in md


def test_the_figure_is_written(tmp_path):
    d = dict(rows=_rows())
    out = plot_compare(d, tmp_path, formats=("png",))
    assert out == [tmp_path / "compare_time_energy.png"]
    assert out[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out[0].stat().st_size > 10_000
    assert plot_compare(None, tmp_path) == []
    assert plot_compare(dict(rows=[dict(r, time_to_target_s=None) for r in _rows()]), tmp_path / "none") == []


def test_the_frontier_of_the_medians_by_hand():
    def s(name, t, e):
        return dict(system=name, time_to_target_s=dict(median=t), energy_to_target_j=dict(median=e))
    table = [s("fast", 10.0, 9.0), s("frugal", 20.0, 5.0), s("beaten", 20.0, 9.0), s("tie", 10.0, 9.0), s("never", None, None)]
    assert C.frontier(table) == ["fast", "frugal", "tie"]  # "beaten" is dominated by "fast"; equal points both stay
    assert C.frontier(C.system_table(_rows())) == [ROG]  # ROG-4: median 47.5 s and 475 J, the lowest of both


def test_a_run_with_another_papers_mechanism_never_shares_its_base_systems_label():
    from rog.analysis.load import run_label

    assert run_label(_run(dict(library="BSP", threshold=0))) == "BSP"
    assert run_label(_run(dict(library="BSP", threshold=0, schedule=dict(name="dynacomm")))) == "BSP + DynaComm schedule"
    assert run_label(_run(dict(library="BSP", threshold=0, schedule=dict(name="sequential"), stream=None,
                               compression="sign"))) == "BSP"
    assert run_label(_run(dict(library="ROG", threshold=4, compression="topk", compression_options=dict(gate=False)))) == "ROG-4 + Top-k"


def test_summary_md_and_json_carry_the_compare_section(tmp_path):
    import json

    import yaml
    from test_analysis import make_run

    from rog.analysis.summary import write_summary

    make_run(tmp_path, "B", system="BSP", threshold=0, evals=((0, 0.50), (5, 0.60), (10, 0.70)))
    make_run(tmp_path, "R", evals=((0, 0.50), (5, 0.70), (10, 0.72)))
    d = make_run(tmp_path, "D", system="BSP", threshold=0, evals=((0, 0.50), (5, 0.65), (10, 0.71)))
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    cfg["schedule"] = dict(name="dynacomm")
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    js, md = write_summary(tmp_path, items={"compare:seed0": ["B", "R", "D"]}, smooth_tests=1)
    doc = json.loads(js.read_text())["compare"]
    table = {s["system"]: s for s in doc["systems"]}
    assert set(table) == {"BSP", "ROG-4", "DynaComm (BSP)"}  # the DynaComm run is not plain BSP's
    for s in table.values():
        # per worker iteration: push 1e6 x push seconds (0.5 and 1.0 s) + pull 1000 bytes
        assert s["bytes_per_iter"]["median"] == pytest.approx(1e6 * (0.5 + 1.0) / 2 + 1000)
        assert s["stall_share"]["median"] == pytest.approx(((2.0 + 0.5) / 2) / ((4.0 + 3.5) / 2))  # stall / iteration
    reached = {r["system"]: r["time_to_target_s"] for r in doc["rows"] if r["time_to_target_s"] is not None}
    first = min(reached, key=reached.get)
    assert table[first]["best"] == 1 and sum(s["best"] for s in table.values()) == 1
    assert "## Every system on the same links (compare item)" in md.read_text()


def test_the_rog_papers_four_systems_set_a_replicas_target_the_rest_are_measured_against_it(tmp_path):
    import yaml
    from test_analysis import make_run

    from rog.analysis.load import load_run
    from rog.analysis.metrics import TARGET_FRACTION
    from rog.analysis.summary import item_views

    make_run(tmp_path, "B", system="BSP", threshold=0, evals=((0, 0.50), (5, 0.60), (10, 0.70)))
    make_run(tmp_path, "R", evals=((0, 0.52), (5, 0.70), (10, 0.74)))
    make_run(tmp_path, "F", system="FLOWN", threshold=4, evals=((0, 0.51), (5, 0.69), (10, 0.71)))
    d = make_run(tmp_path, "D", system="BSP", threshold=0, evals=((0, 0.48), (5, 0.53), (10, 0.55)))
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    cfg["schedule"] = dict(name="dynacomm")  # DynaComm (BSP): another paper's system, the lowest peak
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    runs = [load_run(tmp_path / n) for n in ("B", "R", "F", "D")]
    ids = ["B", "R", "F", "D"]
    _, per_item, _ = item_views(runs, {"compare:seed1": ids, "outdoors": ids}, smooth_tests=1)
    start = (50.0 + 52.0 + 51.0) / 3  # the setters' first tests; DynaComm's 48 % is not among them
    assert per_item["compare:seed1"]["target_acc"] == pytest.approx(start + TARGET_FRACTION * (70.0 - start))
    assert "set by 3 of 4 runs" in per_item["compare:seed1"]["target_rule"]
    assert {C.system_name(r)[0] for r in runs if C.sets_target(r)} == {"BSP", "ROG-4", "FLOWN"}
    assert per_item["compare:seed1"]["runs"]["D"]["time_to_target_s"] is None  # peak 55 % < the target
    # another item keeps its rule: every system but the reference sets it, so DynaComm's peak does
    assert per_item["outdoors"]["target_acc"] == pytest.approx(50.25 + TARGET_FRACTION * (55.0 - 50.25))


def test_each_seed_alone_by_hand():
    seeds = C.by_seed(_rows())
    assert list(seeds) == ["seed0", "seed1"]
    one = {s["system"]: s for s in seeds["seed1"]["systems"]}
    assert one[ROG]["time_to_target_s"] == dict(median=42.5, min=40.0, max=45.0, n=2) and one[ROG]["best"] == 2
    assert one[SCA]["time_to_target_s"]["n"] == 1 and seeds["seed1"]["frontier"] == [ROG]
    assert C.seed_of("compare:A:seed7") == "seed7" and C.seed_of("compare") == "seed0"
    md = C.compare_markdown(dict(systems=C.system_table(_rows()), frontier=[], sentences=[], combinations=[], by_seed=seeds))
    assert "| ROG-4 | 55.0 (50.0 to 60.0), 2/2, best 1 | 42.5 (40.0 to 45.0), 2/2, best 2 |" in md  # 50, 60 | 40, 45
    assert "Frontier on seed1 alone: ROG-4." in md


def test_pacing_check_against_the_seed_spread_by_hand():
    from rog.papers.compare.pacing import pacing_check, pacing_markdown, pacing_verdict

    def m(library, threshold, iter_s, stall_s, times, accs):
        curve = pd.DataFrame(dict(time_s=times, accuracy_pct=accs, iteration=range(len(times))))
        return RunMetrics(run=_run(dict(library=library, threshold=threshold)), iterations=2, iter_s=iter_s, compute_s=1.0,
                          comm_s=0.1, stall_s=stall_s, other_s=0.0, acc_start=accs[0], acc_final=accs[-1], acc_peak=max(accs),
                          acc_at_equal_iters=None, time_to_target_s=None, energy_to_target_j=None, energy_source="model",
                          train_s=times[-1], accuracy_curve=curve)
    flat = ([0, 10, 20], [50, 60, 70])
    sets = {
        "compare:A:seed0": [m("BSP", 0, 1.0, 0.5, [0, 10, 20], [50, 60, 70]), m("ROG", 4, 1.0, 0.2, *flat)],
        "compare:A:seed1": [m("BSP", 0, 1.2, 0.5, [0, 10, 20], [50, 62, 74]), m("ROG", 4, 1.02, 0.2, *flat),
                            m("ADSP", 0, 9.0, 0.0, *flat)],  # not one of the four: not compared
        "outdoors:A:seed1": [m("BSP", 0, 1.1, 0.4, [0, 10, 16], [50, 61, 69]), m("ROG", 4, 1.5, 0.2, *flat)],
        "outdoors:B:seed1": [m("BSP", 0, 1.1, 0.4, *flat)],  # no compare replica of trace B: not compared
    }
    rows = {(r["system"], r["measure"]): r for r in pacing_check(sets)}
    assert set(rows) == {(s, k) for s in ("BSP", "ROG-4") for k in ("iter_s", "stall_share", "acc_equal_time")}
    b = rows[("BSP", "iter_s")]
    assert (b["effect"], b["spread"], b["holds"]) == (pytest.approx(0.1), pytest.approx(0.2), True)
    s = rows[("BSP", "stall_share")]
    assert s["effect"] == pytest.approx(0.5 / 1.2 - 0.4 / 1.1) and s["spread"] == pytest.approx(0.5 - 0.5 / 1.2) and s["holds"]
    a = rows[("BSP", "acc_equal_time")]  # at 16 s (the iteration run's last test): 62 + 0.6 x 12 against 69
    assert a["layer"] == pytest.approx(69.2) and a["effect"] == pytest.approx(0.2) and a["spread"] == pytest.approx(4.0)
    r = rows[("ROG-4", "iter_s")]
    assert r["effect"] == pytest.approx(0.48) and r["spread"] == pytest.approx(0.02) and r["holds"] is False
    assert rows[("ROG-4", "acc_equal_time")]["holds"] is True  # 0 <= 0: equal curves
    verdict = pacing_verdict(list(rows.values()))
    # ROG-4's stall share too: 0.2 / 1.02 against 0.2 / 1.5, while its seeds differ by 0.2 - 0.2 / 1.02
    assert verdict == ("per-layer pacing within the run-to-run spread on 4 of 6 comparisons; outside: "
                       "ROG-4 iter_s on A seed1, ROG-4 stall_share on A seed1")
    assert "| BSP | A | seed1 | iter_s | 1.200 s | 1.100 s | 0.100 s | 0.200 s | yes |" in pacing_markdown(list(rows.values()))
    alone = pacing_check({k: v for k, v in sets.items() if k != "compare:A:seed0"})  # no other seed: no spread
    assert alone and all(x["spread"] is None and x["holds"] is None for x in alone)
    assert pacing_verdict(alone).startswith("no comparison")
