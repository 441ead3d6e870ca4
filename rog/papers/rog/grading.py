"""ROG's claims table as graded rows (:mod:`rog.analysis.grades`).

Each :class:`rog.analysis.claim_table.Claim` with an acceptance bound is one row: ``pass`` agrees, ``FAIL`` does
not, a missing value (or mixed energy sources) is not decidable; a claim without a bound is a reported
comparison, not a verdict, and gets no row.  The setting is the emulated testbed's, named in every row.
:func:`documented_rows` gives the rows docs/reproduction.md reports over seeds 0-2.
"""

from __future__ import annotations

from typing import Collection, Sequence

from rog.analysis.claim_table import Claim
from rog.analysis.grades import GradedRow, outcome_of

__all__ = ["PAPER_NAME", "DOCS", "SCALED", "claim_graded_rows", "documented_rows"]

DOCS = "docs/reproduction.md"  # where the documented rows come from
PAPER_NAME = "ROG"
SCALED = ("4 emulated workers (network namespaces) replaying the recorded outdoors trace, the quick workload from a "
          "pre-trained start, 150 s budget (paper: 4 robots on real Wi-Fi, 60 min)")


def claim_graded_rows(claims: Sequence[Claim], undecided: Collection[str] = ()) -> list[GradedRow]:
    """One graded row per claim with a bound; a claim named in ``undecided`` (the sensitivity items' decidability
    rule, :mod:`.robustness`) is not decidable whatever its value."""
    out = []
    for c in claims:
        if c.bound is None:  # a reported comparison, not a verdict
            continue
        v = "not decidable" if c.name in undecided else c.verdict()
        ours = "n/a" if c.ours is None else (f"{c.ours:.2f}x" if c.unit == "x" else f"{c.ours:+.2f} points")
        op, b = c.bound
        out.append(GradedRow(PAPER_NAME, c.name, c.paper_text, ours, outcome_of(v), SCALED,
                             seeds=c.reached() or f"{len(c.run_ids)} runs", sentence=c.sentence(),
                             reading=f"acceptance bound {op} {b:g}"))
    return out


def documented_rows() -> list[GradedRow]:
    """docs/reproduction.md's seeds 0 / 1 / 2 at 150 s (BSP, SSP-4, FLOWN, ROG-4), each claim on its worst seed."""
    rows = (("time to target, ROG-4 / min(BSP, SSP-4, FLOWN)", "no number (Fig. 6c)", (0.67, 0.61, 0.64), 0.75,
             "Seed 0's ratio depends on where the target falls: 0.86 at a target of 67.21 % (docs/reproduction.md)."),
            ("energy to target, ROG-4 / SSP-4", "20.4-50.7 % less energy to 64 %", (0.73, 0.65, 0.68), 0.8,
             "Energy is the Jetson state model's, not a measurement; it follows the time to target."),
            ("stall / iteration, ROG-4 / BSP", "stall cut by 49.1-86.5 %", (0.24, 0.25, 0.29), 0.5,
             "The stall ratio varies least with the seed of the three."))
    return [GradedRow(PAPER_NAME, name, paper, " / ".join(f"{v:.2f}x" for v in vals), outcome_of(max(vals) <= bound),
                      SCALED, seeds="seeds 0, 1, 2", reading=f"acceptance bound <= {bound:g} on every seed", sentence=sentence)
            for name, paper, vals, bound, sentence in rows]
