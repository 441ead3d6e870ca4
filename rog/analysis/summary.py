"""``result/summary.json`` and ``result/summary.md``: every run's measures, then each reproduced paper's section.

This module assembles; it holds no paper's claims.  It loads the runs (:mod:`.load`), measures them
(:mod:`.metrics`; with a plan one target and one budget per item, :func:`item_views`), builds one
:class:`~rog.analysis.paper_sections.SummaryContext` and calls the registered paper sections
(:mod:`.paper_sections`; ROG's, in :mod:`rog.papers.rog.section`, holds the claims table, the replicas
and the other readings next to the paper and its artifact), placing their parts by position around its
own: the inputs and the runs table, the runs' notes and the targets per item.

``summary.json``: ``{"target_acc": %, "target_rule": str, "runs": {run_id: {...}}, ...}`` then the
sections' keys and, with a plan, ``items``; each run entry has exactly
:data:`rog.analysis.metrics.SUMMARY_KEYS`.  Accuracy is the team's curve
(:func:`rog.analysis.load.team_accuracy`).  Where the inputs come from (each run's testbed and fallback,
the trace, the energy source and the profile whose watts priced a model): :mod:`.provenance`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .claim_table import base_setting, fmt
from .grades import GradedRow, counts, papers_table, rows_json
from .load import RunData, clip_run, find_runs, load_run
from .metrics import SMOOTH_TESTS, SUMMARY_KEYS, TARGET_FRACTION, RunMetrics, compute_metrics
from .paper_sections import HEADER, ITEMS, NOTES, SummaryContext, sections
from .provenance import energy_source_line, testbed_cell, testbed_line, trace_source_line
from .tables import markdown_table

__all__ = ["build_summary", "runs_markdown", "grades_markdown", "grades_json", "notes_markdown", "item_views", "Views", "write_summary", "assemble"]

RUNS_HEADER = ("run", "system", "testbed", "replay", "workers", "batch", "status", "iterations", "s/iter", "compute",
               "comm", "stall", "data wait", "other", "acc start", "acc final", "acc @ equal iters",
               "time to target (s)", "energy to target (kJ)", "energy source")  # summary.md's table of runs


def build_summary(metrics: Sequence[RunMetrics], target: float | None, rule: str) -> dict[str, Any]:
    """The summary.json object: top-level ``target_acc`` (%), ``target_rule`` and ``runs``."""
    runs = {}
    for m in metrics:
        entry = m.summary_entry()
        if tuple(entry) != SUMMARY_KEYS:  # pragma: no cover - summary_entry asserts it too
            raise AssertionError("summary entry keys drifted from SUMMARY_KEYS")
        runs[m.run.run_id] = entry
    return {"target_acc": None if target is None else float(target), "target_rule": rule, "runs": runs}


def grades_markdown(graded: Sequence[GradedRow]) -> list[str]:
    """The counts per grade and outcome of every paper's graded rows, one line per paper."""
    by: dict[str, list[GradedRow]] = {}
    for r in graded:
        by.setdefault(r.paper, []).append(r)
    return ["## Grades across papers", "",
            "Each paper's section opens with its graded rows (rules: `rog/analysis/grades.py`; a `built in` row is "
            "never counted as agreement).", "", *papers_table({p: counts(rs) for p, rs in by.items()})]


def grades_json(graded: Sequence[GradedRow]) -> dict[str, Any]:
    """summary.json's ``grades``: per paper ``{"counts", "rows"}`` (:func:`rog.analysis.grades.rows_json`), and ``all``."""
    by: dict[str, list[GradedRow]] = {}
    for r in graded:
        by.setdefault(r.paper, []).append(r)
    return {**{p: rows_json(rs) for p, rs in by.items()}, "all": counts(graded)}


