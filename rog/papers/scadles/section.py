"""ScaDLES's section of ``summary.{json,md}`` (registered in :mod:`rog.analysis.paper_sections`): its graded rows.

The items write their own tables (``result/scadles/summary.md``, ``result/scadles-figs/summary.md``); the summary
carries the graded rows of what is measured there, read from the same run folders (Table V's gated runs,
:func:`rog.papers.scadles.topk.gate_rows`; Figs. 1 and 5, the ``scadles-figs`` results), with their null models.
"""

from __future__ import annotations

import json
from pathlib import Path

from rog.analysis.grades import section_opening
from rog.analysis.paper_sections import SectionPart, SummaryContext

from .grading import figs_rows, table_v_row
from .seeds import graded_rows as seed_rows


def _result(folder: Path) -> dict | None:
    p = folder / "result.json"
    try:
        return json.loads(p.read_text()) if p.is_file() else None
    except ValueError:
        return None


def summary_section(ctx: SummaryContext) -> SectionPart | None:
    """ScaDLES's graded rows from ``result/scadles/`` and ``result/scadles-figs/``, or None when neither ran."""
    from .figs_item import steps
    from .topk import gate_rows, table_v_cnc

    rows = [table_v_row(c, st) for st, c in table_v_cnc(gate_rows(ctx.result_dir)).items() if c]
    (f1, _), (f5, _) = steps(Path(ctx.result_dir))
    rows += figs_rows(_result(f1), _result(f5))
    rows += seed_rows(Path(ctx.result_dir))  # the fresh-seed rule (Fig. 6 and Table V over seeds 11-13)
    if not rows:
        return None
    md = ["## ScaDLES (items `scadles`, `scadles-figs`)", "",
          "The tables are in `result/scadles/summary.md`, `result/scadles/seeds.md` (the fresh-seed rule) and "
          "`result/scadles-figs/summary.md`.", "",
          *section_opening(rows, "ScaDLES")]
    return SectionPart({}, "\n".join(md), graded=tuple(rows))
