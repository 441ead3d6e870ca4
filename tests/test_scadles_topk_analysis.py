"""rog.papers.scadles.topk on hand-made run folders: plateau, gap recovered, injection share, CNC and
the floats law, computed by hand; the summary rows and figures are written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rog.papers.scadles.topk import gate_rows, noniid_rows, plot_scadles_topk, scadles_topk_markdown
from rog.runtime.events import EventLog


def make_run(base: Path, note: str, accs, *, partition="labels:1", inject=None, topk=None, workers=2,
             inject_bytes=0, grad_bytes=1000, topk_records=None):
    d = base / "scadles" / f"BSP-none-b1-w{workers}-seed0-{note}"
    d.mkdir(parents=True)
    cfg = dict(workers=workers, partition=partition, inject=inject, compression="topk" if topk else "none", topk=topk)
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    n_it = 10 * (len(accs) - 1)
    for k in range(workers):
        with EventLog(d / f"events-w{k}.jsonl", f"w{k}", "r") as ev:
            for it in range(1, n_it + 1):
                ev.write("compute", iteration=it, duration_s=0.1)
                ev.write("push", iteration=it, rows_planned=1, rows_delivered=1, bytes=grad_bytes, deadline_s=None,
                         delivered_share=1.0, duration_s=0.01, mandatory_s=None)
                ev.write("pull", iteration=it, rows_planned=1, rows_delivered=1, bytes=grad_bytes, deadline_s=None,
                         delivered_share=1.0, duration_s=0.01, mandatory_s=None)
                if inject_bytes and k == 0:
                    ev.write("inject", iteration=it, direction="send", samples=8, bytes=inject_bytes, worker=0, peer=1)
            if k == 0:
                for i, a in enumerate(accs):
                    ev.write("eval", iteration=10 * i, accuracy=a, loss=1.0)
                ev.write("eval", iteration=n_it, accuracy=accs[-1], loss=1.0, flushed=True)
        if topk_records is not None:
            (d / f"topk-w{k}.json").write_text(json.dumps(dict(records=topk_records)))
    return d


def rec(compressed, floats, dense=1000):
    return dict(compressed=compressed, floats=floats, dense_floats=dense)


def test_noniid_rows_and_gate_rows_by_hand(tmp_path):
    make_run(tmp_path, "ni-iid", [0.5, 0.8, 0.9, 0.9, 0.9], partition="iid")
    make_run(tmp_path, "ni-labels1", [0.5, 0.5, 0.6, 0.5, 0.4])
    make_run(tmp_path, "ni-labels1-inject-network", [0.5, 0.7, 0.8, 0.85, 0.87],
             inject=dict(alpha=0.25, beta=0.25, mode="network"), inject_bytes=50)
    by = noniid_rows(tmp_path)
    assert by["iid"]["plateau"] == pytest.approx(0.9)
    assert by["noniid"]["plateau"] == pytest.approx(0.5)
    net = by["inject-network"]
    assert net["plateau"] == pytest.approx((0.8 + 0.85 + 0.87) / 3)
    assert net["gap_recovered"] == pytest.approx((net["plateau"] - 0.5) / 0.4)
    assert net["inject_bytes_per_iteration"] == pytest.approx(50)  # one send of 50 B per iteration
    assert net["gradient_bytes_per_iteration"] == pytest.approx(2 * 2 * 1000)  # 2 workers x push + pull
    topk = dict(ratio=0.1, gate=True, delta=0.3, smoothing=0.9)
    # 3 pushes + the final flush (excluded): 2 compressed of 3 -> CNC 2/3; floats 100 + 100 + 1000
    make_run(tmp_path, "gate-cr0.1-d0.3", [0.5, 0.6], topk=topk,
             topk_records=[rec(True, 100), rec(False, 1000), rec(True, 100), rec(False, 1000)])
    (row,) = gate_rows(tmp_path)
    assert row["cnc"] == pytest.approx(2 / 3)
    assert row["floats_sent"] == 2 * 1200 and row["dense_floats"] == 2 * 3000
    law = 6000 * (1 - (2 / 3) * 0.9)
    assert row["floats_law_error"] == pytest.approx((2400 - law) / law)
    md = scadles_topk_markdown(tmp_path)
    assert "| 0.1 | 0.3 | 1 / 1 | 0.67 | does not agree |" in md and "gap recovered" in md and "Paper:" in md
    figs = plot_scadles_topk(tmp_path, tmp_path / "fig")
    assert [f.name for f in figs] == ["scadles_noniid.png", "scadles_cnc.png"] and all(f.stat().st_size for f in figs)


@pytest.mark.parametrize("non, inject, verdict, collapse", [
    # IID plateau 0.9, chance 0.1: the collapse needs >= 0.5 x 0.8 = 0.4 below IID
    ([0.3, 0.3, 0.3], [0.85, 0.85, 0.85], "agrees", "reproduced"),  # gap 0.6, recovered 0.55/0.6 = 92 %
    ([0.3, 0.3, 0.3], [0.6, 0.6, 0.6], "does not agree", "reproduced"),  # recovered 50 %
    ([0.7, 0.7, 0.7], [0.9, 0.9, 0.9], "does not agree", "not reproduced"),  # gap 0.2 < 0.4
])
def test_verdict_follows_the_fixed_rule(tmp_path, non, inject, verdict, collapse):
    make_run(tmp_path, "ni-iid", [0.1, 0.9, 0.9, 0.9], partition="iid")
    make_run(tmp_path, "ni-labels1", [0.1, *non])
    make_run(tmp_path, "ni-labels1-inject-network", [0.1, *inject], inject=dict(alpha=0.25, beta=0.25, mode="network"),
             inject_bytes=50)
    line = next(s for s in scadles_topk_markdown(tmp_path).splitlines() if s.startswith("Here (convmlp_quick)"))
    assert f": {verdict}:" in line and f"margin over chance, is {collapse})" in line


def test_table_v_reads_both_readings_and_the_raw_statistic(tmp_path):
    """Two shut runs (CR 0.1, delta 0.3) per reading: the raw statistic's range is read from the records
    (flush excluded) and the cell verdict is the rule's (CNC 0 at CR 0.1, delta 0.3: does not agree)."""
    for st, vals in (("energy", [0.5, 0.6, 0.4]), ("norm", [0.3, 0.2, 0.25])):
        topk = dict(ratio=0.1, gate=True, delta=0.3, smoothing=0.9, statistic=st)
        recs = [dict(rec(False, 1000), statistic_energy=v, statistic_norm=v / 2) for v in vals]
        make_run(tmp_path, f"gate-cr0.1-d0.3-{st}", [0.5, 0.6], topk=topk, workers=1,
                 topk_records=recs + [rec(False, 1000)])
    md = scadles_topk_markdown(tmp_path)
    assert "| 0.1 | 0.3 | 1 / 1 | 0.00 | does not agree | 0.00 | does not agree |" in md
    # energy over both runs: 0.5, 0.6, 0.4 and 0.3, 0.2, 0.25 -> min 0.2, median 0.35, max 0.6
    assert "raw `energy` statistic, CR 0.1, runs whose gate stayed shut (dense gradients) | min 0.200, median 0.350, max 0.600 over 6 pushes" in md
    assert "raw `norm` statistic, CR 0.1" in md and "min 0.100, median 0.175, max 0.300" in md
