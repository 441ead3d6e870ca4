"""What every module item (``items.MODULE_ITEMS``: ``intradp``, ``dynacomm``, ``scadles``, ``scadles-figs``, ``intradp-streaming``) shares: its command
line (``--result-dir``, ``--figure-dir``, ``--dry-run``) and one resumable step (skip it when its output is
there, print what runs, run it as a fresh interpreter from the repository root)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from rog.paths import repo_root

__all__ = ["ROOT", "item_parser", "add_seeds_argument", "run_step", "write_result", "step_module_main"]

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


def step_module_main(prog: str, doc: str | None, module, tag: str, folder: str, argv=None) -> int:
    """A step module of item ``tag`` run alone (``module``: ``steps``, ``markdown``, ``plot``, ``ESTIMATE_S``): run the
    steps not yet done, then write ``<result>/<folder>/summary.md`` and the module's figures; 1 when a step failed."""
    a = item_parser(prog, doc).parse_args(argv)
    rc = 0
    for d, args in module.steps(Path(a.result_dir)):
        rc |= run_step(tag, f"python {' '.join(args)}", args, any(Path(d).glob("*/DONE")), a.dry_run)
    if a.dry_run:
        print(f"[{tag}] estimate {module.ESTIMATE_S / 60:.0f} min")
        return 0
    md = Path(a.result_dir) / folder / "summary.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(module.markdown(Path(a.result_dir)))
    figs = module.plot(Path(a.result_dir), Path(a.figure_dir))
    print(f"[{tag}] wrote {md} and {len(figs)} figure(s)", flush=True)
    return 1 if rc else 0
