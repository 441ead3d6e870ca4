"""Test every checkpoint of a run on the workload's test set and write RUN_DIR/accuracy.csv.

    python scripts/test_checkpoints.py result/ROG4-b1-w4-seed0
    python scripts/test_checkpoints.py result/<run> --workload cruda --data-dir data --worker all

The model is rebuilt from the run's ``config.yaml`` (``model``, ``workload``, ``seed``, ``workers``;
the quick workload's ``noise``/``split``/``alpha`` and CRUDA's ``data_dir``/``split``/``image_size``/
``normalize``/``test_limit`` when recorded, else the workloads' defaults), each checkpoint of the
chosen worker (:mod:`rog.checkpoint`: a model that worker held, parameters and buffers) is verified
(sha256), loaded strictly and tested: :meth:`QuickWorkload.evaluate` (noisy test part) or
:meth:`CrudaWorkload.test_metrics` (the whole noisy test file unless ``--test-limit``).

accuracy.csv columns: ``time`` (seconds since the run start: the first worker's ``run_start`` record,
the clock :mod:`rog.analysis.load` uses), ``iteration``, ``accuracy`` (in [0, 1]), ``worker``,
``checkpoint`` (file name).  Checkpoints already in accuracy.csv are skipped (resume); the file is
rewritten atomically after every test, so an interruption loses at most the test in progress.
``--limit N`` tests at most N new checkpoints in this call.  A checkpoint that fails verification is
reported and skipped (exit status 1).  The last line printed is a JSON summary.

Needs only the engine and the workload (no SSH, no tc, no plotting).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import yaml

from rog.cli_parser import OneLineParser
from rog.errors import ConfigError
from rog.workloads.registry import WORKLOADS
from rog.workloads.spec import EvalOverrides, WorkloadSpec

COLUMNS = ("time", "iteration", "accuracy", "worker", "checkpoint")


def parse_args(argv=None) -> argparse.Namespace:
    p = OneLineParser(prog="test_checkpoints.py", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", metavar="run_dir",
                   help="run folder(s) (result/<run-id>/) with config.yaml and checkpoints/; several in one call "
                        "share the torch import and the test set (one JSON summary line per run)")
    p.add_argument("--workload", choices=list(WORKLOADS), default=None,
                   help="default: the run's config.yaml (workload)")
    p.add_argument("--data-dir", default=None, help="CRUDA data folder (default: config.yaml's data_dir, else data/)")
    p.add_argument("--test-limit", type=int, default=None,
                   help="CRUDA: test on a seeded subset of this many images (default: config.yaml's, else the whole test set)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="evaluation batch size (default: the workload's eval_batch, quick 256, cruda 64)")
    p.add_argument("--worker", default="0", help="whose checkpoints to test: a worker index or 'all' (default 0)")
    p.add_argument("--limit", type=int, default=None, help="test at most this many new checkpoints in this call")
    p.add_argument("--cache-dir", default=None, help="quick workload cache folder (default: config.yaml's cache_dir)")
    a = p.parse_args(argv)
    if a.worker != "all":
        try:
            a.worker = int(a.worker)
        except ValueError:
            p.error(f"--worker must be a worker index (0, 1, ...) or 'all'; got {a.worker!r}")
        if a.worker < 0:
            p.error("--worker must be >= 0")
    if a.batch_size is not None and a.batch_size < 1:
        p.error("--batch-size must be >= 1")
    if a.limit is not None and a.limit < 1:
        p.error("--limit must be >= 1")
    if a.test_limit is not None and a.test_limit < 1:
        p.error("--test-limit must be >= 1")
    return a


def load_config(run_dir: Path) -> WorkloadSpec:
    """The workload entries of the run's resolved config (config.yaml), checked for the keys this script needs."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{path} not found: RUN_DIR must be a run folder written by scripts/run.py")
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(cfg, dict):
        raise ConfigError(f"{path} must be a YAML mapping")
    missing = [k for k in ("model", "seed") if k not in cfg]
    if missing:
        raise ConfigError(f"{path} misses key(s) {missing}")
    return WorkloadSpec.from_dict(cfg, source=str(path))


def build_workload(name: str, spec: WorkloadSpec, a: argparse.Namespace):
    """The run's workload, as its config describes it (only what the test set depends on matters): the
    workload registry's ``build_eval`` with this command's overrides."""
    overrides = EvalOverrides(cache_dir=a.cache_dir, data_dir=a.data_dir, test_limit=a.test_limit)
    return WORKLOADS[name].build_eval(spec, overrides)


def read_accuracy(path: Path) -> list[dict]:
    """Rows already in accuracy.csv (empty if absent); ValueError naming the file if its header differs."""
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; expected the header {','.join(COLUMNS)} "
                             "(move the file away to re-test every checkpoint)")
        return [dict(r) for r in reader]


