"""ROG's ATP choices of a run: the command-line flags, their ``config.yaml`` entry, the policy options.

``--budget-rule artifact|mandatory`` (:mod:`rog.policies.budget`) and ``--prefix-order
artifact|importance`` (:mod:`rog.policies.rog`) are recorded under ``atp`` in ``config.yaml`` for ROG
runs (``None`` for the other systems, which have no speculative budget); the parameter server and
every worker build their policy with :func:`policy_options` of that entry, so both ends agree.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..policies.budget import BUDGET_RULES
from ..policies.registry import run_options_of
from ..policies.rog import PREFIX_ORDERS
from .run_config import RunConfig

__all__ = ["add_atp_arguments", "atp_config", "policy_options", "LEGACY_ATP"]

# what ROG ran before config.yaml recorded these choices (a config without an ``atp`` entry)
LEGACY_ATP = dict(budget_rule="mandatory", prefix_order="importance")


def add_atp_arguments(groups: Mapping[str, Any]) -> None:
    """Add ``--budget-rule`` and ``--prefix-order`` to run.py's ``atp`` argument group."""
    p = groups["atp"]
    p.add_argument("--budget-rule", choices=BUDGET_RULES, default=BUDGET_RULES[0],
                   help="ROG's speculative budget: artifact (default: as the original ran it, whole transmission "
                        "times, 0 within two transmission steps of the slowest) or mandatory (mandatory-part times, "
                        "0 when tied with the slowest push count); see docs/atp.md")
    p.add_argument("--prefix-order", choices=PREFIX_ORDERS, default=PREFIX_ORDERS[0],
                   help="ROG's mandatory prefix: artifact (default: the MTA share by importance, then the extra "
                        "share as the first rows by tensor magnitude) or importance (all of it by importance)")


def atp_config(library: str, budget_rule: str = BUDGET_RULES[0], prefix_order: str = PREFIX_ORDERS[0]) -> dict | None:
    """The ``atp`` entry of ``config.yaml``: the choices for ROG, None for a system without ATP."""
    if run_options_of(library) != "atp":  # a system without ROG's speculative budget
        return None
    if budget_rule not in BUDGET_RULES:
        raise ValueError(f"--budget-rule must be one of {', '.join(BUDGET_RULES)}, got {budget_rule!r}")
    if prefix_order not in PREFIX_ORDERS:
        raise ValueError(f"--prefix-order must be one of {', '.join(PREFIX_ORDERS)}, got {prefix_order!r}")
    return dict(budget_rule=budget_rule, prefix_order=prefix_order)


def policy_options(cfg: RunConfig) -> dict:
    """Constructor options of the run's policy (``make_policy(library, threshold, **options)``)."""
    if run_options_of(cfg.sync.library) != "atp":
        return {}
    atp = cfg.atp
    return dict(LEGACY_ATP) if atp is None else dict(budget_rule=atp.budget_rule, prefix_order=atp.prefix_order)
