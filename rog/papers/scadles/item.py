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

from rog.experiment.module_item import add_seeds_argument, item_parser, run_step

__all__ = ["NAME", "STEP_MODULES", "StepModuleError", "step_modules", "step_done", "ESTIMATE_S", "SEEDS_FLAG", "main"]

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


def step_done(folder: str | Path) -> bool:
    """A step is complete when its folder holds ``result.json`` or a run folder with ``DONE``."""
    f = Path(folder)
    return (f / "result.json").exists() or any(f.glob("*/DONE"))


def _estimate() -> float:
    return sum(float(m.ESTIMATE_S) for m in step_modules())


ESTIMATE_S = _estimate()
SEEDS_FLAG = "--seeds"  # run_all.sh --seeds: Fig. 6 and Table V per seed (rog.papers.scadles.seeds)


def _seeded(a) -> int:
    """``--seeds``: the rule's runs per seed, then ``R/scadles/seeds.md`` (Fig. 6 and Table V over the seeds)."""
    from . import seeds as S

    for line in S.notes(a.seeds):
        print(line, flush=True)
    rc = 0
    for folder, args in S.steps(Path(a.result_dir), a.seeds):
        rc |= run_step("scadles", f"python {' '.join(args)}", args, step_done(folder), a.dry_run)
    if a.dry_run:
        print(f"[scadles] estimate {S.estimate_s(a.seeds) / 60:.0f} min ({len(a.seeds)} seed(s))")
        return 0
    out = Path(a.result_dir) / NAME / "seeds.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("# ScaDLES: the fresh-seed rule\n\n" + S.seed_markdown(Path(a.result_dir), a.seeds))
    print(f"[scadles] wrote {out}")
    return 1 if rc else 0


def main(argv=None) -> int:
    ap = item_parser("python -m rog.papers.scadles.item", __doc__)
    add_seeds_argument(ap, "Fig. 6 and Table V (the fresh-seed rule; the other parts run their own seeds)")
    a = ap.parse_args(argv)
    if a.seeds:
        return _seeded(a)
    result_dir, figure_dir = Path(a.result_dir), Path(a.figure_dir)
    try:
        mods = step_modules()
    except StepModuleError as e:
        print(f"python -m rog.papers.scadles.item: error: {e}", file=sys.stderr)
        return 2
    rc = 0
    for mod in mods:
        for folder, args in mod.steps(result_dir):
            rc |= run_step("scadles", f"python {' '.join(args)}", args, step_done(folder), a.dry_run)
    if a.dry_run:
        print(f"[scadles] estimate {sum(float(m.ESTIMATE_S) for m in mods) / 60:.0f} min")
        return 0
    out = result_dir / NAME
    out.mkdir(parents=True, exist_ok=True)
    md = "# ScaDLES reproduced at this machine's scale\n\n" + "\n".join(m.markdown(result_dir) for m in mods)
    (out / "summary.md").write_text(md)
    figs = [p for m in mods for p in m.plot(result_dir, figure_dir)]
    print(f"[scadles] wrote {out / 'summary.md'} and {len(figs)} figure(s)")
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
