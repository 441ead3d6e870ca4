"""Finishing a run, complete or not: ``metrics.csv`` and the summary, ``tracking.json``,
``energy.json``, the completion marker (``DONE`` / ``INCOMPLETE``) and ``manifest.json``."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from .config import ROOT
from .rundir import DONE_FILE, INCOMPLETE_FILE, METRICS_FILE, TRACKING_FILE, write_atomic
from .run_config import RunConfig


def summarise(run_dir: Path, cfg: RunConfig, wall_s: float) -> dict:
    """metrics.csv from worker 0's evaluations, and the run's means per iteration (partial runs too)."""
    from rog.runtime import EventLogError, read_events

    logs = {}
    for k in range(cfg.testbed.workers):
        path = run_dir / f"events-w{k}.jsonl"
        if path.exists():
            try:
                logs[k] = read_events(path, allow_partial_last_line=True)[1]
            except EventLogError as e:
                logs[k] = []
                print(f"warning: {e}", file=sys.stderr)
    recs0 = logs.get(0, [])
    starts = [r["t_s"] for recs in logs.values() for r in recs if r["kind"] == "run_start"]
    t0 = min(starts) if starts else 0.0
    evals = [r for r in recs0 if r["kind"] == "eval" and not r.get("flushed")]
    with open(run_dir / METRICS_FILE, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["iteration", "wall_s", "loss", "test_accuracy", "train_loss"])
        for r in evals:
            w.writerow([r["iteration"], f"{max(0.0, r['t_s'] - t0):.3f}", f"{r['loss']:.6f}", f"{r['accuracy']:.6f}",
                        "" if r.get("train_loss") is None else f"{r['train_loss']:.6f}"])
    flushed = [r for r in recs0 if r["kind"] == "eval" and r.get("flushed")]
    sums = {"compute": 0.0, "push": 0.0, "pull": 0.0, "stall": 0.0}
    from rog.policies.registry import systems

    policy = getattr(systems().get(str(cfg.sync.library).upper()), "policy", None)
    step = "compute" if getattr(policy, "local_steps", False) else "pull"  # ADSP/ADACOMM: a local step is an iteration
    n_iter = 0
    paced_sleep_s = 0.0  # the compute-pacing sleep inside the compute records (the device profile's padding)
    ends = []
    for recs in logs.values():
        for r in recs:
            if r["kind"] in sums:
                sums[r["kind"]] += r["duration_s"]
            if r["kind"] == "compute":
                paced_sleep_s += r.get("sleep_s") or 0.0
            if r["kind"] == step:
                n_iter += 1
            if r["kind"] == "pull":
                ends.append(r["t_s"] + r["duration_s"])
    per = {f"{k}_s": (v / n_iter if n_iter else None) for k, v in sums.items()}
    per["comm_s"] = (sums["push"] + sums["pull"]) / n_iter if n_iter else None
    per["compute_work_s"] = (sums["compute"] - paced_sleep_s) / n_iter if n_iter else None  # compute less pacing
    iterations = min((sum(1 for r in recs if r["kind"] == step) for recs in logs.values()), default=0)
    return dict(
        run_dir=str(run_dir),
        iterations=iterations,
        start_accuracy=evals[0]["accuracy"] if evals else None,
        final_accuracy=evals[-1]["accuracy"] if evals else None,
        flushed_accuracy=flushed[-1]["accuracy"] if flushed else None,
        train_s=(max(ends) - t0) if ends else None,
        wall_s=wall_s,
        **{f"mean_{k}": v for k, v in per.items()},
    )


def finalise(run_dir: Path, cfg: RunConfig) -> dict:
    """tracking.json and energy.json for a (possibly partial) run; returns the summary fields."""
    from rog.experiment.energy_report import write_energy_json
    from rog.experiment.tracking import bandwidth_tracking
    from rog.testbed.profiles import load_profile

    out: dict = {}
    if cfg.links.trace is not None:
        try:
            dirs = ("up", "down") if cfg.links.shape == "both" else ("up",)
            tr = {d: bandwidth_tracking(run_dir, d).to_dict() for d in dirs}
            write_atomic(run_dir / TRACKING_FILE, json.dumps(tr, indent=2) + "\n")
            out["tracking"] = {d: {k: r[k] for k in ("n", "pearson", "spearman", "median_ratio")} for d, r in tr.items()}
        except Exception as e:  # noqa: BLE001 - a partial run may lack logs
            out["tracking"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        doc = write_energy_json(run_dir, cfg.testbed.workers, load_profile(cfg.device.profile), load_profile(cfg.device.ps_profile))
        out["energy_j"] = {rank: d.get("energy_j") for rank, d in doc["devices"].items()}
        out["energy_source"] = sorted({d["source"] for d in doc["devices"].values()})
    except Exception as e:  # noqa: BLE001
        out["energy_j"] = {"error": f"{type(e).__name__}: {e}"}
    return out


def mark(run_dir: Path, status: str, reason: str, summary: dict) -> None:
    """The completion marker: ``DONE`` (the summary as JSON) or ``INCOMPLETE`` (the reason; the partial
    results stay next to it)."""
    if status == "done":
        write_atomic(run_dir / DONE_FILE, json.dumps(summary) + "\n")
    else:
        summary["reason"] = reason
        write_atomic(run_dir / INCOMPLETE_FILE, reason + "\n")


def write_run_manifest(run_dir: Path, cfg: RunConfig, command: list[str], start_unix: float, end_unix: float,
                       status: str, reason: str, left: list[str], replay_stats: dict, links_t_s: float | None,
                       hosts: dict | None = None) -> None:
    """``manifest.json`` of the run (hosts: as deployed by Fabric, else from the config); a failure only warns."""
    from rog.runtime.clock_sync import read_offsets_file

    from .rundir import CLOCK_OFFSETS_FILE
    from rog.experiment.manifest import write_manifest

    if hosts is not None:  # --launcher fabric: the hosts as deployed
        pass
    elif cfg.testbed.kind == "emulated":
        hosts = cfg.testbed.emulated["hosts"]
    else:
        hosts = {"ps": {"address": "127.0.0.1"}, **{f"w{k}": {"address": "127.0.0.1"} for k in range(cfg.testbed.workers)}}
    traces = [] if cfg.links.trace is None else [{"path": cfg.links.trace["path"], "sha256": cfg.links.trace["sha256"]}]
    try:
        write_manifest(run_dir, repo=ROOT, command=[sys.executable, *command], testbed=cfg.testbed.kind, hosts=hosts,
                       traces=traces, start_unix_s=start_unix, end_unix_s=end_unix, status=status, reason=reason,
                       fallback_reason=cfg.testbed.fallback_reason, prefix=(cfg.testbed.emulated or {}).get("prefix"),
                       leftovers_after_cleanup=left, replay=replay_stats, replay_start_t_s=links_t_s,
                       launcher=cfg.testbed.launcher or "local", clock_offsets=read_offsets_file(run_dir / CLOCK_OFFSETS_FILE))
    except Exception as e:  # noqa: BLE001
        print(f"warning: manifest.json not written: {e}", file=sys.stderr)



def report_end(summary: dict, status: str, reason: str, run_dir: Path, json_out: bool) -> None:
    """The run's end for a person and for programs: the JSON summary as the last line of stdout (with
    ``--json``, or when stdout is not a terminal: a pipe or a file; always in ``DONE``), then one closing
    sentence on stderr (:func:`rog.experiment.progress.closing_line`)."""
    from .progress import closing_line

    if json_out or not sys.stdout.isatty():
        print(json.dumps(summary), flush=True)
    print(closing_line(summary, status, reason, run_dir), file=sys.stderr, flush=True)
