"""The evaluation items as data and the run plan (scripts/run_items.py; its skip/resume decisions: :mod:`.resume`).

Each reproduced paper's items are built in its home (``rog/papers/<paper>/``) and reach :data:`ITEMS`
through :data:`PAPER_ITEMS` (module paths); ROG's five make the default plan (:data:`ITEM_NAMES`).

An item is a named set of runs compared under one wall-clock budget ("given the same training
time", as the paper compares).  Runs are identified by the folder name ``scripts/run.py`` gives
them (:func:`run_id`, the same rule), so a run shared by two items (ROG-4 at batch x1 with 4 workers
in artifact mode is in ``outdoors``, ``batch``, ``threshold`` and ``workers``) runs once.

Budgets are per item (:meth:`Profile.budget_for`): the end-to-end item needs the longest (its
accuracy curves must rise well clear of the test set's noise before a common target means
anything), the stall and replay-mode comparisons are per-iteration means that a shorter budget
already measures.  A run shared by items with different budgets runs for the longest of them
(:attr:`PlannedRun.budget_s`); the analysis reads it over each item's own budget (its first
``budget_s`` seconds: ``rog.analysis.load.clip_run``), so every run of an item is compared over the
same training time.

Resume (:mod:`.resume`): a run folder with ``DONE`` whose ``config.yaml`` is, entry for entry, the one
the planned run's ``scripts/run.py`` child would write (its :func:`run_args` parsed and resolved by run.py's
own code) is skipped; any other existing folder is moved aside and the run starts again from scratch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Iterable, Sequence

from rog.options import OptionValues, flag_text
from rog.paper_homes import entries as paper_entries
from rog.paper_horizons import QUICK_E2E_BUDGET_S
from rog.policies.registry import has_own_runtime, resolve_threshold, run_id_system, system_label
from rog.registry import RefusedEntryError, Registry, check_module_path

__all__ = ["RunSettings", "RunSpec", "Item", "Profile", "PROFILES", "ITEM_NAMES", "items_for", "plan_runs", "run_id", "run_args",
           "estimate_run_s", "estimate_plan_s", "DEADLINE_S", "item_budgets", "PlannedRun", "MODULE_ITEMS", "PAPER_ITEMS",
           "paper_item_modules", "parse_seeds", "module_item_seeds"]

DEADLINE_S = 3600.0  # `bash scripts/run_all.sh` with no arguments must end within this
# Measured on this 2-core machine (quick profile, emulated testbed, Fabric launcher, budget 70 s, the
# default plan of 2026-11-22): whole runs took 103-118 s with 4 workers (median 114), 128-136 s with 6
# and 143-144 s with 8.  Beyond the budget: namespaces, sshd and the deployment (a few seconds), every
# worker's interpreter, torch import and optimizer imports before the go (about 7 s of CPU per worker on
# 2 cores, hence the per-worker term), the last iteration and the final flush, then stop, collect,
# tracking, energy and manifest.  DDP's last iteration can run far past the budget (not modelled).
STARTUP_S = 9.0  # per run, fixed part of the start-up and tear-down
STARTUP_PER_WORKER_S = 7.5  # per run and worker
TAIL_S = 6.0  # the budget ends mid-iteration: the last iteration and the final flush
# DDP's iterations are long on shaped links (88 s artifact, 17 s recorded, quick profile): the one in
# flight at the budget's end runs to completion (measured 106 and 25 s past the budget + start-up)
DDP_TAIL_S = 65.0
CKPT_TEST_START_S = 15.0  # test_checkpoints.py: torch import and the test set, once per call
CKPT_TEST_EACH_S = 0.10  # per checkpoint tested (quick model, 1,436 noisy test images: 1,864 in 190 s measured)
CKPT_TRIPLE_EVERY = 20  # run.py --checkpoint-triple-every default: the period triples after this many
POST_S = 90.0  # summary and figures


@dataclass(frozen=True)
class RunSettings:
    """run.py settings an item varies beyond :class:`RunSpec`'s own fields, typed (None: run.py's default);
    each field is the run.py flag of its name (``compute_ratios``: ``--compute-ratios``), rendered by :meth:`argv`."""

    compute_s: float | None = None  # --compute-s: paced compute per iteration
    compute_ratios: tuple[float, ...] | None = None  # --compute-ratios: worker k paces to compute_s x ratio k
    global_eval_every_s: float | None = None  # --global-eval-every-s: the PS tests the global model this often
    rate_mbit: float | None = None  # --rate-mbit: a constant rate per link and direction
    link_delay_ms: float | None = None  # --link-delay-ms: extra delay per transfer
    quick_model: str | None = None  # --quick-model
    partition: str | None = None  # --partition
    pacing: str | None = None  # --pacing: iteration or layer
    schedule: str | None = None  # --schedule (DynaComm's schedules)
    compression: str | None = None  # --compression: the codec (its options: RunSpec.options)
    trace_format: str | None = None  # --trace-format of a user trace (--traces)

    def argv(self) -> list[str]:
        """``--<field> <value>`` for every field set (:func:`rog.options.flag_text`)."""
        return [a for f in fields(self) if getattr(self, f.name) is not None
                for a in ("--" + f.name.replace("_", "-"), flag_text(getattr(self, f.name)))]


@dataclass(frozen=True)
class RunSpec:
    """One run of ``scripts/run.py``: what the items vary; everything else comes from the profile."""

    library: str  # a system of rog.policies.registry: BSP, SSP, FLOWN, ROG, DDP, ...
    threshold: int | None = None  # staleness threshold (None: the system's default)
    replay_mode: str = "artifact"  # artifact (the original's holds) or recorded
    batch_multiple: int = 1
    workers: int = 4
    control: str = "outdoors"  # outdoors/indoors, or "custom" for a user trace (--traces)
    trace: str | None = None  # a user trace file (--traces DIR); None: the control's default trace
    seed: int = 0
    settings: RunSettings = RunSettings()  # run.py settings beyond the fields above (the adsp item: pacing, links)
    options: tuple[OptionValues, ...] = ()  # mechanisms' options (rog.options.option_values: ADSP's, Top-k's, ...)
    tag: str = ""  # run.py -n: tells apart runs that differ only in ``settings`` or ``options``
    Settings: ClassVar[type] = RunSettings  # for the paper item modules, which get this class only (``items()``)

    def flags(self) -> list[str]:
        """run.py's flags for ``settings`` and ``options`` (what :func:`run_args` adds to the run's own)."""
        return self.settings.argv() + [a for o in self.options for a in o.argv()]

    def option(self, prefix: str, name: str, default: Any = None) -> Any:
        """The value ``options`` gives field ``name`` of the mechanism whose flags' prefix is ``prefix``."""
        return next((o.get(name, default) for o in self.options if o.prefix == prefix), default)

    @property
    def resolved_threshold(self) -> int:
        return resolve_threshold(self.library, self.threshold)

    @property
    def system(self) -> str:
        """The label of the figures and the summary: BSP, DDP, SSP-4, ROG-20, FLOWN, ..."""
        return system_label(self.library, self.resolved_threshold)

    @property
    def note(self) -> str:
        """run.py's ``-n``: the tag, and the trace's stem when a user trace is replayed (one run id per trace)."""
        parts = [self.tag] if self.tag else []
        if self.trace is not None:
            parts.append(_safe(Path(self.trace).stem))
        return "-".join(parts)


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def run_id(spec: RunSpec, workload: str = "quick") -> str:
    """The folder name ``scripts/run.py`` gives this run (its ``run_id`` rule, checked by a test)."""
    parts = [run_id_system(spec.library, spec.resolved_threshold), spec.control]
    if spec.control != "none":
        parts.append(spec.replay_mode)
    if workload != "quick":
        parts.append(workload)
    rid = "-".join(parts) + f"-b{spec.batch_multiple}-w{spec.workers}-seed{spec.seed}"
    return f"{rid}-{spec.note}" if spec.note else rid


