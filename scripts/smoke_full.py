#!/usr/bin/env python
"""Full-profile smoke run: the paper's CRUDA path end to end, without any download.

    nice -n 10 .venv/bin/python scripts/smoke_full.py                 # emulated testbed (root), ROG-4, 10 iterations
    .venv/bin/python scripts/smoke_full.py --result-dir /tmp/r --iterations 3 -- --testbed loopback

1. Generates tiny Fed-CIFAR100 files in the TFF HDF5 layout, noised DeepTest-style
   (``python -m data_gen.make_tiny_fedcifar``: 8 training clients, 4 test clients, 12 images each),
   into ``--data-dir`` (default ``<result-dir>/.cache/tiny-cruda``; reused when present).
2. Runs ``scripts/run.py --workload cruda`` with the full profile: ConvMLP-M at 224 px, the Jetson
   Xavier NX device profile (batch 24, Table II), learning rate 1e-6 (Table II), ROG with threshold 4,
   4 workers, the outdoors trace, on the emulated testbed (namespaces + tc; loopback without root).
   The model starts from a seeded RANDOM initialisation (``--random-init``): pre-trained weights would
   need the download, and this run only shows that the full path works, so its accuracies say nothing
   about the paper's.
3. Tests every checkpoint of worker 0 with ``scripts/test_checkpoints.py`` (``accuracy.csv``).

``--device auto|cpu|cuda|cuda:N`` is handed to ``run.py`` (the 4 workers of a loopback or emulated run share
one GPU).  Arguments after ``--`` go to ``run.py`` unchanged (they override the defaults above).  Prints one
line per step and, last, a JSON summary: the run folder and status, wall time of each step, the
per-iteration compute / push / pull / stall seconds of every worker (from the event logs), worker 0's
test accuracy lines, and the checkpoint test results.  Exit status 0 only if every step succeeded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN_ARGS = ("--workload", "cruda", "--random-init", "--library", "ROG", "--threshold", "4", "--workers", "4",
            "-c", "outdoors", "--testbed", "emulated", "--note", "smoke-full", "--no-progress", "--overwrite")


def parse_args(argv=None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--result-dir", default=str(ROOT / "result"), help="parent of the run folder (default result/)")
    p.add_argument("--data-dir", default=None, help="tiny CRUDA data (default <result-dir>/.cache/tiny-cruda; made if absent)")
    p.add_argument("--iterations", type=int, default=10, help="iterations per worker (default 10)")
    p.add_argument("--no-checkpoint-test", action="store_true", help="skip step 3")
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda|cuda:N",
                   help="where the workers train (run.py --device; default auto: the GPU when one is present)")
    a = p.parse_args(argv)
    from rog.device.choice import check_device_spec

    try:
        check_device_spec(a.device)
    except ValueError as e:
        p.error(str(e))
    if a.iterations < 1:
        p.error("--iterations must be >= 1")
    return a, extra


def _last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    return {}


def _step(name: str, cmd: list[str]) -> tuple[int, str, float]:
    """Run ``cmd`` (stderr passes through, so progress stays visible); returns exit code, stdout, seconds."""
    print(f"[{name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    return proc.returncode, proc.stdout, time.monotonic() - t0


def iteration_times(run_dir: Path, n_workers: int) -> dict:
    """Per worker: the seconds of each iteration's compute, push, pull and stall records (event logs)."""
    from rog.runtime import read_events

    out: dict = {}
    for k in range(n_workers):
        path = run_dir / f"events-w{k}.jsonl"
        if not path.exists():
            continue
        per: dict[str, list[float]] = {"compute": [], "push": [], "pull": [], "stall": []}
        for r in read_events(path, allow_partial_last_line=True)[1]:
            if r["kind"] in per:
                per[r["kind"]].append(round(float(r["duration_s"]), 3))
        out[f"w{k}"] = per
    return out


def main(argv=None) -> int:
    a, extra = parse_args(argv)
    py = sys.executable
    result_dir = Path(a.result_dir).resolve()
    data_dir = Path(a.data_dir).resolve() if a.data_dir else result_dir / ".cache" / "tiny-cruda"
    summary: dict = dict(data_dir=str(data_dir), steps={})
    t_all = time.monotonic()

    if not all((data_dir / f).is_file() for f in ("mixed_fed_cifar100_train.h5", "mixed_fed_cifar100_test.h5")):
        rc, out, dt = _step("data", [py, "-m", "data_gen.make_tiny_fedcifar", "--out-dir", str(data_dir), "--seed", "0"])
        summary["steps"]["data"] = dict(exit=rc, wall_s=round(dt, 3))
        if rc != 0:
            print(json.dumps(dict(summary, status="failed", failed_step="data")))
            return 1
    else:
        summary["steps"]["data"] = dict(exit=0, reused=True)

    run_cmd = [py, "scripts/run.py", *RUN_ARGS, "--data-dir", str(data_dir), "--iterations", str(a.iterations),
               "--result-dir", str(result_dir), "--device", a.device, *extra]
    rc, out, dt = _step("run", run_cmd)
    run = _last_json(out)
    summary["steps"]["run"] = dict(exit=rc, wall_s=round(dt, 3), command=" ".join(run_cmd[1:]))
    summary["run"] = run
    run_dir = Path(run["run_dir"]) if run.get("run_dir") else None
    if run_dir is not None:
        from rog.experiment.rundir import DONE_FILE, METRICS_FILE, read_config

        cfg = read_config(run_dir).to_dict()  # the summary lists config.yaml entries by key
        summary["config"] = {k: cfg.get(k) for k in ("workload", "model", "image_size", "base_batch", "lr", "profile",
                                                     "library", "threshold", "workers", "iterations", "testbed",
                                                     "random_init", "control", "device")}
        times = iteration_times(run_dir, int(cfg["workers"]))
        summary["per_iteration_s"] = times
        comp = [t for w in times.values() for t in w["compute"]]
        if comp:
            summary["compute_s"] = dict(n=len(comp), min=min(comp), median=statistics.median(comp), max=max(comp))
        metrics = run_dir / METRICS_FILE
        summary["accuracy_lines"] = metrics.read_text().strip().splitlines() if metrics.exists() else []
        summary["done"] = (run_dir / DONE_FILE).exists()
    if rc != 0 or run_dir is None or not summary.get("done"):
        print(json.dumps(dict(summary, status="failed", failed_step="run", wall_s=round(time.monotonic() - t_all, 3))))
        return 1

    if not a.no_checkpoint_test:
        rc, out, dt = _step("checkpoints", [py, "scripts/test_checkpoints.py", str(run_dir), "--worker", "0"])
        summary["steps"]["checkpoints"] = dict(exit=rc, wall_s=round(dt, 3))
        summary["checkpoints"] = _last_json(out)
        acc = run_dir / "accuracy.csv"
        summary["checkpoint_accuracy_lines"] = acc.read_text().strip().splitlines() if acc.exists() else []
        if rc != 0:
            print(json.dumps(dict(summary, status="failed", failed_step="checkpoints",
                                  wall_s=round(time.monotonic() - t_all, 3))))
            return 1
    print(json.dumps(dict(summary, status="done", wall_s=round(time.monotonic() - t_all, 3))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
