"""The run folder ``<result-dir>/<run-id>/``: the names of the files a run's processes coordinate
through and leave behind, and the atomic write / wait helpers they use.

A coordination file is always written whole (a temporary name, then a rename), so a process that
sees the name sees the complete content.  Who writes what, in start-up order:

* the launcher: ``config.yaml`` (the resolved configuration; children read nothing else);
* the worker host (or ``--child prepare``): ``layout.json`` (the model's parameter layout for the PS);
* the parameter server: ``ps.port`` (it listens);
* the worker host: ``workers.ready`` (local launcher); each worker: ``worker.ready`` (Fabric);
* the launcher: ``links.ready`` (the go: replays start, workers connect; ``{"t_s", "monotonic_s"}``);
* the parameter server, at its end: ``clock_offsets.json`` (each worker host's clock offset);
* at the end: ``metrics.csv``, ``tracking.json``, ``energy.json``, ``manifest.json`` and the marker,
  ``DONE`` (the summary as JSON) or ``INCOMPLETE`` (the reason).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import yaml

from rog.errors import ConfigError

from .run_config import RunConfig

CONFIG_FILE = "config.yaml"  # the resolved configuration
LAYOUT_FILE = "layout.json"  # the model's parameter names and shapes (the PS builds its rows from it)
PS_PORT_FILE = "ps.port"  # the parameter server's listening port
WORKERS_READY_FILE = "workers.ready"  # --launcher local: every worker of the worker host is ready to connect
WORKER_READY_FILE = "worker.ready"  # --launcher fabric: a worker is ready to connect (imports done, data loaded)
GO_FILE = "links.ready"  # the launcher's go: links replay and workers connect (also the local path's file)
CLOCK_OFFSETS_FILE = "clock_offsets.json"  # the PS's estimate of each worker host's clock offset (rog.runtime.clock_sync)
PS_RESTARTS_FILE = "ps-restarts.jsonl"  # one line per --resume-ps restart
METRICS_FILE = "metrics.csv"  # worker 0's evaluations
TRACKING_FILE = "tracking.json"  # does communication time follow the replayed rate
ENERGY_FILE = "energy.json"  # energy per device
MANIFEST_FILE = "manifest.json"  # code version, hosts, traces, command, times, status
DONE_FILE = "DONE"  # the run completed (content: the summary as JSON)
INCOMPLETE_FILE = "INCOMPLETE"  # the run failed or was stopped (content: the reason); partial results kept


def local_worker_ready_file(k: int) -> str:
    """``w<k>.ready``: worker ``k`` of the local launcher has imported torch and built its data."""
    return f"w{k}.ready"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a temporary file renamed over it."""
    path = Path(path)
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


def read_config(run_dir: Path) -> RunConfig:
    """The run's ``config.yaml``, typed; a bad entry raises :class:`ConfigError` naming the file and field."""
    path = Path(run_dir) / CONFIG_FILE
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e}); re-create the run with scripts/run.py") from None
    return RunConfig.from_dict(data, source=str(path))


def write_config(run_dir: Path, cfg: RunConfig | dict) -> None:
    """(Re)write the run's ``config.yaml`` (a dict is checked as a :class:`RunConfig` first)."""
    write_atomic(Path(run_dir) / CONFIG_FILE, yaml.safe_dump(_typed(cfg).to_dict(), sort_keys=False))


def _typed(cfg: RunConfig | dict) -> RunConfig:
    return cfg if isinstance(cfg, RunConfig) else RunConfig.from_dict(cfg, source="the run configuration")


def run_status(run_dir: Path) -> str:
    """``done`` (DONE), ``incomplete`` (INCOMPLETE) or ``running`` (neither marker yet)."""
    run_dir = Path(run_dir)
    if (run_dir / DONE_FILE).exists():
        return "done"
    return "incomplete" if (run_dir / INCOMPLETE_FILE).exists() else "running"


def prepare_run_dir(cfg: RunConfig | dict, result_dir: str, overwrite: bool) -> Path:
    """Create the run folder afresh with ``config.yaml``; refuses to replace a completed run unless ``overwrite``."""
    cfg = _typed(cfg)
    run_dir = Path(result_dir) / cfg.output.run_id
    if (run_dir / DONE_FILE).exists() and not overwrite:
        raise ConfigError(f"{run_dir} already holds a completed run; pass --overwrite to replace it")
    check_result_dir(result_dir)
    try:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
    except OSError as e:
        raise ConfigError(f"--result-dir {result_dir}: cannot create {run_dir} ({e.strerror}); give a folder you can "
                          "write to") from None
    write_config(run_dir, cfg)
    return run_dir


def check_result_dir(result_dir: str | Path, flag: str = "--result-dir") -> None:
    """:class:`ConfigError` unless ``result_dir`` is (or could be created as) a writable folder; creates nothing."""
    probe = Path(result_dir).absolute()
    while not probe.exists() and probe != probe.parent:  # the nearest existing folder above it
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{flag} {result_dir}: {probe} is a file, not a folder; give a folder (default result/)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {result_dir}: {probe} is not writable; give a folder you can write to "
                          "(default result/)")
