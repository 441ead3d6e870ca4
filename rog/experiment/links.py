"""The run's links: each worker's replay schedule, their common start (``links.ready``) and the
time budget counted from it.

The launcher starts every replay when the worker host is ready to connect and writes ``links.ready``
(event-clock and monotonic start); the children wait for it, so training meets the traces at their
configured offsets whatever the start-up took.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rog.errors import ConfigError

from .rundir import GO_FILE, wait_for, write_atomic
from .run_config import RunConfig

MAX_LINK_DELAY_MS = 10_000.0  # rog.transport.TransportConfig accepts link_delay_s up to 10 s


def link_delay_ms_arg(text: str) -> float:
    """argparse type of ``--link-delay-ms``: milliseconds in [0, 10000]."""
    try:
        ms = float(text)
    except ValueError:
        ms = float("nan")
    if not 0.0 <= ms <= MAX_LINK_DELAY_MS:
        raise argparse.ArgumentTypeError(f"must be a number of milliseconds in [0, {MAX_LINK_DELAY_MS:g}], got {text!r}")
    return ms


def resolved_link_delay_ms(a: argparse.Namespace) -> float:
    """``config.yaml``'s ``link_delay_ms``: the flag's value; DDP (gloo's own transport) cannot hold one."""
    from rog.policies.registry import has_own_runtime

    ms = float(getattr(a, "link_delay_ms", 0.0) or 0.0)
    if ms > 0 and has_own_runtime(a.library):
        raise ConfigError(f"--link-delay-ms: {a.library} uses its own transport, which has no emulated delay; drop the flag")
    return ms


def transport_delay_s(cfg: RunConfig) -> float:
    """The emulated per-transfer delay every worker's and the PS's transport holds (seconds; 0 without one):
    each transmission's Begin leaves this long after it starts (:attr:`rog.transport.TransportConfig.link_delay_s`)."""
    return float(cfg.links.link_delay_ms or 0.0) / 1000.0


def link_schedules(cfg: RunConfig) -> dict:
    """Event rank -> the replay schedule of its link (None when the run is unshaped or constant-rate)."""
    if cfg.links.trace is None:
        return {}
    from rog.experiment.emulated import schedule_for
    from rog.experiment.traceplan import load_for_replay, replay_options

    trace = load_for_replay(cfg)
    return {k: schedule_for(trace, replay_options(cfg, k)) for k in range(cfg.testbed.workers)}


def fallback_rates(cfg: RunConfig, start_monotonic_s: float) -> dict:
    """Loopback fallback: event rank -> rate_mbit_at callable following its schedule from ``start_monotonic_s``."""
    from rog.experiment.emulated import ScheduleRate

    return {k: ScheduleRate(sched, start_monotonic_s) for k, sched in link_schedules(cfg).items()}


def links_ready(run_dir: Path) -> dict:
    """Wait for the launcher's ``links.ready`` (written when the replays start): ``{"t_s", "monotonic_s"}``."""
    return json.loads(wait_for(run_dir / GO_FILE, "the launcher to start the links").read_text())


def start_links(run_dir: Path, net, schedules: dict, t_start: float) -> dict:
    """Start every link's replay now (emulated: tc threads; fallback: the token buckets read the time
    from ``links.ready``) and tell the worker host; returns the ``links.ready`` content."""
    from rog.experiment.tracking import replay_log_name

    now = time.monotonic()
    if net is not None:
        net.start_replays(schedules, run_dir, t_start, replay_log_name)
    links = {"t_s": now - t_start, "monotonic_s": now}
    write_atomic(run_dir / GO_FILE, json.dumps(links) + "\n")
    return links


def budget_end(cfg: RunConfig, links: dict) -> float | None:
    """Monotonic time at which ``time_budget_s`` runs out, counted from the links' start (None: no budget)."""
    budget = cfg.workload.time_budget_s
    return None if budget is None else float(links["monotonic_s"]) + float(budget)

