"""Draw the paper's figures (PDF and PNG) from the run folders under --result-dir into --figure-dir.

    python -m rog.analysis.plot_command                                   # result/ -> figure/
    python -m rog.analysis.plot_command --runs 'ROG*' --runs 'BSP*' --micro-run ROG4-b1-w4-seed0 --micro-worker 1

Figures (each drawn when its runs exist): composition, accuracy_vs_iterations, accuracy_vs_time,
energy_vs_accuracy, micro_events, sensitivity.  Reads only --result-dir, writes only --figure-dir.

``scripts/plot.py`` is the same command (a thin wrapper over :func:`main`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rog.cli_parser import OneLineParser, add_renamed
from rog.paths import repo_root

ROOT = repo_root()


def main(argv=None) -> int:
    """Draw the figures and print their paths; a bad flag or run folder is one error line and exit status 2."""
    p = OneLineParser(prog="plot.py", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--result-dir", default=str(ROOT / "result"), help="folder holding the run folders (default result/)")
    p.add_argument("--figure-dir", default=str(ROOT / "figure"), help="where the figures go (default figure/)")
    p.add_argument("--runs", action="append", default=None, help="glob over run-folder names (repeatable; default: all)")
    p.add_argument("--power", choices=["auto", "sensor", "model"], default="auto",
                   help="energy source: auto = sensor logs on real devices, else the Jetson state model (default)")
    p.add_argument("--micro-run", default=None, help="run id for the micro-events figure (default: ROG-4 end-to-end)")
    p.add_argument("--formats", default="pdf,png", help="comma-separated file formats (default pdf,png)")
    add_renamed(p, "--items", "--plan", dest="items")  # the old name of --plan (it names a file, not items)
    p.add_argument("--plan", dest="items", default=None, metavar="PLAN_JSON",
                   help="plan.json of scripts/run_items.py: the target line is the first item's (as in summary.json)")
    p.add_argument("--micro-worker", type=int, default=0, help="worker of the micro-events figure (default 0)")
    a = p.parse_args(argv)
    if a.micro_worker < 0:
        p.error("--micro-worker must be >= 0")
    if Path(a.figure_dir).resolve() == Path(a.result_dir).resolve():
        p.error("--figure-dir must differ from --result-dir (plotting never writes into result/)")
    from rog.analysis.figures import draw_all

    from rog.analysis.summarize_command import items_of

    try:
        items, budgets = items_of(a.items)
        paths = draw_all(a.result_dir, a.figure_dir, a.runs or ["*"], a.power, a.micro_run, a.micro_worker,
                         formats=[f.strip() for f in a.formats.split(",") if f.strip()], items=items,
                         budgets_s=budgets)
    except ValueError as e:
        print(f"plot.py: error: {e}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