@dataclass(frozen=True)
class Item:
    """A named evaluation item: its runs (in order) and what it shows."""

    name: str
    runs: tuple[RunSpec, ...]
    about: str


@dataclass(frozen=True)
class Profile:
    """How every run of a profile is made: workload, budget per run, checkpoint period, extra run.py flags."""

    name: str
    workload: str  # run.py --workload
    budget_s: float  # equal wall-clock budget of every run of an item (seconds from links.ready), by default
    checkpoint_every_s: float  # run.py --checkpoint-every-s (trace seconds; x the trace time scale on the wall)
    ckpt_wall_s: float  # about how often a checkpoint is written on the wall clock (for the estimate)
    extra: tuple[str, ...] = ()
    item_budget_s: tuple[tuple[str, float], ...] = ()  # (item, budget) pairs that differ from budget_s

    def budget_for(self, item: str, override_s: float | None = None) -> float:
        """The budget of every run of ``item`` (``name`` or ``name:trace``); ``override_s`` (run_items.py
        --budget-s) gives every item the same one."""
        if override_s is not None:
            return float(override_s)
        return float(dict(self.item_budget_s).get(item.split(":", 1)[0], self.budget_s))


# quick: the 60-minute default.  24 distinct runs (see ITEMS): the end-to-end item's 7 runs in artifact
# mode get OUTDOORS_BUDGET_S, every other item SHORT_BUDGET_S; + start-up, checkpoint tests, summary and
# figures = the estimate printed by --dry-run (the one figure for the plan's duration; its constants measured on a
# 2-core machine: 150 s runs took 188-191 s, DDP 248 s, 40 s runs 71-102 s).  Why not one budget for all: at 70 s each (about the
# most one budget for all 24 runs fits in the hour) the end-to-end runs did about 15 BSP iterations;
# every system crossed the common target within 8-10 of them, so worker 0's first iteration over the
# fade at its trace offset (10-20 s, the mandatory MTA push at 13 kbit/s for ROG) was 37-55 % of every
# time to target, and on two of three seeds the whole rise in 70 s (2.0-2.6 points) was about two
# standard errors of the test set.  The per-iteration comparisons (stall, time per iteration; the
# worker, batch and replay-mode items) are means over iterations and need no such length.  full: CRUDA
# (ConvMLP-M, 224 px) is about 20x slower per iteration on this CPU and is meant for real devices; its
# budget is the paper's scale (its estimate is printed, it does not fit 60 minutes here).
# The reproduced papers' items (rog/papers/<paper>/, docs/architecture.md): name -> the module that builds
# them, by dotted path, from the one registry of paper homes (rog.paper_homes: the experiment layer never imports
# rog.papers; a path not in the tree is refused when this registry is built).  Such a module has ``items(RunSpec, Item) -> {name: Item}`` and
# ``QUICK_BUDGETS_S`` ((item, budget s) pairs of the quick profile; the others take its ``budget_s``) and,
# optionally, ``DEFAULT_ITEMS`` (its items in the default plan), ``FULL_BUDGETS_S`` and
# ``plan_lines(items, budgets_s, profile) -> [str]`` (printed by --dry-run).  Every other item is opt-in
# by name (the adsp, long and compare items would push the default plan past DEADLINE_S).
PAPER_ITEMS: Registry = Registry("paper items module", paper_entries("plan_items"), check=check_module_path)


