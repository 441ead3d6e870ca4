"""Every figure a result folder supports, as PDF and PNG into ``figure/``: load the runs, measure them as the
summary does, and call each reproduced paper's figure hook (:mod:`.paper_sections`) with one
:class:`~rog.analysis.paper_sections.FigureContext`; reads only run tables.

The figures themselves live with their papers (ROG's first: :mod:`rog.papers.rog.figures` and
:mod:`rog.papers.rog.figures_studies`); what they share (colours, composition bars, time units) is
:mod:`.figure_helpers`, writing a figure in the formats asked :mod:`.figure_files`, the replica figures
:mod:`.replica_figures`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from .figure_files import FORMATS, formats as saved_formats, set_formats
from .load import find_runs, load_run
from .metrics import compute_metrics
from .paper_sections import FigureContext, figures as paper_figures

__all__ = ["draw_all", "FORMATS"]


def draw_all(result_dir: str | Path, figure_dir: str | Path, pattern: str | Sequence[str] = "*",
             power: str = "auto", micro_run: str | None = None, micro_worker: int = 0,
             formats: Sequence[str] = FORMATS, items: dict[str, Sequence[str]] | None = None,
             budgets_s: dict[str, float] | None = None) -> list[Path]:
    """Load the complete runs matching ``pattern`` under ``result_dir`` and draw every figure the registered
    papers draw from them (each saved in every one of ``formats``), in registry order (ROG's first).  With
    ``items`` (item -> run ids, run_items.py's plan) every item is measured over its own target and, with
    ``budgets_s`` (item -> seconds), its own budget, as in summary.json (:func:`rog.analysis.summary.item_views`)."""
    set_formats(formats)
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    dirs = sorted({d for p in patterns for d in find_runs(result_dir, p)})
    if not dirs:
        raise ValueError(f"no run folder under {str(result_dir)!r} matches {patterns}; check --result-dir and --runs")
    runs = [load_run(d) for d in dirs]
    partial = [r.run_id for r in runs if r.status != "done"]
    if partial:  # a partial run's means and curves are not comparable with complete ones
        print(f"figures: left out {len(partial)} incomplete run(s): {', '.join(partial)}", file=sys.stderr)
        runs = [r for r in runs if r.status == "done"]
        if not runs:
            raise ValueError(f"no complete run under {str(result_dir)!r} matches {patterns} (all are INCOMPLETE)")
    per_item = views = None
    if items:
        from .summary import item_views

        metrics, per_item, views = item_views(runs, items, power=power, budgets_s=budgets_s)
        target = next(iter(per_item.values()))["target_acc"] if per_item else None
    else:
        metrics, target, _, _ = compute_metrics(runs, power=power)
    ctx = FigureContext(result_dir=Path(result_dir), figure_dir=Path(figure_dir), formats=saved_formats(), runs=runs,
                        metrics=metrics, target_acc=target, power=power, items=items, budgets_s=budgets_s,
                        per_item=per_item, views=views, micro_run=micro_run, micro_worker=micro_worker)
    return paper_figures(ctx)
