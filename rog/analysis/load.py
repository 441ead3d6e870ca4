"""Read one run folder (``result/<run-id>/``) into pandas tables; read-only, partial runs included.

A run folder holds ``config.yaml``, ``events-ps.jsonl`` and ``events-w<k>.jsonl``
(:mod:`rog.runtime.events`), ``metrics.csv``, optionally ``accuracy.csv`` (checkpoint testing),
replay logs (CSV ``t_s,wall_time,rate_mbit``), power logs (CSV ``t_s,power_w,source``) and a
``DONE`` or ``INCOMPLETE`` marker.  Replay and power logs are recognised by their header, not their
name; the worker a log belongs to is the ``w<k>`` in its file name.

Clocks: event ``t_s`` is seconds since the run's clock origin (shared by every rank; ranks of hosts with
their own clocks are first put on the PS's clock by the PS's offset estimates, :mod:`rog.analysis.clock_align`).  The run
starts at ``t0_s`` = the earliest ``run_start`` record of any worker (the first event otherwise);
every "time" in the tables below is seconds since ``t0_s``.  Replay logs carry Unix time
(``wall_time``), mapped onto the run clock with the event headers' ``origin_unix_s``.
"""

from __future__ import annotations

import csv
import fnmatch
import math
import re
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import yaml

from rog.analysis.clock_align import align_events, read_clock_offsets
from rog.experiment.config_upgrade import upgrade_config
from rog.experiment.rundir import CONFIG_FILE, METRICS_FILE, run_status
from rog.policies.registry import label_names_threshold, system_label, system_names
from rog.runtime.events import read_events

__all__ = ["RunData", "find_runs", "load_run", "load_runs", "iteration_table", "team_accuracy", "worker_view", "clip_run",
           "run_budget_s", "run_label", "config_value",
           "SYSTEMS", "ITERATION_COLUMNS", "time_scale_of"]

SYSTEMS = system_names()  # every system registered at import, in plotting order (rog.policies.registry)
ITERATION_COLUMNS = (
    "worker", "iteration", "t_start_s", "t_end_s", "span_s", "compute_s", "push_s", "pull_s", "comm_s",
    "stall_gate_s", "stall_admission_s", "stall_s", "push_t_s", "pull_t_s", "push_rows", "push_rows_planned", "push_share", "push_bytes",
    "push_deadline_s", "pull_rows", "pull_rows_planned", "pull_share", "pull_bytes", "staleness_max",
    "staleness_mean", "data_wait_s",
)
_EVENT_FILE = re.compile(r"^events-(ps|w\d+)\.jsonl$")
_WORKER_IN_NAME = re.compile(r"(?:^|[^a-z0-9])w(\d+)(?:$|[^0-9])")
_PS_IN_NAME = re.compile(r"(?:^|[^a-z0-9])ps(?:$|[^a-z0-9])")
_REPLAY_HEADER = ("t_s", "wall_time", "rate_mbit")
_POWER_HEADER = ("t_s", "power_w", "source")
_UNIX_TIME_MIN = 1e8  # a "time" above this is a Unix timestamp, not seconds since the run start

# config key -> the names a config may use for it (top level first, then one level down: "replay.mode")
_CONFIG_ALIASES: dict[str, tuple[str, ...]] = {
    "system": ("library", "system", "policy"),
    "threshold": ("threshold", "staleness_threshold"),
    "workers": ("workers", "n_workers"),
    "batch_multiple": ("batch_multiple", "batchsize", "batch_size_multiple"),
    "replay_mode": ("replay_mode", "replay.mode", "replay.replay_mode", "trace.replay_mode"),
    "control": ("control",),
    "seed": ("seed",),
    "testbed": ("testbed",),
    "item": ("item", "evaluation_item"),
}


def config_value(cfg: dict, key: str, default: Any = None) -> Any:
    """A resolved-config value by its analysis name (``system``, ``workers``, ``replay_mode``, ...),
    whatever name the config uses for it (``library`` for ``system``, ``replay.mode``, ...)."""
    names = _CONFIG_ALIASES.get(key, (key,))
    for name in names:
        node: Any = cfg
        for part in name.split("."):
            if not isinstance(node, dict) or part not in node:
                node = None
                break
            node = node[part]
        if node is not None:
            return node
    return default


