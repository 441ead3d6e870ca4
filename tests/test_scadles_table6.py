"""ScaDLES's Table VI steps (rog.papers.scadles.table6_steps): the runs it plans and the verdict rules of
docs/scadles.md, computed by hand."""

from __future__ import annotations

from pathlib import Path

from rog.papers.scadles.table6_steps import DROP_BAND_POINTS, SEEDS, steps, table6_verdicts


def test_steps_run_seed_by_seed_with_each_systems_flags(tmp_path):
    st = steps(tmp_path)
    assert len(st) == 3 * len(SEEDS)
    seeds = [int(a[a.index("--seed") + 1]) for _, a in st]
    assert seeds == sorted(seeds)  # whole seeds first
    by_name = {Path(f).name: a for f, a in st}
    s, d, r = by_name["scadles-seed1"], by_name["ddl-seed1"], by_name["rog4-seed1"]
    assert s[s.index("--compression") + 1] == "topk" and s[s.index("--topk-gate-delta") + 1] == "0.3"
    assert s[s.index("--batch-policy") + 1] == "rate_proportional" and s[s.index("--stream-buffer") + 1] == "truncate"
    assert d[d.index("--compression") + 1] == "none" and "--batch-policy" not in d and "--stream-buffer" not in d
    assert r[r.index("--library") + 1] == "ROG" and r[r.index("--threshold") + 1] == "4"
    for a in (s, d, r):  # the same trace, streams, workers and budget
        assert a[a.index("-c") + 1] == "outdoors" and a[a.index("--stream-set") + 1] == "S1"
        assert a[a.index("--workers") + 1] == "4" and a[a.index("--budget-s") + 1] == "90"


def test_table6_verdicts_by_hand():
    assert DROP_BAND_POINTS == (-2.93, 1.0)
    v = table6_verdicts([1.3, 0.9, 1.1], [-1.0, -3.5, 0.2])
    assert v["speedup_median"] == 1.1 and v["speedup_verdict"] == "agrees"
    assert v["drop_median_points"] == -1.0 and v["drop_verdict"] == "agrees"
    v = table6_verdicts([0.8, 0.95, 1.5], [-3.0, -3.2, 0.0])
    assert v["speedup_verdict"] == "does not agree" and v["drop_verdict"] == "does not agree"  # -3.0 < -2.93
    v = table6_verdicts([1.4, None, 1.2], [1.2, 0.5, 2.0])
    assert v["speedup_verdict"] == "not decidable" and v["speedup_missing"] == 1
    assert v["drop_verdict"] == "does not agree"  # +1.2 points: ScaDLES more accurate than the band allows
    assert table6_verdicts([], [])["speedup_verdict"] == "not decidable"
