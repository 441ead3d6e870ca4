"""ScaDLES's claims and the rules that judge them (docs/scadles.md, "Claims and their rules"), as pure
functions of measured numbers, so every verdict can fail and is tested by hand.

The setting is scaled (4 workers, the quick model, scaled rates), so the rules compare the shape the paper
states: an ordering, or a CNC band where both of the paper's models (ResNet152, VGG19) agree.  Checks that
are true by construction (Eq. 2 from the same clock, the truncation cap, the floats-sent law, and CNC at
CR 0.01 <= CNC at CR 0.1: for the same gradients the top 1 % always leaves more energy behind than the
top 10 %, so the lower CR's gate opens less) are not verdicts: they are consistency tests
(:func:`table_v_ordering` serves the summary's consistency table).
"""

from __future__ import annotations

__all__ = ["FIG6_PAPER", "SIMILAR_POINTS", "TABLE_V_PAPER", "CNC_TOLERANCE", "ORDER_SLACK",
           "fig6_verdicts", "table_v_cell", "table_v_ordering", "reading_score"]

# Fig. 6: speed-up of ScaDLES over conventional DDL (ResNet152, VGG19) and the final-accuracy statement
FIG6_PAPER = {
    "S1": dict(speedup=(1.92, 3.33), accuracy=None,
               text="3.33x (ResNet152) / 1.92x (VGG19) faster"),
    "S1p": dict(speedup=(3.6, 4.0), accuracy="proportional",
                text="~3.6x / ~4x faster, higher final accuracy"),
    "S2": dict(speedup=None, accuracy="fixed", text="DDL (fixed batch) reached the higher final accuracy"),
    "S2p": dict(speedup=None, accuracy="similar|proportional",
                text="ResNet152 similar for both; VGG19 better with ScaDLES"),
}
SIMILAR_POINTS = 2.0  # S2': plateaus within this many points are "similar"

# Table V: CNC per (CR, delta) for (ResNet152, VGG19)
TABLE_V_PAPER = {
    (0.1, 0.1): (0.29, 0.0), (0.1, 0.2): (0.99, 0.08), (0.1, 0.3): (1.0, 1.0), (0.1, 0.4): (1.0, 1.0),
    (0.01, 0.1): (0.0, 0.0), (0.01, 0.2): (0.17, 0.0), (0.01, 0.3): (0.43, 0.0), (0.01, 0.4): (0.99, 0.004),
}
CNC_TOLERANCE = 0.1  # a cell agrees iff CNC lies within the band the two models span, widened by this
ORDER_SLACK = 0.05  # consistency: CNC at CR 0.01 may exceed CNC at CR 0.1 by at most this


def fig6_verdicts(regime: str, speedup: float | None, plateau_fixed: float | None,
                  plateau_proportional: float | None) -> list[tuple[str, str]]:
    """``[(aspect, verdict)]`` for one Fig. 6 rate set (plateaus in %; speed-up = fixed / proportional time)."""
    paper = FIG6_PAPER[regime]
    out = []
    if paper["speedup"] is not None:
        lo, hi = paper["speedup"]
        if speedup is None:
            out.append(("ordering", "n/a (no common target)"))
        else:
            out.append(("ordering", "agrees (rate-proportional first)" if speedup > 1 else "does not agree (fixed first)"))
            where = "inside" if lo <= speedup <= hi else ("below" if speedup < lo else "above")
            out.append(("magnitude", f"{speedup:.2f}x is {where} the paper's {lo:g}x-{hi:g}x"))
    if paper["accuracy"] is not None:
        if plateau_fixed is None or plateau_proportional is None:
            out.append(("final accuracy", "n/a (no plateau)"))
        else:
            d = plateau_proportional - plateau_fixed
            if paper["accuracy"] == "proportional":
                v = "agrees" if d > 0 else "does not agree"
            elif paper["accuracy"] == "fixed":
                v = "agrees" if d < 0 else "does not agree"
            else:  # S2': similar (ResNet152) or ScaDLES ahead (VGG19)
                v = ("agrees with ResNet152 (similar)" if abs(d) <= SIMILAR_POINTS else
                     "agrees with VGG19 (rate-proportional ahead)" if d > 0 else "agrees with neither (fixed ahead)")
            out.append(("final accuracy", f"{v}: proportional - fixed = {d:+.1f} points"))
    return out


def table_v_cell(cr: float, delta: float, cnc: float) -> str:
    """The verdict of one Table V cell: ``agrees``, ``does not agree`` or ``no verdict (...)``."""
    key = (round(float(cr), 4), round(float(delta), 4))
    if key not in TABLE_V_PAPER:
        return "no verdict (not a cell of the paper's table)"
    lo, hi = sorted(TABLE_V_PAPER[key])
    lo, hi = max(0.0, lo - CNC_TOLERANCE), min(1.0, hi + CNC_TOLERANCE)
    if lo == 0.0 and hi == 1.0:
        return "no verdict (the two models span every CNC)"
    return "agrees" if lo <= cnc <= hi else "does not agree"


def table_v_ordering(cnc: dict) -> dict:
    """Per delta present at both CRs: True iff CNC(CR 0.01) <= CNC(CR 0.1) + :data:`ORDER_SLACK` (a consistency
    check, true by construction for the same gradients: never counted as agreement with the paper)."""
    deltas = sorted({d for (cr, d) in cnc if (0.1, d) in cnc and (0.01, d) in cnc})
    return {d: cnc[(0.01, d)] <= cnc[(0.1, d)] + ORDER_SLACK for d in deltas}


def reading_score(cnc: dict) -> tuple[int, int]:
    """``(agreeing, judged)`` over the cells with a verdict, for one reading's CNCs (the ordering by CR is a
    consistency check, not counted)."""
    agree = judged = 0
    for (cr, d), v in cnc.items():
        verdict = table_v_cell(cr, d, v)
        if not verdict.startswith("no verdict"):
            judged += 1
            agree += verdict == "agrees"
    return agree, judged