def normalise_system(name: Any) -> str:
    """``'rog'`` -> ``'ROG'``, ``'ddp-gloo'`` -> ``'DDP'``; unknown names are kept upper-cased."""
    s = str(name or "?").upper()
    if s.startswith("DDP"):
        return "DDP"
    return s


@dataclass
class RunData:
    """Everything one run folder holds, as tables (times in seconds since the run start ``t0_s``).

    ``events``: rank (``'ps'``, ``'w0'``, ...) -> one row per record (columns = record fields).
    ``iterations``: one row per (worker, iteration) with the time composition (:data:`ITERATION_COLUMNS`),
    complete iterations only (a pull, or a push for a system that never pulls, was logged).
    ``accuracy``: ``iteration``, ``time_s``, ``accuracy_pct``: the team's curve (:func:`team_accuracy`:
    the mean over every tested worker's model; one worker's tests as they are); ``accuracy_tests``: every
    test with its ``worker``; ``accuracy_source`` names the file and the workers.
    ``replay``: ``worker`` (-1 = not a worker's), ``link`` (file stem), ``time_s``, ``rate_mbit``.
    ``power``: rank -> ``time_s``, ``power_w``, ``source``.
    """

    run_dir: Path
    run_id: str
    config: dict
    status: str  # 'done', 'incomplete' or 'running' (no marker yet)
    t0_s: float  # run start on the run clock (event t_s)
    origin_unix_s: float | None  # Unix time of the run clock's origin (from the event headers)
    clock_offsets_s: dict[str, float] = field(default_factory=dict)  # rank on its own clock -> PS clock - its clock
    headers: dict[str, dict] = field(default_factory=dict)
    events: dict[str, pd.DataFrame] = field(default_factory=dict)
    iterations: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(ITERATION_COLUMNS)))
    accuracy: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["iteration", "time_s", "accuracy_pct"]))
    accuracy_source: str = "none"
    accuracy_tests: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["iteration", "time_s", "accuracy_pct", "worker"]))
    replay: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["worker", "link", "time_s", "rate_mbit"]))
    power: dict[str, pd.DataFrame] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # what rog.analysis.metrics.run_measures read of this run, kept for every later reading (a copy made with
    # dataclasses.replace, e.g. a clipped run, starts empty)
    measures: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # -- config, by analysis name
    @property
    def system(self) -> str:
        """``BSP``, ``SSP``, ``FLOWN``, ``ROG`` or ``DDP``."""
        return normalise_system(config_value(self.config, "system"))

    @property
    def threshold(self) -> int | None:
        v = config_value(self.config, "threshold")
        return None if v is None else int(v)

    @property
    def workers(self) -> int:
        v = config_value(self.config, "workers")
        return int(v) if v is not None else len(self.worker_ranks)

    @property
    def batch_multiple(self) -> int:
        return int(config_value(self.config, "batch_multiple", 1))

    @property
    def replay_mode(self) -> str | None:
        return config_value(self.config, "replay_mode")

    @property
    def control(self) -> Any:
        return config_value(self.config, "control")

    @property
    def seed(self) -> int | None:
        v = config_value(self.config, "seed")
        return None if v is None else int(v)

    @property
    def item(self) -> str | None:
        return config_value(self.config, "item")

    # -- config.yaml entries the analysis and the paper homes read (the one place that names their keys)
    @property
    def library(self) -> str | None:
        """``--library`` as recorded (not normalised: ``ddp-gloo`` stays; :attr:`system` normalises)."""
        return config_value(self.config, "library")

    @property
    def note(self) -> str:
        """The run's ``-n`` note, an item's tag (``fig1``, ``ushape-k2``); '' without one."""
        return str(config_value(self.config, "note") or "")

    @property
    def trace(self) -> dict | None:
        """The replayed trace's entry (``path``, ``kind``, ``sha256``, ...); None: unshaped links."""
        t = config_value(self.config, "trace")
        return t if isinstance(t, dict) else None

    @property
    def time_scale(self) -> float | None:
        """Wall seconds per trace second (None: not recorded)."""
        return config_value(self.config, "time_scale")

    @property
    def time_budget_s(self) -> float | None:
        """``--time-budget-s`` (None: off)."""
        return config_value(self.config, "time_budget_s")

    @property
    def policy_options(self) -> dict:
        """The chosen policy's options as recorded (``budget_rule``, ``fixed_rate``, ...); {} without any."""
        return dict(config_value(self.config, "policy_options") or {})

    @property
    def stream(self) -> dict:
        """The stream mechanism's entry (ScaDLES: ``buffer``, ``rates``, ...); {} without streams."""
        return dict(config_value(self.config, "stream") or {})

    @property
    def compute_model(self) -> dict:
        """The per-pass pacing model ({} without one)."""
        return dict(config_value(self.config, "compute_model") or {})

    @property
    def compute_ratios(self) -> list | None:
        """Per-worker factors on the paced compute (None: uniform or unpaced)."""
        return config_value(self.config, "compute_ratios")

    @property
    def link_delay_ms(self) -> float:
        """Extra delay per transfer (0: none)."""
        return float(config_value(self.config, "link_delay_ms") or 0.0)

    @property
    def worker_ranks(self) -> list[str]:
        """Worker ranks with an event file, in worker order."""
        return sorted((r for r in self.events if r != "ps"), key=lambda r: int(r[1:]))

    @property
    def label(self) -> str:
        """The system as the paper names it: ``BSP``, ``SSP-4``, ``ROG-20``, ``FLOWN``, ``DDP``."""
        return run_label(self)


