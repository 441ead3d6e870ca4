"""The ``table5`` steps of the ``scadles`` item: ScaDLES's Table V run to a common target (accuracy and floats sent
per (CR, delta) cell), rules in docs/scadles.md ("Table V to a target").

BSP, 4 workers, the quick workload at lr 1e-3 on the unshaped loopback, :data:`ITERATIONS` iterations, seed
:data:`SEED`: Top-k at each CR with the gate (``norm`` reading) at each delta, the static Top-k, and a dense
reference (delta 0: the gate never opens, every push is dense and counted by the same codec).  Read back: the
common target (the toolkit's rule over every run, iterations as the time axis), each run's iteration and floats
to it, its CNC, its accuracy, beside the paper's.

Run alone: ``python -m rog.papers.scadles.table5_steps --result-dir R --figure-dir F [--dry-run]`` (the ``scadles``
item runs the same steps).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from rog.analysis.tables import fmt, markdown_table
from rog.analysis.metrics import TARGET_FRACTION, select_target, smooth_accuracy, time_to_target_s
from rog.experiment.config import RUN_MODULE
from rog.experiment.module_item import item_main, step_item
from .stream_runs import load_step, plateau_pct
from .verdicts import TABLE_V_PAPER, table_v_cell

SEED = 1  # the 30-iteration gate runs used seed 0
ITERATIONS = 120
WORKERS = 4
RATIOS = (0.1, 0.01)
DELTAS = (0.1, 0.2, 0.3, 0.4)
STATISTIC = "norm"  # the reading that matched the paper's CNC (the gate runs)
FULL_CNC = 0.9  # "compression pays" is judged on the cells that compress at least this share of pushes
# The paper's Table V: accuracy (%) and floats sent per (CR, delta), (ResNet152, VGG19)
PAPER_ACCURACY = {
    (0.1, 0.1): (97.55, 85.45), (0.1, 0.2): (96.81, 84.74), (0.1, 0.3): (98.41, 81.91), (0.1, 0.4): (98.57, 81.78),
    (0.01, 0.1): (97.39, 84.68), (0.01, 0.2): (97.47, 83.98), (0.01, 0.3): (96.72, 83.94), (0.01, 0.4): (94.97, 84.39),
}
PAPER_FLOATS = {
    (0.1, 0.1): (4.43e11, 1.3e12), (0.1, 0.2): (0.56e11, 1.19e12), (0.1, 0.3): (0.4e11, 1.3e10), (0.1, 0.4): (0.4e11, 1.3e10),
    (0.01, 0.1): (6.02e11, 1.3e12), (0.01, 0.2): (4.99e11, 1.3e12), (0.01, 0.3): (2.56e11, 1.3e12),
    (0.01, 0.4): (6.32e8, 1.29e12),
}
# measured here: a 4-worker loopback run of the quick workload, start-up and tests included, about 1.3 s an iteration
ESTIMATE_S = (len(RATIOS) * (len(DELTAS) + 1) + 1) * (20.0 + 1.3 * ITERATIONS)


def cells() -> list[tuple[str, float | None, float | None]]:
    """``(name, CR, delta)`` of every run: the gated cells, the static Top-k per CR (delta None), the dense reference
    (CR None)."""
    out = [(f"cr{cr:g}-d{d:g}", cr, d) for cr in RATIOS for d in DELTAS]
    out += [(f"cr{cr:g}-static", cr, None) for cr in RATIOS]
    return out + [("dense", None, None)]


def _folder(result_dir: Path, name: str, seed: int | None = None) -> Path:
    """A cell's run folder: ``<result>/scadles/table5/<cell>`` (seed :data:`SEED`), or ``<result>/scadles/seed<n>/
    table5/<cell>`` for a run of the fresh-seed rule (``seed`` given)."""
    base = Path(result_dir) / "scadles"
    return (base if seed is None else base / f"seed{int(seed)}") / "table5" / name


def steps(result_dir: Path, seed: int | None = None) -> list[tuple[str, list[str]]]:
    """``(output folder, argv)`` of every run (``seed``: the runs of one seed of the rule, in its own folders)."""
    common = ["-m", RUN_MODULE, "--library", "BSP", "-c", "none", "--testbed", "loopback", "--item", "scadles",
              "--no-progress", "--workers", str(WORKERS), "--iterations", str(ITERATIONS), "--eval-every", "10",
              "--lr", "1e-3", "--seed", str(SEED if seed is None else int(seed)), "--compression", "topk"]
    tag = "" if seed is None else f"-seed{int(seed)}"
    out = []
    for name, cr, d in cells():
        if cr is None:  # dense: the gate at delta 0 never opens
            flags = ["--topk-ratio", "0.1", "--topk-gate", "on", "--topk-gate-delta", "0", "--topk-gate-statistic", STATISTIC]
        elif d is None:
            flags = ["--topk-ratio", f"{cr:g}", "--topk-gate", "off"]
        else:
            flags = ["--topk-ratio", f"{cr:g}", "--topk-gate", "on", "--topk-gate-delta", f"{d:g}",
                     "--topk-gate-statistic", STATISTIC]
        folder = _folder(result_dir, name, seed)
        out.append((str(folder), [*common, *flags, "-n", f"scadles-table5-{name}{tag}", "--result-dir", str(folder)]))
    return out


def push_records(run_dir: Path, workers: int) -> list[list[dict]]:
    """Each worker's per-push records of the Top-k codec (the final flush left out)."""
    out = []
    for k in range(workers):
        p = Path(run_dir) / f"topk-w{k}.json"
        out.append(json.loads(p.read_text())["records"][:-1] if p.exists() else [])
    return out


