"""Intra-DP's Table 6 verdicts as graded rows (:mod:`rog.analysis.grades`).

Every row names the server it ran with (the paced CPU server, or the CUDA server) and the energy rows name their
source: the power-state model of the emulated robot (``rog.inference.costmodel.POWER_W`` over the time in each
state), not a tegrastats reading.  :func:`graded_rows` reads the yardstick rows of a result folder
(:func:`rog.papers.intradp.paper.yardstick`); :func:`documented_rows` gives the rows docs/intradp.md reports.
The paper's planner (LOSS) is counted; the one-segment ablation and the one GPU-server run are set beside.
"""

from __future__ import annotations

from rog.analysis.grades import GradedRow, outcome_of

__all__ = ["PAPER_NAME", "DOCS", "SCALED", "ENERGY_SOURCE", "SERVERS", "yardstick_rows", "graded_rows", "documented_rows"]

DOCS = "docs/intradp.md"  # where the documented rows come from
PAPER_NAME = "Intra-DP"
SCALED = ("emulated robot = 30 x this CPU's profile, synthetic traces of 60 s, re-implemented baselines "
          "(paper: Jetson robot, GPU server, real Wi-Fi)")
ENERGY_SOURCE = "energy from the power-state model (model:jetson-xavier-nx), not tegrastats"
SERVERS = {"cpu-paced": "paced CPU server (3 x this CPU)", "cuda": "CUDA server (GPU)"}


def _row(model, env, what, ours, paper, verdict, server, plans, n, counted=True, note="") -> GradedRow:
    srv = SERVERS.get(server, str(server))
    against = "the best layer partition" if what == "latency" else "the lowest layer-partition energy"
    return GradedRow(PAPER_NAME, f"Table 6 {model} {env}: {what} reduction vs {against}",
                     f"{paper:+.1f} %", ours, outcome_of(verdict), SCALED + f"; {srv}",
                     reading=f"{plans}, {srv}" + (f"; {ENERGY_SOURCE}" if what == "energy" else ""), counted=counted,
                     seeds=n, sentence=note or ("Energy is modelled, so this row says how the model prices the plans."
                                                if what == "energy" else ""))


def yardstick_rows(ys: list[dict]) -> list[GradedRow]:
    """One row per yardstick entry and measure; LOSS rows on the paced CPU server are counted, the rest beside."""
    out = []
    for y in ys:
        p = y.get("paper")
        if not p:
            continue
        counted = y.get("plans") == "LOSS" and y.get("server_device", "cpu-paced") == "cpu-paced"
        for what in ("latency", "energy"):
            sp = y[f"{what}_reduction_pct"]
            ours = "n/a" if not sp or sp["median"] is None else f"{sp['median']:+.1f} % [{sp['min']:+.1f}, {sp['max']:+.1f}]"
            out.append(_row(y["model"], y["environment"], what, ours, p[f"{what}_reduction_pct"], y[f"{what}_verdict"],
                            y.get("server_device", "cpu-paced"), y.get("plans", "one segment"), f"{y['n']} traces",
                            counted))
    return out


def graded_rows(summary: dict) -> list[GradedRow]:
    """The graded rows of :func:`rog.papers.intradp.summary.intradp_summary`'s dict."""
    return yardstick_rows(summary.get("yardstick") or [])


def documented_rows() -> list[GradedRow]:
    """The rows docs/intradp.md reports: LOSS on seeds 106-108 (paced CPU server), and beside it the GPU-server run."""
    lat = {("vgg19", "indoors"): (18.9, 20.9, "matches"), ("vgg19", "outdoors"): (13.2, 20.3, "below"),
           ("densenet", "indoors"): (24.6, 9.9, "above"), ("densenet", "outdoors"): (14.9, 8.3, "above")}
    en = {("vgg19", "indoors"): (-76.7, 15.8), ("vgg19", "outdoors"): (-42.9, -2.7),
          ("densenet", "indoors"): (-64.0, 14.6), ("densenet", "outdoors"): (-35.3, 0.0)}
    gpu = {("vgg19", "indoors"): 5.0, ("vgg19", "outdoors"): 10.1, ("densenet", "indoors"): 12.4,
           ("densenet", "outdoors"): 9.8}
    from .paper import verdict

    out = []
    for (m, e), (ours, paper, v) in lat.items():
        out.append(_row(m, e, "latency", f"{ours:+.1f} % (median)", paper, v, "cpu-paced", "LOSS", "seeds 106-108"))
        out.append(_row(m, e, "latency", f"{gpu[(m, e)]:+.1f} %", paper, verdict(gpu[(m, e)], paper), "cuda", "LOSS",
                        "seed 104, 8 s per planner", counted=False,
                        note="One short H200 run: where the GPU server lands, not a verdict."))
        eo, ep = en[(m, e)]
        out.append(_row(m, e, "energy", f"{eo:+.1f} % (median)", ep, verdict(eo, ep), "cpu-paced", "LOSS", "seeds 106-108"))
    return out