SCHEDULE_NAMES = {"dynacomm": "DynaComm schedule", "dynacomm-iter": "DynaComm schedule (per iteration)",
                  "lbl": "LBL schedule", "ibatch": "iBatch schedule"}


def mechanisms(cfg: dict) -> tuple[str, ...]:
    """Other papers' mechanisms a run adds to its system (a segment schedule, streams, Top-k), from ``config.yaml``."""
    out = []
    sch = (cfg.get("schedule") or {}).get("name", "sequential")
    if sch != "sequential":
        out.append(SCHEDULE_NAMES.get(sch, f"{sch} schedule"))
    stream = cfg.get("stream")
    if stream:
        out.append("weighted streams" if stream.get("weighted_aggregation") else "streams")
    if cfg.get("compression") == "topk":
        out.append("gated Top-k" if (cfg.get("compression_options") or {}).get("gate") else "Top-k")
    return tuple(out)


def run_label(run: RunData, vary: tuple[str, ...] = ()) -> str:
    """``BSP`` / ``SSP-4`` / ``ROG-20`` / ``FLOWN`` / ``DDP``, `` + `` each added mechanism (``BSP + DynaComm
    schedule``: never mixed with plain BSP's runs), plus the settings named in ``vary``
    (``batch_multiple`` -> `` x2``, ``workers`` -> `` 6w``, ``replay_mode`` -> `` (recorded)``, ``seed``)."""
    s = run.system
    label = " + ".join((system_label(s, run.threshold), *mechanisms(run.config)))
    for v in vary:
        if v == "batch_multiple":
            label += f" x{run.batch_multiple}"
        elif v == "workers":
            label += f" {run.workers}w"
        elif v == "replay_mode" and run.replay_mode:
            label += f" ({run.replay_mode})"
        elif v == "seed" and run.seed is not None:
            label += f" s{run.seed}"
        elif v == "control" and run.control is not None:
            label += f" [{run.control}]"
        elif v == "threshold" and not label_names_threshold(s) and run.threshold is not None:
            label += f"-{run.threshold}"
    return label


# ----------------------------------------------------------------------------- finding runs
def find_runs(result_dir: str | Path, pattern: str = "*") -> list[Path]:
    """Run folders directly under ``result_dir`` whose name matches the glob ``pattern`` (sorted).

    A run folder holds a ``config.yaml`` or at least one event file; hidden folders are skipped.
    """
    root = Path(result_dir)
    if not root.is_dir():
        raise ValueError(f"result_dir {str(root)!r} is not a directory; pass the folder that holds the run folders")
    out = []
    for d in sorted(root.iterdir()):
        if not d.is_dir() or d.name.startswith(".") or not fnmatch.fnmatch(d.name, pattern):
            continue
        if (d / CONFIG_FILE).exists() or any(_EVENT_FILE.match(p.name) for p in d.iterdir()):
            out.append(d)
    return out


def load_runs(result_dir: str | Path, pattern: str = "*") -> list[RunData]:
    """:func:`load_run` for every run folder :func:`find_runs` finds."""
    return [load_run(d) for d in find_runs(result_dir, pattern)]


