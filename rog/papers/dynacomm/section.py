"""DynaComm's section of ``summary.{json,md}`` (registered in :mod:`rog.analysis.paper_sections`): its graded rows.

The item writes its own tables to ``result/dynacomm/summary.md`` (:mod:`rog.papers.dynacomm.summary`); the
summary carries the graded claims of those rounds and of the sweep (:mod:`.grading`) so that every paper's rows
are in ``summary.json``'s ``grades``.
"""

from __future__ import annotations

from pathlib import Path

from rog.analysis.grades import section_opening
from rog.analysis.paper_sections import SectionPart, SummaryContext

from .grading import graded_rows


def summary_section(ctx: SummaryContext) -> SectionPart | None:
    """DynaComm's graded rows from ``result/dynacomm/``, or None when the item has not run there."""
    rows = graded_rows(ctx.result_dir)
    if not rows:
        return None
    md = ["## DynaComm: layer-segment scheduling (item `dynacomm`)", "",
          f"The tables are in `{Path(ctx.result_dir) / 'dynacomm' / 'summary.md'}`.", "", *section_opening(rows, "DynaComm")]
    return SectionPart({}, "\n".join(md), graded=tuple(rows))
