"""Intra-DP's section of ``summary.{json,md}`` (registered in :mod:`rog.analysis.paper_sections`)."""

from __future__ import annotations

from rog.analysis.paper_sections import SectionPart, SummaryContext

from .summary import intradp_markdown, intradp_summary


def summary_section(ctx: SummaryContext) -> SectionPart | None:
    """The inference mode's Table 6 and Fig. 1 rows (``result/intradp/``), or None when it did not run."""
    idp = intradp_summary(ctx.result_dir)
    if not (idp["table6"] or idp["fig1"]):
        return None
    return SectionPart({"intradp": idp}, intradp_markdown(ctx.result_dir))
