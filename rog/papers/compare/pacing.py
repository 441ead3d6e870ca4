"""Does per-layer pacing change the systems that do not need it?  The compare item's runs against the ``outdoors`` item's.

The ``compare`` item runs every engine system under ``--pacing layer`` (each layer's share of the profile's
compute time); the ``outdoors`` item runs BSP, SSP, FLOWN and ROG under the end-of-iteration sleep
(``--pacing iteration``) on the same trace, seed and budget.  Where both replicas of a trace and seed are
in the result folder (e.g. ``--traces DIR --seeds 0,1 compare outdoors``, or a subset chosen with
``--runs``), each of the ROG paper's four systems present in both is compared on three measures that do
not depend on a target: seconds per iteration, stall share, and accuracy at equal time (the smoothed
accuracy at the earlier of the two runs' last tests).

Rule (docs/compare.md, "Pacing check", written before the check's runs): the pacing effect
``|layer - iteration|`` (same trace and seed) holds as "unchanged" when it is at most the run-to-run
spread of the same system on the same trace under layer pacing, ``max |seed n - seed m|`` over the
other seeds of the compare item.  Without another seed there is no spread and no verdict.
"""

from __future__ import annotations

from typing import Any, Sequence

from .summary import ITEM, TARGET_SYSTEMS, seed_of, system_name, trace_of
from rog.analysis.metrics import RunMetrics, accuracy_at_time
from rog.analysis.tables import markdown_table

ITERATION_ITEM = "outdoors"
MEASURES = ("iter_s", "stall_share", "acc_equal_time")


def _plain(ms: Sequence[RunMetrics]) -> dict[str, RunMetrics]:
    """System name -> run, for the ROG paper's four systems with no other paper's mechanism."""
    out = {}
    for m in ms:
        name, combo = system_name(m.run)
        if name in TARGET_SYSTEMS and not combo:
            out[name] = m
    return out


def _last_test_s(m: RunMetrics) -> float | None:
    c = m.accuracy_curve
    return None if c is None or c.empty else float(c["time_s"].max())


def pair_measures(a: RunMetrics, b: RunMetrics) -> dict[str, tuple[float | None, float | None]]:
    """Each of :data:`MEASURES` for two runs: ``{measure: (value of a, value of b)}``; accuracy at equal time
    at the earlier of their last tests."""
    ends = [t for t in (_last_test_s(a), _last_test_s(b)) if t is not None]
    t_eq = min(ends) if len(ends) == 2 else None

    def one(m: RunMetrics) -> dict[str, float | None]:
        share = None if m.stall_s is None or not m.iter_s else m.stall_s / m.iter_s
        return dict(iter_s=m.iter_s, stall_share=share,
                    acc_equal_time=None if t_eq is None else accuracy_at_time(m.accuracy_curve, t_eq))
    va, vb = one(a), one(b)
    return {k: (va[k], vb[k]) for k in MEASURES}


def _diff(pair: tuple[float | None, float | None]) -> float | None:
    a, b = pair
    return None if a is None or b is None else abs(float(a) - float(b))


def pacing_check(item_sets: dict[str, Sequence[RunMetrics]] | None) -> list[dict[str, Any]]:
    """One row per (system, trace, seed, measure) where both pacings ran: ``layer``, ``iteration``, ``effect``
    (|layer - iteration|), ``spread`` (the largest |layer seed n - layer seed m| over the other seeds; None
    without one) and ``holds`` (effect <= spread; None without a spread)."""
    sets = item_sets or {}
    layer = {(trace_of(k, ms[0].run), seed_of(k)): _plain(ms) for k, ms in sets.items()
             if k.split(":", 1)[0] == ITEM and ms}
    rows = []
    for k, ms in sets.items():
        if k.split(":", 1)[0] != ITERATION_ITEM or not ms:
            continue
        key = (trace_of(k, ms[0].run), seed_of(k))
        if key not in layer:
            continue
        for name, it_run in _plain(ms).items():
            lay_run = layer[key].get(name)
            if lay_run is None:
                continue
            others = [runs[name] for (tr, sd), runs in layer.items() if tr == key[0] and sd != key[1] and name in runs]
            effect = pair_measures(lay_run, it_run)
            spreads = [pair_measures(lay_run, o) for o in others]
            for measure in MEASURES:
                e = _diff(effect[measure])
                ds = [d for d in (_diff(s[measure]) for s in spreads) if d is not None]
                spread = max(ds) if ds else None
                rows.append(dict(system=name, trace=key[0], seed=key[1], measure=measure, layer=effect[measure][0],
                                 iteration=effect[measure][1], effect=e, spread=spread,
                                 holds=None if e is None or spread is None else e <= spread))
    return rows


def pacing_verdict(rows: Sequence[dict]) -> str:
    """One sentence: how many comparisons hold, and which do not."""
    judged = [r for r in rows if r["holds"] is not None]
    if not judged:
        return "no comparison with a seed-to-seed spread: no verdict"
    bad = [f"{r['system']} {r['measure']} on {r['trace']} {r['seed']}" for r in judged if not r["holds"]]
    head = f"per-layer pacing within the run-to-run spread on {len(judged) - len(bad)} of {len(judged)} comparisons"
    return head + (f"; outside: {', '.join(bad)}" if bad else "")


def pacing_markdown(rows: Sequence[dict]) -> str:
    """The subsection of the compare section (empty without rows)."""
    if not rows:
        return ""
    fmt = dict(iter_s="{:.3f} s", stall_share="{:.1%}", acc_equal_time="{:.2f} %")

    def cell(measure: str, v: float | None) -> str:
        return "-" if v is None else fmt[measure].format(v)
    lines = ["", "Per-layer pacing (compare) against the end-of-iteration sleep (outdoors), same trace and seed; "
             "spread: the same system's layer-paced runs on the other seeds (docs/compare.md, \"Pacing check\"):", "",
             *markdown_table(["system", "trace", "seed", "measure", "layer", "iteration", "effect", "spread", "within"])]
    for r in rows:
        within = "-" if r["holds"] is None else ("yes" if r["holds"] else "no")
        lines.append(f"| {r['system']} | {r['trace']} | {r['seed']} | {r['measure']} | {cell(r['measure'], r['layer'])} | "
                     f"{cell(r['measure'], r['iteration'])} | {cell(r['measure'], r['effect'])} | "
                     f"{cell(r['measure'], r['spread'])} | {within} |")
    lines += ["", f"Verdict: {pacing_verdict(rows)}."]
    return "\n".join(lines) + "\n"
