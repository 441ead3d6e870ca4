"""How often each claim holds over the replicas of a plan (trace x seed): ``summary.json`` ``robustness``.

A replica is one trace and one seed of every item (``scripts/run_items.py --traces DIR --seeds 0,1,2``
names the items ``<item>:<trace stem>:seed<n>``; the default plan is one replica).  Every replica's
claims are computed as the claims table computes them (:func:`rog.papers.rog.claims.claim_rows`, its
own target per item), then each claim is aggregated over the replicas that measured it
(:func:`aggregate`): ``{"claim", "bound", "holds", "of", "median", "min", "max", "run_ids"}`` with
``of`` the replicas that measured it (a replica whose value is missing, e.g. a system that never
reached the target, is left out of ``of`` and of the statistics), ``holds`` how many of them meet the
acceptance bound (None for a claim without one), ``run_ids`` the runs behind it and ``replicas`` every
replica that has the claim, so ``of`` of ``replicas`` says how many reached a target ("reached k of n":
a mean or median over the replicas that reached it is read beside that count, never alone).
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from rog.analysis.claim_table import Claim
from rog.analysis.metrics import RunMetrics
from rog.analysis.plan_file import replica_of
from rog.analysis.tables import fmt, markdown_table

from .claims import claim_key, claim_rows
from .decidable import NOT_DECIDABLE, reasons

__all__ = ["ROBUSTNESS_KEYS", "replica_of", "replica_claims", "aggregate", "robustness",
           "robustness_markdown", "holds_text"]

ROBUSTNESS_KEYS = ("claim", "bound", "holds", "of", "median", "min", "max", "run_ids", "replicas")
_SENSITIVITY_ITEMS = ("batch", "workers")
def _union(groups: Sequence[Sequence[RunMetrics]]) -> list[RunMetrics]:
    seen: dict[str, RunMetrics] = {}
    for ms in groups:
        for m in ms:
            seen.setdefault(m.run.run_id, m)
    return list(seen.values())


def replica_claims(item_sets: dict[str, Sequence[RunMetrics]]) -> dict[str, list[Claim]]:
    """Replica -> its claims table, from item name -> that item's metrics (each over its own budget and
    target), as the summary's claims table reads the items of one replica."""
    by_replica: dict[str, dict[str, Sequence[RunMetrics]]] = {}
    for name, ms in item_sets.items():
        by_replica.setdefault(replica_of(name), {})[name] = ms
    out: dict[str, list[Claim]] = {}
    for rep, sets in by_replica.items():
        primary = _union(list(sets.values()))
        if not primary:
            continue
        sens = _union([ms for n, ms in sets.items() if n.split(":", 1)[0] in _SENSITIVITY_ITEMS]) or None
        thr = _union([ms for n, ms in sets.items() if n.split(":", 1)[0] == "threshold"]) or None
        out[rep] = claim_rows(primary, None, sens, thr)
    return out


def _holds(value: float, bound: tuple[str, float]) -> bool:
    op, b = bound
    return value <= b if op == "<=" else value >= b


def aggregate(per_replica: dict[str, Sequence[Claim]]) -> list[dict[str, Any]]:
    """One entry per claim (first-seen order) over the replicas: see the module docstring."""
    order: list[str] = []
    rows: dict[str, list[tuple[str, Claim]]] = {}
    for rep, claims in per_replica.items():
        for c in claims:
            k = claim_key(c.name)
            if k not in rows:
                order.append(k)
                rows[k] = []
            rows[k].append((rep, c))
    out = []
    for k in order:
        cs = [c for _, c in rows[k]]
        bound = next((c.bound for c in cs if c.bound is not None), None)
        vals = [c.ours for c in cs if c.ours is not None]
        ids = sorted({i for c in cs for i in c.run_ids})
        out.append(dict(claim=k, bound=None if bound is None else [bound[0], float(bound[1])],
                        holds=None if bound is None else sum(_holds(v, bound) for v in vals), of=len(vals),
                        median=float(statistics.median(vals)) if vals else None,
                        min=float(min(vals)) if vals else None, max=float(max(vals)) if vals else None,
                        run_ids=ids, replicas=len(cs)))
    return out


def robustness(item_sets: dict[str, Sequence[RunMetrics]] | None, metrics: Sequence[RunMetrics]
               ) -> tuple[list[dict[str, Any]], dict[str, list[Claim]]]:
    """The ``robustness`` list and the per-replica claims; without items (no plan) the runs are one replica."""
    per = replica_claims(item_sets) if item_sets else {"": claim_rows(metrics)}
    return aggregate(per), per


def holds_text(e: dict[str, Any]) -> str:
    """A robustness entry's "holds" cell: ``on 2 of 3; reached 3 of 4``, or ``not decidable: ...`` when no
    replica has a value."""
    n_all = e.get("replicas", e["of"])
    word = "reached" if "to target" in e["claim"] else "measured"
    if e["of"] == 0:
        return f"not decidable: no replica has a value ({word} 0 of {n_all})"
    holds = f"on {e['holds']} of {e['of']}" if e["holds"] is not None else f"no bound (n = {e['of']})"
    shown = n_all > e["of"] or (word == "reached" and n_all > 1)  # a mean over seeds names how many reached it
    return holds + (f"; {word} {e['of']} of {n_all}" if shown else "")


def robustness_markdown(entries: Sequence[dict[str, Any]], per_replica: dict[str, Sequence[Claim]],
                        budgets_s: dict[str, float] | None = None) -> str:
    """summary.md's section: per claim "holds on k of n", median and range, and every replica's value;
    claims that :mod:`rog.papers.rog.decidable` marks say so (``budgets_s``: plan.json's item budgets)."""
    undecided = {claim_key(n) for cs in per_replica.values() for n in reasons(cs, budgets_s, entries)}
    units = {claim_key(c.name): c.unit for cs in per_replica.values() for c in cs}
    reps = list(per_replica)
    lines = ["## Robustness over traces and seeds", "",
             f"Every claim read per replica ({len(reps)} replica(s): "
             + (", ".join(f"`{r}`" for r in reps) if any(reps) else "the one trace and seed of this plan")
             + "), each with its own target per item. n counts the replicas that measured the claim "
             "(a missing value, e.g. a target never reached, is not counted; 'reached k of n' says how many of all "
             "replicas had a value).", "",
             *markdown_table(["claim", "holds", "median", "range (min-max)", "bound", "per replica"])]
    for e in entries:
        u = units.get(e["claim"], "x")
        kw = {"unit": "x"} if u == "x" else {"unit": " pts", "sign": True}  # a ratio, or a signed difference
        holds = holds_text(e)
        if e["claim"] in undecided:
            holds += f" ({NOT_DECIDABLE})"
        b = "-" if e["bound"] is None else f"{e['bound'][0]} {fmt(e['bound'][1], **kw)}"
        per = []
        for r, cs in per_replica.items():
            c = next((c for c in cs if claim_key(c.name) == e["claim"]), None)
            if c is not None:
                per.append(f"{r or 'all'}: {fmt(c.ours, **kw)}")
        lines.append(f"| {e['claim']} | {holds} | {fmt(e['median'], **kw)} | {fmt(e['min'], **kw)} to {fmt(e['max'], **kw)} "
                     f"| {b} | {'; '.join(per)} |")
    return "\n".join(lines) + "\n"
