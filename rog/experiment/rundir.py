"""The run folder ``<result-dir>/<run-id>/``: the file names the run's processes coordinate through,
and the atomic write / wait helpers they use.

A coordination file is always written whole (temporary name, then rename), so a reader that sees
the name sees the complete content.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import yaml

WORKER_READY_FILE = "worker.ready"  # --launcher fabric: a worker is ready to connect (imports done, data loaded)
GO_FILE = "links.ready"  # the launcher's go: links replay and workers connect (also the local path's file)


def prepare_run_dir(cfg: dict, result_dir: str, overwrite: bool) -> Path:
    """Create the run folder afresh with ``config.yaml``; refuses to replace a completed run unless ``overwrite``."""
    run_dir = Path(result_dir) / cfg["run_id"]
    if (run_dir / "DONE").exists() and not overwrite:
        raise SystemExit(f"run.py: error: {run_dir} already holds a completed run; pass --overwrite to replace it")
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return run_dir


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a temporary file renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def wait_for(path: Path, what: str, timeout_s: float = 900.0) -> Path:
    """Wait until ``path`` exists (written atomically by another process of the run)."""
    end = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"waited {timeout_s} s for {what} ({path.name})")
        time.sleep(0.05)
    return path

