"""The ``compare`` item's figure ``compare_time_energy``: time to target against energy to target, one point
per replica (a run that reached its replica's target), one colour per system, each system's median marked
(a larger cross at the median time and the median energy of its points); combinations drawn hollow."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from rog.analysis.figure_files import save_figure  # noqa: E402

NAME = "compare_time_energy"


def points(rows: Sequence[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """System -> its replicas' ``(time to target s, energy to target kJ)``, runs that reached the target only."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        out.setdefault(r["system"], [])
        if r["time_to_target_s"] is not None and r["energy_to_target_j"] is not None:
            out[r["system"]].append((float(r["time_to_target_s"]), float(r["energy_to_target_j"]) / 1e3))
    return out


def plot_compare(d: dict[str, Any] | None, figure_dir: str | Path, formats: Sequence[str] = ("pdf", "png")) -> list[Path]:
    """Draw the figure from :func:`rog.papers.compare.summary.compare_summary`'s result; nothing without a point."""
    if not d:
        return []
    pts = points(d["rows"])
    if not any(pts.values()):
        return []
    combos = {r["system"] for r in d["rows"] if r["combination"]}
    cmap = plt.get_cmap("tab10" if len(pts) <= 10 else "tab20")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (name, xy) in enumerate(pts.items()):
        color = cmap(i % cmap.N)
        if not xy:
            ax.plot([], [], "o", color=color, label=f"{name} (never reached the target)")
            continue
        hollow = name in combos
        ax.scatter([x for x, _ in xy], [y for _, y in xy], s=28, color="none" if hollow else color,
                   edgecolors=color, label=name + (" (combination)" if hollow else ""))
        ax.plot([statistics.median(x for x, _ in xy)], [statistics.median(y for _, y in xy)], "X", color=color,
                markersize=11, markeredgecolor="black")
    ax.plot([], [], "X", color="grey", markeredgecolor="black", markersize=9, label="median of each system")
    ax.set_xscale("log")  # the systems span two orders of magnitude (seconds to the whole budget)
    ax.set_yscale("log")
    ax.set_xlabel("time to target (s, log scale)")
    ax.set_ylabel("energy to target (kJ, team, log scale)")
    ax.set_title("compare: every system on the same links, one point per replica", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return save_figure(fig, Path(figure_dir), NAME, formats)
