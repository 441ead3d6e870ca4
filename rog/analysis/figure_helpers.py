"""What every paper's run figures share: one colour per system, the time-composition bars, time-axis units
and the one way a figure is saved (:func:`~rog.analysis.figure_files.save_figure`, re-exported).

One colour per system in every figure (:data:`PALETTE`); thresholds of one system differ by line style and
shade (:func:`system_style`).  A paper's own figures (ROG's: :mod:`rog.papers.rog.figures`) build on these.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .figure_files import FORMATS, formats, save_figure, set_formats  # noqa: E402,F401  (re-exported)
from .load import SYSTEMS, RunData, run_label  # noqa: E402
from .metrics import RunMetrics  # noqa: E402

__all__ = ["PALETTE", "OTHER_COLOR", "COMPONENTS", "LINESTYLES", "FORMATS", "set_formats", "formats", "save_figure", "mix",
           "system_style", "order", "is_reference", "seeds_vary", "time_unit", "mode_title", "stacked_bars",
           "component_legend", "bar_colour", "bar_total", "composition_axis", "cut_outlier"]

PALETTE = {"BSP": "#d62728", "SSP": "#ff7f0e", "FLOWN": "#2ca02c", "ROG": "#1f77b4", "DDP": "#8c564b"}
OTHER_COLOR = "#333333"  # a system without a colour of its own
COMPONENTS = (("compute_s", "computation", 0.0, ""), ("comm_s", "communication", 0.45, "///"),
              ("stall_s", "stall", 0.75, "xxx"), ("data_wait_s", "data wait", 0.9, "..."))  # (field, label, white mix, hatch)
LINESTYLES = ("-", "--", "-.", ":")


def mix(color: str, white: float) -> tuple[float, float, float]:
    """``color`` mixed with white (0: the colour itself, 1: white)."""
    c = np.array(mcolors.to_rgb(color))
    return tuple(c + (1.0 - c) * white)


def _variant(run: RunData, runs: Sequence[RunData]) -> int:
    """Rank of this run's threshold among the same system's thresholds in ``runs`` (0 = smallest)."""
    thr = sorted({r.threshold or 0 for r in runs if r.system == run.system})
    return thr.index(run.threshold or 0) if (run.threshold or 0) in thr else 0


def system_style(run: RunData, runs: Sequence[RunData]) -> dict:
    """Line colour (the system's), shade and line style (by threshold within the system)."""
    k = _variant(run, runs)
    base = PALETTE.get(run.system, OTHER_COLOR)
    return {"color": mix(base, min(0.45, 0.22 * k)), "linestyle": LINESTYLES[k % len(LINESTYLES)]}


def order(metrics: Sequence[RunMetrics]) -> list[RunMetrics]:
    """Runs by system (the bench's order), then threshold, workers, batch, replay mode and seed."""
    sysrank = {s: i for i, s in enumerate(SYSTEMS)}
    return sorted(metrics, key=lambda m: (sysrank.get(m.run.system, 99), m.run.threshold or 0, m.run.workers,
                                          m.run.batch_multiple, str(m.run.replay_mode), m.run.seed or 0))


def is_reference(m: RunMetrics) -> bool:
    """Whether the run's system is a reference baseline (DDP), drawn on its own scale."""
    from rog.policies.registry import reference_systems

    return m.run.library in reference_systems()


def seeds_vary(ms: Sequence[RunMetrics]) -> tuple[str, ...]:
    """``("seed",)`` when two runs share a label (so labels must name the seed), else ``()``."""
    labels = [m.run.label for m in ms]
    return ("seed",) if len(set(labels)) < len(labels) else ()


def time_unit(max_s: float) -> tuple[float, str]:
    """(seconds per unit, unit) of a time axis reaching ``max_s``: minutes past 10 minutes, else seconds."""
    return (60.0, "min") if max_s > 600 else (1.0, "s")


def mode_title(mode: str | None) -> str:
    """A panel's title for a replay mode ("" where the runs replay no trace: the concept does not apply)."""
    return f"replay mode: {mode}" if mode else ""


# ----------------------------------------------------------------------------- composition bars
def stacked_bars(ax, ms: Sequence[RunMetrics], x: np.ndarray, width: float, runs_all: Sequence[RunData]) -> list[str]:
    """Stack each run's components; a component without a value is left out (never drawn as 0) and
    returned as ``'<run label> <component>'`` for the legend."""
    missing = []
    for xi, m in zip(x, ms):
        bottom = 0.0
        base = system_style(m.run, runs_all)["color"]
        for field, label, white, hatch in COMPONENTS:
            v = getattr(m, field)
            if v is None or not np.isfinite(v):
                missing.append(f"{run_label(m.run, ())} {label}")
                continue
            ax.bar(xi, v, width, bottom=bottom, color=mix(mcolors.to_hex(base), white), hatch=hatch,
                   edgecolor=mix(mcolors.to_hex(base), 0.0), linewidth=0.6)
            bottom += v
        if m.iter_s is not None:
            ax.plot([xi - width / 2, xi + width / 2], [m.iter_s, m.iter_s], color="black", linewidth=1.2)
    return missing


def bar_colour(ms: Sequence[RunMetrics], runs_all: Sequence[RunData]) -> str:
    """The colour the bars of ``ms`` share (one system), else grey (the legend then shows the shading only)."""
    colours = {mcolors.to_hex(system_style(m.run, runs_all)["color"]) for m in ms}
    return colours.pop() if len(colours) == 1 else "#555555"


def component_legend(ax, loc="upper right", missing: Sequence[str] = (), base: str = "#555555", fig=None) -> None:
    """The components' legend (and the wall-clock line), swatches shaded from ``base`` as the bars are
    (:func:`bar_colour`); ``missing`` segments are named as not drawn.  With ``fig``: below the axes, outside;
    ``loc="outside"``: right of the axes."""
    handles = [Patch(facecolor=mix(base, white), edgecolor=mix(base, 0.0), hatch=hatch, label=label)
               for _, label, white, hatch in COMPONENTS]
    handles.append(plt.Line2D([], [], color="black", linewidth=1.2, label="wall-clock per iteration"))
    if missing:  # a segment without a value is left out, and said so
        handles.append(Patch(facecolor="none", edgecolor="none",
                             label=f"not drawn, no value: {', '.join(dict.fromkeys(missing))}"))
    title = "shades of each bar's own colour" if base == "#555555" else None  # several systems: the shading only
    if fig is not None:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(3, len(handles)), fontsize=8, framealpha=0.9,
                   title=title, title_fontsize=7)
    else:
        where = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0)) if loc == "outside" else dict(loc=loc)  # right of the axes
        ax.legend(handles=handles, fontsize=8, framealpha=0.9, title=title, title_fontsize=7, **where)


