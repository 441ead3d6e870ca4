"""Figures of the ADSP items (tables in :mod:`rog.papers.adsp.summary`): ``adsp_fig1`` (time per step
split into compute / communication / stall per system, ADSP's Fig. 1) and ``adsp_ushape`` (time to the
common target loss against the fixed commit rate, with where each online search landed: Fig. 3a), ``adsp_fig4a``
and ``adsp_fig4d`` (the global loss against time and against the steps trained: Fig. 4a and 4d)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rog.analysis.figure_files import save_figure  # noqa: E402

COLORS = {"compute_s": "#4c72b0", "comm_s": "#dd8452", "stall_s": "#c44e52"}
LABELS = {"compute_s": "computation", "comm_s": "communication", "stall_s": "stall"}



def plot_adsp(d: dict[str, Any] | None, figure_dir: str | Path, formats=("pdf", "png")) -> list[Path]:
    """Draw the ADSP figures that ``d`` (:func:`~rog.papers.adsp.summary.adsp_summary`) supports."""
    if not d:
        return []
    fdir, out = Path(figure_dir), []
    rows = [x for x in d["fig1"] if x["iter_s"] is not None]
    if rows:
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        missing = []  # a part without a value is left out (not drawn as 0) and named in the legend
        for i, x in enumerate(rows):
            bottom = 0.0
            for key in ("compute_s", "comm_s", "stall_s"):
                if x[key] is None:
                    missing.append(f"{x['system']} {LABELS[key]}")
                    continue
                ax.bar(i, x[key], 0.6, bottom=bottom, color=COLORS[key], label=LABELS[key] if i == 0 else None)
                bottom += x[key]
        if missing:
            ax.bar(0, 0, 0, color="none", label=f"not drawn, no value: {', '.join(missing)}")
            if x["waiting_share"] is not None:
                ax.text(i, bottom, f"wait {100 * x['waiting_share']:.0f} %", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(rows)), [x["system"] for x in rows])
        ax.set_ylabel("seconds per step (mean over workers)")
        ax.set_title("ADSP Fig. 1: 3 workers at 1:1:3", fontsize=10)
        ax.legend(fontsize=8)
        out += save_figure(fig, fdir, "adsp_fig1", formats)
    u = d["ushape"]
    pts = [x for x in u["rows"] if x["time_to_target_s"] is not None]
    if pts:
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        ax.plot([x["k"] for x in pts], [x["time_to_target_s"] for x in pts], "o-", color="#4c72b0",
                label="fixed commit rate")
        top = max(x["time_to_target_s"] for x in pts)
        for j, s in enumerate(u["searches"]):
            if s["k"] is not None:
                ax.plot([s["k"]], [top * (1.05 + 0.04 * j)], "v", color="#c44e52",
                        label="online search landed (seeds)" if j == 0 else None)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("commits per check period")
        ax.set_ylabel(f"time to loss {u['target_loss']:.3f} (s)" if u["target_loss"] is not None else "time to target (s)")
        ax.set_title("ADSP Fig. 3a: the commit rate's U", fontsize=10)
        ax.legend(fontsize=8)
        out += save_figure(fig, fdir, "adsp_ushape", formats)
    return out


def plot_fig4ad(runs, figure_dir: str | Path, formats=("pdf", "png"), tag: str = "fig1") -> list[Path]:
    """``adsp_fig4a`` (the global loss against time) and ``adsp_fig4d`` (against the steps trained at all
    workers), one panel per seed, one line per system, from the ``fig1`` runs with the PS's global grid."""
    from .fig4_steps import steps_at
    from .global_curve import _system, global_curve

    curves: dict[int, dict[str, tuple]] = {}
    for r in runs:
        if r.note != tag:
            continue
        c = global_curve(r)
        if c is None or len(c) < 2:
            continue
        steps = steps_at(r, c["time_s"].to_numpy())
        curves.setdefault(r.seed or 0, {})[_system(r)] = (c, steps)
    if not curves:
        return []
    out, seeds = [], sorted(curves)
    for name, xlabel, use_steps in (("adsp_fig4a", "time since every worker joined (s)", False),
                                    ("adsp_fig4d", "steps trained at all workers", True)):
        fig, axes = plt.subplots(1, len(seeds), figsize=(3.6 * len(seeds), 3.2), squeeze=False, sharey=True)
        for ax, seed in zip(axes[0], seeds):
            for system, (c, steps) in sorted(curves[seed].items()):
                if use_steps and steps is None:
                    continue
                ax.plot(steps if use_steps else c["time_s"], c["loss"], lw=1.2, label=system)
            ax.set_title(f"seed {seed}", fontsize=9)
            ax.set_xlabel(xlabel, fontsize=8)
        axes[0][0].set_ylabel("global loss")
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"ADSP Fig. 4{'d' if use_steps else 'a'}: 3 workers at 1:1:3", fontsize=10)
        out += save_figure(fig, Path(figure_dir), name, formats)
    return out