def floats_to(records: list[list[dict]], iteration: float | None) -> int | None:
    """Floats all workers pushed in their first ``ceil(iteration)`` pushes (BSP: one push an iteration)."""
    if iteration is None:
        return None
    n = int(math.ceil(iteration - 1e-9))
    return sum(int(r["floats"]) for recs in records for r in recs[:n])


def cnc_of(records: list[list[dict]]) -> float | None:
    """The share of pushes the gate sent compressed (CNC), over every worker's records (None: no push)."""
    pushes = sum(len(r) for r in records)
    return sum(bool(x["compressed"]) for r in records for x in r) / pushes if pushes else None


def seed_cnc(result_dir: Path, seed: int) -> dict[tuple[float, float], float]:
    """``{(CR, delta): CNC}`` of one seed's complete gated runs of the fresh-seed rule (missing cells left out)."""
    out = {}
    for name, cr, d in cells():
        if cr is None or d is None:
            continue
        run = load_step(_folder(result_dir, name, seed))
        if run is not None and run.status == "done":
            cnc = cnc_of(push_records(run.run_dir, WORKERS))
            if cnc is not None:
                out[(cr, d)] = cnc
    return out


def _curve(run) -> pd.DataFrame:
    a = run.accuracy.sort_values("iteration")
    return pd.DataFrame({"time_s": a["iteration"].astype(float).to_numpy(), "iteration": a["iteration"].to_numpy(),
                         "accuracy_pct": a["accuracy_pct"].astype(float).to_numpy()})


def table5_rows(result_dir: Path, fraction: float = TARGET_FRACTION) -> dict[str, Any]:
    """Every cell's CNC, iteration and floats to the common target and accuracy; the verdicts (None without every run)."""
    runs = {name: load_step(_folder(result_dir, name)) for name, _, _ in cells()}
    if any(r is None or r.status != "done" for r in runs.values()):
        return dict(complete=False, missing=[n for n, r in runs.items() if r is None or r.status != "done"])
    names = list(runs)
    curves = [smooth_accuracy(_curve(runs[n])) for n in names]
    target, rule = select_target(curves, fraction, names)
    rows = []
    for (name, cr, d), c in zip(cells(), curves):
        recs = push_records(runs[name].run_dir, WORKERS)
        cnc = cnc_of(recs)
        it = time_to_target_s(c, target)
        rows.append(dict(name=name, cr=cr, delta=d, cnc=cnc, iteration_to_target=it, floats_to_target=floats_to(recs, it),
                         floats_total=sum(int(x["floats"]) for r in recs for x in r),
                         accuracy_pct=plateau_pct(runs[name]),
                         cnc_verdict=None if cr is None or d is None else table_v_cell(cr, d, cnc)))
    return dict(complete=True, target_pct=target, rule=rule, rows=rows, **pays(rows))


