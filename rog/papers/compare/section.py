"""The compare item's section of ``summary.{json,md}``, its target rule and its figure (registered in
:mod:`rog.analysis.paper_sections`)."""

from __future__ import annotations

from pathlib import Path

from rog.analysis.paper_sections import FigureContext, SectionPart, SummaryContext

from .figure import plot_compare
from .pacing import pacing_check, pacing_markdown
from .summary import ITEM, compare_markdown, compare_summary, sets_target

ITEM_TARGET_RULES = {ITEM: sets_target}  # the item's common target: its own rule (docs/compare.md)


def summary_section(ctx: SummaryContext) -> SectionPart | None:
    """Every system on the same links, and its pacing against the outdoors item's where both ran (summary.json
    ``compare``); None without the item's runs."""
    cmp = compare_summary(ctx.item_sets)
    if cmp is None:
        return None
    cmp["pacing"] = pacing_check(ctx.item_sets)
    return SectionPart({"compare": cmp}, compare_markdown(cmp) + pacing_markdown(cmp["pacing"]))


def draw_figures(ctx: FigureContext) -> list[Path]:
    """``compare_time_energy``: time against energy to target, one point per replica."""
    return plot_compare(compare_summary(ctx.item_sets), ctx.figure_dir, ctx.formats)
