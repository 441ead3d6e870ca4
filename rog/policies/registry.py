"""The systems the toolkit runs: name -> policy class, plus the reference baselines with their own runtime.

Adding a synchronisation system = one new module + one line in ``POLICIES`` (a :class:`rog.registry.Registry`:
an unknown name or a name registered twice is an error naming the choices).  Everything that names
systems derives from here: ``scripts/run.py --library`` choices and default thresholds, the run ids
(:func:`run_id_system`), the evaluation items' planned runs, and the figures' and summaries' labels
(:func:`system_label`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from rog.registry import Registry

from .adacomm import ADACOMM
from .adacomm_adaptive import AdaptiveADACOMM
from .adsp import ADSP
from .base import Policy
from .bsp import BSP
from .flown import FLOWN
from .rog import ROG
from .ssp import SSP

POLICIES: Registry = Registry("policy", [  # names in upper case (--library upper-cases what it is given)
    ("BSP", BSP),
    ("SSP", SSP),
    ("FLOWN", FLOWN),
    ("ROG", ROG),
    ("ADSP", ADSP),
    ("ADACOMM", ADACOMM),
    ("ADAPTIVE_ADACOMM", AdaptiveADACOMM),
])


@dataclass(frozen=True)
class System:
    """One system ``--library`` can name: a policy over the toolkit's runtime, or a reference baseline."""

    name: str
    policy: type[Policy] | None  # None: a reference baseline with its own runtime
    default_threshold: int  # what a bare name means
    fixed_threshold: bool  # the threshold is part of the system: run ids and labels omit it
    threshold_in_label: bool  # labels name the threshold (SSP-4, ROG-20)
    reference: bool = False  # measured against an item's target, never setting it
    about: str = ""


# Reference baselines: what a user would otherwise pick, run by their own runtime (rog.baselines).
REFERENCE_BASELINES: Registry = Registry("reference baseline", [
    ("DDP", System("DDP", None, default_threshold=0, fixed_threshold=True, threshold_in_label=False, reference=True,
                   about="torch DistributedDataParallel over gloo, float32 all-reduce (rog.baselines.ddp)")),
])


def _from_policy(name: str, cls: type[Policy]) -> System:
    doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
    return System(name, cls, default_threshold=int(getattr(cls, "default_threshold", 0)),
                  fixed_threshold=bool(getattr(cls, "fixed_threshold", False)),
                  threshold_in_label=bool(getattr(cls, "threshold_in_label", True)), about=doc)


def systems() -> dict[str, System]:
    """Every system, in order: the policies as registered, then the reference baselines."""
    out = {name: _from_policy(name, cls) for name, cls in POLICIES.items()}
    out.update((name, s) for name, s in REFERENCE_BASELINES.items() if name not in out)
    return out


def run_options_of(name: str) -> str | None:
    """The prefix of the run.py flags of the system's policy's options (:attr:`Policy.run_options`), or None."""
    return getattr(get_system(name).policy, "run_options", None)

def segmented_systems() -> tuple[str, ...]:
    """The systems a layer-segment schedule (``--schedule``) can run: their policy's
    :attr:`~rog.policies.base.Policy.segmented_schedules` (BSP, SSP)."""
    return tuple(n for n, cls in POLICIES.items() if getattr(cls, "segmented_schedules", False) and not cls.local_steps)


def has_own_runtime(name: str) -> bool:
    """A reference baseline run by its own runtime (``rog.baselines``), not by the toolkit's engine."""
    return get_system(name).policy is None


def engine_systems() -> tuple[str, ...]:
    """The systems the toolkit's engine runs (every one but the reference baselines with their own runtime)."""
    return tuple(n for n in systems() if not has_own_runtime(n))


def system_names() -> tuple[str, ...]:
    """The names ``--library`` accepts (upper case), in :func:`systems` order."""
    return tuple(systems())


def get_system(name: str) -> System:
    """The system named ``name`` (case-insensitive); ValueError naming the choices if unknown."""
    key = str(name).strip().upper()
    every = Registry("system", systems().items())
    if key not in every:
        raise every.unknown(name)
    return every[key]


def resolve_threshold(name: str, threshold: int | None) -> int:
    """The threshold a run of ``name`` uses (``None``: the system's default); a policy checks it (BSP: 0 only)."""
    system = get_system(name)
    if system.policy is not None:
        return make_policy(system.name, threshold).threshold
    return system.default_threshold if threshold is None else int(threshold)


def run_id_system(name: str, threshold: int) -> str:
    """The system part of a run id: ``BSP``, ``DDP``, ``SSP4``, ``ROG20``, ``FLOWN4`` (unknown names: with the
    threshold)."""
    system = systems().get(str(name).upper())
    return str(name) if system is not None and system.fixed_threshold else f"{name}{threshold}"


def label_names_threshold(name: str) -> bool:
    """Whether :func:`system_label` names the threshold of system ``name`` (unknown names: yes)."""
    system = systems().get(str(name).upper())
    return system is None or (system.threshold_in_label and not system.fixed_threshold)


def system_label(name: str, threshold: int | None) -> str:
    """The label of figures, summaries and the items: ``BSP``, ``SSP-4``, ``ROG-20``, ``FLOWN``, ``DDP``."""
    return f"{name}-{threshold}" if threshold is not None and label_names_threshold(name) else str(name)


def reference_systems() -> tuple[str, ...]:
    """The reference baselines' names (measured against an item's target, never setting it)."""
    return tuple(name for name, s in systems().items() if s.reference)


def make_policy(name: str, threshold: int | None = None, **options) -> Policy:
    """Build a policy by (case-insensitive) name; ``threshold=None`` takes the class's ``default_threshold``.

    Defaults: BSP 0, SSP 4, FLOWN 4, ROG 4, ADSP 0 (none), ADACOMM 40 (tau).  ``options`` go to the class's constructor
    (e.g. ``max_concurrent`` for FLOWN, ``initial_budget_s`` for ROG).
    """
    key = str(name).strip().upper()
    if key not in POLICIES:
        raise POLICIES.unknown(name)
    cls = POLICIES[key]
    params = inspect.signature(cls).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        known = sorted(p for p in params if p != "threshold")
        raise ValueError(f"policy {key} does not take option(s) {unknown}; it takes {known or 'none'}")
    if threshold is None:
        threshold = getattr(cls, "default_threshold", 0)
    return cls(threshold=threshold, **options)
