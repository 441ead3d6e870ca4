"""Intra-DP's section of ``summary.{json,md}`` (registered in :mod:`rog.analysis.paper_sections`)."""

from __future__ import annotations

import json
from pathlib import Path

from rog.analysis.paper_sections import SectionPart, SummaryContext

from rog.analysis.grades import section_opening

from .grading import graded_rows
from .summary import intradp_markdown, intradp_summary


def summary_section(ctx: SummaryContext) -> SectionPart | None:
    """The inference mode's Table 6 and Fig. 1 rows (``result/intradp/``) and the streaming item's tables
    (``result/intradp_streaming/summary.{json,md}``), or None when neither ran."""
    idp = intradp_summary(ctx.result_dir)
    data, md = {}, []
    rows: list = []
    if idp["table6"] or idp["fig1"]:
        data["intradp"] = idp
        rows = graded_rows(idp)
        text = intradp_markdown(ctx.result_dir)
        head, _, rest = text.partition("\n\n")  # the section's title, then its grades, then its tables
        md.append("\n".join([head, "", *section_opening(rows, "Intra-DP"), rest]))
    streaming = Path(ctx.result_dir) / "intradp_streaming"
    if (streaming / "summary.json").is_file() and (streaming / "summary.md").is_file():
        data["intradp_streaming"] = json.loads((streaming / "summary.json").read_text())
        text = (streaming / "summary.md").read_text()
        md.append("#" + text if text.startswith("# ") else text)  # its title one level down, under the section
    if not data:
        return None
    return SectionPart(data, "\n\n".join(md), graded=tuple(rows))
