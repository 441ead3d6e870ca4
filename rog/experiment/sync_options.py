"""run.py flags for per-worker compute speed and ADSP's scheduler, their checks, and what they resolve to.

* ``--compute-ratios 1,1,3``: worker ``k`` paces each iteration's compute to ``compute_s x ratio[k]``
  (ADSP's setting is compute heterogeneity; the paper's Fig. 1 runs three workers at 1:1:3).  A device
  profile may carry the same list (``compute_ratios``); the flag wins.
* ``--adsp-gamma-s`` / ``--adsp-epoch-s`` / ``--adsp-window-s`` / ``--adsp-floor-s``: check period,
  search epoch, search window and minimum commit interval (paper defaults 60 s, 20 min, 1 min, and
  the released code's 10 s), each multiplied by ``--adsp-time-scale`` (a run scaled to this
  machine's compute time scales them all by one factor); ``--adsp-rate K`` fixes the commit rate
  (no search), ``--adsp-mode code`` reproduces the released code's variant, ``--adsp-target-loss``
  sets the reward's target loss, ``--adsp-loss-every-s`` logs the global loss that often.
* ``--global-eval-every-s S`` (any system): the PS evaluates the global model every S seconds of run
  time (:mod:`rog.runtime.global_eval`); recorded as ``global_eval_every_s``.

Every bad value exits with one line naming the flag and the fix (:class:`OptionError`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any, Mapping

from ..policies.adsp import DEFAULT_EPOCH_S, DEFAULT_FLOOR_S, DEFAULT_GAMMA_S, DEFAULT_WINDOW_S
from ..options import add_option_flags, options_from
from ..policies.adacomm_adaptive import AdaptiveADACOMM
from ..policies.adsp_search import SEARCH_MODES
from ..policies.registry import run_options_of
from .atp import policy_options as atp_policy_options
from .run_config import RunConfig


class OptionError(ValueError):
    """A bad flag value; the message names the flag and the fix."""


def add_arguments(groups: Mapping[str, Any]) -> None:
    """Add the flags to run.py's argument groups by concern (``device``, ``synchronisation``, ``output``)."""
    p = groups["device"]
    p.add_argument("--compute-ratios", default=None,
                   help="per-worker compute time multiples, one per worker, e.g. 1,1,3 (default: all 1, or the profile's)")
    p = groups["synchronisation"]
    p.add_argument("--adsp-gamma-s", type=float, default=DEFAULT_GAMMA_S, help="ADSP check period Gamma in seconds (paper 60)")
    p.add_argument("--adsp-epoch-s", type=float, default=DEFAULT_EPOCH_S, help="ADSP search epoch in seconds (paper 1200)")
    p.add_argument("--adsp-window-s", type=float, default=DEFAULT_WINDOW_S, help="ADSP search window in seconds (paper 60)")
    p.add_argument("--adsp-floor-s", type=float, default=DEFAULT_FLOOR_S, help="ADSP minimum commit interval in seconds (code 10)")
    p.add_argument("--adsp-time-scale", type=float, default=1.0,
                   help="multiplies every ADSP time above (e.g. this machine's compute time / the paper's)")
    p.add_argument("--adsp-rate", type=int, default=None, help="ADSP: fix the commit rate (commits per check period; default: online search)")
    p.add_argument("--adsp-mode", choices=SEARCH_MODES, default="paper",
                   help="ADSP: paper (catch-up rule, no pauses) or code (the released code's variant)")
    p.add_argument("--adsp-target-loss", type=float, default=None,
                   help="ADSP: the reward's target loss (default: the first search window's last loss minus 10 %%)")
    p.add_argument("--adsp-loss-every-s", type=float, default=None, help="ADSP: also log the global loss this often (seconds)")
    add_option_flags(p, AdaptiveADACOMM.options, AdaptiveADACOMM.run_options, AdaptiveADACOMM.name)  # --adacomm-*
    p = groups["output"]
    p.add_argument("--global-eval-every-s", type=float, default=None,
                   help="any system: the PS evaluates the global model (loss, accuracy on a fixed held-out subset) "
                        "every this many seconds of run time (default: off)")


