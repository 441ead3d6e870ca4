"""Rows sent as they finish, measured: the fixed-rate sweep's stream points and the trace runs of
``intra-dp-loss`` against ``intra-dp-stream`` (the rules are in ``docs/intradp.md``, written before the runs).

``python -m rog.papers.intradp.streaming --sweep DIR[,DIR] --traces DIR[,DIR...]`` prints the tables
(markdown) and, on its last line, the JSON of :func:`sweep_verdicts` and :func:`trace_gains`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from rog.analysis.tables import markdown_table

__all__ = ["point_verdict", "sweep_verdicts", "trace_gain", "trace_gains", "markdown", "main"]

LOSS, STREAM = "intra-dp-loss", "intra-dp-stream"


def point_verdict(one: dict, streamed: dict) -> str:
    """``pays`` / ``costs`` / ``not measurable``: the streamed run's mean latency against the one-band run's,
    decided when the difference exceeds twice its standard error (sweep rows: ``latency_s``,
    ``latency_sd_s``, ``n``)."""
    se = math.sqrt(one["latency_sd_s"] ** 2 / one["n"] + streamed["latency_sd_s"] ** 2 / streamed["n"])
    diff = one["latency_s"] - streamed["latency_s"]
    if diff > 2 * se:
        return "pays"
    if -diff > 2 * se:
        return "costs"
    return "not measurable"


def _bands(label: str) -> int:
    return int(label.rsplit("~", 1)[1]) if "~" in label else 1


def sweep_verdicts(result: dict) -> dict:
    """Per rate of a sweep ``result.json`` (kind ``stream``): the plan, each band count's measured and modelled
    latency, the model's pick among 2 and 4 bands, the verdict, and whether the modelled gain has the measured
    one's sign at a decided point (a modelled gain of 0 has none: it does not agree); totals."""
    by_rate: dict[float, dict[int, dict]] = {}
    for row in result.get("sweep", []):
        if row.get("kind") == "stream":
            by_rate.setdefault(row["rate_mbit"], {})[_bands(row["plan"])] = row
    points, errors = [], []
    for rate, rows in sorted(by_rate.items()):
        if 1 not in rows or not ({2, 4} & set(rows)):
            continue
        errors += [r["model_error"] for r in rows.values()]
        pick = min((b for b in (2, 4) if b in rows), key=lambda b: rows[b]["model_latency_s"])
        one, st = rows[1], rows[pick]
        verdict = point_verdict(one, st)
        model_gain = 1 - st["model_latency_s"] / one["model_latency_s"]
        gain = 1 - st["latency_s"] / one["latency_s"]
        points.append({"rate_mbit": rate, "plan": one["plan"], "bands": pick, "verdict": verdict,
                       "latency_ms": {b: round(r["latency_s"] * 1e3, 1) for b, r in sorted(rows.items())},
                       "model_latency_ms": {b: round(r["model_latency_s"] * 1e3, 1) for b, r in sorted(rows.items())},
                       "gain_pct": 100 * gain, "model_gain_pct": 100 * model_gain,
                       "sign_agrees": None if verdict == "not measurable" else gain * model_gain > 0})
    count = {v: sum(p["verdict"] == v for p in points) for v in ("pays", "costs", "not measurable")}
    abs_err = sorted(abs(e) for e in errors)
    return {"model": result.get("model"), "points": points, "verdicts": count,
            "model_error": None if not errors else {"n": len(errors), "median_abs": statistics.median(abs_err),
                                                   "max_abs": abs_err[-1], "n_within_15pct": sum(e <= 0.15 for e in abs_err)},
            "signs_agree": sum(p["sign_agrees"] is True for p in points),
            "signs_decided": sum(p["sign_agrees"] is not None for p in points)}


def _modelled_s(result: dict, recs: list[dict], planner: str) -> float | None:
    """Mean of ``planner``'s plan-table latency at the level each inference of the run used (both planners'
    inferences: the two tables are read at the same levels)."""
    table = {row["rate_mbit"]: row["model_latency_s"] for row in result.get("tables", {}).get(planner, [])}
    vals = [table.get(r.get("level_mbit")) for r in recs if r.get("planner") in (LOSS, STREAM)]
    vals = [v for v in vals if v is not None]
    return statistics.fmean(vals) if vals else None


