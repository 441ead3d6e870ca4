"""The ``intradp`` evaluation item: Fig. 1 and Table 6 of Intra-DP on the emulated testbed (opt-in).

``bash scripts/run_all.sh intradp`` runs, one after the other, ``scripts/run_inference.py`` for the
Fig. 1 sweep (VGG19, every cut at 20/50/100 Mbit/s), Table 6 (VGG19 and DenseNet, every planner,
indoors and outdoors synthetic traces) and the negative control (DenseNet on a constant rate where the
cost model puts local first: ``run_inference.py control``), then writes ``result/intradp/summary.md`` and the figures
(``figure/intradp_*``).  A step whose ``result.json`` exists is skipped (delete its folder to rerun).
Not in the default plan: about :data:`ESTIMATE_S` seconds on a 2-core machine.

Run as ``python -m rog.experiment.intradp_item --result-dir R --figure-dir F [--dry-run]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .module_item import ROOT, item_parser, run_step

__all__ = ["NAME", "steps", "ESTIMATE_S", "main"]

NAME = "intradp"
TRACES = {"indoors": ROOT / "configs/traces/indoors-synth.csv", "outdoors": ROOT / "configs/traces/outdoors-synth.csv"}
TRACE_S = 60.0  # trace seconds per planner (each planner replays the trace from its start): 120 frames
CONTROL_S = 20.0  # seconds per planner of the negative control (local, layer-latency, intra-dp)
# Measured here: profiling and planning 20-60 s per model, start-up 10 s, then 5 planners x TRACE_S per trace
# run; the sweep about 7 minutes (30 cuts x 3 rates x 3 inferences of 0.3-1.3 s).
ESTIMATE_S = 4 * (60 + 10 + 5 * TRACE_S) + (60 + 10 + 3 * CONTROL_S) + 420


def steps(result_dir: Path) -> list[tuple[str, list[str]]]:
    """``(output folder, run_inference.py arguments)`` of every step."""
    base = Path(result_dir) / "intradp"
    out = [(str(base / "sweep-vgg19"), ["sweep", "--model", "vgg19", "--rates", "20,50,100", "--n", "3"])]
    for model in ("vgg19", "densenet"):
        for env, trace in TRACES.items():
            d = base / f"trace-{model}-{trace.stem}-passive"
            out.append((str(d), ["trace", "--model", model, "--trace", str(trace), "--duration-s", f"{TRACE_S:g}"]))
    out.append((str(base / "control-densenet"), ["control", "--model", "densenet", "--planners",
                                                 "local,layer-latency,intra-dp", "--duration-s", f"{CONTROL_S:g}"]))
    return [(d, args + ["--out", d]) for d, args in out]


def main(argv=None) -> int:
    a = item_parser("python -m rog.experiment.intradp_item", __doc__).parse_args(argv)
    rc = 0
    for d, args in steps(Path(a.result_dir)):
        rc |= run_step("intradp", f"run_inference.py {' '.join(args)}", [str(ROOT / "scripts/run_inference.py"), *args],
                       (Path(d) / "result.json").exists(), a.dry_run)
    if a.dry_run:
        print(f"[intradp] estimate {ESTIMATE_S / 60:.0f} min")
        return 0
    from rog.analysis.intradp import intradp_markdown, plot_intradp

    md = Path(a.result_dir) / "intradp" / "summary.md"
    md.write_text(intradp_markdown(a.result_dir))
    figs = plot_intradp(a.result_dir, a.figure_dir)
    print(f"[intradp] wrote {md} and {len(figs)} figure(s)")
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