# ----------------------------------------------------------------------------- one run
def load_run(run_dir: str | Path) -> RunData:
    """Read one run folder (tolerates a run still being written: a partial last line is skipped)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"run_dir {str(run_dir)!r} is not a directory")
    cfg_path = run_dir / CONFIG_FILE
    config: dict = {}
    if cfg_path.exists():
        loaded = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"{cfg_path}: the resolved config must be a YAML mapping, got {type(loaded).__name__}")
        config = upgrade_config(loaded) if loaded else {}  # an older run's config.yaml in the current shape
    status = run_status(run_dir)
    headers, events = {}, {}
    for p in sorted(run_dir.iterdir()):
        m = _EVENT_FILE.match(p.name)
        if not m:
            continue
        header, records = read_events(p, allow_partial_last_line=True)
        headers[m.group(1)] = header
        events[m.group(1)] = pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=["kind", "t_s"])
    shifts, clock_offsets, clock_warnings = align_events(events, headers, read_clock_offsets(run_dir))
    t0 = _run_start(events)
    origins = [h.get("origin_unix_s") for h in headers.values() if h.get("origin_unix_s") is not None]
    origin_unix = float(headers["ps"]["origin_unix_s"]) if shifts else float(np.median(origins)) if origins else None
    run = RunData(run_dir=run_dir, run_id=str(config_value(config, "run_id") or run_dir.name), config=config, status=status,
                  t0_s=t0, origin_unix_s=origin_unix, headers=headers, events=events, clock_offsets_s=clock_offsets,
                  warnings=clock_warnings)
    tables = [iteration_table(df, worker=int(rank[1:])) for rank, df in events.items() if rank != "ps"]
    tables = [t for t in tables if not t.empty]
    if tables:
        it = pd.concat(tables, ignore_index=True)
        it["t_start_s"] -= t0
        for col in ("t_end_s", "push_t_s", "pull_t_s"):
            it[col] -= t0
        run.iterations = it
    run.accuracy_tests, where = _load_accuracy(run)
    run.accuracy = team_accuracy(run.accuracy_tests)
    run.accuracy_source = _accuracy_source(where, run.accuracy_tests)
    _load_side_logs(run)
    return run


def _run_start(events: dict[str, pd.DataFrame]) -> float:
    starts, firsts = [], []
    for rank, df in events.items():
        if rank == "ps" or df.empty:
            continue
        st = df.loc[df["kind"] == "run_start", "t_s"]
        if len(st):
            starts.append(float(st.min()))
        firsts.append(float(df["t_s"].min()))
    if starts:
        return min(starts)
    if firsts:
        return min(firsts)
    ps = events.get("ps")
    return float(ps["t_s"].min()) if ps is not None and not ps.empty else 0.0


def iteration_table(ev: pd.DataFrame, worker: int = 0) -> pd.DataFrame:
    """One row per complete iteration of one worker's records (times on the run clock, not shifted).

    compute_s = ``compute``; push_s / pull_s = the transfers' ``duration_s``; comm_s = push + pull;
    stall_s = every ``stall`` (gate and admission); data_wait_s = ``data_wait`` (streaming); span_s = end of the pull - start of the first
    event of the iteration.  An iteration is complete when its pull was logged (its push, for a
    system that logs no pulls), or, for a local step without a commit (ADSP, ADACOMM), when a later
    iteration's was.  push_share / pull_share = delivered share of the planned rows.
    """
    empty = pd.DataFrame(columns=list(ITERATION_COLUMNS))
    if ev is None or ev.empty or "iteration" not in ev.columns:
        return empty
    timed = ev[ev["kind"].isin(["compute", "push", "pull", "stall", "data_wait"]) & ev["iteration"].notna()].copy()
    if timed.empty:
        return empty
    timed["iteration"] = timed["iteration"].astype(int)
    timed["duration_s"] = timed["duration_s"].astype(float)
    part = timed["kind"].astype(object)
    if "reason" in timed.columns:
        stall = timed["kind"] == "stall"
        part = part.where(~stall, "stall_" + timed["reason"].fillna("gate").astype(str))
    timed["part"] = part
    dur = timed.pivot_table(index="iteration", columns="part", values="duration_s", aggfunc="sum", fill_value=0.0)
    for col in ("compute", "push", "pull", "stall_gate", "stall_admission", "data_wait"):
        if col not in dur.columns:
            dur[col] = 0.0
    timed["end_s"] = timed["t_s"] + timed["duration_s"]
    g = timed.groupby("iteration")
    out = pd.DataFrame(index=dur.index)
    out["worker"] = int(worker)
    out["iteration"] = dur.index.astype(int)
    out["t_start_s"] = g["t_s"].min()
    out["t_end_s"] = g["end_s"].max()
    out["span_s"] = out["t_end_s"] - out["t_start_s"]
    out["compute_s"] = dur["compute"]
    out["push_s"] = dur["push"]
    out["pull_s"] = dur["pull"]
    out["comm_s"] = out["push_s"] + out["pull_s"]
    out["stall_gate_s"] = dur["stall_gate"]
    out["stall_admission_s"] = dur["stall_admission"]
    out["stall_s"] = out["stall_gate_s"] + out["stall_admission_s"]
    out["data_wait_s"] = dur["data_wait"]  # streaming: waiting for the batch on the arrival clock, never stall
    for kind in ("push", "pull"):
        rec = timed[timed["kind"] == kind].drop_duplicates("iteration", keep="last").set_index("iteration")
        out[f"{kind}_t_s"] = rec["t_s"].reindex(out.index)
        for src, dst in (("rows_delivered", "rows"), ("rows_planned", "rows_planned"), ("delivered_share", "share"),
                         ("bytes", "bytes"), ("deadline_s", "deadline_s")):
            if kind == "pull" and dst == "deadline_s":
                continue
            out[f"{kind}_{dst}"] = rec[src].reindex(out.index) if src in rec.columns else np.nan
    st = ev[(ev["kind"] == "staleness")] if "max" in ev.columns else ev.iloc[0:0]
    if not st.empty:
        st = st.drop_duplicates("iteration", keep="last").set_index(st["iteration"].astype(int).values)
        out["staleness_max"] = st["max"].reindex(out.index).astype(float)
        out["staleness_mean"] = st["mean"].reindex(out.index).astype(float)
    else:
        out["staleness_max"] = np.nan
        out["staleness_mean"] = np.nan
    done_kind = "pull" if (timed["kind"] == "pull").any() else "push"
    done = timed.loc[timed["kind"] == done_kind, "iteration"].unique()
    local = timed.loc[timed["kind"] == "compute", "iteration"].unique()
    last = done.max() if done.size else 0  # local steps (ADSP, ADACOMM) are complete once a later commit is
    out = out[out.index.isin(done) | (out.index.isin(local) & (out.index < last))]
    return out.reset_index(drop=True)[list(ITERATION_COLUMNS)]


# ----------------------------------------------------------------------------- accuracy
def _load_accuracy(run: RunData) -> tuple[pd.DataFrame, str]:
    """Checkpoint testing (accuracy.csv) when present, else the workers' eval records, else metrics.csv."""
    cols = ["iteration", "time_s", "accuracy_pct", "worker"]
    path = run.run_dir / "accuracy.csv"
    if path.exists():
        df = pd.read_csv(path)
        missing = [c for c in ("time", "iteration", "accuracy") if c not in df.columns]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; expected the header 'time,iteration,accuracy'")
        if not df.empty:
            t = df["time"].astype(float)
            if t.max() > _UNIX_TIME_MIN:  # Unix timestamps: onto the run clock
                if run.origin_unix_s is None:
                    raise ValueError(f"{path}: times are Unix timestamps but no event header gives the run's origin")
                t = t - run.origin_unix_s - run.t0_s
            acc = df["accuracy"].astype(float)
            if acc.max() <= 1.0:
                acc = acc * 100.0
            worker = df["worker"].astype(int) if "worker" in df.columns else 0
            out = pd.DataFrame({"iteration": df["iteration"].astype(float), "time_s": t, "accuracy_pct": acc,
                                "worker": worker})
            return out.sort_values(["time_s", "iteration"]).reset_index(drop=True), "accuracy.csv (checkpoint testing)"
    for rank in run.worker_ranks:
        df = run.events[rank]
        if "accuracy" not in df.columns:
            continue
        ev = df[df["kind"] == "eval"]
        if "flushed" in ev.columns:
            ev = ev[ev["flushed"].fillna(False) != True]  # noqa: E712 - a column of True/False/NaN
        if ev.empty:
            continue
        out = pd.DataFrame({"iteration": ev["iteration"].astype(float).values,
                            "time_s": (ev["t_s"].astype(float) - run.t0_s).values,
                            "accuracy_pct": ev["accuracy"].astype(float).values * 100.0, "worker": int(rank[1:])})
        return out.sort_values(["time_s", "iteration"]).reset_index(drop=True), f"eval records of {rank}"
    path = run.run_dir / METRICS_FILE
    if path.exists():
        df = pd.read_csv(path)
        if not df.empty and {"iteration", "wall_s", "test_accuracy"} <= set(df.columns):
            acc = df["test_accuracy"].astype(float)
            if acc.max() <= 1.0:
                acc = acc * 100.0
            out = pd.DataFrame({"iteration": df["iteration"].astype(float), "time_s": df["wall_s"].astype(float),
                                "accuracy_pct": acc, "worker": 0})
            return out.sort_values(["time_s", "iteration"]).reset_index(drop=True), "metrics.csv"
    return pd.DataFrame(columns=cols), "none"