def write_accuracy(path: Path, rows: list[dict]) -> None:
    """accuracy.csv sorted by time, written to a temporary file then renamed over the old one."""
    rows = sorted(rows, key=lambda r: (float(r["time"]), int(r["iteration"]), int(r["worker"])))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def main(argv=None) -> int:
    """``scripts/test_checkpoints.py``; a bad run folder or config.yaml is one ``error:`` line and exit status 2."""
    a = parse_args(argv)
    cache: dict = {}
    try:
        codes = [test_one_run(Path(d), a, cache) for d in a.run_dirs]
    except ConfigError as e:
        print(f"test_checkpoints.py: error: {e}", file=sys.stderr, flush=True)
        return 2
    return max(codes)


def _workload_key(workload: str, spec: WorkloadSpec, a: argparse.Namespace) -> str:
    """What the test set depends on: runs with the same key share one workload object."""
    s = spec
    entries = (s.seed, s.workers, s.noise, s.split, s.alpha, s.cache_dir, s.image_size, s.normalize, s.train_file,
               s.test_file, s.test_limit, s.data_dir)
    return json.dumps([workload, entries, a.data_dir, a.test_limit, a.cache_dir], default=str)


def test_one_run(run_dir: Path, a: argparse.Namespace, cache: dict) -> int:
    """Test one run's new checkpoints into its accuracy.csv; prints the run's JSON summary line."""
    import torch

    from rog.checkpoint import CheckpointError, list_checkpoints, load_checkpoint, run_start_s

    t_begin = time.perf_counter()
    if not run_dir.is_dir():
        raise ConfigError(f"RUN_DIR {str(run_dir)!r} is not a directory")
    spec = load_config(run_dir)
    workload = a.workload or spec.workload
    if workload not in WORKLOADS:
        raise ConfigError(f"config.yaml workload {workload!r}; pass --workload {'|'.join(WORKLOADS)}")
    model_name = str(spec.model)
    batch = a.batch_size or WORKLOADS[workload].eval_batch

    out_path = run_dir / "accuracy.csv"
    try:
        rows = read_accuracy(out_path)
    except ValueError as e:
        raise ConfigError(f"{e}") from None
    done = {r["checkpoint"] for r in rows}
    ckpts = list_checkpoints(run_dir, worker=None if a.worker == "all" else a.worker)
    todo = [c for c in ckpts if c.name not in done]
    deferred = todo[a.limit:] if a.limit is not None else []
    todo = todo[: a.limit] if a.limit is not None else todo
    summary = dict(run_dir=str(run_dir), workload=workload, model=model_name, worker=a.worker,
                   checkpoints=len(ckpts), already_tested=len(ckpts) - len(todo) - len(deferred), tested=0,
                   remaining=len(deferred), failed=[], accuracy_csv=None)
    if not ckpts:
        print(f"no checkpoints of worker {a.worker} in {run_dir} (or {run_dir / 'checkpoints'})", file=sys.stderr)

    if todo:
        key = _workload_key(workload, spec, a)
        if key not in cache:
            cache[key] = build_workload(workload, spec, a)
        wl = cache[key]
        t0 = run_start_s(run_dir)
        with torch.random.fork_rng(devices=[]):
            model = wl.make_model(model_name)
        for info in todo:
            try:
                if info.model is not None and info.model != model_name:
                    raise CheckpointError(f"{info.path}: holds model {info.model!r}, config.yaml says {model_name!r}")
                state, info = load_checkpoint(info)
                try:
                    model.load_state_dict(state, strict=True)
                except RuntimeError as e:
                    raise CheckpointError(f"{info.path}: does not match {model_name}: {str(e).splitlines()[0]}") from None
            except CheckpointError as e:
                print(f"skipped: {e}", file=sys.stderr, flush=True)
                summary["failed"].append(dict(checkpoint=info.name, error=str(e)))
                continue
            if workload == "cruda":
                acc = float(wl.test_metrics(model, batch)["accuracy"])
            else:
                acc = float(wl.evaluate(model, batch))
            row = dict(time=round(info.t_s - t0, 6), iteration=info.iteration, accuracy=acc, worker=info.worker,
                       checkpoint=info.name)
            rows.append(row)
            write_accuracy(out_path, rows)
            summary["tested"] += 1
            summary["last"] = row
            print(f"{info.name}: iteration {info.iteration}, t {row['time']:.1f} s, accuracy {100 * acc:.2f} %",
                  file=sys.stderr, flush=True)
        summary["test_images"] = int(wl.sizes()["test"]) * int(getattr(wl, "test_noise_draws", 1))
        from rog.tb_scalars import write_checkpoint_accuracy

        write_checkpoint_accuracy(run_dir, [r for r in rows if r["checkpoint"] not in done])  # the new ones
    if out_path.exists():
        summary["accuracy_csv"] = str(out_path)
    summary["duration_s"] = round(time.perf_counter() - t_begin, 3)
    print(json.dumps(summary), flush=True)
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
