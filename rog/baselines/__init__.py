"""Reference baselines a user would otherwise pick, run through the same launcher, links and event log.

* :mod:`rog.baselines.ddp`: plain PyTorch ``DistributedDataParallel`` over gloo (CPU), float32
  gradients all-reduced every iteration (``scripts/run.py --library DDP``).
* :mod:`rog.baselines.netpath`: how gloo's worker-to-worker traffic crosses the emulated links
  (forwarding in the PS namespace, routes in the worker namespaces) and which interface it uses.
"""

from .ddp import DDP_LIBRARY, DDPConfigError, check_ddp_config, run_ddp_worker, serve_rendezvous

__all__ = ["DDP_LIBRARY", "DDPConfigError", "check_ddp_config", "run_ddp_worker", "serve_rendezvous"]
