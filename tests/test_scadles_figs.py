"""The ``scadles-figs`` item: Fig. 1's latency measured with real sleeps (near ``b / S``; its accuracy within
the sleep granularity is a bench), Fig. 5's producer on a tiny case, and the rules by hand (a case that passes,
one that fails)."""

from __future__ import annotations

import json

import pytest

from rog.papers.scadles import figs15 as A
from rog.experiment import items as I
from rog.papers.scadles import figs_item as FI
from rog.papers.scadles import stream_latency as L
from rog.papers.scadles import stream_producers as P
from rog.streams.rates import RATE_SETS, draw_rates
from benchmarks.timing import streams as TS


def test_latency_real_sleeps_wait_at_least_b_over_s():
    """Real sleeps: the mean wait is at least half of ``b / S`` (samples that arrive between takes, while
    Python runs, are not waited for: a loaded machine's preemptions there shorten the waits) and under
    5 x ``b / S``; its accuracy within the sleep granularity's tolerance: benchmarks/timing/streams.py (bench)."""
    m = L.measure_latency(400.0, 10, takes=4, compress=1.0)  # 25 ms a take, uncompressed
    assert m["waits_s"] and len(m["waits_s"]) == 4
    assert 0.5 * 10 / 400 <= m["measured_s"] < 5 * 10 / 400
    assert m["real_s"] >= (4 * 10 - 1) / 400  # the sleeps really happened: 39 more samples had to arrive


def test_compressed_latency_is_in_toolkit_time_and_takes_less_real_time():
    m = L.measure_latency(40.0, 10, takes=3, compress=10.0)  # 0.25 s a take on a clock 10x faster
    assert 0.5 * 0.25 <= m["measured_s"] < 5 * 0.25  # toolkit seconds, not real ones (0.025)
    assert (3 * 10 - 1) / 40 / 10 <= m["real_s"] < 3 * 0.25 / 2  # uncompressed it would take 0.75 s
    auto = L.measure_latency(20.0, 8, takes=1)  # 0.4 s: compressed to REAL_TAKE_S of real time
    assert auto["compress"] == pytest.approx(0.4 / L.REAL_TAKE_S, rel=1e-3)
    with pytest.raises(ValueError, match="rate must be > 0"):
        L.measure_latency(0.0, 8)


def test_latency_tolerance_by_hand():
    """The bench's bound: 1 / (S takes) for the sample in flight plus compress x (granularity, floored, + the
    loop's overhead)."""
    g = L.GRANULARITY_FLOOR_S
    assert L.latency_tolerance_s(400.0, 4, 1.0, 0.0) == pytest.approx(1 / 1600 + g + L.LOOP_OVERHEAD_S)
    assert L.latency_tolerance_s(40.0, 3, 10.0, 5 * g) == pytest.approx(1 / 120 + 10 * (5 * g + L.LOOP_OVERHEAD_S))


@pytest.mark.bench
def test_bench_latency_and_producer_rates_match_real_time():
    for f in TS.latency_figures() + TS.producer_figures():
        assert f["ok"], f


def test_batches_and_the_item_workers_are_a_prefix_of_the_paper_draw():
    assert L.fig1_batches(32) == [8, 16, 32, 64, 128] and L.fig1_batches(64) == list(L.FIG1_PAPER_BATCHES)
    for name in RATE_SETS:  # docs/scadles.md: the first 4 of the 16-device draw are the item's 4 workers
        assert draw_rates(name, 16, 0, 2.0)[:4] == draw_rates(name, 4, 0, 2.0)


def test_producer_holds_a_low_rate_on_two_streams():
    """Two producers at 100 samples/s: both stream into the measured window and neither exceeds the rate by
    more than its edge samples and a late wake-up's catch-up (one-sided: a loaded machine only slows them);
    the rate within those edges: benchmarks/timing/streams.py (bench)."""
    g = max(L.sleep_granularity_s(), L.GRANULARITY_FLOOR_S)
    m = P.measure_streams(2, 100.0, duration_s=0.4, warmup_s=0.1, bucket_s=0.2)
    assert m["exit_codes"] == [0, 0] and len(m["buckets"]) == 2 and all(len(b) == 2 for b in m["buckets"])
    assert all(0 < x <= 100.0 + 2 * (1 + 100.0 * g) / 0.4 for x in m["effective"]), m["effective"]
    with pytest.raises(ValueError, match="streams >= 1"):
        P.measure_streams(0, 100.0, 1.0)


