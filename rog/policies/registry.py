"""Name -> policy class.  Adding a system = one new module + one line in ``POLICIES``."""

from __future__ import annotations

import inspect

from .adacomm import ADACOMM
from .adsp import ADSP
from .base import Policy
from .bsp import BSP
from .flown import FLOWN
from .rog import ROG
from .ssp import SSP

POLICIES: dict[str, type[Policy]] = {
    "BSP": BSP,
    "SSP": SSP,
    "FLOWN": FLOWN,
    "ROG": ROG,
    "ADSP": ADSP,
    "ADACOMM": ADACOMM,
}


def make_policy(name: str, threshold: int | None = None, **options) -> Policy:
    """Build a policy by (case-insensitive) name; ``threshold=None`` takes the class's ``default_threshold``.

    Defaults: BSP 0, SSP 4, FLOWN 4, ROG 4, ADSP 0 (none), ADACOMM 40 (tau).  ``options`` go to the class's constructor
    (e.g. ``max_concurrent`` for FLOWN, ``initial_budget_s`` for ROG).
    """
    key = str(name).strip().upper()
    if key not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")
    cls = POLICIES[key]
    params = inspect.signature(cls).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        known = sorted(p for p in params if p != "threshold")
        raise ValueError(f"policy {key} does not take option(s) {unknown}; it takes {known or 'none'}")
    if threshold is None:
        threshold = getattr(cls, "default_threshold", 0)
    return cls(threshold=threshold, **options)
