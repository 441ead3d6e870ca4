"""Wiring of (alpha, beta) data injection into a run: the relay next to the parameter server, and each
worker's batch wrapper (:mod:`rog.streams.inject`, :mod:`rog.streams.inject_relay`)."""

from __future__ import annotations

from pathlib import Path

from .run_config import RunConfig

INJECT_PORT_FILE = "inject.port"


def _fixed_port(cfg: RunConfig) -> bool:
    """Fabric-launched processes do not share the run folder: the relay then listens on the PS port + 1
    (its own namespace or device), otherwise on any free port published in ``<run>/inject.port``."""
    return cfg.testbed.launcher == "fabric" or cfg.testbed.kind == "hosts"


def start_relay(cfg: RunConfig, run_dir: Path, host: str, ps_port: int):
    """``--inject-mode network``: start the relay on ``host`` (the PS's listening address), on ``ps_port + 1``
    for a Fabric launch, else on a free port published in ``<run>/inject.port``; returns the relay, or None
    when the run injects nothing over the network."""
    inj = cfg.inject
    if not inj or inj.mode != "network":
        return None
    from rog.streams.inject_relay import InjectRelay
    from rog.transport import load_secret

    from .rundir import write_atomic

    relay = InjectRelay(host, int(ps_port) + 1 if _fixed_port(cfg) else 0, cfg.testbed.workers, load_secret())
    write_atomic(Path(run_dir) / INJECT_PORT_FILE, str(relay.address[1]))
    return relay


def wrap_batches(cfg: RunConfig, k: int, wl, batches, run_dir: Path, server: tuple[str, int], events):
    """Worker ``k``'s batches with injection (unchanged when the run injects nothing)."""
    inj = cfg.inject
    if not inj:
        return batches
    from rog.streams.inject import InjectedBatches, local_pool

    def log(**fields):
        events.write("inject", worker=k, **fields)

    exchange = pool = None
    if inj.mode == "network":
        from rog.streams.inject_relay import InjectClient
        from rog.transport import load_secret

        from .rundir import wait_for

        if _fixed_port(cfg):
            port = int(server[1]) + 1
        else:
            port = int(wait_for(Path(run_dir) / INJECT_PORT_FILE, "the injection relay to listen").read_text())
        exchange = InjectClient((server[0], port), k, load_secret(), timeout_s=120.0)
    else:
        pool = local_pool(wl, k)
    return InjectedBatches(batches, k, cfg.testbed.workers, inj.alpha, inj.beta, cfg.workload.seed, inj.mode,
                           exchange=exchange, pool=pool, log=log)


def inject_streamed(batches, streamed: list | None) -> list | None:
    """A streamed worker's batch ``[(x, y)]`` with the run's injection applied (``batches`` is what
    :func:`wrap_batches` returned: injection is there when it has ``inject``); unchanged otherwise."""
    inject = getattr(batches, "inject", None)
    if streamed is None or inject is None:
        return streamed
    return [inject(x, y) for x, y in streamed]
