"""The paper homes (rog/papers/<paper>/) and the registries of module paths that reach them from the
experiment and analysis layers (docs/architecture.md, "The paper homes")."""

from __future__ import annotations

from pathlib import Path

import pytest

from rog.analysis import paper_sections as PS
from rog.experiment import items as I
from rog.registry import RefusedEntryError

ROOT = Path(__file__).resolve().parents[1]
HOMES = {"rog", "adsp", "dynacomm", "scadles", "intradp", "compare"}
DEFAULT_PLAN = ("outdoors", "recorded", "batch", "threshold", "workers")  # ROG's items (docs/reproduction.md)
TOOLKIT_ITEMS = {"rog.experiment.simulate_study"}  # module items of the toolkit itself, no paper's (docs/fleet.md)


def _entries() -> list[tuple[str, str]]:
    return [(r.kind, path) for r in (I.PAPER_ITEMS, I.MODULE_ITEMS, PS.PAPER_SECTIONS) for path in r.values()
            if path not in TOOLKIT_ITEMS]


def test_toolkit_items_are_module_items_outside_the_paper_homes():
    assert TOOLKIT_ITEMS <= set(I.MODULE_ITEMS.values())
    assert all(not path.startswith("rog.papers.") for path in TOOLKIT_ITEMS)


def test_every_home_is_reached_by_a_registry_and_named_in_the_docs():
    homes = {p.name for p in (ROOT / "rog" / "papers").iterdir() if (p / "__init__.py").is_file()}
    assert homes == HOMES
    reached = {path.split(".")[2] for _, path in _entries()}
    assert all(path.startswith("rog.papers.") for _, path in _entries()), _entries()
    assert reached == HOMES
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert all(f"`rog/papers/{h}/`" in doc for h in HOMES)


def test_each_registered_module_has_its_hooks():
    for name, mod in I.paper_item_modules().items():
        assert callable(mod.items) and mod.QUICK_BUDGETS_S, name
        built = mod.items(I.RunSpec, I.Item)
        assert built and all(I.ITEMS[k] == v for k, v in built.items())  # the plan holds exactly what it built
        assert {k for k, _ in mod.QUICK_BUDGETS_S} <= set(built)
    assert [n for n, _ in PS.section_modules()] == ["rog", "compare", "adsp", "dynacomm", "scadles", "intradp"]
    assert set(PS.item_target_rules()) == {"compare"}
    assert I.ITEM_NAMES == DEFAULT_PLAN and tuple(I.ITEMS)[:5] == DEFAULT_PLAN


def test_one_registry_of_homes_feeds_the_layers_registries():
    from rog.paper_homes import PAPER_HOMES, PaperHome

    homes = list(PAPER_HOMES.values())
    assert list(I.PAPER_ITEMS.items()) == [p for h in homes for p in h.plan_items]
    assert list(I.MODULE_ITEMS.items()) == [p for h in homes for p in h.module_items]
    assert list(PS.PAPER_SECTIONS.items()) == [(n, h.section) for n, h in PAPER_HOMES.items() if h.section]
    assert set(PAPER_HOMES) == HOMES | {"fleet"}  # every home, and the toolkit's own study
    with pytest.raises(RefusedEntryError, match="must be a PaperHome"):
        PAPER_HOMES.register("throwaway", "rog.papers.adsp.item")
    assert "throwaway" not in PAPER_HOMES and PaperHome().section is None


@pytest.mark.parametrize("path", ["rog.papers.adsp.no_such_section", "rog.papers.no_such_paper.section"])
def test_a_module_path_not_in_the_tree_is_refused_when_registered(path):
    for registry in (PS.PAPER_SECTIONS, I.PAPER_ITEMS):
        with pytest.raises(RefusedEntryError, match=f"module '{path}' is not in this tree"):
            registry.register("throwaway", path)
        assert "throwaway" not in registry


def _no_runs(result_dir: Path) -> PS.SummaryContext:
    return PS.SummaryContext(result_dir=result_dir, runs=[], metrics=[], target_acc=None, target_rule="-",
                             equal_iters=None, target_fraction=0.5, power="auto", smooth_tests=1)


def test_a_section_module_without_its_hook_is_an_error_not_a_skip(tmp_path):
    PS.PAPER_SECTIONS.register("throwaway", "rog.papers.adsp.theorem2")  # in the tree, no summary_section
    try:
        with pytest.raises(RefusedEntryError, match="rog.papers.adsp.theorem2 has no summary_section"):
            PS.sections(_no_runs(tmp_path))
    finally:
        PS.PAPER_SECTIONS.unregister("throwaway")


