"""ROG's groups of its items' runs for its readings, built from what the shared analysis measured per item
(:func:`rog.analysis.summary.item_views`): the batch and worker items' runs (the sensitivity claims and
figure), the threshold item's, and the end-to-end systems of both replay modes read over one budget (the
replay-mode paragraph).  A run shared by several of these items is taken once, from the first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from rog.analysis.load import clip_run
from rog.analysis.metrics import RunMetrics, compute_metrics
from rog.analysis.paper_sections import SummaryContext

__all__ = ["SENSITIVITY_ITEMS", "THRESHOLD_ITEMS", "REPLAY_ITEMS", "ItemGroups", "study_groups", "item_groups"]

SENSITIVITY_ITEMS = ("batch", "workers")  # Fig. 9: batch size and worker count
THRESHOLD_ITEMS = ("threshold",)  # Fig. 10: ROG's staleness threshold
REPLAY_ITEMS = ("outdoors", "recorded")  # the end-to-end item in the artifact's replay mode and in the recorded one


@dataclass(frozen=True)
class ItemGroups:
    """The groups (None where their items are not there): ``sensitivity`` (the batch and worker items' runs),
    ``threshold`` (the threshold item's), ``replay`` (both replay modes' runs over ``replay_horizon_s``, the
    shorter of the two items' budgets)."""

    sensitivity: list[RunMetrics] | None = None
    threshold: list[RunMetrics] | None = None
    replay: list[RunMetrics] | None = None
    replay_horizon_s: float | None = None


def _base(name: str) -> str:
    return name.split(":", 1)[0]  # --traces items are "<item>:<trace stem>"


def _union(item_sets: dict[str, list[RunMetrics]], kinds: Sequence[str]) -> list[RunMetrics] | None:
    seen: dict[str, RunMetrics] = {}
    for name, ms in item_sets.items():
        if _base(name) in kinds:
            for m in ms:
                seen.setdefault(m.run.run_id, m)
    return list(seen.values()) or None


def study_groups(item_sets: dict[str, list[RunMetrics]] | None) -> ItemGroups:
    """The sensitivity and threshold groups from the items' run sets (each over its own budget and target)."""
    sets = item_sets or {}
    return ItemGroups(sensitivity=_union(sets, SENSITIVITY_ITEMS), threshold=_union(sets, THRESHOLD_ITEMS))


def item_groups(ctx: SummaryContext) -> ItemGroups:
    """Every group for the summary; the replay group re-measures both modes' runs over the shorter budget
    (stall per iteration over the same training time) with the summary's own measuring rules."""
    studies = study_groups(ctx.item_sets)
    sets, items, budgets_s = ctx.item_sets or {}, ctx.items or {}, ctx.budgets_s or {}
    e2e = [n for n in sets if _base(n) == REPLAY_ITEMS[0]]
    rec = [n for n in sets if _base(n) == REPLAY_ITEMS[1]]
    if not (e2e and rec):
        return studies
    by_id = {r.run_id: r for r in ctx.runs}
    horizon = min((budgets_s[n] for n in e2e + rec if n in budgets_s), default=None)
    both = [by_id[i] for n in e2e + rec for i in items.get(n, ()) if i in by_id]
    both = list({r.run_id: (r if horizon is None else clip_run(r, horizon)) for r in both}.values())
    replay = compute_metrics(both, ctx.target_fraction, ctx.power, ctx.smooth_tests)[0]
    return ItemGroups(studies.sensitivity, studies.threshold, replay, horizon)
