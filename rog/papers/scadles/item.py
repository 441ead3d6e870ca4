"""The ``scadles`` evaluation item (opt-in): ScaDLES's claims reproduced at this machine's scale.

``bash scripts/run_all.sh scadles`` imports every module of :data:`STEP_MODULES` by name (a module that
is not there is an error naming it, never a silent skip), runs each module's steps one after the other (a step
whose folder holds ``result.json`` or a completed run, ``<run>/DONE``, is skipped: delete the folder to
rerun), then writes ``result/scadles/summary.md`` (the modules' markdown, concatenated) and the
figures ``figure/scadles_*``.

A step module exposes ``ESTIMATE_S: float``, ``steps(result_dir) -> [(folder, argv)]`` (argv of a
python command run from the repository root), ``markdown(result_dir) -> str`` and
``plot(result_dir, figure_dir) -> [Path]``.

Run as ``python -m rog.papers.scadles.item --result-dir R --figure-dir F [--dry-run] [--seeds 11,12,13]``.

``--seeds`` (``run_all.sh --seeds`` passes it on, :data:`SEEDS_FLAG`) runs the fresh-seed rule instead: Fig. 6 and
Table V once per seed, each seed in ``R/scadles/seed<n>/`` (:mod:`rog.papers.scadles.seeds`); one line per other
part says which seed it runs and why it is not repeated.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from rog.experiment.module_item import ModuleItem, Summary, add_seeds_argument, folder_done, item_main, python_step

__all__ = ["NAME", "STEP_MODULES", "StepModuleError", "step_modules", "step_done", "ESTIMATE_S", "SEEDS_FLAG", "ITEM", "main"]

NAME = "scadles"
STEP_MODULES = ("rog.papers.scadles.stream_steps", "rog.papers.scadles.topk_steps", "rog.papers.scadles.table6_steps",
                "rog.papers.scadles.table5_steps")


class StepModuleError(ImportError):
    """A step module named in :data:`STEP_MODULES` is not there."""


def step_modules(names=None) -> list:
    """The step modules (default :data:`STEP_MODULES`), imported; a missing one is a :class:`StepModuleError`."""
    out = []
    for name in STEP_MODULES if names is None else names:
        try:
            out.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
            raise StepModuleError(f"scadles item: step module {name} is not in this tree; restore it or remove it "
                                  f"from rog.papers.scadles.item.STEP_MODULES") from None
    return out


step_done = folder_done  # a step is complete when its folder holds result.json or a run folder with DONE


def _estimate() -> float:
    return sum(float(m.ESTIMATE_S) for m in step_modules())


ESTIMATE_S = _estimate()
SEEDS_FLAG = "--seeds"  # run_all.sh --seeds: Fig. 6 and Table V per seed (rog.papers.scadles.seeds)


def _steps(a):
    """``--seeds``: the rule's runs per seed (after a line per other part); else every step module's steps."""
    if a.seeds:
        from . import seeds as S

        for line in S.notes(a.seeds):
            print(line, flush=True)
        pairs = S.steps(Path(a.result_dir), a.seeds)
    else:
        pairs = [p for m in step_modules() for p in m.steps(Path(a.result_dir))]
    return (python_step(args, step_done(folder)) for folder, args in pairs)


def _summarise(a, rc: int) -> Summary:
    result_dir = Path(a.result_dir)
    if a.seeds:
        from . import seeds as S

        return Summary("# ScaDLES: the fresh-seed rule\n\n" + S.seed_markdown(result_dir, a.seeds), file="seeds.md")
    mods = step_modules()
    md = "# ScaDLES reproduced at this machine's scale\n\n" + "\n".join(m.markdown(result_dir) for m in mods)
    return Summary(md, figures=[p for m in mods for p in m.plot(result_dir, Path(a.figure_dir))])


def _check(a, ap) -> int | None:
    try:
        step_modules()
    except StepModuleError as e:
        print(f"python -m rog.papers.scadles.item: error: {e}", file=sys.stderr)
        return 2
    return None


def _estimate_s(a) -> float:
    if a.seeds:
        from . import seeds as S

        return S.estimate_s(a.seeds)
    return _estimate()


ITEM = ModuleItem(
    tag=NAME, folder=NAME, prog="python -m rog.papers.scadles.item", doc=__doc__, steps=_steps, summarise=_summarise,
    estimate_s=_estimate_s, check=_check, estimate_note=lambda a: f" ({len(a.seeds)} seed(s))" if a.seeds else "",
    arguments=lambda ap: add_seeds_argument(
        ap, "Fig. 6 and Table V (the fresh-seed rule; the other parts run their own seeds)"))


def main(argv=None) -> int:
    return item_main(ITEM, argv)


if __name__ == "__main__":
    sys.exit(main())