def runs_markdown(metrics: Sequence[RunMetrics], target: float | None, rule: str, equal_iters: int | None,
                  views: Views | None = None, grades: Sequence[str] = ()) -> str:
    """summary.md's opening: where the inputs come from, the target, the budgets per item (``views``,
    :func:`item_views`), the grades across papers (``grades``: lines, :func:`grades_markdown`) and one row per run."""
    views = views or Views()
    setting = base_setting(metrics)
    acc_sources = sorted({m.run.accuracy_source for m in metrics})
    lines = ["# Results summary", "",
             trace_source_line([m.run for m in metrics]),
             testbed_line([m.run for m in metrics]),
             f"- Runs: {len(metrics)} ({sum(m.run.status == 'done' for m in metrics)} complete).",
             f"- Target accuracy: {fmt(target)} %. Rule: {rule}.",
             f"- Accuracy at equal iterations: at iteration {equal_iters if equal_iters is not None else '-'} "
             f"(the smallest last-tested iteration of the complete runs).",
             f"- Accuracy source: {', '.join(acc_sources)}.",
             energy_source_line(metrics),
             f"- End-to-end setting used for the comparisons: {setting.workers} workers, batch x{setting.batch_multiple}, "
             + ("unshaped links (control none)." if setting.control == "none" else
                f"replay mode {('`' + setting.replay_mode + '`') if setting.replay_mode else '(not in the configs)'}, "
                f"control {setting.control if setting.control is not None else '(not in the configs)'}."),
             *([f"- Budgets per item: {', '.join(f'{n} {b:g} s' for n, b in views.budgets_s.items())}. A run shared by "
                "items ran for the longest; every other item reads it over its own budget (its first seconds), "
                "so every run of an item is compared over the same training time."] if views.budgets_s else []),
             "", *grades,
             "## Runs", "",
             *markdown_table(RUNS_HEADER, [
                 [m.run.run_id, m.run.label, testbed_cell(m.run), m.run.replay_mode or "-", m.run.workers,
                  f"x{m.run.batch_multiple}", m.run.status, m.iterations, fmt(m.iter_s, 3), fmt(m.compute_s, 3),
                  fmt(m.comm_s, 3), fmt(m.stall_s, 3), fmt(m.data_wait_s, 3), fmt(m.other_s, 3), fmt(m.acc_start),
                  fmt(m.acc_final), fmt(m.acc_at_equal_iters), fmt(m.time_to_target_s, 1),
                  fmt(m.energy_to_target_j, 3, 1e-3), m.energy_source] for m in metrics])]
    return "\n".join(lines)


def notes_markdown(metrics: Sequence[RunMetrics]) -> str | None:
    """summary.md's notes on the runs (what a run's metrics flagged), None when there are none."""
    notes = [f"- {m.run.run_id}: {n}" for m in metrics for n in m.notes]
    return "\n".join(["## Notes", "", *notes, ""]) if notes else None


@dataclass
class Views:
    """What the items' own budgets and targets give besides the primary metrics (:func:`item_views`); a
    paper groups its items from ``item_sets`` (ROG's: :mod:`rog.papers.rog.item_groups`)."""

    budgets_s: dict[str, float] | None = None
    first_runs: list[RunData] | None = None  # the first item's runs as it reads them (over its budget)
    item_sets: dict[str, list[RunMetrics]] | None = None  # item name -> its runs' metrics (own budget and target)


def _base(name: str) -> str:
    return name.split(":", 1)[0]  # --traces items are "<item>:<trace stem>"


def item_views(runs: Sequence[RunData], items: dict[str, Sequence[str]], target_fraction: float = TARGET_FRACTION,
               power: str = "auto", smooth_tests: int = SMOOTH_TESTS, budgets_s: dict[str, float] | None = None
               ) -> tuple[list[RunMetrics], dict[str, Any], Views]:
    """One target and one equal-iteration count per evaluation item (one target for all runs of an
    item), every item read over its own budget.

    ``items``: item name -> run ids (``result/plan.json``); ``budgets_s``: item name -> budget (its
    ``budgets_s``): a run longer than its item's budget is read over the budget
    (:func:`rog.analysis.load.clip_run`).  Returns every run's metrics in the first item that holds it
    (its primary item; runs in no item form one more group, ``(other)``), per item ``{"target_acc",
    "target_rule", "equal_iters", "budget_s", "runs": {run_id: {"time_to_target_s",
    "energy_to_target_j", "acc_at_equal_iters"}}}``, and the :class:`Views` of the items."""
    budgets_s = dict(budgets_s or {})
    by_id = {r.run_id: r for r in runs}
    groups = [(name, [by_id[i] for i in ids if i in by_id]) for name, ids in items.items()]
    covered = {r.run_id for _, g in groups for r in g}
    rest = [r for r in runs if r.run_id not in covered]
    if rest:
        groups.append(("(other)", rest))
    primary: dict[str, RunMetrics] = {}
    per_item: dict[str, Any] = {}
    sets: dict[str, list[RunMetrics]] = {}
    views = Views(budgets_s=budgets_s or None)
    from .paper_sections import item_target_rules  # an item's own target rule (the compare item's), from its paper
    target_rules = item_target_rules()
    for name, group in groups:
        budget = budgets_s.get(name)
        if budget is not None:
            group = [clip_run(r, budget) for r in group]
        if views.first_runs is None:
            views.first_runs = group  # the first item's, also when none of its runs is there
        if not group:
            continue
        ms, target, rule, eq = compute_metrics(group, target_fraction, power, smooth_tests,
                                               sets_target=target_rules.get(_base(name)))
        sets[name] = ms
        per_item[name] = {"target_acc": None if target is None else float(target), "target_rule": rule,
                          "equal_iters": eq, "budget_s": budget, "runs": {
                              m.run.run_id: {"time_to_target_s": m.summary_entry()["time_to_target_s"],
                                             "energy_to_target_j": m.summary_entry()["energy_to_target_j"],
                                             "acc_at_equal_iters": m.summary_entry()["acc_at_equal_iters"]}
                              for m in ms}}
        for m in ms:
            primary.setdefault(m.run.run_id, m)
    views.item_sets = sets
    return [primary[r.run_id] for r in runs if r.run_id in primary], per_item, views