def test_no_runs_no_section_and_no_figure(tmp_path):
    assert PS.sections(_no_runs(tmp_path)) == []
    ctx = PS.FigureContext(result_dir=tmp_path, figure_dir=tmp_path / "fig", formats=("png",), runs=[], metrics=[],
                           target_acc=None)
    assert PS.figures(ctx) == []
    assert not (tmp_path / "fig").exists()


def test_parts_are_placed_by_position_then_registry_order():
    """summary.{json,md} from parts given out of order: the summary's own parts at HEADER / NOTES / ITEMS and
    two sections' parts at the AFTER_* positions; expected order written out by hand."""
    from rog.analysis.summary import assemble

    parts = [(PS.HEADER, {"runs": 1}, "# head"), (PS.NOTES, {}, None), (PS.ITEMS, {"items": 2}, "items"),
             (PS.AFTER_ITEMS, {"adsp": 3}, "adsp"), (PS.AFTER_RUNS, {}, "rog claims"),
             (PS.AFTER_NOTES, {"robustness": 4}, "rog replicas"), (PS.AFTER_ITEMS, {"intradp": 5}, "intradp")]
    doc, md = assemble(parts)
    assert list(doc.items()) == [("runs", 1), ("robustness", 4), ("items", 2), ("adsp", 3), ("intradp", 5)]
    assert md == "# head\nrog claims\nrog replicas\nitems\nadsp\nintradp"
    with pytest.raises(ValueError, match="'runs' is written by two sections"):
        assemble(parts + [(PS.AFTER_ITEMS, {"runs": 6}, "")])


def test_a_section_returning_something_else_is_refused(tmp_path, monkeypatch):
    import types

    bad = types.SimpleNamespace(summary_section=lambda ctx: ({"x": 1}, "text"))  # the old (entry, markdown) pair
    monkeypatch.setattr(PS, "section_modules", lambda: [("bad", bad)])
    with pytest.raises(RefusedEntryError, match="'bad': summary_section returned tuple, not SectionPart"):
        PS.sections(_no_runs(tmp_path))


def test_draw_all_hands_every_figure_hook_one_context_and_keeps_registry_order(tmp_path, monkeypatch):
    """draw_all's paths are the hooks' in registry order (a section without draw_figures draws nothing); each
    hook sees the same FigureContext: the complete runs, the formats asked, the micro-events choice, the first
    item's target, which ROG's figures draw on the panels of that item's replay modes only."""
    import types

    from test_analysis import make_run

    from rog.analysis.figures import draw_all
    from rog.analysis.summary import item_views
    from rog.papers.rog.section import figure_target

    res = tmp_path / "res"
    make_run(res, "A", replay_mode="artifact")
    make_run(res, "B", system="BSP", threshold=0, replay_mode="recorded")
    make_run(res, "C", done=False)  # incomplete: left out
    seen = []

    def hook(tag):
        return lambda ctx: seen.append((tag, ctx)) or [tmp_path / f"{tag}.png"]

    mods = [("first", types.SimpleNamespace(draw_figures=hook("first"))), ("none", types.SimpleNamespace()),
            ("second", types.SimpleNamespace(draw_figures=hook("second")))]
    monkeypatch.setattr(PS, "section_modules", lambda: mods)
    items = {"outdoors": ["A"], "recorded": ["B"]}
    out = draw_all(res, tmp_path / "fig", formats=("png",), micro_run="A", micro_worker=1, items=items)
    assert out == [tmp_path / "first.png", tmp_path / "second.png"]
    (_, ctx), (_, ctx2) = seen
    assert ctx is ctx2 and isinstance(ctx, PS.FigureContext)
    assert [r.run_id for r in ctx.runs] == ["A", "B"] and ctx.formats == ("png",) and ctx.figure_dir == tmp_path / "fig"
    assert (ctx.micro_run, ctx.micro_worker, ctx.items) == ("A", 1, items)
    from rog.analysis.load import load_run

    _, per_item, _ = item_views([load_run(res / "A"), load_run(res / "B")], items)
    assert ctx.target_acc == per_item["outdoors"]["target_acc"] and set(ctx.item_sets) == {"outdoors", "recorded"}
    assert figure_target(ctx) == {"artifact": per_item["outdoors"]["target_acc"]}  # not on the recorded panel
    seen.clear()
    draw_all(res, tmp_path / "fig", formats=("png",))
    ctx = seen[0][1]
    assert ctx.items is None and ctx.item_sets is None and figure_target(ctx) == ctx.target_acc is not None
