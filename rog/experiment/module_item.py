"""The one protocol of every module item (``items.MODULE_ITEMS``: ``intradp``, ``intradp-streaming``, ``dynacomm``,
``dynacomm-scaled``, ``scadles``, ``scadles-figs``, ``simulate``) and one runner for all of them.

An item is a :class:`ModuleItem`: its steps (:class:`Step`: a python command run from the repository root,
skipped when its output is there, so a rerun resumes) and the section that reads their results
(:class:`Summary`).  :func:`item_main` parses the command line (``--result-dir``, ``--figure-dir``,
``--dry-run`` and the item's own flags), runs the steps, and writes the summary file, ``summary.json`` when
the section has one, and the figures; no item writes its own summary or prints its own "wrote" line.
The recipe of a new item is in ``docs/architecture.md``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from rog.paths import repo_root

__all__ = ["ROOT", "Step", "Blocked", "Summary", "ItemError", "ModuleItem", "item_main", "item_parser",
           "add_seeds_argument", "run_step", "python_step", "folder_done", "write_result", "step_item"]

ROOT = repo_root()


def item_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The item's parser: ``--result-dir``, ``--figure-dir`` (defaults result/ and figure/) and ``--dry-run``."""
    ap = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    ap.add_argument("--result-dir", default=str(ROOT / "result"))
    ap.add_argument("--figure-dir", default=str(ROOT / "figure"))
    ap.add_argument("--dry-run", action="store_true", help="print the steps and the estimate, run nothing")
    return ap


def _seed_list(text: str) -> list[int]:
    from rog.experiment.items import parse_seeds

    try:
        return parse_seeds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_seeds_argument(ap: argparse.ArgumentParser, what: str) -> None:
    """``--seeds 11,12,13`` (``run_all.sh --seeds`` passes it on): ``what`` says which parts run per seed."""
    ap.add_argument("--seeds", type=_seed_list, default=None, help=f"run {what} once per seed (e.g. 11,12,13)")


def run_step(tag: str, label: str, python_args: Sequence[str], done: bool, dry_run: bool) -> int:
    """Print ``[tag] run: label`` (or ``skip (done)``) and, unless done or a dry run, run
    ``python *python_args`` from the repository root; its exit code (0 when not run)."""
    print(f"[{tag}] {'skip (done)' if done else 'run'}: {label}", flush=True)
    if done or dry_run:
        return 0
    return subprocess.call([sys.executable, *python_args], cwd=str(ROOT))


def write_result(folder: str | Path, res: dict) -> None:
    """A step's ``folder/result.json`` (the marker that it is done), and the same JSON as stdout's last line."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res), flush=True)


@dataclass(frozen=True)
class Step:
    """One step: ``python *argv`` from the repository root, printed as ``[tag] run: label`` (``skip (done)``
    and not run when ``done``: its output is there)."""

    label: str
    argv: Sequence[str]
    done: bool = False


@dataclass(frozen=True)
class Blocked:
    """A step that cannot run because an earlier one left nothing to go on (``why``): listed on a dry run,
    a failure otherwise."""

    label: str
    why: str


@dataclass(frozen=True)
class Summary:
    """What an item's section read from its steps' results; :func:`item_main` writes it.

    ``markdown``: the text of ``<result>/<folder>/<file>``; ``doc``: ``summary.json`` beside it (None: none);
    ``figures``: the files the section drew (None: it draws none); ``complete`` False makes the item's exit
    code 1; ``last_line``: printed as JSON on stdout's last line."""

    markdown: str
    file: str = "summary.md"
    doc: dict | None = None
    figures: Sequence[Path] | None = None
    complete: bool = True
    last_line: dict | None = None


class ItemError(Exception):
    """The section has nothing to read (the message says what is missing): the item exits 1."""


def _none(*_: Any) -> None:
    return None


