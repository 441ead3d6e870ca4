"""The report of ``bash scripts/gpu_check.sh LOG intradp``: the server's per-unit times from the profiles
and the reduced Table 6 (with the server that ran marked), as markdown; JSON on the last line.

    python scripts/intradp_gpu_report.py --profiles LOG/intradp_profile_vgg19.json LOG/intradp_profile_densenet.json \
        --result-dir /tmp/rog_gpu_check/intradp_run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def profile_lines(paths: list[str]) -> tuple[list[str], list[dict]]:
    """Per profile: the server's device, its whole-model seconds next to the robot CPU's, the largest units."""
    L = ["Server per-unit times (fastest of the repeats, whole unit, one inference of a 224 x 224 image):", "",
         "| model | server device | GPU | units | server total ms | robot CPU total ms (before the robot factor) | "
         "largest server units (ms) |", "|---|---|---|---|---|---|---|"]
    brief = []
    for p in paths:
        d = json.loads(Path(p).read_text())
        top = sorted(d["units"], key=lambda u: -u["server_s"])[:4]
        L.append(f"| {d['model']} | {d['server_device']} | {d.get('gpu') or '-'} | {len(d['units'])} | "
                 f"{1e3 * d['server_total_s']:.2f} | {1e3 * d['robot_cpu_total_s']:.1f} | "
                 + ", ".join(f"{u['unit']} {u['name']} {1e3 * u['server_s']:.3f}" for u in top) + " |")
        brief.append({"model": d["model"], "server_device": d["server_device"], "gpu": d.get("gpu"),
                      "server_total_ms": round(1e3 * d["server_total_s"], 3),
                      "robot_cpu_total_ms": round(1e3 * d["robot_cpu_total_s"], 2)})
    return L + [""], brief


def _paper_module():
    """``rog/papers/intradp/paper.py`` loaded on its own: it needs only the standard library, while the
    ``rog.analysis`` package imports pandas, which a bare GPU image may lack."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "rog" / "papers" / "intradp" / "paper.py"
    spec = importlib.util.spec_from_file_location("intradp_paper_standalone", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def table_lines(result_dir: str) -> tuple[list[str], list[dict]]:
    """Per run: every planner's mean latency [energy] (frames), both Intra-DP planners' reductions against
    the best layer partition next to the paper's same row, the server that ran, the output mismatches."""
    P = _paper_module()
    names = list(P.METHOD_COLUMNS)
    L = ["Reduced Table 6: mean latency ms [robot energy J] (frames) per planner; Intra-DP's latency reduction "
         "against the best layer partition, one segment / LOSS | the paper's same row:", "",
         "| model | environment | server | " + " | ".join(P.METHOD_COLUMNS.values()) + " | reduction: one segment / LOSS "
         "\\| paper | output mismatches |", "|---|---|---|" + "---|" * (len(names) + 2)]
    rows = []
    for f in sorted(Path(result_dir, "intradp").glob("*/result.json")):
        d = json.loads(f.read_text())
        m = {k: v for k, v in d.get("methods", {}).items() if v.get("n")}
        env = "indoors" if "indoor" in Path(d["trace"]).stem.lower() else "outdoors"
        lat, en = {k: v["mean_latency_s"] for k, v in m.items()}, {k: v["mean_energy_j"] for k, v in m.items()}
        one, loss = P.row_ratios(lat, en), P.row_ratios(lat, en, ours="intra-dp-loss")
        paper = P.paper_ratios(d["model"], env)
        red = lambda r: None if r is None else round(r["latency_reduction_pct"], 1)  # noqa: E731
        row = {"model": d["model"], "environment": env, "server_device": d["emulation"]["server_device"],
               "n": {k: v["n"] for k, v in m.items()}, "latency_ms": {k: round(1e3 * v, 1) for k, v in lat.items()},
               "latency_reduction_pct": red(one), "loss_latency_reduction_pct": red(loss),
               "paper_latency_reduction_pct": red(paper), "output_mismatches": d.get("output_mismatches")}
        rows.append(row)
        cells = [f"{1e3 * lat[k]:.1f} [{en[k]:.2f}] ({m[k]['n']})" if k in m else "-" for k in names]
        L.append(f"| {d['model']} | {env} | {row['server_device']} | " + " | ".join(cells)
                 + f" | {row['latency_reduction_pct']} / {row['loss_latency_reduction_pct']} \\| "
                 f"{row['paper_latency_reduction_pct']} | {row['output_mismatches']} |")
    return L + [""], rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", nargs="*", default=[], help="profiles of python -m rog.inference.profiler --out")
    ap.add_argument("--result-dir", required=True, help="the folder holding intradp/<run>/result.json")
    a = ap.parse_args(argv)
    lines, profiles = profile_lines(a.profiles)
    table, rows = table_lines(a.result_dir)
    print("\n".join(lines + table))
    try:  # the whole summary section (components, states, yardstick, energy), where rog.analysis imports
        from rog.papers.intradp.summary import intradp_markdown

        print(intradp_markdown(a.result_dir))
    except ImportError as e:
        print(f"(the full summary needs rog.analysis, which did not import here: {e})")
    print(json.dumps({"profiles": profiles, "table6": rows}))
    return 0 if rows and all(r["output_mismatches"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
