"""The paper's yardstick for Intra-DP: Table 6 as printed, its reductions per row, the verdict rule.

Our latencies are in hundreds of ms (an emulated robot 30 x this CPU), the paper's in tens, so rows are
compared by *ratios inside a row*: each system's latency over the row's best layer partition (the
lower of DSCCS and SPSO-GA), each system's energy over the row's lowest layer-partition energy, and
Intra-DP's reductions against those.  The same function (:func:`row_ratios`) computes both sides.

The 14.9-41.1 % range of the paper's prose belongs to its two applications (Kapao and AGRNav, Sec. 6.1.1,
Table 4): :data:`PAPER_APP_REDUCTION_PCT` holds it by application and it is used only for those.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

from rog.analysis.tables import markdown_table

__all__ = ["METHOD_COLUMNS", "INTRA_DP_PLANS", "PAPER_KEY", "yardstick", "yardstick_markdown", "PAPER_TABLE6", "PAPER_APP_REDUCTION_PCT", "LAYER_PLANNERS", "MATCH_PP", "ENVIRONMENTS", "paper_row",
           "row_ratios", "paper_ratios", "verdict", "app_claim", "spread"]

ENVIRONMENTS = ("indoors", "outdoors")
METHOD_COLUMNS = {"local": "Local", "all": "ALL", "layer-latency": "DSCCS-like", "layer-energy-deadline": "SPSO-GA-like",
                  "intra-dp": "Intra-DP", "intra-dp-loss": "Intra-DP LOSS"}
# Intra-DP's plans in our runs: one split segment (the ``intra-dp`` planner, the ablation) or per-layer splits
# (``intra-dp-loss``, the paper's LOSS); the paper's Intra-DP column is the yardstick of both.
INTRA_DP_PLANS = {"one segment": "intra-dp", "LOSS": "intra-dp-loss"}
PAPER_KEY = {"intra-dp-loss": "intra-dp"}
LAYER_PLANNERS = ("layer-latency", "layer-energy-deadline")  # DSCCS-like, SPSO-GA-like
# Table 6 of the paper, as printed: (latency ms indoors, outdoors, energy J per inference indoors, outdoors).
# Local has one value for both environments (it uses no link).
PAPER_TABLE6 = {
    "vgg19": {"local": (96.34, 96.34, 0.94, 0.94), "all": (87.90, 96.35, 0.51, 0.57),
              "layer-latency": (71.97, 76.92, 0.38, 0.37), "layer-energy-deadline": (69.08, 73.77, 0.46, 0.51),
              "intra-dp": (54.62, 58.82, 0.32, 0.38)},
    "densenet": {"local": (56.29, 56.29, 0.46, 0.46), "all": (115.18, 128.50, 0.63, 0.70),
                 "layer-latency": (95.25, 100.73, 0.48, 0.48), "layer-energy-deadline": (98.69, 106.73, 0.68, 0.73),
                 "intra-dp": (85.86, 92.35, 0.41, 0.48)},
}
# Sec. 6.1.1: Intra-DP's latency reduction against (SPSO-GA, DSCCS) per environment, applications only.
PAPER_APP_REDUCTION_PCT = {"kapao": {"indoors": (16.3, 14.9), "outdoors": (23.7, 15.0)},
                           "agrnav": {"indoors": (36.2, 27.8), "outdoors": (41.1, 30.8)}}
# Verdict rule (fixed before any run of this tree): a reduction of ours "matches" the paper's row when it
# is within MATCH_PP percentage points of it; otherwise it is "below" or "above".
MATCH_PP = 5.0


def paper_row(model: str, environment: str) -> dict[str, tuple[float, float]] | None:
    """The paper's Table 6 row: system -> (latency s, energy J); None for a model or environment it lacks."""
    if model not in PAPER_TABLE6 or environment not in ENVIRONMENTS:
        return None
    ix = ENVIRONMENTS.index(environment)
    return {k: (v[ix] / 1e3, v[2 + ix]) for k, v in PAPER_TABLE6[model].items()}


def row_ratios(latency_s: Mapping[str, float], energy_j: Mapping[str, float], ours: str = "intra-dp") -> dict[str, Any] | None:
    """Inside one row: every system's latency over the best layer partition's and energy over the lowest
    layer-partition energy; ``ours``' (an Intra-DP planner's) latency and energy reductions (%) against those.
    None without it or a layer partition."""
    layer = [k for k in LAYER_PLANNERS if k in latency_s]
    if ours not in latency_s or not layer:
        return None
    best = min(layer, key=lambda k: latency_s[k])
    low = min(layer, key=lambda k: energy_j[k])
    return {"best_layer": best, "lowest_energy_layer": low,
            "latency_ratio": {k: v / latency_s[best] for k, v in latency_s.items()},
            "energy_ratio": {k: v / energy_j[low] for k, v in energy_j.items()},
            "latency_reduction_pct": 100.0 * (1.0 - latency_s[ours] / latency_s[best]),
            "energy_reduction_pct": 100.0 * (1.0 - energy_j[ours] / energy_j[low])}


