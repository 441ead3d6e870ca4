"""The ScaDLES verdict rules (rog.papers.scadles.verdicts) by hand: each can say "does not agree", the
bands are the paper's two models' values widened by 0.1, and the Fig. 6 rows read real run folders."""

from __future__ import annotations

import pytest

from rog.papers.scadles.verdicts import fig6_verdicts, reading_score, table_v_cell, table_v_ordering


def test_fig6_ordering_and_magnitude_can_fail():
    assert fig6_verdicts("S1", 2.0, None, None) == [("ordering", "agrees (rate-proportional first)"),
                                                   ("magnitude", "2.00x is inside the paper's 1.92x-3.33x")]
    v = dict(fig6_verdicts("S1", 0.8, None, None))
    assert v["ordering"].startswith("does not agree") and "below" in v["magnitude"]
    assert "above" in dict(fig6_verdicts("S1", 5.0, None, None))["magnitude"]
    assert dict(fig6_verdicts("S1", None, None, None))["ordering"].startswith("n/a")


@pytest.mark.parametrize("regime, fixed, prop, start", [
    ("S1p", 80.0, 82.0, "agrees"), ("S1p", 82.0, 80.0, "does not agree"),
    ("S2", 84.0, 81.0, "agrees"), ("S2", 81.8, 84.1, "does not agree"),
    ("S2p", 80.0, 81.5, "agrees with ResNet152"), ("S2p", 80.0, 83.0, "agrees with VGG19"),
    ("S2p", 83.0, 80.0, "agrees with neither"),
])
def test_fig6_final_accuracy_rules(regime, fixed, prop, start):
    v = dict(fig6_verdicts(regime, 1.5, fixed, prop))["final accuracy"]
    assert v.startswith(start) and f"{prop - fixed:+.1f} points" in v


@pytest.mark.parametrize("cr, delta, cnc, verdict", [
    (0.1, 0.1, 0.39, "agrees"), (0.1, 0.1, 0.40, "does not agree"),  # paper 0.29 / 0: band [0, 0.39]
    (0.1, 0.3, 0.9, "agrees"), (0.1, 0.3, 0.0, "does not agree"), (0.1, 0.4, 0.27, "does not agree"),
    (0.01, 0.1, 0.0, "agrees"), (0.01, 0.1, 0.2, "does not agree"),
    (0.01, 0.2, 0.27, "agrees"), (0.01, 0.3, 0.6, "does not agree"),
    (0.1, 0.2, 0.5, "no verdict"), (0.01, 0.4, 0.0, "no verdict"), (0.1, 0.6, 0.9, "no verdict"),
])
def test_table_v_cells(cr, delta, cnc, verdict):
    assert table_v_cell(cr, delta, cnc).startswith(verdict)


def test_ordering_and_reading_score():
    # the measurement of the first gate runs (energy statistic): CR 0.1 shut until delta 0.4
    cnc = {(0.1, 0.1): 0.0, (0.1, 0.2): 0.0, (0.1, 0.3): 0.0, (0.1, 0.4): 0.27,
           (0.01, 0.1): 0.0, (0.01, 0.2): 0.0, (0.01, 0.3): 0.0, (0.01, 0.4): 0.0}
    assert table_v_ordering(cnc) == {0.1: True, 0.2: True, 0.3: True, 0.4: True}
    # judged cells: (0.1, 0.1) yes, (0.1, 0.3) no, (0.1, 0.4) no, (0.01, 0.1..0.3) yes x3; the orderings are a
    # consistency check (true by construction for the same gradients), not counted as agreement
    assert reading_score(cnc) == (4, 6)
    cnc[(0.01, 0.2)] = 0.5  # now above CR 0.1's 0.0 + 0.05 and outside [0, 0.27]
    assert table_v_ordering(cnc)[0.2] is False and reading_score(cnc) == (3, 6)


def test_plateau_is_the_mean_of_the_last_three_tests_in_time_order():
    import pandas as pd

    from rog.papers.scadles.stream_runs import plateau_pct

    class Run:
        accuracy = pd.DataFrame({"time_s": [30.0, 10.0, 20.0, 40.0], "accuracy_pct": [80.0, 50.0, 70.0, 90.0],
                                 "iteration": [3, 1, 2, 4]})

    assert plateau_pct(Run()) == pytest.approx((70 + 80 + 90) / 3)
    Run.accuracy = Run.accuracy.iloc[:0]
    assert plateau_pct(Run()) is None