def _accuracy_source(where: str, tests: pd.DataFrame) -> str:
    """Where the tests came from and whose models they are (checkpoint tests name the worker(s))."""
    tested = sorted(int(w) for w in tests["worker"].unique()) if not tests.empty else []
    if len(tested) > 1:
        return f"{where}; team mean over workers {', '.join(map(str, tested))}"
    if tested and where.startswith("accuracy.csv"):
        return f"{where}; worker {tested[0]}"
    return where


def team_accuracy(tests: pd.DataFrame) -> pd.DataFrame:
    """The team's accuracy curve from the tests of one or more workers' models.

    One tested worker: its tests as they are.  Several: at every test time of the lowest-numbered
    tested worker (the reference schedule; all workers checkpoint on the same clock), the mean over
    the tested workers of each one's accuracy and completed iterations, each linearly interpolated
    between its own tests (held at its first / last test outside them).  A robot team's model quality
    is every robot's, not one robot's: which worker replays which part of the trace would otherwise
    decide the result (measured: worker 0 spent a whole quick run in a fade).
    Columns ``iteration`` (mean over the workers), ``time_s``, ``accuracy_pct``.
    """
    cols = ["iteration", "time_s", "accuracy_pct"]
    if tests is None or tests.empty:
        return pd.DataFrame(columns=cols)
    if "worker" not in tests.columns or tests["worker"].nunique() <= 1:
        return tests.sort_values(["time_s", "iteration"]).reset_index(drop=True)[cols]
    per = {int(w): g.sort_values(["time_s", "iteration"]) for w, g in tests.groupby("worker")}
    grid = per[min(per)]["time_s"].to_numpy(float)
    mean = {c: np.mean([np.interp(grid, g["time_s"].to_numpy(float), g[c].to_numpy(float)) for g in per.values()], axis=0)
            for c in ("iteration", "accuracy_pct")}
    return pd.DataFrame({"iteration": mean["iteration"], "time_s": grid, "accuracy_pct": mean["accuracy_pct"]})[cols]


