"""Module item ``intradp-streaming``: Intra-DP's rows sent as they finish, measured (the protocol of
``docs/intradp.md``, section "Rows sent as they finish, built").

Steps, each skipped when its ``result.json`` exists (delete the folder to rerun), under ``R/intradp_streaming/``:
the fixed-rate sweeps (``python -m rog.inference.experiment sweep --sweep-plans stream``, as ``scripts/run_inference.py``, VGG19 and DenseNet at 5-100 Mbit/s,
8 inferences a point), then ``intra-dp-loss`` against ``intra-dp-stream`` on fresh synthetic traces of
:data:`SEEDS` (generated into ``traces/``), indoors and outdoors, both models, :data:`TRACE_S` s a planner.
Then ``summary.md`` and ``summary.json`` (:mod:`rog.papers.intradp.streaming`).  No figure.

Run as ``python -m rog.papers.intradp.streaming_item --result-dir R [--dry-run] [--seeds 109,110,111]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rog.experiment.module_item import ModuleItem, Summary, item_main, python_step

__all__ = ["NAME", "SEEDS", "TRACE_S", "ESTIMATE_S", "steps", "ITEM", "main"]

NAME = "intradp-streaming"
SEEDS = (109, 110, 111)  # fresh when the protocol was written (0 committed, 101-108 used before)
SEEDS_FLAG = "--seeds"  # run_all.sh --seeds passes its seeds on as the trace seeds
MODELS = ("vgg19", "densenet")
ENVIRONMENTS = ("indoors", "outdoors")
RATES = "5,10,20,50,100"
TRACE_S = 30.0  # seconds per planner on each trace
TRACE_LEN_S = 300.0  # each generated trace
# Measured here (27 Nov, 2-core machine): a sweep about 2 minutes (profile, 15 points x 8 inferences), a trace
# run about 1.5 minutes (profile and plan tables, 2 planners x TRACE_S).
ESTIMATE_S = 2 * 120 + len(SEEDS) * len(MODELS) * len(ENVIRONMENTS) * 90


def steps(result_dir: Path, seeds=SEEDS) -> list[tuple[str, list[str]]]:
    """``(output folder, python arguments)`` of every step, in order (traces before the runs that replay them)."""
    base = Path(result_dir) / "intradp_streaming"
    out: list[tuple[str, list[str]]] = []
    for m in MODELS:
        d = base / f"sweep-{m}"
        out.append((str(d), ["-m", "rog.inference.experiment", "sweep", "--model", m, "--rates", RATES, "--sweep-plans", "stream",
                             "--n", "8", "--out", str(d)]))
    for s in seeds:
        for env in ENVIRONMENTS:
            trace = base / "traces" / f"{env}-seed{s}.csv"
            out.append((str(trace), ["-m", "data_gen.synth_traces", "--kind", env, "--seconds", f"{TRACE_LEN_S:g}",
                                     "--seed", str(s), "--out", str(trace)]))
            for m in MODELS:
                d = base / f"trace-{m}-{env}-{s}"
                out.append((str(d), ["-m", "rog.inference.experiment", "trace", "--model", m, "--trace", str(trace),
                                     "--duration-s", f"{TRACE_S:g}", "--planners", "intra-dp-loss,intra-dp-stream",
                                     "--out", str(d)]))
    return out


def _done(path: str) -> bool:
    p = Path(path)
    return p.is_file() if p.suffix == ".csv" else (p / "result.json").is_file()


def _check(a, ap) -> None:
    try:
        a.seed_list = [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--seeds {a.seeds!r}: give integers, e.g. --seeds 109,110,111")
    return None


def _summarise(a, rc: int) -> Summary:
    from rog.papers.intradp.streaming import markdown, sweep_verdicts, trace_gains

    base = Path(a.result_dir) / "intradp_streaming"
    sweeps = [sweep_verdicts(json.loads((base / f"sweep-{m}" / "result.json").read_text()))
              for m in MODELS if (base / f"sweep-{m}" / "result.json").is_file()]
    runs = [d for d in sorted(base.glob("trace-*")) if (d / "result.json").is_file()]
    traces = trace_gains(runs) if runs else None
    complete = not rc and len(sweeps) == len(MODELS) and len(runs) == len(a.seed_list) * len(MODELS) * len(ENVIRONMENTS)
    head = "" if complete else "**Incomplete**: a step failed or is missing (see above); what exists is shown.\n\n"
    return Summary(f"# Intra-DP: rows sent as they finish\n\n{head}{markdown(sweeps, traces)}\n",
                   doc={"complete": complete, "sweeps": sweeps, "traces": traces})


ITEM = ModuleItem(
    tag=NAME, folder="intradp_streaming", prog="python -m rog.papers.intradp.streaming_item", doc=__doc__,
    steps=lambda a: (python_step(args, _done(path)) for path, args in steps(Path(a.result_dir), a.seed_list)),
    summarise=_summarise, check=_check, estimate_s=lambda a: ESTIMATE_S,
    arguments=lambda ap: ap.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="trace seeds (default %(default)s)"))


def main(argv=None) -> int:
    return item_main(ITEM, argv)


if __name__ == "__main__":
    sys.exit(main())