def test_rules_by_hand():
    assert A.rises_with_batch([0.1, 0.2, 0.4]) and not A.rises_with_batch([0.1, 0.2, 0.2])
    assert A.slowest_is_straggler([10, 20, 30], [3.0, 1.5, 1.0], 0.01)
    assert not A.slowest_is_straggler([10, 20, 30], [2.0, 2.5, 1.0], 0.1)
    assert A.slowest_is_straggler([10, 20], [2.0, 2.05], 0.1)  # within the slowest's tolerance
    assert A.starved(0.30, 0.28) and not A.starved(0.25, 0.28)
    assert A.rate_held([96.0, 95.0, 10.0], 100.0) and not A.rate_held([94.0, 99.0, 10.0], 100.0)
    assert A.fig5_paper_holds(100.0, 32) and A.fig5_paper_holds(600.0, 16)
    assert A.fig5_paper_holds(600.0, 32) is False and A.fig5_paper_holds(250.0, 4) is None


def _fig1(name: str, slow_latencies) -> dict:
    """Two workers at 10 and 100 /s, batches 8/16/32 (fixed 16), compute 0.2/0.25/0.3 s."""
    def pts(rate, lat):
        return [dict(rate=rate, batch=b, analytic_s=b / rate, measured_s=x, tolerance_s=0.01)
                for b, x in zip((8, 16, 32), lat)]
    return dict(batches=[8, 16, 32], fixed_batch=16, compute_s=[0.2, 0.25, 0.3], item_workers=1, n_workers=2,
                sets={name: dict(rates=[10.0, 100.0], workers=[pts(10.0, slow_latencies), pts(100.0, [0.08, 0.16, 0.32])])})


def test_fig1_verdicts_on_hand_made_measurements():
    v = A.fig1_verdicts(_fig1("S1", [0.8, 1.6, 3.2]))["S1"]
    assert v["rises"] and v["straggler_batches"] == 3 and v["starved"] and v["starved_agrees"] is True
    assert v["within_tolerance"] == 6 and v["fixed_wait_s"] == 1.6
    bad = A.fig1_verdicts(_fig1("S2", [0.8, 0.7, 0.05]))["S2"]  # falls, and beaten by the fast worker at 32
    assert not bad["rises"] and bad["straggler_batches"] == 2 and bad["starved"] and bad["starved_agrees"] is False
    assert bad["within_tolerance"] == 4  # 0.7 vs 1.6 and 0.05 vs 3.2 are outside
    assert A.fig1_readings(_fig1("S1", [0.8, 1.6, 3.2]))["item"]["S1"]["workers"] == 1


def test_fig5_verdicts_on_hand_made_rates():
    res = dict(runs=[dict(target=600.0, streams=32, effective=[600.0, 599.0, 598.0]),
                     dict(target=600.0, streams=16, effective=[500.0, 520.0, 600.0])])
    held32, held16 = A.fig5_verdicts(res)
    assert held32["held"] and held32["paper_held"] is False and held32["agrees"] is False
    assert not held16["held"] and held16["paper_held"] is True and held16["agrees"] is False


