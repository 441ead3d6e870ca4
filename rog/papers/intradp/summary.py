"""Intra-DP results next to the paper: Table 6 rows, the claims, the Fig. 1 cost-model check, figures.

Reads ``result/intradp/*/result.json`` written by ``scripts/run_inference.py`` (``trace-<model>-<trace>-
<estimate>`` for Table 6, ``sweep-<model>`` for Fig. 1).  :func:`intradp_summary` returns the numbers,
:func:`intradp_markdown` the section of ``result/summary.md``, :func:`plot_intradp` the figures
``intradp_fig1_<model>`` and ``intradp_table6``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from rog.analysis.figure_files import MODULE_FORMATS, save_figure
from rog.analysis.tables import markdown_table

from .paper import (LAYER_PLANNERS, MATCH_PP, METHOD_COLUMNS, PAPER_KEY, PAPER_TABLE6, app_claim, paper_ratios,
                                        row_ratios, verdict, yardstick, yardstick_markdown)

__all__ = ["PAPER_TABLE6", "METHOD_COLUMNS", "yardstick", "load_intradp", "intradp_summary", "intradp_markdown",
           "plot_intradp", "environment_of", "window_reductions", "energy_terms"]

WINDOW_S = 15.0  # trace seconds per window of the paired spread (every planner meets the same frames)


def environment_of(trace: str) -> str:
    """``indoors`` or ``outdoors`` from a trace's file name (``other`` otherwise)."""
    stem = Path(trace).stem.lower()
    return "indoors" if "indoor" in stem else "outdoors" if "outdoor" in stem else "other"


def load_intradp(result_dir: str | Path) -> list[dict]:
    """Every ``result/intradp/*/result.json`` (trace and sweep modes)."""
    base = Path(result_dir) / "intradp"
    out = []
    for p in sorted(base.glob("*/result.json")) if base.is_dir() else []:
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        d["_dir"] = p.parent.name
        d["_path"] = str(p.parent)
        out.append(d)
    return out


def _pct(a: float, b: float) -> float:
    return 100.0 * (1.0 - a / b)


def energy_terms(states: dict | None, base: dict | None) -> dict | None:
    """The robot's energy difference ``states - base`` (mean seconds per state) split into the power
    model's terms: idle power over the whole inference (``time``), compute above idle (compute and
    compute-while-transmitting) and transmit above idle; they sum to the energy difference."""
    if not states or not base:
        return None
    from rog.inference.costmodel import POWER_W as P

    d = {k: states.get(k, 0.0) - base.get(k, 0.0) for k in ("compute", "transmit", "both", "idle")}
    return {"time": P["idle"] * sum(d.values()),
            "compute": (P["compute"] - P["idle"]) * d["compute"] + (P["both"] - P["idle"]) * d["both"],
            "transmit": (P["transmit"] - P["idle"]) * d["transmit"],
            "robot_compute_s": d["compute"] + d["both"], "latency_s": sum(d.values())}


