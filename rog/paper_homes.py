"""The one registry through which every reproduced paper (and the toolkit's own studies) is reached.

A paper's home is a package ``rog/papers/<paper>/`` (docs/architecture.md, "The paper homes"); :data:`PAPER_HOMES`
names, by module path, what it contributes: plan items (modules with ``items(RunSpec, Item)``, run as
``scripts/run.py`` runs of one plan), module items (``python -m <module>``, :mod:`rog.experiment.module_item`) and
its summary section (``summary_section(ctx)``, ``draw_figures(ctx)``).  The experiment and analysis layers never
import ``rog.papers``: they derive their registries from this one (``rog.experiment.items.PAPER_ITEMS`` and
``MODULE_ITEMS``, ``rog.analysis.paper_sections.PAPER_SECTIONS``), so a new paper is one line here.  The order
of the lines is the order of the sections in ``summary.md``; items keep the order in which they are named here.
"""

from __future__ import annotations

from dataclasses import dataclass

from rog.registry import RefusedEntryError, Registry

__all__ = ["PaperHome", "PAPER_HOMES", "entries"]


@dataclass(frozen=True)
class PaperHome:
    """What one home contributes, by dotted module path: ``plan_items`` and ``module_items`` as
    ``(name, module)`` pairs, ``section`` (None: no summary section)."""

    plan_items: tuple[tuple[str, str], ...] = ()
    module_items: tuple[tuple[str, str], ...] = ()
    section: str | None = None


def _check(name: str, home: object, registry: Registry) -> None:
    if not isinstance(home, PaperHome):
        raise RefusedEntryError(f"paper home {name!r} must be a PaperHome; got {type(home).__name__}")


PAPER_HOMES: Registry = Registry("paper home", [
    ("rog", PaperHome(plan_items=(("rog", "rog.papers.rog.items"),  # ROG's items: the default plan
                                  ("rog-long", "rog.papers.rog.long_item")),  # ROG's 30 and 60 minutes
                      section="rog.papers.rog.section")),
    ("compare", PaperHome(plan_items=(("compare", "rog.papers.compare.item"),),  # every system on the outdoors links
                          section="rog.papers.compare.section")),
    ("adsp", PaperHome(plan_items=(("adsp", "rog.papers.adsp.item"),), section="rog.papers.adsp.section")),
    ("dynacomm", PaperHome(module_items=(("dynacomm", "rog.papers.dynacomm.item"),
                                         ("dynacomm-scaled", "rog.papers.dynacomm.scaled_item")),  # rules 1-4
                           section="rog.papers.dynacomm.section")),
    ("scadles", PaperHome(module_items=(("scadles", "rog.papers.scadles.item"),
                                        ("scadles-figs", "rog.papers.scadles.figs_item")),
                          section="rog.papers.scadles.section")),
    ("intradp", PaperHome(module_items=(("intradp", "rog.papers.intradp.item"),
                                        ("intradp-streaming", "rog.papers.intradp.streaming_item")),
                          section="rog.papers.intradp.section")),
    # the toolkit's own study, no paper's: the fleet in the simulator (docs/fleet.md)
    ("fleet", PaperHome(module_items=(("simulate", "rog.experiment.simulate_study"),))),
], check=_check)


def entries(kind: str) -> list[tuple[str, str]]:
    """``(name, module)`` of every home's ``kind`` (``plan_items``, ``module_items``; ``section``: the home's
    name and its section module), in :data:`PAPER_HOMES` order."""
    if kind == "section":
        return [(name, h.section) for name, h in PAPER_HOMES.items() if h.section]
    return [pair for h in PAPER_HOMES.values() for pair in getattr(h, kind)]
