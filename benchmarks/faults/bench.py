"""Run the fault-injection scenarios and print one JSON object per scenario, then a summary.

  python scripts/bench_faults.py                 # every scenario, full length
  python scripts/bench_faults.py --quick         # the short versions
  python scripts/bench_faults.py --only wire_fuzz hostile_peers
  python scripts/bench_faults.py --list

Scenarios come from the modules in benchmarks/faults/registry.py (a module that is missing or fails to
import is reported as a failed scenario).  Each runs in a fresh folder under --work-dir; after each
one, nothing named with --prefix may remain (network namespaces, links, qdiscs): a leftover fails
the scenario.  The last line is ``{"scenarios": N, "passed": M, "rows_lost": K, ...}``; the exit
status is 0 iff every scenario passed.  The scenarios need the project's ``test`` extra
(hypothesis drives the fuzz scenarios): without it the command says so in one line and exits 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from benchmarks.faults.registry import (SCENARIO_MODULES, ScenarioContext, missing_imports, result,
                                       scenarios, shadows_random_prefixes)

SETUP_HINT = "ROG_EXTRAS=test bash scripts/setup_env.sh, then .venv/bin/python scripts/bench_faults.py"


def leftovers(prefix: str) -> list[str]:
    """Network namespaces, links and qdiscs whose names start with ``prefix`` (empty when not root / no ip)."""
    try:
        from rog.experiment.emulated import leftovers as find
        return find(prefix)
    except Exception as e:  # noqa: BLE001 - the check itself must not hide the scenario's result
        return [f"leftover check failed: {type(e).__name__}: {e}"]


def run_one(name: str, fn, ctx: ScenarioContext) -> dict:
    """Run one scenario; an exception or a malformed result becomes a failed result, never a crash."""
    t0 = time.monotonic()
    try:
        out = fn(ctx)
        if not isinstance(out, dict) or not {"scenario", "passed", "rows_lost", "details"} <= set(out):
            out = result(name, False, error=f"scenario returned a malformed result: {out!r}"[:500])
    except BaseException as e:  # noqa: BLE001 - reported; KeyboardInterrupt is re-raised below
        if isinstance(e, KeyboardInterrupt):
            raise
        tb = traceback.format_exc(limit=-3).strip().splitlines()
        out = result(name, False, {"traceback": tb[-6:]}, error=f"{type(e).__name__}: {e}")
    left = leftovers(ctx.prefix)
    if left:
        before = out.get("error") if not out["passed"] else None
        out["passed"] = False
        out["error"] = "; ".join(x for x in (before, f"left behind: {left}") if x)
        out.setdefault("details", {})["leftovers"] = left
    out["duration_s"] = round(time.monotonic() - t0, 3)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these scenarios (see --list)")
    ap.add_argument("--quick", action="store_true", help="the short version of every scenario")
    ap.add_argument("--seed", type=int, default=0, help="seed of the scenarios' random choices (default 0)")
    ap.add_argument("--prefix", default="rgz", help="namespace/tc name prefix the scenarios may use (default rgz)")
    ap.add_argument("--work-dir", default=None, help="keep each scenario's folder under this directory (default: a temp dir, removed)")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    a = ap.parse_args(argv)
    if not a.prefix.isalnum() or len(a.prefix) > 6:
        ap.error(f"--prefix {a.prefix!r} must be 1-6 letters or digits (it starts interface names)")
    if shadows_random_prefixes(a.prefix):
        ap.error(f"--prefix {a.prefix!r} also starts the random prefixes of other runs on this machine "
                 f"('rg' + hex digits), whose namespaces would count as this bench's leftovers; "
                 f"put a letter after g-z in it, e.g. {a.prefix + 'z' if len(a.prefix) < 6 else 'rgz'!r}")
    found = scenarios()
    if a.list:
        for name in found:
            print(name)
        return 0
    names = list(found)
    if a.only:
        unknown = [n for n in a.only if n not in found]
        if unknown:
            ap.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(found)}")
        names = list(dict.fromkeys(a.only))
    missing = missing_imports({getattr(found[n], "__module__", "") for n in names})
    if missing:
        print(f"bench_faults.py: this Python ({sys.executable}) lacks {', '.join(missing)}, which the scenarios "
              f"need (the project's test extra); install it: {SETUP_HINT}", file=sys.stderr)
        return 2
    base = Path(a.work_dir) if a.work_dir else Path(tempfile.mkdtemp(prefix="bench_faults-"))
    base.mkdir(parents=True, exist_ok=True)
    results = []
    t0 = time.monotonic()
    try:
        for name in names:
            ctx = ScenarioContext(work_dir=Path(tempfile.mkdtemp(prefix=f"{name.replace(':', '_')}-", dir=base)),
                                  quick=a.quick, seed=a.seed, prefix=a.prefix, python=sys.executable)
            out = run_one(name, found[name], ctx)
            results.append(out)
            print(json.dumps(out, default=str), flush=True)
    except KeyboardInterrupt:
        print(json.dumps({"interrupted": True, "completed": len(results)}), flush=True)
    finally:
        if not a.work_dir:
            shutil.rmtree(base, ignore_errors=True)
    passed = sum(1 for r in results if r["passed"])
    summary = {
        "scenarios": len(names),
        "passed": passed,
        "failed": [r["scenario"] for r in results if not r["passed"]],
        "not_run": names[len(results):],
        "rows_lost": sum(int(r.get("rows_lost", 0)) for r in results),
        "quick": a.quick,
        "seed": a.seed,
        "modules": list(SCENARIO_MODULES),
        "duration_s": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(summary), flush=True)
    return 0 if passed == len(names) and len(results) == len(names) else 1