def paper_ratios(model: str, environment: str) -> dict[str, Any] | None:
    """:func:`row_ratios` of the paper's own Table 6 row."""
    row = paper_row(model, environment)
    if row is None:
        return None
    return row_ratios({k: v[0] for k, v in row.items()}, {k: v[1] for k, v in row.items()})


def verdict(ours_pct: float, paper_pct: float, match_pp: float = MATCH_PP) -> str:
    """``matches`` within ``match_pp`` percentage points of the paper's, else ``below`` / ``above``."""
    if abs(ours_pct - paper_pct) <= match_pp:
        return "matches"
    return "below" if ours_pct < paper_pct else "above"


def app_claim(model: str) -> dict | None:
    """The paper's prose reductions for one of its applications (Kapao, AGRNav); None for any other model."""
    return PAPER_APP_REDUCTION_PCT.get(model.lower())


def spread(values) -> dict[str, float] | None:
    """Median, min, max and count of replicate values (None when there are none)."""
    v = [float(x) for x in values]
    if not v:
        return None
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def yardstick(rows: list[dict]) -> list[dict]:
    """Replicates of one setting (model, environment, estimate, server device, split costs) pooled: the
    spread of Intra-DP's reductions and the median ratio of every system, next to the paper's row."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "latency_reduction_pct" in r:
            key = (r["model"], r["environment"], r.get("estimate"), r.get("server_device"), r.get("split_costs"))
            groups.setdefault(key, []).append(r)
    out = []
    for key, all_rs in groups.items():
        for plans, pre in (("one segment", ""), ("LOSS", "loss_")):  # one row per Intra-DP planner run
            rs = [x for x in all_rs if f"{pre}latency_reduction_pct" in x]
            if rs:
                out.append(_yardstick_row(key, rs, plans, pre))
    return out


def _yardstick_row(key: tuple, rs: list[dict], plans: str, pre: str) -> dict:
    med = lambda name, k: spread(x[name][k] for x in rs if k in x[name])  # noqa: E731
    paper = rs[0].get("paper")
    lat, en = spread(x[f"{pre}latency_reduction_pct"] for x in rs), spread(x[f"{pre}energy_reduction_pct"] for x in rs)
    return {"model": key[0], "environment": key[1], "estimate": key[2], "server_device": key[3],
            "split_costs": key[4], "plans": plans, "n": len(rs), "dirs": [x["dir"] for x in rs],
            "latency_reduction_pct": lat, "energy_reduction_pct": en,
            "latency_ratio": {k: med("latency_ratio", k) for k in METHOD_COLUMNS},
            "energy_ratio": {k: med("energy_ratio", k) for k in METHOD_COLUMNS}, "paper": paper,
            "latency_verdict": verdict(lat["median"], paper["latency_reduction_pct"]) if paper else None,
            "energy_verdict": verdict(en["median"], paper["energy_reduction_pct"]) if paper else None}


def _cell(ours: dict | None, paper: float | None, fmt: str) -> str:
    o = "-" if ours is None else format(ours["median"], fmt)
    return o + ("" if paper is None else f" \\| {format(paper, fmt)}")


def _range(sp: dict) -> str:
    return f"{sp['median']:.1f}" + (f" [{sp['min']:.1f}, {sp['max']:.1f}]" if sp["n"] > 1 else "")


def yardstick_markdown(rows: list[dict]) -> list[str]:
    """The yardstick tables (lines of markdown): per setting, every system's latency over the best layer
    partition and energy over the lowest layer-partition energy, ours (median over replicates) | the paper's
    same Table 6 row; Intra-DP's reductions, median [min, max], with the verdict of :func:`verdict`."""
    ys = yardstick(rows)
    if not ys:
        return []
    L = []
    for what, unit in (("latency", "latency over the best layer partition's"),
                       ("energy", "energy over the lowest layer-partition energy (source: the power-state model "
                                  "model:jetson-xavier-nx, not tegrastats)")):
        L += [f"Yardstick, {what}: each system's {unit}, ours (median over n replicates) | the paper's same row; "
              f"Intra-DP's reduction in %, median [min, max] | the paper's; verdict: within {MATCH_PP:g} points = matches.", "",
              *markdown_table(["model", "environment", "estimate", "server", "split costs", "Intra-DP plans", "n",
                               *METHOD_COLUMNS.values(), "Intra-DP reduction", "verdict"])]
        for y in ys:
            p = y["paper"]
            cells = [_cell(y[f"{what}_ratio"][k], p[f"{what}_ratio"].get(PAPER_KEY.get(k, k)) if p else None, ".2f")
                     for k in METHOD_COLUMNS]
            red = _range(y[f"{what}_reduction_pct"]) + (f" \\| {p[f'{what}_reduction_pct']:.1f}" if p else "")
            L.append(f"| {y['model']} | {y['environment']} | {y['estimate']} | {y['server_device']} | {y['split_costs']} | "
                     f"{y.get('plans', 'one segment')} | {y['n']} | " + " | ".join(cells) + f" | {red} | {y[f'{what}_verdict'] or '-'} |")
        L.append("")
    return L
