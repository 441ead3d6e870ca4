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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", nargs="*", default=[], help="profiles of python -m rog.inference.profiler --out")
    ap.add_argument("--result-dir", required=True, help="the folder holding intradp/<run>/result.json")
    a = ap.parse_args(argv)
    from rog.analysis.intradp import intradp_markdown, intradp_summary

    lines, profiles = profile_lines(a.profiles)
    print("\n".join(lines))
    print(intradp_markdown(a.result_dir))
    s = intradp_summary(a.result_dir)
    rows = [{"model": r["model"], "environment": r["environment"], "server_device": r["server_device"],
             "n": {k: v["n"] for k, v in r["methods"].items()},
             "latency_reduction_pct": r.get("latency_reduction_pct"),
             "loss_latency_reduction_pct": r.get("loss_latency_reduction_pct"),
             "output_mismatches": r.get("output_mismatches")} for r in s["table6"]]
    print(json.dumps({"profiles": profiles, "table6": rows}))
    return 0 if rows and all(r["output_mismatches"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
