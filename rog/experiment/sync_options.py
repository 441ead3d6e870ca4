"""run.py's synchronisation flags beyond ``--library``/``--threshold``: every registered policy's options,
``--compute-ratios`` and ``--global-eval-every-s``; their checks and what they resolve to.

A policy that declares options (:attr:`rog.policies.base.Policy.options`, a frozen dataclass of
:mod:`rog.options` that checks its values) gets one flag per field in its ``options_group``; the chosen
policy's options are ``config.yaml``'s ``policy_options`` and its constructor's keyword arguments.  A new
policy's options need no line here.  ``--compute-ratios 1,1,3`` paces worker ``k``'s compute to
``compute_s x ratio[k]`` (ADSP's heterogeneity; a device profile may carry the same list, the flag wins).
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Mapping

from rog.errors import ConfigError

from ..options import add_entry_flags, check_entry_options, entry_options
from ..policies.registry import POLICIES, get_system
from .run_config import RunConfig


def add_arguments(groups: Mapping[str, Any]) -> None:
    """Add the flags to run.py's argument groups by concern (``device``, ``synchronisation``, ``output``)."""
    groups["device"].add_argument(
        "--compute-ratios", default=None,
        help="per-worker compute time multiples, one per worker, e.g. 1,1,3 (default: all 1, or the profile's)")
    add_entry_flags(groups, POLICIES.items())  # every registered policy's options (rog.policies.registry)
    groups["output"].add_argument(
        "--global-eval-every-s", type=float, default=None,
        help="any system: the PS evaluates the global model (loss, accuracy on a fixed held-out subset) every this "
             "many seconds of run time (default: off)")


def parse_ratios(text: str | None, n_workers: int, source: str = "--compute-ratios") -> list[float] | None:
    """``"1,1,3"`` -> ``[1.0, 1.0, 3.0]`` (None: not given); one positive finite number per worker."""
    if text is None:
        return None
    items = [x.strip() for x in str(text).split(",")] if isinstance(text, str) else list(text)
    try:
        ratios = [float(x) for x in items]
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: {text!r} is not a comma-separated list of numbers; give one positive number "
                          f"per worker, e.g. {','.join(['1'] * max(n_workers - 1, 0) + ['3'])}") from None
    if len(ratios) != n_workers:
        raise ConfigError(f"{source}: got {len(ratios)} ratio(s) for {n_workers} workers; give exactly one per worker "
                          f"(or change --workers)")
    bad = [x for x in ratios if not (x > 0 and math.isfinite(x))]
    if bad:
        raise ConfigError(f"{source}: every ratio must be a positive number (a compute time multiple), got {bad[0]:g}; "
                          f"use e.g. 1 for the base speed and 3 for a worker three times slower")
    return ratios


def check(a: argparse.Namespace) -> None:
    """Every declaring policy's options, checked by its dataclass (a bad value given for another system than
    ``--library``'s is refused too: the flag was given for nothing), and ``--global-eval-every-s``."""
    check_entry_options(a, POLICIES.items())
    v = getattr(a, "global_eval_every_s", None)
    if v is not None and not (v > 0 and math.isfinite(v)):
        raise ConfigError(f"--global-eval-every-s must be a positive number of seconds, got {v:g}; e.g. 2, or leave it out")


def chosen_policy_options(a: argparse.Namespace) -> dict | None:
    """``config.yaml``'s ``policy_options``: ``--library``'s options from the flags (None: it declares none)."""
    return entry_options(a, get_system(a.library).policy)


def policy_options(cfg: RunConfig) -> dict:
    """Constructor options of the run's policy (``config.yaml``'s ``policy_options`` -> :func:`rog.policies.make_policy`)."""
    return dict(cfg.sync.options or {})


def worker_compute_s(cfg: RunConfig, worker: int) -> float | None:
    """Worker ``worker``'s compute pacing target: ``compute_s x compute_ratios[worker]``; on ``--testbed hosts``
    its host's (``hosts.pacing``, :mod:`rog.experiment.host_pacing`; None: it computes at its own speed)."""
    pacing = (cfg.testbed.hosts or {}).get("pacing")
    if pacing:
        return pacing["workers"][worker]["compute_s"]
    base, ratios = cfg.device.compute_s, cfg.device.compute_ratios
    if base is None or not ratios:
        return base
    return float(base) * float(ratios[worker])