def worker_view(run: RunData, worker: int) -> RunData | None:
    """``run`` with its accuracy read from ``worker``'s tests alone (the artifact tested one worker's
    model); None when that worker's model was not tested.  Everything else is shared, not copied."""
    tests = run.accuracy_tests
    if tests is None or tests.empty or worker not in set(tests["worker"].astype(int)):
        return None
    one = tests[tests["worker"].astype(int) == worker].reset_index(drop=True)
    return replace(run, accuracy=team_accuracy(one), accuracy_tests=one,
                   accuracy_source=_accuracy_source(run.accuracy_source.split(";")[0], one))


CLIP_SLACK_S = 1.0  # a run whose budget is within this of the horizon is read whole


def run_budget_s(run: RunData) -> float | None:
    """The run's wall-clock budget (config ``time_budget_s``), None for a run without one."""
    v = config_value(run.config, "time_budget_s")
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def clip_run(run: RunData, horizon_s: float) -> RunData:
    """``run`` read over its first ``horizon_s`` seconds only: what a run with that budget measures.

    An item whose budget is shorter than a shared run's reads it this way (``rog.experiment.items``:
    a run shared by items runs for the longest of their budgets), so every run of an item is
    compared over the same training time.  Kept: iterations complete by ``horizon_s``, events that
    end by it (the energy timeline), checkpoint tests taken by it (the team curve is recomputed),
    power and replay samples up to it.  A run no longer than ``horizon_s`` (+ 1 s) comes back as it
    is; otherwise the copy's config says ``time_budget_s: horizon_s`` and ``clipped_from_s`` the
    run's own, and a warning says so.  Nothing is read from or written to disk."""
    budget = run_budget_s(run)
    if budget is not None and budget <= horizon_s + CLIP_SLACK_S:
        return run
    h = float(horizon_s)
    it = run.iterations
    if it is not None and not it.empty:
        it = it[it["t_end_s"] <= h].reset_index(drop=True)
    events = {}
    for rank, ev in run.events.items():
        if ev is None or ev.empty or "t_s" not in ev.columns:
            events[rank] = ev
            continue
        end = ev["t_s"].astype(float) - run.t0_s
        if "duration_s" in ev.columns:
            end = end + ev["duration_s"].astype(float).fillna(0.0)
        events[rank] = ev[end <= h].reset_index(drop=True)
    tests = run.accuracy_tests
    if tests is not None and not tests.empty:
        tests = tests[tests["time_s"] <= h].reset_index(drop=True)
    replay = run.replay
    if replay is not None and not replay.empty:
        replay = replay[replay["time_s"] <= h].reset_index(drop=True)
    power = {k: df[df["time_s"] <= h].reset_index(drop=True) for k, df in run.power.items()}
    config = {**run.config, "time_budget_s": h, "clipped_from_s": budget}
    note = f"read over its first {h:g} s (the item's budget) of a {'longer' if budget is None else f'{budget:g} s'} run"
    return replace(run, config=config, iterations=it, events=events, accuracy_tests=tests,
                   accuracy=team_accuracy(tests), replay=replay, power=power, warnings=[*run.warnings, note])