def bar_total(m: RunMetrics) -> float:
    """A bar's height: the wall-clock iteration or the sum of its components, whichever is taller."""
    return max(m.iter_s or 0.0, sum(getattr(m, f) or 0.0 for f, *_ in COMPONENTS))


def composition_axis(ax, ms: Sequence[RunMetrics], runs_all: Sequence[RunData]) -> list[str]:
    """One bar per run of ``ms``, labelled; returns the segments left out (:func:`stacked_bars`)."""
    x = np.arange(len(ms))
    missing = stacked_bars(ax, ms, x, 0.62, runs_all)
    vary = seeds_vary(ms)
    ax.set_xticks(x, [run_label(m.run, vary) for m in ms], rotation=30 if len(ms) > 5 else 0,
                  ha="right" if len(ms) > 5 else "center")
    ax.grid(axis="y", alpha=0.3)
    return missing


def cut_outlier(axes_ms: Sequence[tuple[object, Sequence[RunMetrics]]]) -> None:
    """One y range for ``axes_ms``; a bar over 4x the next tallest is cut and labelled with its value."""
    totals = sorted(bar_total(m) for _, ms in axes_ms for m in ms)
    top = totals[-1] if totals else 0.0
    if len(totals) > 1 and totals[-2] > 0 and top > 4 * totals[-2]:
        top = totals[-2]
        for ax, ms in axes_ms:
            for xi, m in enumerate(ms):
                v = bar_total(m)
                if v > top * 1.35:
                    ax.annotate(f"{v:.1f} s\n(axis cut)", (xi, top * 1.3), ha="center", va="top", fontsize=7,
                                color="black", bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="#555555"))
    for ax, _ in axes_ms:
        ax.set_ylim(0, top * 1.35 if top > 0 else 1)