def window_reductions(run_dir: str | Path, planner: str, baseline: str, window_s: float = WINDOW_S) -> list[float]:
    """Per ``window_s`` of trace (frames by their start ``t0_s``): % by which ``planner``'s mean latency is
    below ``baseline``'s, from the run's ``records.jsonl`` (empty when it is missing)."""
    path = Path(run_dir) / "records.jsonl"
    if not path.is_file():
        return []
    sums: dict[tuple[str, int], list[float]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("planner") in (planner, baseline):
            sums.setdefault((r["planner"], int(r["t0_s"] // window_s)), []).append(r["latency_s"])
    wins = sorted({w for p, w in sums if p == planner} & {w for p, w in sums if p == baseline})
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return [_pct(mean(sums[(planner, w)]), mean(sums[(baseline, w)])) for w in wins]


def intradp_summary(result_dir: str | Path) -> dict[str, Any]:
    """Per trace run: each method's means, Intra-DP's reductions against the best layer partition and
    ALL, the share sums; per sweep: the largest model error."""
    table, sweeps, controls = [], [], []
    for d in load_intradp(result_dir):
        if d.get("mode") == "control" and d.get("methods"):
            m = {k: v for k, v in d["methods"].items() if v.get("n")}
            idp = m.get("intra-dp", {})
            controls.append({"dir": d["_dir"], "model": d["model"], "rate_mbit": d["control"]["rate_mbit"],
                             "rule": d["control"]["rule"], "estimate": d["emulation"].get("estimate"),
                             "latency_s": {k: v["mean_latency_s"] for k, v in m.items()},
                             "intra_dp_local_share": idp.get("plans", {}).get("local", 0) / max(idp.get("n", 0), 1),
                             "intra_dp_n": idp.get("n", 0)})
        elif d.get("mode") == "trace" and d.get("methods"):
            m = {k: v for k, v in d["methods"].items() if v.get("n")}
            emu = d.get("emulation", {})
            row: dict[str, Any] = {"dir": d["_dir"], "model": d["model"], "environment": environment_of(d["trace"]),
                                   "trace": Path(d["trace"]).name, "estimate": emu.get("estimate"),
                                   "server_device": emu.get("server_device", "cpu-paced"),
                                   "split_costs": emu.get("split_costs", "linear"),
                                   "output_mismatches": d.get("output_mismatches"),
                                   "duration_s": d.get("duration_s"), "methods": m}
            layer = [k for k in LAYER_PLANNERS if k in m]
            lat_s, en_j = {k: v["mean_latency_s"] for k, v in m.items()}, {k: v["mean_energy_j"] for k, v in m.items()}
            ours = row_ratios(lat_s, en_j)
            loss = row_ratios(lat_s, en_j, ours="intra-dp-loss")
            if loss is not None:  # Intra-DP with per-layer plans, next to the one-segment planner's row
                row.update(loss_latency_reduction_pct=loss["latency_reduction_pct"],
                           loss_energy_reduction_pct=loss["energy_reduction_pct"])
            if ours is not None:
                idp = m["intra-dp"]
                best, low = ours["best_layer"], ours["lowest_energy_layer"]
                row.update(ours)
                row["paper"] = paper_ratios(d["model"], row["environment"])
                row["energy_terms_j"] = energy_terms(idp.get("states_s"), m[low].get("states_s"))
                row["window_reductions_pct"] = window_reductions(d.get("_path", ""), "intra-dp", best)
                from .bound import oracle_bound

                bound = oracle_bound(d["_path"]) if d.get("_path") else None
                if bound:
                    row["oracle_bound_reduction_pct"] = bound["reduction_pct"]
                row["faster_than_every_layer"] = all(idp["mean_latency_s"] < m[k]["mean_latency_s"] for k in layer)
                if "all" in m:
                    row["faster_than_all"] = idp["mean_latency_s"] < m["all"]["mean_latency_s"]
                    row["latency_reduction_vs_all_pct"] = _pct(idp["mean_latency_s"], m["all"]["mean_latency_s"])
                if "local" in m:
                    fastest = min(m, key=lambda k: m[k]["mean_latency_s"])
                    row["fastest"] = fastest
                    row["intra_dp_local_share"] = idp["plans"].get("local", 0) / max(idp["n"], 1)
            table.append(row)
        elif d.get("mode") == "sweep" and d.get("sweep"):
            sweeps.append({"dir": d["_dir"], "model": d["model"], "points": d["points"],
                           "within_15pct": d["points_within_15pct"], "max_abs_error": d["max_abs_model_error"],
                           "rates_mbit": sorted({r["rate_mbit"] for r in d["sweep"]}), "emulation": d["emulation"],
                           "model_error": d.get("model_error"), "profile_holdout": d.get("profile_holdout"),
                           "output_mismatches": d.get("output_mismatches")})
    return {"table6": table, "yardstick": yardstick(table), "fig1": sweeps, "control": controls}


def _dist(d: dict) -> str:
    """An error distribution (:func:`rog.inference.validation.error_distribution`) in words."""
    return (f"|error| median {100 * d['median_abs']:.1f} %, p90 {100 * d['p90_abs']:.1f} %, max {100 * d['max_abs']:.1f} % "
            f"(signed median {100 * d['median_signed']:+.1f} %; {d['n_within']} of {d['n']} within {100 * d['within']:g} %)")


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f}"


def _energy_why(r: dict) -> str:
    e = r.get("energy_terms_j")
    if not e:
        return ""
    return (f": against {METHOD_COLUMNS[r['lowest_energy_layer']]}, the robot computes {1e3 * e['robot_compute_s']:+.0f} ms "
            f"per inference ({e['compute']:+.2f} J above idle power) and the inference lasts {1e3 * e['latency_s']:+.0f} ms "
            f"({e['time']:+.2f} J at idle power; transmit {e['transmit']:+.2f} J)")


def intradp_markdown(result_dir: str | Path) -> str:
    """The Intra-DP section of ``summary.md`` (empty when no inference run exists)."""
    s = intradp_summary(result_dir)
    if not s["table6"] and not s["fig1"] and not s["control"]:
        return ""
    L = ["## Intra-DP: distributed inference (scripts/run_inference.py)", ""]
    if s["table6"]:
        emu = None
        L += ["Table 6: mean latency per inference in ms [robot energy per inference in J, power model "
              "model:jetson-xavier-nx], ours on the replayed trace | the paper's (indoors / outdoors).", "",
              *markdown_table(["model", "trace", "estimate, server, split costs", *METHOD_COLUMNS.values()])]
        for r in s["table6"]:
            cells = []
            paper = PAPER_TABLE6.get(r["model"], {})
            for k in METHOD_COLUMNS:
                v = r["methods"].get(k)
                ours = "-" if v is None else f"{_ms(v['mean_latency_s'])} [{v['mean_energy_j']:.2f}]"
                p = paper.get(PAPER_KEY.get(k, k))
                ref = ""
                if p is not None:
                    ix = 1 if r["environment"] == "outdoors" else 0
                    ref = f" \\| {p[ix]:g}" + (f" [{p[2 + ix]:g}]" if p[2 + ix] is not None else "")
                cells.append(ours + ref)
            L.append(f"| {r['model']} | {r['trace']} | {r['estimate']}, {r['server_device']}, {r['split_costs']} | "
                     + " | ".join(cells) + " |")
        L.append("")
        L += ["Components (share of the mean latency: robot compute + transfer + server compute; sequential "
              "plans sum to about 100 %, overlapping ones to more):", "",
              *markdown_table(["model", "trace", *METHOD_COLUMNS.values()])]
        for r in s["table6"]:
            cells = []
            for k in METHOD_COLUMNS:
                v = r["methods"].get(k)
                cells.append("-" if v is None else f"{100 * v['robot_compute_share']:.0f}/{100 * v['transfer_share']:.0f}/"
                             f"{100 * v['server_compute_share']:.0f} = {100 * v['share_sum']:.0f} %")
            L.append(f"| {r['model']} | {r['trace']} | " + " | ".join(cells) + " |")
        L.append("")
        from rog.inference.costmodel import POWER_W

        L += ["Robot states per inference in ms (compute / transmit / both / idle; energy = "
              + " / ".join(f"{POWER_W[x]:g}" for x in ("compute", "transmit", "both", "idle")) + " W x these):", "",
              *markdown_table(["model", "trace", *METHOD_COLUMNS.values()])]
        for r in s["table6"]:
            cells = []
            for k in METHOD_COLUMNS:
                st = (r["methods"].get(k) or {}).get("states_s")
                cells.append("-" if not st else "/".join(f"{1e3 * st.get(x, 0.0):.0f}"
                                                         for x in ("compute", "transmit", "both", "idle")))
            L.append(f"| {r['model']} | {r['trace']} | " + " | ".join(cells) + " |")
        L.append("")
        L += yardstick_markdown(s["table6"])
        checked = [r for r in s["table6"] if r.get("output_mismatches") is not None]
        if checked:
            L += [f"Output check (every inference's output against the whole model's): "
                  f"{sum(r['output_mismatches'] for r in checked)} mismatches in {len(checked)} trace runs"
                  + "".join(f"; {r['dir']}: {r['output_mismatches']}" for r in checked if r["output_mismatches"]) + ".", ""]
        for r in s["table6"]:
            if "latency_reduction_pct" not in r:
                continue
            red, paper = r["latency_reduction_pct"], r.get("paper")
            rel = f"{red:.1f} % below" if red >= 0 else f"{-red:.1f} % above"
            ref = (f"the paper's same row: {paper['latency_reduction_pct']:.1f} % ({verdict(red, paper['latency_reduction_pct'])}, "
                   f"rule: within {MATCH_PP:g} points)" if paper else "no row of the paper's Table 6 for this model")
            claim = app_claim(r["model"])
            if claim:
                ref += f"; the paper's prose for this application: {claim}"
            L.append(f"- {r['model']}, {r['trace']}: Intra-DP's mean latency is {rel} the best layer "
                     f"partition ({METHOD_COLUMNS[r['best_layer']]}); {ref}; "
                     f"{'faster' if r.get('faster_than_all') else 'NOT faster'} than ALL "
                     f"({r.get('latency_reduction_vs_all_pct', float('nan')):.1f} %); "
                     f"{'faster than every' if r['faster_than_every_layer'] else 'NOT faster than every'} layer partition"
                     + (f"; per {WINDOW_S:g} s of trace: " + " / ".join(f"{w:.1f}" for w in r["window_reductions_pct"]) + " %"
                        if r.get("window_reductions_pct") else "") + ".")
            if "loss_latency_reduction_pct" in r:
                lr, le = r["loss_latency_reduction_pct"], r["loss_energy_reduction_pct"]
                L.append(f"- {r['model']}, {r['trace']}: Intra-DP with per-layer plans (LOSS, intra-dp-loss): latency "
                         f"{lr:.1f} % and energy {le:+.1f} % below the same layer partitions (one segment: {red:.1f} % and "
                         f"{r['energy_reduction_pct']:+.1f} %)" + (f"; the paper's same row: {paper['latency_reduction_pct']:.1f} % "
                                                                  f"({verdict(lr, paper['latency_reduction_pct'])})" if paper else "") + ".")
            if "oracle_bound_reduction_pct" in r:
                L.append(f"- {r['model']}, {r['trace']}: given the trace's true rate at each frame's start and no rounding, "
                         f"the cost model's best plans put Intra-DP {r['oracle_bound_reduction_pct']:.1f} % below the best layer "
                         f"partition (rog/papers/intradp/bound.py).")
            en = r["energy_reduction_pct"]
            ref = (f"the paper's same row: {paper['energy_reduction_pct']:+.1f} % ({verdict(en, paper['energy_reduction_pct'])})"
                   if paper else "no paper row")
            L.append(f"- {r['model']}, {r['trace']}: energy per inference {en:+.1f} % below the lowest layer-partition "
                     f"energy; {ref}" + _energy_why(r) + ".")
            if "fastest" in r:
                share = r["intra_dp_local_share"]
                if r["fastest"] == "local":
                    L.append(f"- {r['model']}, {r['trace']}: local execution is the fastest method (negative control); "
                             f"Intra-DP ran the local plan in {100 * share:.0f} % of its inferences.")
        emu = s["table6"][0]
        L.append("")
    for c in s["control"]:
        lat = c["latency_s"]
        vs = ", ".join(f"{METHOD_COLUMNS.get(k, k)} {_ms(v)} ms" for k, v in lat.items())
        L.append(f"- Negative control ({c['model']}, link held at {c['rate_mbit']:g} Mbit/s = {c['rule']}; "
                 f"{c['estimate']} estimate): Intra-DP ran the local plan in {100 * c['intra_dp_local_share']:.0f} % of "
                 f"its {c['intra_dp_n']} inferences; mean latency {vs}.")
    for f in s["fig1"]:
        e = f["emulation"]
        L.append(f"- Fixed-rate sweep ({f['model']}, {', '.join(f'{r:g}' for r in f['rates_mbit'])} Mbit/s; split costs "
                 f"{e.get('split_costs', 'linear')}, server {e.get('server_device', 'cpu-paced')}): the cost model is within 15 % of "
                 f"the measured mean latency at {f['within_15pct']} of {f['points']} points (largest error "
                 f"{100 * f['max_abs_error']:.1f} %); emulated robot = {e['robot_factor']:g} x and server = "
                 f"{e['server_factor']:g} x the measured time (robot/server {e['robot_over_server']:g}).")
        for kind, dist in (f.get("model_error") or {}).items():
            if dist:
                L.append(f"  - {kind} plans: {_dist(dist)}.")
        for side, h in ((k, v) for k, v in (f.get("profile_holdout") or {}).items() if k in ("robot", "server")):
            L.append(f"  - {side} compute at held-out row shares ({len(f['profile_holdout']['shares'])} shares x every local unit): "
                     f"curves {_dist(h['units'])}; the linear share of the whole {_dist(h['units_linear'])}; "
                     f"per share, all units summed: curves {_dist(h['share_sums'])}, linear {_dist(h['share_sums_linear'])}.")
    return "\n".join(L) + "\n"


def plot_intradp(result_dir: str | Path, figure_dir: str | Path, formats: Sequence[str] = MODULE_FORMATS) -> list[Path]:
    """Fig. 1 (latency and energy over the cut, one line per rate, model dashed) and Table 6 bars, one file per
    format."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: list[Path] = []
    docs = load_intradp(result_dir)
    for d in docs:
        if d.get("mode") != "sweep" or not d.get("sweep"):
            continue
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
        for k, rate in enumerate(sorted({r["rate_mbit"] for r in d["sweep"]})):
            pts = sorted((r for r in d["sweep"] if r["rate_mbit"] == rate and r.get("kind", "cut") == "cut"), key=lambda r: r["cut"])
            x = [r["cut"] for r in pts]
            c = f"C{k}"
            axes[0].plot(x, [1e3 * r["latency_s"] for r in pts], "o-", color=c, ms=3, label=f"{rate:g} Mbit/s measured")
            axes[0].plot(x, [1e3 * r["model_latency_s"] for r in pts], "--", color=c, lw=1, label=f"{rate:g} Mbit/s model")
            axes[1].plot(x, [r["energy_j"] for r in pts], "o-", color=c, ms=3, label=f"{rate:g} Mbit/s")
        axes[0].set(xlabel="cut: units computed on the robot (0 = all-offload)", ylabel="latency per inference (ms)",
                    title=f"{d['model']}: latency over the cut (server {d['emulation'].get('server_device', 'cpu-paced')})")
        axes[1].set(xlabel="cut: units computed on the robot", ylabel="robot energy per inference (J, model)",
                    title=f"{d['model']}: energy over the cut")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        out += save_figure(fig, figure_dir, f"intradp_fig1_{d['model']}", formats)
    rows = intradp_summary(result_dir)["table6"]
    if rows:
        fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.6), squeeze=False)
        for ax, r in zip(axes[0], rows):
            keys = [k for k in METHOD_COLUMNS if k in r["methods"]]
            ax.bar(range(len(keys)), [1e3 * r["methods"][k]["mean_latency_s"] for k in keys],
                   color=[f"C{i}" for i in range(len(keys))])
            ax.set_xticks(range(len(keys)), [METHOD_COLUMNS[k] for k in keys], rotation=30, fontsize=7)
            ax.set(ylabel="mean latency (ms)", title=f"{r['model']}, {r['trace']}\nserver {r['server_device']}, split costs {r['split_costs']}")
        fig.tight_layout()
        out += save_figure(fig, figure_dir, "intradp_table6", formats)
    return out