def parse_ratios(text: str | None, n_workers: int, source: str = "--compute-ratios") -> list[float] | None:
    """``"1,1,3"`` -> ``[1.0, 1.0, 3.0]`` (None: not given); one positive finite number per worker."""
    if text is None:
        return None
    items = [x.strip() for x in str(text).split(",")] if isinstance(text, str) else list(text)
    try:
        ratios = [float(x) for x in items]
    except (TypeError, ValueError):
        raise OptionError(f"{source}: {text!r} is not a comma-separated list of numbers; give one positive number "
                          f"per worker, e.g. {','.join(['1'] * max(n_workers - 1, 0) + ['3'])}") from None
    if len(ratios) != n_workers:
        raise OptionError(f"{source}: got {len(ratios)} ratio(s) for {n_workers} workers; give exactly one per worker "
                          f"(or change --workers)")
    bad = [x for x in ratios if not (x > 0 and math.isfinite(x))]
    if bad:
        raise OptionError(f"{source}: every ratio must be a positive number (a compute time multiple), got {bad[0]:g}; "
                          f"use e.g. 1 for the base speed and 3 for a worker three times slower")
    return ratios


def resolve_adsp(a: argparse.Namespace) -> dict:
    """The ADSP policy's options from the flags (times already multiplied by ``--adsp-time-scale``)."""
    scale = a.adsp_time_scale
    if not (scale > 0 and math.isfinite(scale)):
        raise OptionError(f"--adsp-time-scale must be a positive number, got {scale!r}; e.g. 0.1 for a run ten times faster")
    for flag, v, what in (("--adsp-gamma-s", a.adsp_gamma_s, "the check period Gamma; paper 60"),
                          ("--adsp-epoch-s", a.adsp_epoch_s, "the search epoch; paper 1200"),
                          ("--adsp-window-s", a.adsp_window_s, "the search window; paper 60")):
        if not (v > 0 and math.isfinite(v)):
            raise OptionError(f"{flag} must be a positive number of seconds ({what}), got {v:g}")
    if not (a.adsp_floor_s >= 0 and math.isfinite(a.adsp_floor_s)):
        raise OptionError(f"--adsp-floor-s must be a number of seconds >= 0 (the minimum commit interval), got {a.adsp_floor_s:g}")
    if a.adsp_rate is not None and a.adsp_rate < 1:
        raise OptionError(f"--adsp-rate must be an integer >= 1 (commits per check period), got {a.adsp_rate}; "
                          "leave it out for the online search")
    if a.adsp_loss_every_s is not None and not (a.adsp_loss_every_s > 0 and math.isfinite(a.adsp_loss_every_s)):
        raise OptionError(f"--adsp-loss-every-s must be a positive number of seconds, got {a.adsp_loss_every_s:g}")
    return dict(gamma_s=a.adsp_gamma_s * scale, epoch_s=a.adsp_epoch_s * scale, window_s=a.adsp_window_s * scale,
                floor_s=a.adsp_floor_s * scale, mode=a.adsp_mode, fixed_rate=a.adsp_rate,
                target_loss=a.adsp_target_loss, loss_every_s=a.adsp_loss_every_s, time_scale=scale)


def resolve_adacomm(a: argparse.Namespace) -> dict:
    """Adaptive ADACOMM's options from the flags (checked by its :class:`~rog.policies.adacomm_adaptive.Options`)."""
    return dataclasses.asdict(options_from(a, AdaptiveADACOMM.options, AdaptiveADACOMM.run_options))


def check_global_eval(a: argparse.Namespace) -> None:
    """``--global-eval-every-s``: a positive finite number of seconds, or left out."""
    v = getattr(a, "global_eval_every_s", None)
    if v is not None and not (v > 0 and math.isfinite(v)):
        raise OptionError(f"--global-eval-every-s must be a positive number of seconds, got {v:g}; e.g. 2, or leave it out")


def policy_options(cfg: RunConfig) -> dict:
    """Constructor options of the run's policy (``config.yaml`` -> :func:`rog.policies.make_policy`)."""
    section = run_options_of(cfg.sync.library)
    if section == "atp":
        return atp_policy_options(cfg)  # --budget-rule, --prefix-order (rog.experiment.atp)
    if section == "adacomm":
        return dict(cfg.sync.adacomm)  # --adacomm-period-s, --adacomm-shrink
    if section != "adsp":
        return {}
    opts = dict(cfg.sync.adsp)
    opts.pop("time_scale", None)
    return opts


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
