#!/usr/bin/env python
"""A stand-in for scripts/run.py in the run_items driver tests: writes the run folder run.py would
(config.yaml as run.py resolves it from the same flags, DONE or INCOMPLETE) in about a second, without
starting a process (give the driver --cache-dir result/.cache, so the payload size is read from the cache).

The flags are parsed and resolved by run.py's own code (:mod:`rog.experiment.cli`, :mod:`rog.experiment.config`),
so the run id and every config.yaml entry are run.py's (not rog.experiment.items', the module under test).
``FAKE_LOG``: every call appends ``start <run-id>`` / ``signal <name> <run-id>`` / ``done <run-id>``, and
``tag <testbed prefix tag> <run-id>``.  ``FAKE_HANG_ON=<run-id>[,<run-id>...]``: those runs write ``started``,
then wait for SIGINT or SIGTERM, write INCOMPLETE (as run.py does) and exit 1.  ``FAKE_UNREACHABLE=<run-id>:<host>``:
that run loses the host mid-run as the Fabric launcher reports it (INCOMPLETE naming the host, exit 1),
unless ``$FAKE_LOG``'s folder holds a file ``<host>.back`` (the device is reachable again).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    from rog.experiment import cli
    from rog.experiment.config import resolve_config

    a = cli.parse_args(sys.argv[1:])  # run.py's own flags, checks and resolution: the config.yaml it writes
    cfg = resolve_config(a)
    rid = cfg["run_id"]
    run_dir = Path(a.result_dir) / rid
    log = Path(os.environ["FAKE_LOG"])

    def note(text: str) -> None:
        with open(log, "a") as f:
            f.write(f"{text} {rid}\n")

    note("start")
    import yaml

    run_dir.mkdir(parents=True)  # run.py replaces an existing folder; the driver must have moved it aside
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
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