def pays(rows: list[dict]) -> dict[str, Any]:
    """Per CR: "compression pays" (every gated cell with CNC >= :data:`FULL_CNC` reaches the target with fewer floats
    than the dense reference), or not decidable without such a cell."""
    dense = next((r["floats_to_target"] for r in rows if r["cr"] is None), None)
    out = {}
    for cr in RATIOS:
        full = [r for r in rows if r["cr"] == cr and r["delta"] is not None and (r["cnc"] or 0) >= FULL_CNC]
        if not full or dense is None or any(r["floats_to_target"] is None for r in full):
            out[f"pays_cr{cr:g}"] = "not decidable (no cell with CNC >= 0.9)" if not full else "not decidable"
        else:
            out[f"pays_cr{cr:g}"] = "agrees" if all(r["floats_to_target"] < dense for r in full) else "does not agree"
    return out


def markdown(result_dir: Path) -> str:
    """Table V's rows to the target, beside the paper's."""
    d = table5_rows(result_dir)
    if not d["complete"]:
        return f"## Table V to a target (table5 steps)\n\nRuns missing: {', '.join(d['missing'])}.\n"
    lines = ["## Table V to a common target (BSP, 4 workers, loopback, seed 1, 120 iterations)", "",
             f"Target: {fmt(d['target_pct'], 1, unit=' %', none='n/a')} ({d['rule']}).", "",
             *markdown_table(["CR", "delta", "CNC", "CNC verdict", "paper CNC ResNet152 / VGG19",
                              "iteration to target", "floats to target", "accuracy",
                              "paper accuracy ResNet152 / VGG19", "paper floats sent ResNet152 / VGG19"])]
    for r in d["rows"]:
        key = (r["cr"], r["delta"])
        pc = "/".join(f"{x:g}" for x in TABLE_V_PAPER[key]) if key in TABLE_V_PAPER else "-"
        pa = "/".join(f"{x:g} %" for x in PAPER_ACCURACY[key]) if key in PAPER_ACCURACY else "-"
        pf = "/".join(f"{x:.3g}" for x in PAPER_FLOATS[key]) if key in PAPER_FLOATS else "-"
        cr = "dense" if r["cr"] is None else f"{r['cr']:g}"
        delta = "0 (never opens)" if r["cr"] is None else ("static" if r["delta"] is None else f"{r['delta']:g}")
        ft = "n/a" if r["floats_to_target"] is None else f"{r['floats_to_target']:.3g}"
        lines.append(f"| {cr} | {delta} | {fmt(r['cnc'], 2, none='n/a')} | {r['cnc_verdict'] or '-'} | {pc} | "
                     f"{fmt(r['iteration_to_target'], 1, none='n/a')} | {ft} | {fmt(r['accuracy_pct'], 1, unit=' %', none='n/a')} | {pa} | {pf} |")
    lines += ["", "Paper: at CR 0.1 and delta above 0.2, ResNet152 converges by exchanging fewer floats. Rule: at each CR, "
              f"every gated cell with CNC >= {FULL_CNC:g} needs fewer floats to the target than the dense reference: "
              f"CR 0.1: **{d['pays_cr0.1']}**; CR 0.01: **{d['pays_cr0.01']}**. Accuracy is reported, not judged.", ""]
    return "\n".join(lines)


def plot(result_dir: Path, figure_dir: Path) -> list[Path]:
    """No figure of its own (the table is the result)."""
    return []


def main(argv=None) -> int:
    """Run the steps not yet done, then write ``<result>/scadles/table5/summary.md`` and the figures."""
    return item_main(step_item(sys.modules[__name__], "scadles", "scadles/table5", "python -m rog.papers.scadles.table5_steps"), argv)


if __name__ == "__main__":
    sys.exit(main())