def paper_item_modules() -> dict[str, ModuleType]:
    """Name -> the imported module of every :data:`PAPER_ITEMS` entry, in order."""
    return {name: importlib.import_module(path) for name, path in PAPER_ITEMS.items()}


def _paper_budgets(attr: str) -> tuple[tuple[str, float], ...]:
    return tuple(pair for mod in paper_item_modules().values() for pair in getattr(mod, attr, ()))


OUTDOORS_BUDGET_S = QUICK_E2E_BUDGET_S  # 150 s, shared with the long item's reading (rog.paper_horizons)
SHORT_BUDGET_S = 40.0
PROFILES: dict[str, Profile] = {
    # a checkpoint every 2 s on the wall (8 trace seconds x time scale 0.25): a target crossing is
    # read to a few seconds, not to the 8 s between tests a coarser period gives
    "quick": Profile("quick", "quick", budget_s=SHORT_BUDGET_S, checkpoint_every_s=8.0, ckpt_wall_s=2.0,
                     item_budget_s=_paper_budgets("QUICK_BUDGETS_S")),
    "full": Profile("full", "cruda", budget_s=1800.0, checkpoint_every_s=60.0, ckpt_wall_s=60.0,
                    item_budget_s=_paper_budgets("FULL_BUDGETS_S")),
}


def _check_item(name: str, item: Item, registry: Registry) -> None:
    if not isinstance(item, Item) or item.name != name:
        raise RefusedEntryError(f"item {name!r}: the entry must be an Item named {name!r}; got {item!r}")
    if name in globals().get("MODULE_ITEMS", ()):
        raise RefusedEntryError(f"item {name!r} is already a module item (MODULE_ITEMS); pick another name")


def _check_module_item(name: str, module: str, registry: Registry) -> None:
    """A module item names a module that is in the tree (``python -m <module>`` runs it): never skipped later."""
    if name in globals().get("ITEMS", ()):
        raise RefusedEntryError(f"module item {name!r} is already an item (ITEMS); pick another name")
    check_module_path(name, module, registry)


