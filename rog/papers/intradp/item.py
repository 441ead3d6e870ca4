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

from rog.experiment.module_item import ROOT, ModuleItem, Step, Summary, item_main

__all__ = ["NAME", "steps", "ESTIMATE_S", "ITEM", "main"]

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


def _check(a, ap) -> None:
    """Refuse a bad replicate flag (``--replicate-seeds``, ``--models``, ``--environments``); keep the parsed lists on ``a``."""
    from rog.experiment.items import parse_seeds
    from rog.inference.models import MODELS

    if not a.replicate_seeds:
        return None
    try:
        a.seeds = parse_seeds(a.replicate_seeds)
    except ValueError as e:
        ap.error(f"--replicate-seeds: {e}")
    a.model_list = [m.strip() for m in a.models.split(",") if m.strip()]
    a.environment_list = [e.strip() for e in a.environments.split(",") if e.strip()]
    if not a.environment_list or any(e not in TRACES for e in a.environment_list):
        ap.error(f"--environments {a.environments!r}: give a comma list of {', '.join(TRACES)}")
    if not a.model_list or any(m not in MODELS for m in a.model_list):
        ap.error(f"--models {a.models!r}: give a comma list of {', '.join(MODELS)}")
    return None


def _inference(d: str, args: list[str]) -> Step:
    return Step(f"run_inference.py {' '.join(args)}", ["-m", "rog.inference.experiment", *args],
                (Path(d) / "result.json").exists())


def _steps(a):
    """The default steps, or with ``--replicate-seeds`` each replicate's trace (generated when missing) and run."""
    if not a.replicate_seeds:
        yield from (_inference(d, args) for d, args in steps(Path(a.result_dir), a.intra_dp_plans))
        return
    for d, args, trace, env, seed in replicate_steps(Path(a.result_dir), a.seeds, a.model_list, a.environment_list,
                                                     a.server_device, a.intra_dp_plans):
        if not trace.exists():
            if not a.dry_run:
                trace.parent.mkdir(parents=True, exist_ok=True)
            yield Step(f"trace {trace.name}", ["-m", "data_gen.synth_traces", "--kind", env, "--seconds",
                                               f"{REPLICATE_TRACE_S:g}", "--seed", str(seed), "--out", str(trace)])
        yield _inference(d, args)


def _summarise(a, rc: int) -> Summary:
    from .summary import intradp_markdown, plot_intradp

    return Summary(intradp_markdown(a.result_dir), figures=plot_intradp(a.result_dir, a.figure_dir))


def _arguments(ap) -> None:
    ap.add_argument("--replicate-seeds", default=None,
                    help="run the fresh-replicate protocol on these trace seeds (e.g. 101,102,103) instead of the default steps")
    ap.add_argument("--models", default="vgg19,densenet", help="replicates: comma list of models (default vgg19,densenet)")
    ap.add_argument("--environments", default="indoors,outdoors", help="replicates: comma list of indoors, outdoors")
    ap.add_argument("--server-device", choices=("cpu", "cuda"), default="cpu", help="replicates: the server's device")
    ap.add_argument("--intra-dp-plans", choices=tuple(INTRA_DP_PLANS), default="both",
                    help="Table 6's Intra-DP: one-segment plans (intra-dp), per-layer plans (intra-dp-loss, LOSS) or both "
                         "side by side (default; the summary shows a row for each)")


ITEM = ModuleItem(tag=NAME, folder=NAME, prog="python -m rog.papers.intradp.item", doc=__doc__, steps=_steps,
                  summarise=_summarise, arguments=_arguments, check=_check,
                  estimate_s=lambda a: None if a.replicate_seeds else ESTIMATE_S)


def main(argv=None) -> int:
    return item_main(ITEM, argv)


if __name__ == "__main__":
    sys.exit(main())
