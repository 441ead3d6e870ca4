"""Write result/summary.json and result/summary.md from the run folders under --result-dir.

    python -m rog.analysis.summarize_command                      # every run under result/
    python -m rog.analysis.summarize_command --runs 'ROG4-*' --runs 'BSP-*' --stem summary-e2e

summary.json: top-level target_acc (%) and target_rule, and under "runs" one entry per run with
exactly these keys (system, threshold, control, replay_mode, workers, batch_multiple,
iterations, iter_s, compute_s, comm_s, stall_s, time_to_target_s, energy_to_target_j,
energy_source, acc_final, acc_at_equal_iters); with --items (run_items.py's plan.json) one target
per item, listed under "items", each item reading its runs over its own budget (plan.json's
budgets_s).  summary.md: the same as tables next to the paper's claims and the original
artifact's logged numbers.  Only these two files are written.

``scripts/summarize.py`` is the same command (a thin wrapper over :func:`main`).
"""

from __future__ import annotations

import argparse
import sys

from rog.analysis.metrics import SMOOTH_TESTS, TARGET_FRACTION
from rog.analysis.plan_file import read_plan
from rog.analysis.summary import write_summary
from rog.cli_parser import OneLineParser, add_renamed
from rog.paths import repo_root

ROOT = repo_root()


def items_of(plan_json: str | None) -> tuple:
    """``(items, budgets_s)`` of ``--items`` (run_items.py's plan.json), ``(None, None)`` without one; a bad
    file is a ValueError naming ``--items``."""
    if not plan_json:
        return None, None
    try:
        return read_plan(plan_json)
    except ValueError as e:
        raise ValueError(f"--items: {e}") from None


def main(argv=None) -> int:
    """Write the summary files; a bad flag or run folder is one error line and exit status 2."""
    p = OneLineParser(prog="summarize.py", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--result-dir", default=str(ROOT / "result"), help="folder holding the run folders (default result/)")
    p.add_argument("--runs", action="append", default=None,
                   help="glob over run-folder names (repeatable; default: every run)")
    p.add_argument("--target-fraction", type=float, default=TARGET_FRACTION,
                   help=f"target = start + f x (lowest peak - start) (default {TARGET_FRACTION})")
    p.add_argument("--power", choices=["auto", "sensor", "model"], default="auto",
                   help="energy source: auto = sensor logs on real devices, else the Jetson state model (default)")
    add_renamed(p, "--items", "--plan", dest="items")  # the old name of --plan (it names a file, not items)
    p.add_argument("--plan", dest="items", default=None, metavar="PLAN_JSON",
                   help="plan.json of scripts/run_items.py (items -> run ids): one target per item (default: one for all runs)")
    p.add_argument("--smooth-tests", type=int, default=SMOOTH_TESTS,
                   help=f"read targets and crossings from accuracy curves smoothed over this many consecutive tests "
                        f"(odd; 1 = raw tests; default {SMOOTH_TESTS})")
    p.add_argument("--stem", default="summary", help="output file names <stem>.json / <stem>.md (default summary)")
    a = p.parse_args(argv)
    if not 0 < a.target_fraction <= 1:
        p.error("--target-fraction must lie in (0, 1]")
    if a.smooth_tests < 1 or a.smooth_tests % 2 == 0:
        p.error("--smooth-tests must be an odd number >= 1 (1 = raw tests)")
    if not a.stem or "/" in a.stem or a.stem.startswith("."):
        p.error("--stem must be a plain file name (no '/', not hidden)")
    try:
        items, budgets = items_of(a.items)
        js, md = write_summary(a.result_dir, a.runs or ["*"], a.target_fraction, a.power, a.stem, items, a.smooth_tests,
                               budgets)
    except ValueError as e:
        print(f"summarize.py: error: {e}", file=sys.stderr)
        return 2
    print(js)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
