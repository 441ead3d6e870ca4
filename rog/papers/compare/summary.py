"""The ``compare`` item's section of ``summary.md``: every system on the same links, per replica and summed up.

Reads the item's runs as :func:`rog.analysis.summary.item_views` measured them (one target and one
equal-iteration count per replica, ``compare:<trace>:seed<n>``).  Per run (:func:`replica_rows`): the
system's name from its ``config.yaml`` (:func:`system_name`: the paper's system, or a base system and
the mechanisms added to it), time and energy to the replica's target, stall share (stall / time per
iteration), accuracy at equal time (at the earliest last test among the replica's runs) and at equal
iterations, and bytes per iteration (every byte the workers' push and pull records carry, over the
workers' iterations).  Per system (:func:`system_table`): median and range over replicas, and "best on
k of n" (the shortest time to target of its replica; ties all count).  Per trace (:func:`trace_sentences`):
one sentence when every replica of the trace has the same winner, none where they disagree.  Per
combination (:func:`combination_rows`): its change against its two parents, replica by replica.
docs/compare.md states these rules; they were written before any run of the item.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from rog.policies.registry import system_label

from rog.analysis.load import RunData, mechanisms
from rog.analysis.metrics import RunMetrics, accuracy_at_time
from rog.analysis.tables import markdown_table

ITEM = "compare"
# a paper's system built as a base system plus mechanisms: (base label, mechanisms) -> its name
NAMED = {("BSP", ("DynaComm schedule",)): "DynaComm (BSP)",
         ("BSP", ("weighted streams", "gated Top-k")): "ScaDLES (BSP)"}
# the systems that set a replica's target (the outdoors item's four); the rest are measured against it.
# Adopted after seed 0 had been run and read (docs/compare.md, "The target"), so it is judged on seed 1 and later.
TARGET_SYSTEMS = ("BSP", "SSP-4", "FLOWN", "ROG-4")  # their labels (system_label: FLOWN at 4 is "FLOWN")
MEASURES = ("time_to_target_s", "energy_to_target_j", "stall_share", "acc_equal_time", "acc_equal_iters",
            "bytes_per_iter")


def system_name(run: RunData) -> tuple[str, bool]:
    """``(name, combination)``: the paper's system (``ROG-4``, ``DynaComm (BSP)``, ``ScaDLES (BSP)``), or a
    base system with the mechanisms added (``ROG-4 + gated Top-k``), which is a combination."""
    base, mech = system_label(run.system, run.threshold), mechanisms(run.config)
    if not mech:
        return base, False
    if (base, mech) in NAMED:
        return NAMED[(base, mech)], False
    return " + ".join((base, *mech)), True


def sets_target(run: RunData) -> bool:
    """Whether the run sets its replica's target: one of the ROG paper's four systems (:data:`TARGET_SYSTEMS`),
    with no other paper's mechanism, as in the ``outdoors`` item whose setting this item repeats."""
    return system_name(run) in {(name, False) for name in TARGET_SYSTEMS}


def trace_of(item: str, run: RunData) -> str:
    """The trace a replica replays: the ``--traces`` file's stem in the item's name, else the run's control."""
    parts = [p for p in item.split(":")[1:] if not p.startswith("seed")]
    return parts[0] if parts else str(run.control)


