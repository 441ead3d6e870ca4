"""Per-layer against end-of-iteration pacing, measured (docs/dynacomm.md#per-layer-pacing).

Runs ``python -m rog.experiment`` on the loopback testbed at a constant rate in rounds, the order
rotated by one per round: BSP under the sequential schedule with ``--pacing iteration`` (the
reference) and ``--pacing layer``, and BSP with ``--schedule dynacomm`` under ``--pacing layer``.
Per run, from the workers' event logs (iterations after ``--warmup``): the median compute record, its
median sleep, and the median time from one iteration's compute start to the next, the mean over the
workers.  Prints a line per run and, last, JSON: the per-round numbers, their medians over rounds,
``layer`` / ``iteration`` (compute and iteration time) and DynaComm / sequential under ``layer``.
The machine's load average is recorded before and after each run (these runs are noisy under load).

``python -m rog.papers.dynacomm.pacing_bench --rounds 3 --iterations 40 --out /tmp/pacing``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rog.paths import repo_root

RUNS = (("iteration", "sequential"), ("layer", "sequential"), ("layer", "dynacomm"))


def run_flags(a: argparse.Namespace, pacing: str, schedule: str, result_dir: Path) -> list[str]:
    """run.py's flags of one run."""
    return ["--testbed", "loopback", "--rate-mbit", str(a.rate_mbit), "--profile", a.profile, "--library", "BSP",
            "--compression", "none", "--workers", str(a.workers), "--iterations", str(a.iterations),
            "--eval-every", "100000", "--result-dir", str(result_dir), "--pacing", pacing, "--schedule", schedule,
            "-n", f"{pacing}-{schedule}"]


def read_run(run_dir: Path, warmup: int) -> dict:
    """A run's per-iteration numbers: medians per worker over iterations after ``warmup``, the mean over workers."""
    from rog.runtime import read_events

    per = []
    for f in sorted(run_dir.glob("events-w*.jsonl")):
        recs = [r for r in read_events(f)[1] if r["kind"] == "compute" and r["iteration"] > warmup]
        if len(recs) < 2:
            raise ValueError(f"{f}: fewer than 2 iterations after the first {warmup}")
        starts = [r["t_s"] for r in recs]
        per.append(dict(compute_s=statistics.median(r["duration_s"] for r in recs),
                        sleep_s=statistics.median(r["sleep_s"] for r in recs),
                        iteration_s=statistics.median(b - a for a, b in zip(starts, starts[1:]))))
    if not per:
        raise ValueError(f"{run_dir}: no worker event log")
    return {k: statistics.mean(p[k] for p in per) for k in per[0]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3, help="iterations left out at the start (DynaComm's cold and profiling)")
    p.add_argument("--rate-mbit", type=float, default=40.0)
    p.add_argument("--profile", default="quick-cpu")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="/tmp/rog-pacing-bench")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.iterations <= a.warmup + 2:
        p.error("--rounds must be >= 1 and --iterations > --warmup + 2")
    rounds = []
    for r in range(a.rounds):
        got = {}
        for i in range(len(RUNS)):
            pacing, schedule = RUNS[(i + r) % len(RUNS)]
            result_dir = Path(a.out) / f"round{r}"
            load0 = os.getloadavg()[0]
            result_dir.mkdir(parents=True, exist_ok=True)
            log = result_dir / f"{pacing}-{schedule}.log"
            with open(log, "w") as out:
                rc = subprocess.call([sys.executable, "-m", "rog.experiment", *run_flags(a, pacing, schedule, result_dir)],
                                     cwd=str(repo_root()), stdout=out, stderr=subprocess.STDOUT)
            if rc != 0:
                print(f"error: round {r}: {pacing}/{schedule} exited {rc}; see {log}", file=sys.stderr)
                return 1
            run_dir = next(result_dir.glob(f"*-{pacing}-{schedule}"))
            got[f"{pacing}/{schedule}"] = dict(read_run(run_dir, a.warmup), load_before=load0,
                                               load_after=os.getloadavg()[0])
            print(f"round {r} {pacing}/{schedule}: " + ", ".join(f"{k} {v:.3f}" for k, v in got[f"{pacing}/{schedule}"].items()),
                  flush=True)
        rounds.append(got)
    med = {key: {k: statistics.median(g[key][k] for g in rounds) for k in ("compute_s", "iteration_s")}
           for key in rounds[0]}
    ref, lay, dyn = med["iteration/sequential"], med["layer/sequential"], med["layer/dynacomm"]
    print(json.dumps(dict(rounds=rounds, medians=med, reference="iteration/sequential",
                          layer_over_iteration=dict(compute=lay["compute_s"] / ref["compute_s"],
                                                    iteration=lay["iteration_s"] / ref["iteration_s"]),
                          dynacomm_over_sequential_layer=dyn["iteration_s"] / lay["iteration_s"])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