# Items run by their own module rather than as scripts/run.py runs (rog.paper_homes; rog.experiment.module_item);
# opt-in by name (never in the default plan).
MODULE_ITEMS: Registry = Registry("module item", paper_entries("module_items"), check=_check_module_item)
# The items of the plan, each paper's in PAPER_ITEMS order (rog.registry.Registry: a name registered twice is an error).
ITEMS: Registry = Registry("item", check=_check_item)
for _mod in paper_item_modules().values():
    ITEMS.update(_mod.items(RunSpec, Item))
ITEM_NAMES = tuple(name for _mod in paper_item_modules().values() for name in getattr(_mod, "DEFAULT_ITEMS", ()))  # the default plan


def items_for(names: Sequence[str] | None, traces: Sequence[Path] | None = None,
              seeds: Sequence[int] | None = None, trace_format: str | None = None) -> list[Item]:
    """The items named (default: all, in :data:`ITEM_NAMES` order); with ``traces``, every run once per
    trace file (control ``custom``, run id suffixed with the trace's stem); with ``seeds``, every run
    once per seed (run ids end in ``-seed<n>``).  One item per replica (trace x seed), named
    ``<item>:<trace stem>:seed<n>`` (the parts present); ``trace_format`` is passed on as run.py's
    ``--trace-format`` (None: each file's format is detected from its content)."""
    names = list(names) if names else list(ITEM_NAMES)
    unknown = [n for n in names if n not in ITEMS and n not in MODULE_ITEMS]
    if unknown:
        from rog.cli_parser import closest

        known = tuple(ITEMS) + tuple(MODULE_ITEMS)
        raise ValueError(f"unknown item {unknown[0]!r}{closest(unknown[0], known)} (the items: {', '.join(known)}; "
                         "run_all.sh --help lists them)")
    chosen = [ITEMS[n] for n in dict.fromkeys(names) if n in ITEMS]
    if traces:
        chosen = [Item(f"{it.name}:{_safe(Path(t).stem)}",
                       tuple(replace(r, control="custom", trace=str(t),
                                     settings=replace(r.settings, trace_format=trace_format)) for r in it.runs),
                       f"{it.about}; trace {Path(t).name}") for it in chosen for t in traces]
    if seeds:
        own = [(it.name, sorted({r.seed for r in it.runs})) for it in chosen if len({r.seed for r in it.runs}) > 1]
        if own:
            name, its = own[0]
            raise ValueError(f"--seeds: item {name!r} runs its own seeds ({', '.join(map(str, its))}: the seeds its rule "
                             f"names); --seeds would run every one of its runs on each given seed instead: run {name} "
                             "without --seeds")
        chosen = [Item(f"{it.name}:seed{s}", tuple(replace(r, seed=int(s)) for r in it.runs), f"{it.about}; seed {s}")
                  for it in chosen for s in seeds]
    return chosen


def module_item_seeds(name: str, seeds: Sequence[int]) -> list[str]:
    """The arguments that pass ``--seeds`` to module item ``name``: its module's ``SEEDS_FLAG`` followed by the
    seeds; ValueError with the module's ``SEEDS_REFUSED`` reason when it cannot honour them (never silent)."""
    mod = importlib.import_module(MODULE_ITEMS[name])
    flag = getattr(mod, "SEEDS_FLAG", None)
    if flag:
        return [flag, ",".join(str(int(s)) for s in seeds)]
    why = getattr(mod, "SEEDS_REFUSED", None) or "its module declares no SEEDS_FLAG"
    raise ValueError(f"--seeds: item {name!r} cannot run per seed ({why}); run {name} without --seeds")


def parse_seeds(text: str) -> list[int]:
    """``--seeds 0,1,2``: distinct integers >= 0, in the order given; ValueError naming the flag otherwise."""
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--seeds must be comma-separated integers, e.g. 0,1,2; got {text!r}") from None
    if not vals or any(v < 0 for v in vals) or len(set(vals)) != len(vals):
        raise ValueError(f"--seeds must list distinct integers >= 0, e.g. 0,1,2; got {text!r}")
    return vals


@dataclass
class PlannedRun:
    """A distinct run of the plan and the items it belongs to."""

    spec: RunSpec
    run_id: str
    items: list[str] = field(default_factory=list)
    budget_s: float = 0.0  # the longest budget of its items: every item reads it over its own


