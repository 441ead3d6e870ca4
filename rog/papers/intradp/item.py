"""The ``intradp`` evaluation item: Fig. 1 and Table 6 of Intra-DP on the emulated testbed (opt-in).

``bash scripts/run_all.sh intradp`` runs, one after the other, ``scripts/run_inference.py`` for the
Fig. 1 sweep (VGG19, every cut at 20/50/100 Mbit/s), Table 6 (VGG19 and DenseNet, every planner (Intra-DP
with one-segment and with per-layer plans side by side: ``--intra-dp-plans``),
indoors and outdoors synthetic traces) and the negative control (DenseNet on a constant rate where the
cost model puts local first: ``run_inference.py control``), then writes ``result/intradp/summary.md`` and the figures
(``figure/intradp_*``).  A step whose ``result.json`` exists is skipped (delete its folder to rerun).
Not in the default plan: about :data:`ESTIMATE_S` seconds on a 2-core machine.

Run as ``python -m rog.papers.intradp.item --result-dir R --figure-dir F [--dry-run]``.

Fresh replicates (the protocol of ``docs/intradp.md``, not part of the item's default steps):
``--replicate-seeds 101,102,103`` generates one synthetic trace per environment and seed
(``data_gen.synth_traces``, :data:`REPLICATE_TRACE_S` s, into ``R/intradp/traces/``) and runs Table 6
on each instead of the default steps (``--models``, ``--environments``, ``--server-device`` narrow or
change them).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rog.experiment.module_item import ROOT, item_parser, run_step

__all__ = ["NAME", "steps", "ESTIMATE_S", "main"]

NAME = "intradp"
TRACES = {"indoors": ROOT / "configs/traces/indoors-synth.csv", "outdoors": ROOT / "configs/traces/outdoors-synth.csv"}
TRACE_S = 60.0  # trace seconds per planner (each planner replays the trace from its start): 120 frames
CONTROL_S = 20.0  # seconds per planner of the negative control (local, layer-latency, intra-dp)
# Measured here: profiling and planning 20-60 s per model, start-up 10 s, then 5 planners x TRACE_S per trace
# run; the sweep about 7 minutes (30 cuts x 3 rates x 3 inferences of 0.3-1.3 s).
ESTIMATE_S = 4 * (60 + 10 + 6 * TRACE_S) + (60 + 10 + 3 * CONTROL_S) + 420
# run_all.sh --seeds passes the seeds on as the fresh-replicate protocol's trace seeds
SEEDS_FLAG = "--replicate-seeds"
# Table 6's planners by --intra-dp-plans: Intra-DP with one split segment (intra-dp, the ablation), with
# per-layer plans (intra-dp-loss, the paper's LOSS) or both side by side (the default), next to the baselines.
BASELINES = ("local", "all", "layer-latency", "layer-energy-deadline")
INTRA_DP_PLANS = {"one-segment": ("intra-dp",), "loss": ("intra-dp-loss",), "both": ("intra-dp", "intra-dp-loss")}


def _planners(intra_dp_plans: str) -> list[str]:
    return ["--planners", ",".join(BASELINES + INTRA_DP_PLANS[intra_dp_plans])]


def steps(result_dir: Path, intra_dp_plans: str = "both") -> list[tuple[str, list[str]]]:
    """``(output folder, run_inference.py arguments)`` of every step."""
    base = Path(result_dir) / "intradp"
    out = [(str(base / "sweep-vgg19"), ["sweep", "--model", "vgg19", "--rates", "20,50,100", "--n", "3"])]
    for model in ("vgg19", "densenet"):
        for env, trace in TRACES.items():
            d = base / f"trace-{model}-{trace.stem}-passive"
            out.append((str(d), ["trace", "--model", model, "--trace", str(trace), "--duration-s", f"{TRACE_S:g}",
                                 *_planners(intra_dp_plans)]))
    out.append((str(base / "control-densenet"), ["control", "--model", "densenet", "--planners",
                                                 "local,layer-latency,intra-dp", "--duration-s", f"{CONTROL_S:g}"]))
    return [(d, args + ["--out", d]) for d, args in out]


REPLICATE_TRACE_S = 300.0  # each replicate trace: 300 s (a planner replays its first TRACE_S)


def replicate_steps(result_dir: Path, seeds, models=("vgg19", "densenet"), environments=("indoors", "outdoors"),
                    server_device: str = "cpu", intra_dp_plans: str = "both") -> list[tuple[str, list[str], Path, str, int]]:
    """``(output folder, run_inference.py arguments, trace file, environment, seed)`` of every replicate run:
    for each model, environment and seed, Table 6 on a fresh synthetic trace of that seed."""
    base = Path(result_dir) / "intradp"
    out = []
    for model in models:
        for env in environments:
            for seed in seeds:
                trace = base / "traces" / f"synth-{env}-seed{seed}.csv"
                tag = "" if server_device == "cpu" else f"-{server_device}"
                d = base / f"trace-{model}-{trace.stem}-passive{tag}"
                args = ["trace", "--model", model, "--trace", str(trace), "--duration-s", f"{TRACE_S:g}",
                        "--server-device", server_device, *_planners(intra_dp_plans), "--out", str(d)]
                out.append((str(d), args, trace, env, int(seed)))
    return out


def _replicates(a, ap) -> int:
    from rog.experiment.items import parse_seeds
    from rog.inference.models import MODELS

    try:
        seeds = parse_seeds(a.replicate_seeds)
    except ValueError as e:
        ap.error(f"--replicate-seeds: {e}")
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    envs = [e.strip() for e in a.environments.split(",") if e.strip()]
    bad = [e for e in envs if e not in TRACES] or not envs
    if bad:
        ap.error(f"--environments {a.environments!r}: give a comma list of {', '.join(TRACES)}")
    if not models or any(m not in MODELS for m in models):
        ap.error(f"--models {a.models!r}: give a comma list of {', '.join(MODELS)}")
    rc = 0
    for d, args, trace, env, seed in replicate_steps(Path(a.result_dir), seeds, models, envs, a.server_device,
                                                     a.intra_dp_plans):
        if not trace.exists() and not a.dry_run:
            trace.parent.mkdir(parents=True, exist_ok=True)
            rc |= run_step("intradp", f"trace {trace.name}", ["-m", "data_gen.synth_traces", "--kind", env, "--seconds",
                                                                  f"{REPLICATE_TRACE_S:g}", "--seed", str(seed), "--out", str(trace)],
                           False, False)
        rc |= run_step("intradp", f"run_inference.py {' '.join(args)}", ["-m", "rog.inference.experiment", *args],
                       (Path(d) / "result.json").exists(), a.dry_run)
    return rc


def main(argv=None) -> int:
    ap = item_parser("python -m rog.papers.intradp.item", __doc__)
    ap.add_argument("--replicate-seeds", default=None,
                    help="run the fresh-replicate protocol on these trace seeds (e.g. 101,102,103) instead of the default steps")
    ap.add_argument("--models", default="vgg19,densenet", help="replicates: comma list of models (default vgg19,densenet)")
    ap.add_argument("--environments", default="indoors,outdoors", help="replicates: comma list of indoors, outdoors")
    ap.add_argument("--server-device", choices=("cpu", "cuda"), default="cpu", help="replicates: the server's device")
    ap.add_argument("--intra-dp-plans", choices=tuple(INTRA_DP_PLANS), default="both",
                    help="Table 6's Intra-DP: one-segment plans (intra-dp), per-layer plans (intra-dp-loss, LOSS) or both "
                         "side by side (default; the summary shows a row for each)")
    a = ap.parse_args(argv)
    if a.replicate_seeds:
        rc = _replicates(a, ap)
        if a.dry_run:
            return rc
    else:
        rc = _default_steps(a)
        if a.dry_run:
            print(f"[intradp] estimate {ESTIMATE_S / 60:.0f} min")
            return 0
    from .summary import intradp_markdown, plot_intradp

    md = Path(a.result_dir) / "intradp" / "summary.md"
    md.write_text(intradp_markdown(a.result_dir))
    figs = plot_intradp(a.result_dir, a.figure_dir)
    print(f"[intradp] wrote {md} and {len(figs)} figure(s)")
    return 1 if rc else 0


def _default_steps(a) -> int:
    rc = 0
    for d, args in steps(Path(a.result_dir), a.intra_dp_plans):
        rc |= run_step("intradp", f"run_inference.py {' '.join(args)}", ["-m", "rog.inference.experiment", *args],
                       (Path(d) / "result.json").exists(), a.dry_run)
    return rc


if __name__ == "__main__":
    sys.exit(main())