def bytes_per_iteration(run: RunData) -> float | None:
    """Bytes of every push and pull record of the workers (both directions, segments included) over the
    workers' complete iterations; None without iterations."""
    it = run.iterations
    if it is None or it.empty:
        return None
    total = 0.0
    for rank in run.worker_ranks:
        ev = run.events.get(rank)
        if ev is None or ev.empty or "bytes" not in ev.columns:
            continue
        moved = ev[ev["kind"].isin(["push", "pull"])]["bytes"]
        total += float(moved.fillna(0).sum())
    return total / len(it)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def replica_rows(item_sets: dict[str, Sequence[RunMetrics]] | None) -> list[dict[str, Any]]:
    """One row per run of every ``compare`` replica (item name ``compare`` or ``compare:...``)."""
    rows = []
    for item, ms in (item_sets or {}).items():
        if item.split(":", 1)[0] != ITEM or not ms:
            continue
        ends = [float(m.accuracy_curve["time_s"].max()) for m in ms
                if m.accuracy_curve is not None and not m.accuracy_curve.empty]
        t_eq = min(ends) if ends else None
        for m in ms:
            name, combo = system_name(m.run)
            rows.append(dict(replica=item, trace=trace_of(item, m.run), system=name, combination=combo,
                             run_id=m.run.run_id, time_to_target_s=m.time_to_target_s,
                             energy_to_target_j=m.energy_to_target_j, stall_share=_ratio(m.stall_s, m.iter_s),
                             acc_equal_time=accuracy_at_time(m.accuracy_curve, t_eq), equal_time_s=t_eq,
                             acc_equal_iters=m.acc_at_equal_iters, bytes_per_iter=bytes_per_iteration(m.run)))
    return rows


def winners(rows: Sequence[dict], replica: str) -> list[str]:
    """The systems with the shortest time to target in ``replica`` (several on a tie; none if none reached it)."""
    got = [(r["time_to_target_s"], r["system"]) for r in rows if r["replica"] == replica and r["time_to_target_s"] is not None]
    if not got:
        return []
    best = min(t for t, _ in got)
    return sorted(s for t, s in got if t == best)


def _spread(values: Sequence[float | None]) -> dict[str, Any]:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return dict(median=None, min=None, max=None, n=0)
    return dict(median=statistics.median(vals), min=min(vals), max=max(vals), n=len(vals))


def system_table(rows: Sequence[dict]) -> list[dict[str, Any]]:
    """Per system (in first-seen order): replicas, median / min / max / count of each of :data:`MEASURES`, and
    ``best`` (replicas it wins on time to target) of ``replicas``."""
    names = list(dict.fromkeys(r["system"] for r in rows))
    reps = list(dict.fromkeys(r["replica"] for r in rows))
    best = {rep: winners(rows, rep) for rep in reps}
    out = []
    for name in names:
        mine = [r for r in rows if r["system"] == name]
        entry = dict(system=name, combination=mine[0]["combination"], replicas=len({r["replica"] for r in mine}),
                     best=sum(1 for rep in {r["replica"] for r in mine} if name in best[rep]))
        entry.update({k: _spread([r[k] for r in mine]) for k in MEASURES})
        out.append(entry)
    return out


def trace_sentences(rows: Sequence[dict]) -> list[dict[str, Any]]:
    """Per trace: ``{"trace", "sentence" or None, "why"}``; a sentence only when every replica of the trace
    has one and the same winner on time to target, with its lead over the runner-up (runner-up / winner)."""
    out = []
    for trace in dict.fromkeys(r["trace"] for r in rows):
        reps = list(dict.fromkeys(r["replica"] for r in rows if r["trace"] == trace))
        won = {rep: winners(rows, rep) for rep in reps}
        names = {tuple(w) for w in won.values()}
        if any(len(w) != 1 for w in won.values()) or len(names) != 1:
            desc = ", ".join(f"{rep}: {' = '.join(w) or 'none reached the target'}" for rep, w in won.items())
            out.append(dict(trace=trace, sentence=None, why=f"no one winner on every replica ({desc}): no sentence"))
            continue
        name = next(iter(names))[0]
        leads, runners = [], []
        for rep in reps:
            others = sorted((r["time_to_target_s"], r["system"]) for r in rows
                            if r["replica"] == rep and r["system"] != name and r["time_to_target_s"] is not None)
            mine = next(r["time_to_target_s"] for r in rows if r["replica"] == rep and r["system"] == name)
            if others:
                leads.append(others[0][0] / mine)
                runners.append(others[0][1])
        n = len(reps)
        if leads:
            lead = _spread(leads)
            how = (f"{lead['median']:.2f}x sooner than the runner-up (median over {len(leads)} replica(s), range "
                   f"{lead['min']:.2f}-{lead['max']:.2f}x; runner-up {', '.join(dict.fromkeys(runners))})")
        else:
            how, lead = "the only system to reach the target", None
        sentence = f"On trace {trace}, {name} reaches the target first on {n} of {n} replicas, {how}."
        out.append(dict(trace=trace, sentence=sentence, winner=name, replicas=n, lead=lead, why="every replica agrees"))
    return out