def trace_gain(run_dir: str | Path) -> dict:
    """One trace run: ``intra-dp-stream``'s measured gain over ``intra-dp-loss``, the modelled gain at the levels
    the run's inferences used (both tables at the same levels), how many of its inferences ran a streamed plan,
    and the output mismatches."""
    run_dir = Path(run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    recs = [json.loads(x) for x in (run_dir / "records.jsonl").read_text().splitlines() if x.strip()]
    m = result["methods"]
    loss_s, stream_s = m[LOSS]["mean_latency_s"], m[STREAM]["mean_latency_s"]
    ml, ms = _modelled_s(result, recs, LOSS), _modelled_s(result, recs, STREAM)
    mine = [r for r in recs if r.get("planner") == STREAM]
    return {"run": run_dir.name, "model": result["model"], "trace": Path(result["trace"]).stem,
            "loss_ms": 1e3 * loss_s, "stream_ms": 1e3 * stream_s, "gain_pct": 100 * (1 - stream_s / loss_s),
            "model_gain_pct": None if not (ml and ms) else 100 * (1 - ms / ml),
            "streamed_inferences": sum(1 for r in mine if r.get("bands", 1) > 1), "inferences": len(mine),
            "output_checked": result.get("output_checked"), "output_mismatches": result.get("output_mismatches")}


def trace_gains(run_dirs) -> dict:
    """:func:`trace_gain` of every run, and per (model, environment) the median and range of the gains."""
    runs = [trace_gain(d) for d in run_dirs]
    groups: dict[str, list] = {}
    for r in runs:
        env = "indoors" if "indoors" in r["trace"] else "outdoors" if "outdoors" in r["trace"] else r["trace"]
        groups.setdefault(f"{r['model']} {env}", []).append(r)
    summary = {}
    for key, rs in sorted(groups.items()):
        g = [r["gain_pct"] for r in rs]
        mg = [r["model_gain_pct"] for r in rs if r["model_gain_pct"] is not None]
        summary[key] = {"seeds": len(rs), "gain_pct_median": statistics.median(g), "gain_pct_range": [min(g), max(g)],
                        "model_gain_pct_median": statistics.median(mg) if mg else None,
                        "streamed_share": sum(r["streamed_inferences"] for r in rs) / max(1, sum(r["inferences"] for r in rs))}
    return {"runs": runs, "groups": summary, "output_mismatches": sum(r["output_mismatches"] or 0 for r in runs),
            "output_checked": sum(r["output_checked"] or 0 for r in runs)}


def markdown(sweeps: list[dict], traces: dict | None) -> str:
    lines = []
    for s in sweeps:
        lines += [f"### {s['model']}: fixed rates", "", *markdown_table(["Mbit/s", "plan",
                                                                         "1 / 2 / 4 bands, measured ms",
                                                                         "modelled ms",
                                                                         "pick",
                                                                         "gain measured",
                                                                         "modelled",
                                                                         "verdict"])]
        for p in s["points"]:
            fmt = lambda d: " / ".join(str(d.get(b, "-")) for b in (1, 2, 4))  # noqa: E731
            lines.append(f"| {p['rate_mbit']:g} | `{p['plan']}` | {fmt(p['latency_ms'])} | {fmt(p['model_latency_ms'])} | "
                         f"{p['bands']} | {p['gain_pct']:+.1f} % | {p['model_gain_pct']:+.1f} % | {p['verdict']} |")
        lines.append("")
    if traces:
        lines += ["### traces", "", *markdown_table(["run", "intra-dp-loss ms", "intra-dp-stream ms", "gain",
                                                     "modelled", "streamed", "mismatches"])]
        for r in traces["runs"]:
            mg = "-" if r["model_gain_pct"] is None else f"{r['model_gain_pct']:+.1f} %"
            lines.append(f"| {r['run']} | {r['loss_ms']:.1f} | {r['stream_ms']:.1f} | {r['gain_pct']:+.1f} % | {mg} | "
                         f"{r['streamed_inferences']}/{r['inferences']} | {r['output_mismatches']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rog.papers.intradp.streaming", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", default="", help="sweep output folders (result.json), comma-separated")
    ap.add_argument("--traces", default="", help="trace output folders (result.json, records.jsonl), comma-separated")
    a = ap.parse_args(argv)
    dirs = lambda text: [Path(d) for d in text.split(",") if d.strip()]  # noqa: E731
    for d in dirs(a.sweep) + dirs(a.traces):
        if not (d / "result.json").is_file():
            ap.error(f"{d}: no result.json there (give the --out folder of a run_inference.py run)")
    sweeps = [sweep_verdicts(json.loads((d / "result.json").read_text())) for d in dirs(a.sweep)]
    traces = trace_gains(dirs(a.traces)) if a.traces else None
    print(markdown(sweeps, traces))
    print(json.dumps({"sweeps": sweeps, "traces": traces}))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
