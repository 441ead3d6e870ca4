"""The typed run configuration: what :func:`rog.experiment.config.resolve` returns, what a run's
``config.yaml`` holds and what every layer reads by attribute (``cfg.<section>.<field>``).

:class:`RunConfig` is a frozen dataclass of one section per concern plus the per-mechanism entries ``stream`` and
``inject``.  Every field is one key of ``config.yaml`` under its own name (or ``metadata["key"]``; the workload's
own entries are flat keys), so :meth:`RunConfig.to_dict` gives back, key for key and in order, the dict
:meth:`RunConfig.from_dict` read; an older run's file is first brought to the current shape by
:func:`~rog.experiment.config_upgrade.upgrade_config`, and an unknown, missing or mistyped key raises a
:class:`~rog.errors.ConfigError` naming the file and the field.  Entries one mechanism checks where it resolves
its flags (``regime``, ``trace``, ``stream``, the options, ``compute_model``, ``flags``, ``hosts``, ...) are
mappings here.  A new flag is a field in its concern's section and a place in :data:`_KEYS`.  Imports only the
standard library and the engine: every layer may read a run's configuration.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

from rog.config_entries import KIND_WORDS, check_kind
from rog.errors import ConfigError
from rog.options import option
from rog.workloads.registry import WORKLOADS

from .config_upgrade import upgrade_config


# config.yaml's ``emulated`` entry holds ``tcp_slow_start_after_idle: off`` when run.py turned TCP's slow-start
# restart after idle off in the namespaces; absent, they kept the kernel's default (on), as every run before it
SLOW_START_KEY = "tcp_slow_start_after_idle"


def slow_start_after_idle(emulated: Optional[Mapping]) -> bool:
    """Whether a run's namespaces kept TCP's slow-start restart after idle (config.yaml's ``emulated`` entry)."""
    value = (emulated or {}).get(SLOW_START_KEY, "on")
    if value not in ("on", "off"):
        raise ConfigError(f"config.yaml: emulated.{SLOW_START_KEY}: expected 'on' or 'off', got {value!r}")
    return value == "on"


def _key(name: str) -> dict:
    """Field metadata: the field's ``config.yaml`` key is ``name`` (not the attribute's name)."""
    return {"key": name}


OPTIONAL = {"optional": True}  # a key absent from config.yaml reads as None (and None is written as absent)


@dataclass(frozen=True)
class Testbed:
    """Where the run's processes live: ``emulated`` (namespaces + tc), ``loopback`` or ``hosts``."""
    kind: str = field(metadata=_key("testbed"))  # what ran
    testbed_requested: str  # what was asked for
    fallback_reason: Optional[str]  # why emulated fell back to loopback (None: it did not)
    workers: int  # worker processes
    hosts: Optional[dict] = field(default=None, metadata=OPTIONAL)  # --testbed hosts: the real devices
    emulated: Optional[dict] = field(default=None, metadata=OPTIONAL)  # emulated: namespaces and addresses
    launcher: Optional[str] = field(default=None, metadata=OPTIONAL)  # local or fabric (set by the command)
    deploy: Optional[dict] = field(default=None, metadata=OPTIONAL)  # fabric: the weights shipped with the run


@dataclass(frozen=True)
class Links:
    """The replayed links: trace, replay, rate scaling, shaping and the transmission unit."""
    control: str  # outdoors, indoors, custom or none (unshaped)
    trace: Optional[dict]  # path, kind, sha256, duration_s, mean_mbit, samples (None: unshaped)
    replay_mode: Optional[str]  # recorded or artifact (None: no trace)
    time_scale: float  # wall seconds per trace second
    rate_scale: float  # factor on every trace rate
    worker_offsets_s: Optional[list]  # trace second each worker's replay starts at
    shape: str  # uplink or both directions
    cap_mbit: Optional[float]  # shared-channel cap at the PS: uplinks and downlinks together
    cap_applied: bool  # the cap is in force (emulated testbed only)
    rate_mbit: Optional[float]  # constant rate per link and direction
    link_delay_ms: float  # extra delay per transfer (0: none)
    regime: dict  # the quick regime's ratios and what was changed
    chunk_share: float  # chunk payload / full payload


@dataclass(frozen=True)
class Workload:
    """What is trained, on what data, for how long."""
    name: str = field(metadata=_key("workload"))  # quick or cruda (rog.workloads.registry)
    model: str  # rog.models name
    base_batch: int  # samples per mini-batch
    batch_multiple: int  # -b: mini-batches per iteration
    iterations: int  # per worker (with time_budget_s: a cap)
    time_budget_s: Optional[float]  # stop this long after links.ready (None: off)
    epoch: Optional[float]  # requested epochs (None: not asked)
    seed: int  # data, split, noise, sampling, the artifact replay's holds
    lr: float  # worker learning rate (constant over a quick run: the milestones at 800.. are not reached)
    momentum: float  # DEFSGDM's Nesterov momentum
    weight_decay: float
    eval_every: int  # worker 0 tests its model every this many iterations
    global_eval_every_s: Optional[float]  # the PS tests the global model this often (None: off)
    cache_dir: str  # pre-trained weights cache
    # the workload's own entries (WORKLOADS[name].entries, e.g. CRUDA's data files), flat keys of config.yaml
    entries: Optional[object] = field(default=None, metadata={"flat": True})


@dataclass(frozen=True)
class Sync:
    """The synchronisation system and its policy's options."""
    library: str  # BSP, SSP, FLOWN, ROG, ADSP, AdaComm, DDP, ...
    threshold: int  # staleness threshold
    # the policy's Options (rog.policies.<policy>.Options, its checks) as a mapping; None: it declares none
    options: Optional[dict] = field(metadata=_key("policy_options"))


@dataclass(frozen=True)
class PlanEntry:
    """``--schedule``: the computation/communication schedule and its re-planning period."""
    name: str
    epoch_iterations: Optional[int]  # None: one epoch


@dataclass(frozen=True)
class Schedule:
    """DynaComm's schedules and compute pacing's placement."""
    plan: Optional[PlanEntry] = field(metadata=_key("schedule"))
    pacing: str  # iteration or layer


@dataclass(frozen=True)
class Compression:
    """The gradient codec and the quick workload's data partition."""
    codec: str = field(metadata=_key("compression"))  # sign, none or topk
    # the codec's Options (rog.codecs.<codec>.Options, its checks) as a mapping; None: it declares none
    options: Optional[dict] = field(metadata=_key("compression_options"))
    partition: Optional[str]  # quick workload's partition (None: label_sorted)


@dataclass(frozen=True)
class Inject:
    """ScaDLES's data injection (alpha, beta, mode)."""
    alpha: float
    beta: float
    mode: str


@dataclass(frozen=True)
class Device:
    """Where workers compute and how their compute is paced."""
    device: str  # cpu or cuda:N (hosts: the request)
    device_requested: str
    profile: str  # workers' device profile
    ps_profile: str  # the parameter server's device profile
    compute_s: Optional[float]  # pacing target per iteration (None: off)
    compute_ratios: Optional[list]  # per-worker factors on compute_s
    compute_model: Optional[dict]  # per-pass pacing model


@dataclass(frozen=True)
class FaultOptions:
    """``faults``: surviving broken links, worker restarts and PS restarts (run.py's flags of the same names)."""
    evict_after_s: float = option(60.0, "a worker whose link broke still counts in the staleness gate this long, then "
                                  "it is evicted (warning event) so the others continue; it may rejoin later; 0 = at once",
                                  flag="--evict-after-s")
    ps_checkpoint_every_s: float = option(60.0, "the parameter server checkpoints its state (<run>/ps-checkpoints/) "
                                          "every this many seconds, so it can be restarted with --resume-ps; 0 = never",
                                          flag="--ps-checkpoint-every-s")
    reconnect_timeout_s: float = option(600.0, "a worker whose link broke reconnects with backoff for up to this long; "
                                        "0 = a broken link ends the worker", flag="--reconnect-timeout-s")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (value >= 0 and math.isfinite(value)):
                raise ConfigError(f"{f.metadata['flag']} must be a number of seconds >= 0, got {value:g}; e.g. "
                                  f"{f.default:g} (the default)")


@dataclass(frozen=True)
class CheckpointOptions:
    """``checkpoint``: the models the workers hold (rog.checkpoint, in ``<run>/checkpoints/``)."""
    every_s: float  # the period before scaling (0: at the start and the end only)
    triple_every: int  # the period triples after every this many checkpoints
    time_scale: float  # the period is scaled like trace time
    workers: list  # the workers that write checkpoints


@dataclass(frozen=True)
class Faults:
    """Fault tolerance and checkpoints."""
    faults: FaultOptions
    checkpoint: CheckpointOptions


@dataclass(frozen=True)
class Output:
    """The run's identity and its labels for the analysis."""
    version: int  # config.yaml's shape (rog.experiment.config_upgrade.CONFIG_VERSION)
    run_id: str
    item: Optional[str]  # evaluation item
    note: str
    flags: Optional[dict]  # every run.py flag set, by long name
    run_semantics: int


SECTIONS = ("testbed", "links", "workload", "sync", "schedule", "compression", "device", "faults", "output")
ENTRIES = ("stream", "inject")  # one mechanism's entry each, at the top level

# config.yaml's keys in the order resolve_config writes them (launcher and deploy come later; a workload's own
# entries after ``workload``: key_order)
_KEYS = (
    "version", "testbed", "testbed_requested", "fallback_reason", "library", "device", "device_requested", "threshold",
    "policy_options", "workers", "iterations", "time_budget_s", "epoch", "batch_multiple", "base_batch", "seed",
    "control", "item", "trace", "replay_mode", "time_scale", "rate_scale", "worker_offsets_s", "shape", "cap_mbit",
    "cap_applied", "rate_mbit", "link_delay_ms", "compute_s", "compute_ratios", "compute_model", "stream", "schedule",
    "pacing", "run_semantics", "profile", "ps_profile", "regime", "compression", "compression_options", "partition",
    "inject", "chunk_share", "lr", "momentum", "weight_decay", "eval_every", "global_eval_every_s", "faults",
    "checkpoint", "model", "workload", "note", "flags", "cache_dir", "hosts", "emulated", "run_id", "launcher", "deploy",
)


def key_order() -> tuple:
    """config.yaml's keys in write order, with every registered workload's own entries after ``workload``."""
    own = dict.fromkeys(f.name for _, w in WORKLOADS.items() if w.entries for f in dataclasses.fields(w.entries))
    i = _KEYS.index("workload") + 1
    return (*_KEYS[:i], *own, *_KEYS[i:])


KEY_ORDER = key_order()  # the workloads registered at import


def _key_of(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


@functools.lru_cache(maxsize=None)
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _describe(hint) -> str:
    if typing.get_origin(hint) is typing.Union:  # Optional[...] annotations: Python 3.8 has no X | Y
        return " or ".join(_describe(h) for h in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if dataclasses.is_dataclass(hint):
        return "a mapping of " + ", ".join(_key_of(f) for f in dataclasses.fields(hint))
    return KIND_WORDS.get(hint, str(hint))


def _convert(value, hint, where: str):
    """``value`` checked against ``hint`` (nested sections built); raises ConfigError naming ``where``."""
    args, desc = typing.get_args(hint), _describe(hint)
    if args and type(None) in args:
        if value is None:
            return None
        rest = [h for h in args if h is not type(None)]
        hint = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected {desc}, got {value!r}")
        return _build(hint, value, where + ".", nested=True)
    check_kind(value, hint, where, desc)
    return copy.deepcopy(dict(value) if isinstance(value, Mapping) else value)


def _build(cls, d: Mapping, prefix: str, nested: bool = False):
    """A ``cls`` from the keys of ``d`` its fields name (nested: ``d`` must hold exactly them)."""
    hints, kw = _hints(cls), {}
    for f in dataclasses.fields(cls):
        key = _key_of(f)
        if f.metadata.get("flat"):  # the workload's own entries: flat keys of config.yaml
            kw[f.name] = _workload_entries(d, prefix)
            continue
        if key not in d:
            if f.metadata.get("optional"):
                kw[f.name] = None
                continue
            raise ConfigError(f"{prefix}{key}: missing (re-create the run with scripts/run.py)")
        if f.metadata.get("optional") and d[key] is None:
            raise ConfigError(f"{prefix}{key}: null; leave the entry out instead")
        kw[f.name] = _convert(d[key], hints[f.name], f"{prefix}{key}")
    if nested:
        extra = [k for k in d if k not in {_key_of(f) for f in dataclasses.fields(cls)}]
        if extra:
            raise ConfigError(f"{prefix}{extra[0]}: unknown field (known: "
                              f"{', '.join(_key_of(f) for f in dataclasses.fields(cls))})")
    try:
        return cls(**kw)
    except ConfigError as e:  # an options section's own check (FaultOptions): name the file and the section
        raise ConfigError(f"{prefix.rstrip(': .')}: {e}") from None


def _workload_entries(d: Mapping, prefix: str):
    """The ``WORKLOADS[d["workload"]].entries`` of ``d``'s flat keys (None: it has none); another workload's key
    raises ConfigError."""
    name = d.get("workload")
    own = WORKLOADS[name].entries if name in WORKLOADS else None
    for other, w in WORKLOADS.items():
        stray = [f.name for f in dataclasses.fields(w.entries) if f.name in d] if w.entries not in (None, own) else []
        if stray:
            raise ConfigError(f"{prefix}{stray[0]}: the {other} entries go with workload: {other} (workload is {name!r})")
    return _build(own, d, prefix) if own else None


def _flatten(obj, out: dict) -> dict:
    """The ``config.yaml`` keys of a section (a workload's entries flat, nested options as dicts)."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.metadata.get("flat") and value is not None:
            _flatten(value, out)
        elif value is None and (f.metadata.get("optional") or f.metadata.get("flat")):
            continue
        else:
            out[_key_of(f)] = _plain(value)
    return out


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {_key_of(f): _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return copy.deepcopy(value)


@dataclass(frozen=True, eq=False)
class RunConfig:
    """A run's resolved configuration (``config.yaml``), one section per concern; see the module doc."""
    testbed: Testbed
    links: Links
    workload: Workload
    sync: Sync
    schedule: Schedule
    compression: Compression
    device: Device
    faults: Faults
    output: Output
    stream: Optional[dict]  # ScaDLES streaming (None: off; rog.experiment.stream_options)
    inject: Optional[Inject]  # ScaDLES data injection (None: off)
    _flat: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        flat = {}
        for name in SECTIONS:
            _flatten(getattr(self, name), flat)
        for name in ENTRIES:
            flat[name] = _plain(getattr(self, name))
        order = {k: i for i, k in enumerate(key_order())}
        object.__setattr__(self, "_flat", {k: flat[k] for k in sorted(flat, key=lambda k: order[k])})

    @classmethod
    def from_dict(cls, d: Mapping, source: str = "config.yaml") -> RunConfig:
        """The RunConfig of a ``config.yaml`` dict; an unknown, missing or mistyped key raises
        :class:`~rog.errors.ConfigError` naming ``source`` and the field."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"{source}: expected a mapping of configuration keys, got {type(d).__name__}")
        d = upgrade_config(d)  # an older run's config.yaml, in the current shape (rog.experiment.config_upgrade)
        known = key_order()
        unknown = [k for k in d if k not in known]
        if unknown:
            raise ConfigError(f"{source}: {unknown[0]}: unknown field (re-create the run with scripts/run.py)")
        prefix = f"{source}: "
        hints = _hints(cls)
        kw = {name: _build(hints[name], d, prefix) for name in SECTIONS}
        for name in ENTRIES:
            if name not in d:
                raise ConfigError(f"{prefix}{name}: missing (re-create the run with scripts/run.py)")
            kw[name] = _convert(d[name], hints[name], prefix + name)
        return cls(**kw)

    def to_dict(self) -> dict:
        """The ``config.yaml`` dict (a fresh copy: same keys, values and order as :meth:`from_dict` read)."""
        return copy.deepcopy(self._flat)

    def replace(self, **entries) -> RunConfig:
        """A copy with some ``config.yaml`` entries set (e.g. ``launcher="fabric"``), checked again."""
        return RunConfig.from_dict({**self._flat, **entries}, source="run configuration")

    def __eq__(self, other) -> bool:
        if isinstance(other, RunConfig):
            return self._flat == other._flat
        return NotImplemented

    __hash__ = None