def _items_markdown(per_item: dict[str, Any]) -> str:
    lines = ["## Targets per item", "",
             "One target accuracy for all runs of an item; a run shared by several items is measured against each "
             "item's target here, and against its first item's target in the tables above.", ""]
    for name, d in per_item.items():
        lines += [f"### {name}", "", *([f"- Budget: {d['budget_s']:g} s (longer runs read over their first "
                                         f"{d['budget_s']:g} s)."] if d.get("budget_s") else []),
                  f"- Target: {fmt(d['target_acc'])} %. Rule: {d['target_rule']}.",
                  f"- Equal iterations: {d['equal_iters'] if d['equal_iters'] is not None else '-'}.", "",
                  *markdown_table(["run", "time to target (s)", "energy to target (kJ)", "acc @ equal iters"],
                                  [[rid, fmt(v["time_to_target_s"], 1), fmt(v["energy_to_target_j"], 3, 1e-3),
                                    fmt(v["acc_at_equal_iters"])] for rid, v in d["runs"].items()]), ""]
    return "\n".join(lines)


def write_summary(result_dir: str | Path, pattern: str | Sequence[str] = "*", target_fraction: float = TARGET_FRACTION,
                  power: str = "auto", stem: str = "summary", items: dict[str, Sequence[str]] | None = None,
                  smooth_tests: int = SMOOTH_TESTS, budgets_s: dict[str, float] | None = None) -> tuple[Path, Path]:
    """Load the runs under ``result_dir`` matching ``pattern`` (glob or globs) and write
    ``<stem>.json`` and ``<stem>.md`` into ``result_dir``; returns both paths.  With ``items`` (item ->
    run ids) every item gets its own target (:func:`item_views`); the top-level ``target_acc`` is
    the first item's and ``items`` holds every item's target, rule and per-run measures; with
    ``budgets_s`` (item -> seconds, plan.json's) every item reads its runs over its own budget."""
    result_dir = Path(result_dir)
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    dirs = sorted({d for p in patterns for d in find_runs(result_dir, p)})
    if not dirs:
        raise ValueError(f"no run folder under {str(result_dir)!r} matches {patterns}; check --result-dir and --runs")
    runs: list[RunData] = [load_run(d) for d in dirs]
    if items:
        metrics, per_item, views = item_views(runs, items, target_fraction, power, smooth_tests, budgets_s)
        first = next(iter(per_item.values()))
        target, eq = first["target_acc"], first["equal_iters"]
        rule = f"per item (top level: item {next(iter(per_item))!r}): {first['target_rule']}"
    else:
        metrics, target, rule, eq = compute_metrics(runs, target_fraction, power, smooth_tests)
        per_item, views = None, None
    ctx = SummaryContext(result_dir=result_dir, runs=runs, metrics=metrics, target_acc=target, target_rule=rule,
                         equal_iters=eq, target_fraction=target_fraction, power=power, smooth_tests=smooth_tests,
                         items=items, budgets_s=budgets_s, per_item=per_item, views=views)
    # (position, summary.json keys, summary.md text): the summary's own parts, then each paper's, in position order
    parts: list[tuple[int, dict[str, Any], str | None]] = [
        (HEADER, build_summary(metrics, target, rule), runs_markdown(metrics, target, rule, eq, views)),
        (NOTES, {}, notes_markdown(metrics)),
        (ITEMS, {} if per_item is None else {"items": per_item}, None if per_item is None else _items_markdown(per_item)),
    ]
    secs = sections(ctx)
    graded = [r for _, part in secs for r in part.graded]
    if graded:  # the counts across papers open summary.md (after its header lines) and summary.json's "grades"
        parts[0] = (HEADER, parts[0][1], runs_markdown(metrics, target, rule, eq, views, grades_markdown(graded)))
        parts.append((HEADER, {"grades": grades_json(graded)}, None))
    parts += [(part.position, part.entries, part.markdown) for _, part in secs]
    doc, text = assemble(parts)
    js = result_dir / f"{stem}.json"
    md = result_dir / f"{stem}.md"
    js.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    md.write_text(text, encoding="utf-8")
    return js, md


def assemble(parts: Sequence[tuple[int, dict[str, Any], str | None]]) -> tuple[dict[str, Any], str]:
    """summary.json's object and summary.md's text from ``(position, keys, text)`` parts: in position order
    (parts at one position in the given order), texts joined by a newline (a None text adds none); a key
    given by two parts is a ValueError."""
    doc: dict[str, Any] = {}
    texts: list[str] = []
    for _, entries, text in sorted(parts, key=lambda p: p[0]):  # sorted() is stable
        for key, value in entries.items():
            if key in doc:
                raise ValueError(f"summary.json key {key!r} is written by two sections")
            doc[key] = value
        if text is not None:
            texts.append(text)
    return doc, "\n".join(texts)