def parents_of(name: str, rows: Sequence[dict]) -> tuple[str, str | None]:
    """A combination's two parents: its base system, and the system (not a combination) that carries the added
    mechanism (each None where the rows have no such system)."""
    base, *added = name.split(" + ")
    carriers = [r["system"] for r in rows if not r["combination"] and r["system"] != base
                and any(m in mechanisms_of_label(r["system"]) for m in added)]
    present = {r["system"] for r in rows}
    return (base if base in present else None), (carriers[0] if carriers else None)


def mechanisms_of_label(system: str) -> tuple[str, ...]:
    """The mechanisms a (named or combined) system carries, from its name."""
    for (_, mech), named in NAMED.items():
        if named == system:
            return mech
    return tuple(system.split(" + ")[1:])


def combination_rows(rows: Sequence[dict]) -> list[dict[str, Any]]:
    """Per combination and parent: time and energy to target as combination / parent, and accuracy at equal
    iterations as combination - parent (points), replica by replica (median and range), and whether the
    combination is ever the best of its replica."""
    out = []
    combos = list(dict.fromkeys(r["system"] for r in rows if r["combination"]))
    reps = list(dict.fromkeys(r["replica"] for r in rows))
    for c in combos:
        for parent in parents_of(c, rows):
            if parent is None:
                continue
            t, e, a = [], [], []
            for rep in reps:
                mine = next((r for r in rows if r["replica"] == rep and r["system"] == c), None)
                par = next((r for r in rows if r["replica"] == rep and r["system"] == parent), None)
                if mine is None or par is None:
                    continue
                t.append(_ratio(mine["time_to_target_s"], par["time_to_target_s"]))
                e.append(_ratio(mine["energy_to_target_j"], par["energy_to_target_j"]))
                if mine["acc_equal_iters"] is not None and par["acc_equal_iters"] is not None:
                    a.append(mine["acc_equal_iters"] - par["acc_equal_iters"])
            out.append(dict(combination=c, parent=parent, time_ratio=_spread(t), energy_ratio=_spread(e),
                            acc_equal_iters_diff=_spread(a), best_on=sum(1 for rep in reps if c in winners(rows, rep))))
    return out


def frontier(systems: Sequence[dict]) -> list[str]:
    """The systems on the time/energy frontier of the medians: no other system has a median time and a median
    energy to target both at most its own and one of them lower (systems without both medians are left out)."""
    pts = {s["system"]: (s["time_to_target_s"]["median"], s["energy_to_target_j"]["median"]) for s in systems
           if s["time_to_target_s"]["median"] is not None and s["energy_to_target_j"]["median"] is not None}
    return [n for n, (t, e) in pts.items()
            if not any(t2 <= t and e2 <= e and (t2, e2) != (t, e) for m, (t2, e2) in pts.items() if m != n)]


def seed_of(replica: str) -> str:
    """The seed part of a replica's name (``seed1`` of ``compare:w1:seed1``); ``seed0`` without ``--seeds``."""
    return next((p for p in replica.split(":")[1:] if p.startswith("seed")), "seed0")