# ----------------------------------------------------------------------------- replay and power logs
def _csv_header(path: Path) -> tuple[str, ...]:
    try:
        with open(path, newline="", encoding="utf-8") as f:
            row = next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError):
        return ()
    return tuple(c.strip() for c in row)


def _owner(stem: str) -> str | None:
    m = _WORKER_IN_NAME.search(stem.lower())
    if m:
        return f"w{int(m.group(1))}"
    if _PS_IN_NAME.search(stem.lower()):
        return "ps"
    return None


def _load_side_logs(run: RunData) -> None:
    replays, power = [], {}
    for p in sorted(run.run_dir.glob("*.csv")):
        header = _csv_header(p)
        if header[:3] == _REPLAY_HEADER:
            df = pd.read_csv(p)
            if df.empty:
                continue
            owner = _owner(p.stem)
            if run.origin_unix_s is not None and df["wall_time"].notna().all():
                t = df["wall_time"].astype(float) + run.clock_offsets_s.get(owner or "", 0.0) - run.origin_unix_s - run.t0_s
            else:
                t = df["t_s"].astype(float)
                run.warnings.append(f"{p.name}: no event header to align Unix times with; replay time is the replay's own")
            replays.append(pd.DataFrame({"worker": int(owner[1:]) if owner and owner != "ps" else -1, "link": p.stem,
                                         "time_s": t.values, "rate_mbit": df["rate_mbit"].astype(float).values}))
        elif header[:3] == _POWER_HEADER:
            df = pd.read_csv(p)
            if df.empty:
                continue
            owner = _owner(p.stem) or p.stem
            power[owner] = pd.DataFrame({"time_s": df["t_s"].astype(float).values - run.t0_s,
                                         "power_w": df["power_w"].astype(float).values,
                                         "source": df["source"].astype(str).values})
    if replays:
        run.replay = pd.concat(replays, ignore_index=True).sort_values(["link", "time_s"]).reset_index(drop=True)
    run.power = power


def finite_or_none(x: Any) -> float | None:
    """A float, or None for None/NaN/inf (JSON-safe)."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def time_scale_of(runs: Sequence[RunData]) -> float | None:
    """The runs' trace time scale (wall s per trace s; the median of their configs'), None if none says."""
    vals = []
    for r in runs:
        v = r.time_scale
        if isinstance(v, (int, float)) and v > 0:
            vals.append(float(v))
    return float(statistics.median(vals)) if vals else None
