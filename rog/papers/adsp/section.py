"""ADSP's section of ``summary.{json,md}`` and its figures (registered in :mod:`rog.analysis.paper_sections`)."""

from __future__ import annotations

from pathlib import Path

from rog.analysis.paper_sections import FigureContext, SectionPart, SummaryContext

from rog.analysis.grades import section_opening

from .figures import plot_adsp, plot_fig4ad
from .grading import FIG1_RATIOS, graded_rows
from .summary import adsp_markdown, adsp_summary


def summary_section(ctx: SummaryContext) -> SectionPart | None:
    """The adsp items' tables (summary.json ``adsp``), opened by their graded rows, or None when none of their
    runs is there."""
    d = adsp_summary(ctx.runs)
    if d is None:
        return None
    ratios = next((r.compute_ratios for r in ctx.runs
                   if r.note == "fig1" and r.compute_ratios), None)
    rows = graded_rows(d, ratios or FIG1_RATIOS)
    md = adsp_markdown(d)
    head, _, rest = md.partition("\n\n")  # the section's title, then its grades, then its tables
    return SectionPart({"adsp": d}, "\n".join([head, "", *section_opening(rows, "ADSP"), rest]), graded=tuple(rows))


def draw_figures(ctx: FigureContext) -> list[Path]:
    """``adsp_fig1``, ``adsp_ushape``, ``adsp_fig3bc``, ``adsp_fig4a`` and ``adsp_fig4d``, where their runs are there."""
    from .fig3bc import plot_fig3bc

    d = adsp_summary(ctx.runs)
    extra = plot_fig3bc(d["fig3bc"], ctx.figure_dir, ctx.formats) if d else []
    return plot_adsp(d, ctx.figure_dir, ctx.formats) + extra + plot_fig4ad(ctx.runs, ctx.figure_dir, ctx.formats)