def by_seed(rows: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """Per seed: the system table and frontier of that seed's replicas alone (a rule adopted after one seed was
    read is judged on the others)."""
    out = {}
    for seed in dict.fromkeys(seed_of(r["replica"]) for r in rows):
        table = system_table([r for r in rows if seed_of(r["replica"]) == seed])
        out[seed] = dict(systems=table, frontier=frontier(table))
    return out


def compare_summary(item_sets: dict[str, Sequence[RunMetrics]] | None) -> dict[str, Any] | None:
    """``{"rows", "systems", "frontier", "sentences", "combinations", "by_seed"}`` of the compare item's runs; None
    without them."""
    rows = replica_rows(item_sets)
    if not rows:
        return None
    table = system_table(rows)
    return dict(rows=rows, systems=table, frontier=frontier(table), sentences=trace_sentences(rows),
                combinations=combination_rows(rows), by_seed=by_seed(rows))


def _cell(s: dict, fmt: str, scale: float = 1.0) -> str:
    if s["median"] is None:
        return "-"
    return f"{s['median'] * scale:{fmt}} ({s['min'] * scale:{fmt}} to {s['max'] * scale:{fmt}})"


def compare_markdown(d: dict[str, Any]) -> str:
    """The section of ``summary.md``: the table per system, the sentence per trace, the combinations."""
    lines = ["## Every system on the same links (compare item)", "",
             "Median (min to max) over replicas (trace x seed), each replica against its own target; time to target n/N "
             "= replicas that reached it. Stall share = stall / time per iteration. Accuracy at equal time: at the "
             "earliest last test of the replica's runs. Bytes per iteration: push + pull, per worker iteration. "
             "Best: shortest time to target of its replica (docs/compare.md).", "",
             *markdown_table(["system", "time to target (s)", "n/N", "energy to target (kJ)", "stall share (%)",
                              "acc @ equal time (%)", "acc @ equal iters (%)", "kB per iteration",
                              "best on"])]
    for s in d["systems"]:
        mark = " (combination)" if s["combination"] else ""
        lines.append(f"| {s['system']}{mark} | {_cell(s['time_to_target_s'], '.1f')} | {s['time_to_target_s']['n']}/"
                     f"{s['replicas']} | {_cell(s['energy_to_target_j'], '.2f', 1e-3)} | {_cell(s['stall_share'], '.1f', 100)} "
                     f"| {_cell(s['acc_equal_time'], '.2f')} | {_cell(s['acc_equal_iters'], '.2f')} "
                     f"| {_cell(s['bytes_per_iter'], '.1f', 1e-3)} | {s['best']} of {s['replicas']} |")
    lines += ["", f"Time/energy frontier of the medians: {', '.join(d['frontier']) or 'none (no system reached the target)'}.",
              "", "Per trace (a sentence only where every replica has the same winner):", ""]
    lines += [f"- {x['sentence']}" if x["sentence"] else f"- On trace {x['trace']}, {x['why']}." for x in d["sentences"]]
    if d["combinations"]:
        lines += ["", "Combinations against their parents (per replica: time and energy as combination / parent, "
                  "accuracy at equal iterations as combination - parent, points; median (min to max)):", "",
                  *markdown_table(["combination", "parent", "time ratio", "energy ratio", "acc @ equal iters diff",
                                   "best on"])]
        for c in d["combinations"]:
            lines.append(f"| {c['combination']} | {c['parent']} | {_cell(c['time_ratio'], '.2f')} | "
                         f"{_cell(c['energy_ratio'], '.2f')} | {_cell(c['acc_equal_iters_diff'], '+.2f')} | "
                         f"{c['best_on']} replica(s) |")
    seeds = d.get("by_seed") or {}
    if len(seeds) > 1:
        lines += ["", "Per seed (each seed's replicas alone): time to target, median (min to max), n/N, best on:", "",
                  *markdown_table(["system", *seeds])]
        for s in d["systems"]:
            cells = []
            for one in seeds.values():
                m = next((x for x in one["systems"] if x["system"] == s["system"]), None)
                cells.append("-" if m is None else f"{_cell(m['time_to_target_s'], '.1f')}, {m['time_to_target_s']['n']}/"
                             f"{m['replicas']}, best {m['best']}")
            lines.append(f"| {s['system']} | " + " | ".join(cells) + " |")
        lines += [""] + [f"Frontier on {seed} alone: {', '.join(one['frontier']) or 'none'}." for seed, one in seeds.items()]
    return "\n".join(lines) + "\n"