@dataclass(frozen=True)
class ModuleItem:
    """A module item: ``steps(a)`` yields its :class:`Step` (and :class:`Blocked`) in order (a generator may read
    an earlier step's result: it resumes after that step ran), ``summarise(a, rc)`` reads them (``rc``: nonzero
    when a step failed).  ``arguments(ap)`` adds the item's flags; ``check(a, ap)`` refuses bad ones
    (``ap.error``) or answers a mode that runs no step (its exit code; None: go on).  ``estimate_s(a)``: the
    dry run's estimate (None: not printed); ``estimate_note`` follows it."""

    tag: str
    folder: str
    prog: str
    doc: str | None
    steps: Callable[[Any], Iterable[Step | Blocked]]
    summarise: Callable[[Any, int], Summary]
    estimate_s: Callable[[Any], float | None]
    arguments: Callable[[argparse.ArgumentParser], None] = _none
    check: Callable[[Any, argparse.ArgumentParser], int | None] = _none
    estimate_note: Callable[[Any], str] = field(default=lambda a: "")


def item_main(item: ModuleItem, argv=None) -> int:
    """Run ``item``: its steps (skipping those done), then its summary and figures; 0 when every step ran and the
    section is complete, 1 otherwise; on ``--dry-run`` the steps and the estimate only."""
    ap = item_parser(item.prog, item.doc)
    item.arguments(ap)
    a = ap.parse_args(argv)
    early = item.check(a, ap)
    if early is not None:
        return early
    rc = 0
    for step in item.steps(a):
        if isinstance(step, Blocked):
            print(f"[{item.tag}] {'run' if a.dry_run else f'cannot run ({step.why})'}: {step.label}", flush=True)
            rc |= 0 if a.dry_run else 1
        else:
            rc |= run_step(item.tag, step.label, step.argv, step.done, a.dry_run)
    if a.dry_run:
        est = item.estimate_s(a)
        if est is not None:
            print(f"[{item.tag}] estimate {est / 60:.0f} min{item.estimate_note(a)}")
        return 0
    try:
        s = item.summarise(a, rc)
    except ItemError as e:
        print(f"[{item.tag}] {e}", file=sys.stderr)
        return 1
    out = Path(a.result_dir) / item.folder
    out.mkdir(parents=True, exist_ok=True)
    (out / s.file).write_text(s.markdown)
    if s.doc is not None:
        (out / "summary.json").write_text(json.dumps(s.doc, indent=1))
    figs = "" if s.figures is None else f" and {len(s.figures)} figure(s)"
    print(f"[{item.tag}] wrote {out / s.file}{figs}", flush=True)
    if s.last_line is not None:
        print(json.dumps(s.last_line), flush=True)
    return 1 if rc or not s.complete else 0


def python_step(args: Sequence[str], done: bool) -> Step:
    """A step labelled with its own command line (``python -m ...``)."""
    return Step(f"python {' '.join(args)}", args, done)


def folder_done(folder: str | Path) -> bool:
    """A step whose output folder holds ``result.json`` or a finished run (``*/DONE``) is done."""
    f = Path(folder)
    return (f / "result.json").exists() or any(f.glob("*/DONE"))


def step_item(module, tag: str, folder: str, prog: str) -> ModuleItem:
    """A part of an item run alone (``module``: ``steps(result_dir) -> [(folder, argv)]``, ``markdown(result_dir)``,
    ``plot(result_dir, figure_dir)``, ``ESTIMATE_S``; ScaDLES's parts), a step done by :func:`folder_done`."""
    return ModuleItem(
        tag=tag, folder=folder, prog=prog, doc=module.__doc__,
        steps=lambda a: (python_step(args, folder_done(d)) for d, args in module.steps(Path(a.result_dir))),
        summarise=lambda a, rc: Summary(module.markdown(Path(a.result_dir)),
                                        figures=module.plot(Path(a.result_dir), Path(a.figure_dir))),
        estimate_s=lambda a: float(module.ESTIMATE_S))
