"""ScaDLES's null models (docs/scadles.md, "Grades"): the trivial gates of Table V and Fig. 1's sleep alone.

* Table V: a gate that **never opens** (CNC 0 in every cell: every step sends the dense gradient) and one that
  **always opens** (CNC 1), judged cell by cell by the rule that judges ours
  (:func:`rog.papers.scadles.verdicts.table_v_cell`): :func:`gate_null_scores`.  The claim's reading is fixed
  before the cells are read (:data:`TABLE_V_READING`) and the other reading is reported beside it.
* Fig. 1: the stream source sleeps ``b / S`` for a batch of ``b`` samples at ``S`` samples/s, so the latencies'
  shape follows from that sleep alone: :func:`sleep_latency_null` applies Fig. 1's rules
  (:mod:`rog.papers.scadles.figs15`) to ``b / S``.
"""

from __future__ import annotations

from typing import Sequence

from .figs15 import rises_with_batch, slowest_is_straggler, starved
from .verdicts import TABLE_V_PAPER, reading_score

__all__ = ["TABLE_V_READING", "TABLE_V_BESIDE", "gate_null_cnc", "gate_null_scores", "majority", "sleep_latency_null"]

# Fixed on 6 Dec 2026 (issue 52), before any new Table V cell is read: `norm` (the released code's statistic,
# the toolkit's default `--topk-gate-statistic norm`); the paper's printed formula (`energy`) is reported beside it.
TABLE_V_READING = "norm"
TABLE_V_BESIDE = "energy"


def gate_null_cnc(always_open: bool, cells: Sequence[tuple[float, float]] = tuple(TABLE_V_PAPER)) -> dict:
    """``{(CR, delta): CNC}`` of a trivial gate: 1.0 in every cell (always opens) or 0.0 (never opens)."""
    return {k: 1.0 if always_open else 0.0 for k in cells}


def gate_null_scores(cells: Sequence[tuple[float, float]] = tuple(TABLE_V_PAPER)) -> dict[str, tuple[int, int]]:
    """``{"never opens": (agreeing, judged), "always opens": (...)}`` over ``cells`` by Table V's cell rule."""
    return {"never opens": reading_score(gate_null_cnc(False, cells)),
            "always opens": reading_score(gate_null_cnc(True, cells))}


def majority(score: tuple[int, int]) -> bool:
    """Table V's table-level reading of "k of n judged cells agree": more than half of the judged cells."""
    agree, judged = score
    return judged > 0 and 2 * agree > judged


def sleep_latency_null(rates: Sequence[float], batches: Sequence[int], fixed_batch: int,
                       compute_s: float) -> dict[str, bool]:
    """Fig. 1's rules on the latencies ``b / S`` alone: ``rises`` (every worker's latency strictly rising with the
    batch), ``straggler`` (the lowest-rate worker the slowest at every batch, no tolerance) and ``starved`` (the
    lowest-rate worker's wait for the fixed batch above its compute ``compute_s``)."""
    if not rates or min(rates) <= 0 or not batches:
        raise ValueError("rates must be positive and batches non-empty")
    lat = [[b / s for b in batches] for s in rates]
    slow = min(range(len(rates)), key=lambda i: rates[i])
    return dict(rises=all(rises_with_batch(row) for row in lat),
                straggler=all(slowest_is_straggler(rates, [lat[w][j] for w in range(len(rates))], 0.0)
                              for j in range(len(batches))),
                starved=starved(fixed_batch / rates[slow], compute_s))
