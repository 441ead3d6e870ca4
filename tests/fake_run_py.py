#!/usr/bin/env python
"""A stand-in for scripts/run.py in the run_items driver tests: writes the run folder run.py would
(config.yaml with the resolved keys, DONE or INCOMPLETE) in a fraction of a second.

The run id comes from run.py's own ``run_id`` (:mod:`rog.experiment.config`) (not from rog.experiment.items, the module
under test).  ``FAKE_LOG``: every call appends ``start <run-id>`` / ``signal <name> <run-id>`` /
``done <run-id>``, and ``tag <testbed prefix tag> <run-id>``.  ``FAKE_HANG_ON=<run-id>[,<run-id>...]``: those runs write ``started``, then waits for SIGINT or
SIGTERM, writes INCOMPLETE (as run.py does) and exits 1.  ``--testbed hosts --hosts FILE``: config.yaml
names the hosts of the run's first ``--workers`` workers (as run.py's).  ``FAKE_UNREACHABLE=<run-id>:<host>``:
that run loses the host mid-run as the Fabric launcher reports it (INCOMPLETE naming the host, exit 1),
unless ``$FAKE_LOG``'s folder holds a file ``<host>.back`` (the device is reachable again).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    p = argparse.ArgumentParser()
    for flag in ("--testbed", "--library", "--replay-mode", "--workload", "--item", "--result-dir", "-c", "-n",
                 "--trace", "--hosts"):
        p.add_argument(flag, default=None)
    p.add_argument("--threshold", type=int, default=None)
    p.add_argument("-b", type=int, default=1)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", "--time-budget-s", dest="time_budget_s", type=float)
    p.add_argument("--json", action="store_true")
    p.add_argument("--checkpoint-every-s", type=float)
    p.add_argument("--checkpoint-workers", default="0")
    p.add_argument("--eval-every", type=int)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args()
    from rog.experiment import RUN_SEMANTICS
    from rog.experiment.atp import atp_config
    from rog.experiment.config import run_id
    from rog.experiment.traceplan import default_trace, sha256_file

    control = a.c or ("custom" if a.trace else "outdoors")
    threshold = a.threshold if a.threshold is not None else (0 if a.library in ("BSP", "DDP") else 4)
    trace = Path(a.trace) if a.trace else default_trace(control)[0]
    testbed = a.testbed
    if testbed == "emulated":  # run.py's fallback without root or namespaces (run_items.py --allow-loopback)
        from rog.testbed.netns import root_netns_status

        testbed = "emulated" if root_netns_status()[0] else "loopback"
    cfg = dict(testbed=testbed, library=a.library, threshold=threshold, control=control, replay_mode=a.replay_mode,
               batch_multiple=a.b, workers=a.workers, seed=a.seed, time_budget_s=a.time_budget_s, workload=a.workload,
               note=a.n or "", trace=dict(sha256=sha256_file(trace)), checkpoint=dict(
                   every_s=a.checkpoint_every_s, workers=list(range(a.workers)) if a.checkpoint_workers == "all"
                   else [int(w) for w in a.checkpoint_workers.split(",")]),
               item=a.item, run_semantics=RUN_SEMANTICS, atp=atp_config(a.library))
    if a.testbed == "hosts":
        from rog.deploy.hosts import load_hosts

        hf = load_hosts(a.hosts).first_workers(a.workers)
        cfg["hosts"] = dict(file=a.hosts, ps=hf.ps.name, workers=[h.name for h in hf.workers])
    rid = run_id(cfg)
    cfg["run_id"] = rid
    run_dir = Path(a.result_dir) / rid
    log = Path(os.environ["FAKE_LOG"])

    def note(text: str) -> None:
        with open(log, "a") as f:
            f.write(f"{text} {rid}\n")

    note("start")
    import yaml

    run_dir.mkdir(parents=True)  # run.py replaces an existing folder; the driver must have moved it aside
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    note(f"tag {os.environ.get('ROG_TESTBED_PREFIX', '-')}")
    if rid in os.environ.get("FAKE_HANG_ON", "").split(","):
        got = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda s, f: got.append(s))
        (run_dir / "started").write_text("1\n")
        end = time.monotonic() + 60
        while not got and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.5)  # a second signal would arrive now
        for s in got:
            note(f"signal {signal.Signals(s).name}")
        (run_dir / "INCOMPLETE").write_text("interrupted\n")
        print(json.dumps({"status": "incomplete"}))
        return 1
    lost_rid, _, lost_host = os.environ.get("FAKE_UNREACHABLE", "").partition(":")
    if rid == lost_rid and not (log.parent / f"{lost_host}.back").exists():
        (run_dir / "INCOMPLETE").write_text(f"{lost_host}: status poll failed: {lost_host} (root@10.0.0.9:22): cannot "
                                            f"connect (timed out); is the device up, sshd running, address and port right?\n")
        note("lost")
        print(json.dumps({"status": "incomplete"}))
        return 1
    (run_dir / "DONE").write_text("{}\n")
    note("done")
    print(json.dumps({"status": "done", "iterations": 3, "mean_stall_s": 0.5, "final_accuracy": 0.7}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
