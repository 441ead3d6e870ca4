"""The reproduced papers' own sections of ``summary.{json,md}`` and their figures, by module path.

The analysis is shared; each reproduced paper's tables, verdicts and figures live in its home under
``rog/papers/<paper>/`` (docs/architecture.md), which may import the analysis, never the other way.
So the summary and the figures reach a paper through this registry: name -> the dotted path of the
paper's section module, imported when a summary is written.  A section module has

* ``summary_section(ctx: SummaryContext) -> SectionPart | list[SectionPart] | None``: what the paper adds
  to the summary, read from the :class:`SummaryContext` (the loaded runs, their metrics and targets, the
  items' run sets and budgets); ``None`` when none of its runs is there.  Each :class:`SectionPart`
  carries its summary.json keys (top level, in order; a key already written is refused) and its
  summary.md text, at a :attr:`SectionPart.position` among the summary's own parts (:data:`AFTER_RUNS`,
  :data:`AFTER_NOTES`, :data:`AFTER_ITEMS`, the default); parts at one position keep registry order;
* ``draw_figures(ctx: FigureContext) -> list[Path]`` (optional): its figures, read from the
  :class:`FigureContext` (the summary's inputs, the figure folder, the formats and the micro-events choice);
* ``ITEM_TARGET_RULES`` (optional): item name -> the ``sets_target`` rule of that item's common target
  (:func:`rog.analysis.metrics.compute_metrics`).

A path that is not in the tree is refused when the registry is built (:class:`rog.registry.RefusedEntryError`),
never skipped when a summary is written.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rog.paper_homes import entries as paper_entries
from rog.registry import RefusedEntryError, Registry, check_module_path

if TYPE_CHECKING:  # pragma: no cover - types only
    from .load import RunData
    from .metrics import RunMetrics
    from .summary import Views

__all__ = ["PAPER_SECTIONS", "SummaryContext", "FigureContext", "SectionPart", "HEADER", "AFTER_RUNS", "NOTES", "AFTER_NOTES", "ITEMS",
           "AFTER_ITEMS", "section_modules", "sections", "figures", "item_target_rules"]

# Positions in summary.md (and of the keys in summary.json).  The summary's own parts sit at HEADER (the
# inputs and the runs table), NOTES (the runs' notes) and ITEMS (the targets per item); a section's
# part goes at one of the AFTER_* positions.
HEADER, AFTER_RUNS, NOTES, AFTER_NOTES, ITEMS, AFTER_ITEMS = 0, 10, 20, 30, 40, 50


@dataclass(frozen=True)
class SummaryContext:
    """What a paper's section reads: the loaded runs and how the summary measured them.

    ``metrics``: every run's metrics in its primary item (all runs against one target without a plan);
    ``target_acc`` / ``target_rule`` / ``equal_iters``: the top-level target (the first item's with a plan);
    ``items`` / ``budgets_s``: plan.json's item -> run ids and item -> seconds (None without a plan);
    ``per_item``: summary.json's ``items``; ``views``: :class:`rog.analysis.summary.Views` of the items
    (None without a plan); ``target_fraction``, ``power``, ``smooth_tests``: the summary's measuring rules."""

    result_dir: Path
    runs: Sequence["RunData"]
    metrics: Sequence["RunMetrics"]
    target_acc: float | None
    target_rule: str
    equal_iters: int | None
    target_fraction: float
    power: str
    smooth_tests: int
    items: dict[str, Sequence[str]] | None = None
    budgets_s: dict[str, float] | None = None
    per_item: dict[str, Any] | None = None
    views: "Views | None" = field(default=None, compare=False)

    @property
    def item_sets(self) -> dict[str, list["RunMetrics"]] | None:
        """Item name -> its runs' metrics (each item over its own budget and target); None without a plan."""
        return None if self.views is None else self.views.item_sets


@dataclass(frozen=True)
class FigureContext:
    """What a paper's figures read: the complete runs, measured as the summary measures them, and where
    and how to draw.

    ``runs``: the complete runs loaded (an incomplete one is left out); ``metrics``: every run's metrics in
    its primary item (all runs against one target without a plan); ``target_acc``: the top-level target
    (the first item's with a plan; None when no item has runs); ``items`` / ``budgets_s``: plan.json's
    (None without a plan); ``per_item``: summary.json's ``items``; ``views``:
    :class:`rog.analysis.summary.Views` of the items (None without a plan); ``formats``: the file formats
    of every figure; ``micro_run`` / ``micro_worker``: the run and worker a micro-events figure shows
    (None: the paper's choice)."""

    result_dir: Path
    figure_dir: Path
    formats: tuple[str, ...]
    runs: Sequence["RunData"]
    metrics: Sequence["RunMetrics"]
    target_acc: float | None
    power: str = "auto"
    items: dict[str, Sequence[str]] | None = None
    budgets_s: dict[str, float] | None = None
    per_item: dict[str, Any] | None = None
    views: "Views | None" = field(default=None, compare=False)
    micro_run: str | None = None
    micro_worker: int = 0

    @property
    def item_sets(self) -> dict[str, list["RunMetrics"]] | None:
        """Item name -> its runs' metrics (each item over its own budget and target); None without a plan."""
        return None if self.views is None else self.views.item_sets


@dataclass(frozen=True)
class SectionPart:
    """One piece of a paper's section: its summary.json keys (top level) and its summary.md text."""

    entries: dict[str, Any]
    markdown: str
    position: int = AFTER_ITEMS
    graded: tuple = ()  # the part's graded verdict rows (rog.analysis.grades.GradedRow): summary.json's "grades"


# summary.md order: ROG's claims (before the runs' notes) and replicas (after them), then the compare item,
# ADSP's items, DynaComm's and ScaDLES's graded rows and Intra-DP's inference runs (after the targets per item)
PAPER_SECTIONS: Registry = Registry("paper section", paper_entries("section"), check=check_module_path)


def section_modules() -> list[tuple[str, ModuleType]]:
    """``(name, module)`` of every registered section, in order; a module without ``summary_section`` raises."""
    out = []
    for name, path in PAPER_SECTIONS.items():
        mod = importlib.import_module(path)
        if not callable(getattr(mod, "summary_section", None)):
            raise RefusedEntryError(f"paper section {name!r}: {path} has no summary_section(ctx)")
        out.append((name, mod))
    return out


def sections(ctx: SummaryContext) -> list[tuple[str, SectionPart]]:
    """``(name, part)`` of every part the registered sections return for ``ctx``, in registry order
    (not yet sorted by position); a part that is not a :class:`SectionPart` raises."""
    out = []
    for name, mod in section_modules():
        got = mod.summary_section(ctx)
        parts = [] if got is None else [got] if isinstance(got, SectionPart) else got
        if not isinstance(parts, list) or not all(isinstance(part, SectionPart) for part in parts):
            raise RefusedEntryError(f"paper section {name!r}: summary_section returned {type(got).__name__}, "
                                    "not SectionPart, a list of them or None")
        out += [(name, part) for part in parts]
    return out


def figures(ctx: FigureContext) -> list[Path]:
    """Every paper section's figures for ``ctx`` (those with ``draw_figures``), in registry order."""
    out: list[Path] = []
    for _, mod in section_modules():
        draw = getattr(mod, "draw_figures", None)
        if draw is not None:
            out += draw(ctx)
    return out


def item_target_rules() -> dict[str, Callable]:
    """Item name -> its own ``sets_target`` rule, from every section's ``ITEM_TARGET_RULES``."""
    out: dict[str, Callable] = {}
    for _, mod in section_modules():
        out.update(getattr(mod, "ITEM_TARGET_RULES", {}))
    return out