def plan_runs(items: Iterable[Item], workload: str = "quick", profile: Profile | None = None,
              budget_override_s: float | None = None) -> list[PlannedRun]:
    """Distinct runs in first-use order (a run shared by several items appears once), each with the
    longest budget of its items (``profile``: the quick profile's by default)."""
    profile = profile or PROFILES["quick"]
    out: dict[str, PlannedRun] = {}
    for it in items:
        budget = profile.budget_for(it.name, budget_override_s)
        for spec in it.runs:
            rid = run_id(spec, workload)
            pr = out.setdefault(rid, PlannedRun(spec, rid))
            pr.items.append(it.name)
            pr.budget_s = max(pr.budget_s, budget)
    return list(out.values())


def item_budgets(items: Iterable[Item], profile: Profile, budget_override_s: float | None = None) -> dict[str, float]:
    """Item name -> its budget (plan.json ``budgets_s``, read by the summary to clip shared runs)."""
    return {it.name: profile.budget_for(it.name, budget_override_s) for it in items}


def run_args(spec: RunSpec, profile: Profile, budget_s: float, result_dir: str | Path, item: str,
             hosts: str | Path | None = None) -> list[str]:
    """``scripts/run.py`` arguments of one run (the emulated testbed, or ``--testbed hosts --hosts FILE``
    with ``hosts``; the equal budget, checkpoints for testing)."""
    testbed = ["--testbed", "emulated"] if hosts is None else ["--testbed", "hosts", "--hosts", str(hosts)]
    args = [*testbed, "--library", spec.library, "--replay-mode", spec.replay_mode,
            "-b", str(spec.batch_multiple), "--workers", str(spec.workers), "--seed", str(spec.seed),
            "--budget-s", f"{budget_s:g}", "--checkpoint-every-s", f"{profile.checkpoint_every_s:g}",
            "--eval-every", "1000000",  # accuracy comes from checkpoint testing; no test inside the timed loop
            "--checkpoint-workers", "all",  # the team's accuracy: every worker's model is tested
            "--workload", profile.workload, "--item", item, "--result-dir", str(result_dir), "--no-progress", "--json"]
    if spec.threshold is not None:
        args += ["--threshold", str(spec.threshold)]
    if spec.trace is not None:
        args += ["--trace", str(spec.trace)]
    else:
        args += ["-c", spec.control]
    if spec.note:
        args += ["-n", spec.note]
    return args + spec.flags() + list(profile.extra)


def estimate_run_s(spec: RunSpec, budget_s: float) -> float:
    """Wall seconds of one run: start-up and tear-down, the budget, the last iteration and flush."""
    tail = DDP_TAIL_S if has_own_runtime(spec.library) else TAIL_S
    return STARTUP_S + STARTUP_PER_WORKER_S * spec.workers + budget_s + tail


def checkpoints_in(budget_s: float, period_s: float, triple_every: int = CKPT_TRIPLE_EVERY) -> int:
    """Checkpoints a run writes in ``budget_s``: the start, one per period (the period tripling after
    every ``triple_every``), and the last."""
    n, t, period = 0, period_s, period_s
    while t <= budget_s:
        n += 1
        if n % triple_every == 0:
            period *= 3
        t += period
    return n + 2


def estimate_ckpt_test_s(budget_s: float, profile: Profile, workers: int = 1) -> float:
    """Seconds to test one run's checkpoints (start, one per period, the last; every one of ``workers``)."""
    return CKPT_TEST_EACH_S * workers * checkpoints_in(budget_s, profile.ckpt_wall_s)


def estimate_plan_s(runs: Sequence[PlannedRun], profile: Profile, to_run: set[str] | None = None) -> dict[str, float]:
    """Seconds of the plan (every run for its :attr:`PlannedRun.budget_s`): runs still to do (``to_run``:
    their ids; default all), checkpoint tests of every run, summary and figures; keys ``runs_s``,
    ``ckpt_s``, ``post_s``, ``total_s``."""
    runs_s = sum(estimate_run_s(r.spec, r.budget_s) for r in runs if to_run is None or r.run_id in to_run)
    ckpt_s = CKPT_TEST_START_S + sum(estimate_ckpt_test_s(r.budget_s, profile, r.spec.workers) for r in runs)
    return dict(runs_s=runs_s, ckpt_s=ckpt_s, post_s=POST_S, total_s=runs_s + ckpt_s + POST_S)
