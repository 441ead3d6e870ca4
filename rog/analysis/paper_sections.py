"""The reproduced papers' own sections of ``summary.{json,md}`` and their figures, by module path.

The analysis is shared; each reproduced paper's tables, verdicts and figures live in its home under
``rog/papers/<paper>/`` (docs/architecture.md), which may import the analysis, never the other way.
So the summary and the figures reach a paper through this registry: name (the summary.json key) ->
the dotted path of the paper's section module, imported when a summary is written.  A section module has

* ``summary_section(runs, item_sets, result_dir) -> (entry, markdown) | None``: the entry goes under its
  name in summary.json, the markdown is appended to summary.md; ``None`` when none of its runs is there;
* ``draw_figures(runs, item_sets, figure_dir, formats) -> list[Path]`` (optional): its figures;
* ``ITEM_TARGET_RULES`` (optional): item name -> the ``sets_target`` rule of that item's common target
  (:func:`rog.analysis.metrics.compute_metrics`).

A path that is not in the tree is refused when the registry is built (:class:`rog.registry.RefusedEntryError`),
never skipped when a summary is written.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

from rog.registry import RefusedEntryError, Registry, check_module_path

__all__ = ["PAPER_SECTIONS", "section_modules", "sections", "figures", "item_target_rules"]


# summary.md order: the compare item, then ADSP's items, then Intra-DP's inference runs
PAPER_SECTIONS: Registry = Registry("paper section", [
    ("compare", "rog.papers.compare.section"),
    ("adsp", "rog.papers.adsp.section"),
    ("intradp", "rog.papers.intradp.section"),
], check=check_module_path)


def section_modules() -> list[tuple[str, ModuleType]]:
    """``(name, module)`` of every registered section, in order; a module without ``summary_section`` raises."""
    out = []
    for name, path in PAPER_SECTIONS.items():
        mod = importlib.import_module(path)
        if not callable(getattr(mod, "summary_section", None)):
            raise RefusedEntryError(f"paper section {name!r}: {path} has no summary_section(runs, item_sets, result_dir)")
        out.append((name, mod))
    return out


def sections(runs: Sequence[Any], item_sets: dict | None, result_dir: Path) -> list[tuple[str, Any, str]]:
    """``(name, summary.json entry, markdown)`` of every paper section that has runs to read."""
    out = []
    for name, mod in section_modules():
        got = mod.summary_section(runs, item_sets, result_dir)
        if got is not None:
            out.append((name, got[0], got[1]))
    return out


def figures(runs: Sequence[Any], item_sets: dict | None, figure_dir: Path, formats: Sequence[str]) -> list[Path]:
    """Every paper section's figures (those with ``draw_figures``), in registry order."""
    out: list[Path] = []
    for _, mod in section_modules():
        draw = getattr(mod, "draw_figures", None)
        if draw is not None:
            out += draw(runs, item_sets, figure_dir, formats)
    return out


def item_target_rules() -> dict[str, Callable]:
    """Item name -> its own ``sets_target`` rule, from every section's ``ITEM_TARGET_RULES``."""
    out: dict[str, Callable] = {}
    for _, mod in section_modules():
        out.update(getattr(mod, "ITEM_TARGET_RULES", {}))
    return out