def test_item_is_registered_opt_in_and_plans_its_two_steps(tmp_path, capsys):
    assert I.MODULE_ITEMS["scadles-figs"] == "rog.papers.scadles.figs_item" and "scadles-figs" not in I.ITEM_NAMES
    st = FI.steps(tmp_path)
    assert [a[1] for _, a in st] == ["rog.papers.scadles.stream_latency", "rog.papers.scadles.stream_producers"]
    assert FI.main(["--result-dir", str(tmp_path), "--figure-dir", str(tmp_path / "f"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("[scadles-figs] run:") == 2 and "estimate" in out


def test_summary_rows_say_what_is_missing_and_name_the_producer():
    md = "\n".join(A.markdown_rows(None, None))
    assert md.count("Not measured") == 2
    fig5 = dict(started_utc="t", cpus=2, nice=19, wall_s=1.0, producer="this machine's producer in place of Kafka",
                runs=[dict(target=100.0, streams=1, effective=[100.0], load_avg_before=[1.0, 1.0, 1.0])])
    md = "\n".join(A.markdown_rows(None, fig5))
    assert "in place of Kafka" in md and "| 100 | 1 | 100.0 | 100.0 | yes | yes | yes | 1.00 |" in md
    json.dumps(A.fig5_verdicts(fig5))  # the item prints these on its last line


def test_item_reads_results_writes_summary_figures_and_json_last(tmp_path, capsys):
    fig1 = _fig1("S1", [0.8, 1.6, 3.2])
    fig1.update(started_utc="t", seed=0, takes=3, load_avg_before=[1.0] * 3, load_avg_after=[1.0] * 3, wall_s=1.0,
                paper_batches=[16, 32, 64], to_paper_time=4.29)
    fig5 = dict(started_utc="t", cpus=2, nice=19, wall_s=1.0, producer="this machine's producer in place of Kafka",
                runs=[dict(target=t, streams=n, effective=[t] * n, buckets=[[t, t]] * n, bucket_s=0.5,
                           load_avg_before=[1.0] * 3) for t in (100.0, 600.0) for n in (1, 4)])
    for (folder, _), res in zip(FI.steps(tmp_path), (fig1, fig5)):
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps(res))
    assert FI.main(["--result-dir", str(tmp_path), "--figure-dir", str(tmp_path / "f")]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["fig1"]["item"]["S1"]["starved_agrees"] is True and len(last["fig5"]) == 4
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == ["scadles_fig1.png", "scadles_fig5.png"]
    assert "| S1 | 1 (item) |" in (tmp_path / "scadles-figs" / "summary.md").read_text()


def test_fig1_and_fig5_graded_with_the_sleep_null():
    from rog.analysis.grades import BUILT_IN, DOES_NOT, REDUCED
    from rog.papers.scadles.grading import figs_rows

    # S1 measured as b / S: every rule holds, and so do the rules on b / S alone (the 10/s worker waits 16 / 10 =
    # 1.6 s > 0.25 s compute at the fixed batch): all built in
    rows = {r.claim.split(":")[1].strip(): r for r in figs_rows(_fig1("S1", [0.8, 1.6, 3.2]), None)}
    assert all(r.grade == BUILT_IN and r.nulls[0].value == "1 of 1 rate sets" for r in rows.values())
    # S2 measured falling: "rises" does not agree while b / S rises: not built in
    bad = {r.claim.split(":")[1].strip(): r for r in figs_rows(_fig1("S2", [0.8, 0.7, 0.05]), None)}
    rises = bad["latency rises with the batch"]
    assert rises.outcome == DOES_NOT and rises.grade == REDUCED and rises.nulls[0].outcome == "agrees"
    fig5 = dict(runs=[dict(target=600.0, streams=32, effective=[600.0] * 3)])
    (r5,) = figs_rows(None, fig5)
    assert r5.grade == BUILT_IN and "not a Kafka broker" in r5.why and r5.ours == "0 of 1 cells"


def test_scadles_section_grades_the_figs_results(tmp_path):
    from rog.analysis.paper_sections import SummaryContext
    from rog.papers.scadles.section import summary_section

    ctx = SummaryContext(result_dir=tmp_path, runs=[], metrics=[], target_acc=None, target_rule="-", equal_iters=None,
                         target_fraction=0.5, power="auto", smooth_tests=1)
    assert summary_section(ctx) is None  # nothing measured there
    (f1, _), _ = FI.steps(tmp_path)
    f1.mkdir(parents=True)
    (f1 / "result.json").write_text(json.dumps(_fig1("S1", [0.8, 1.6, 3.2])))
    part = summary_section(ctx)
    assert len(part.graded) == 3 and all(r.paper == "ScaDLES" for r in part.graded)
    assert "### ScaDLES: grades" in part.markdown and "the stream source's b / S sleep alone" in part.markdown
