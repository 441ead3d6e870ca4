"""ROG's end-to-end figures (matplotlib, Agg) from its items' runs, one panel per replay mode (``artifact``
first), in every format of :func:`rog.analysis.figure_files.set_formats`:

* ``composition``: average time composition of an iteration (compute / communication / stall, stacked;
  means over workers with the same boundaries), one bar per system (Fig. 1a / 6a); a reference baseline
  (DDP) on its own narrow axis;
* ``accuracy_vs_iterations`` (statistical efficiency, b), ``accuracy_vs_time`` (c), ``energy_vs_accuracy``
  (d: team energy until each accuracy is first reached; the energy source in the legend).

The micro events, the sensitivity studies and the long horizon are in :mod:`.figures_studies`; what
draws them all for a result folder is :func:`rog.papers.rog.section.draw_figures`.  Units on every axis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rog.analysis import figure_helpers as H  # noqa: E402
from rog.analysis.claim_table import Setting, base_setting  # noqa: E402
from rog.analysis.load import run_label  # noqa: E402
from rog.analysis.metrics import RunMetrics, energy_to_accuracy, is_model_source, model_pricing  # noqa: E402
from rog.analysis.provenance import testbed_title  # noqa: E402

__all__ = ["in_setting", "mode_panels", "setting_title", "plot_composition", "plot_accuracy_vs_iterations",
           "plot_accuracy_vs_time", "plot_energy_vs_accuracy"]


def in_setting(m: RunMetrics, s: Setting, mode: str | None) -> bool:
    """Whether the run is in setting ``s`` (workers, batch, control) and replay mode ``mode``."""
    r = m.run
    return ((s.workers is None or r.workers == s.workers) and (s.batch_multiple is None or r.batch_multiple == s.batch_multiple)
            and r.control == s.control and r.replay_mode == mode)


def _end_to_end(ms: Sequence[RunMetrics]) -> list[RunMetrics]:
    """Drop the threshold study's extra ROG runs (30, 40): the end-to-end item pairs ROG-4 / SSP-4 and
    ROG-20 / SSP-20, so ROG thresholds above both 20 and every SSP threshold present are left out."""
    top = max([20] + [m.run.threshold or 0 for m in ms if m.run.system == "SSP"])
    return [m for m in ms if m.run.system != "ROG" or (m.run.threshold or 0) <= top]


def mode_panels(metrics: Sequence[RunMetrics], setting: Setting) -> list[tuple[str | None, list[RunMetrics]]]:
    """The end-to-end runs, split by replay mode (``artifact`` first)."""
    modes = sorted({m.run.replay_mode for m in metrics}, key=lambda x: (x != "artifact", str(x)))
    out = []
    for mode in modes:
        ms = H.order(_end_to_end([m for m in metrics if in_setting(m, setting, mode)]))
        if ms:
            out.append((mode, ms))
    return out


def _panel_target(target: float | dict | None, mode: str | None) -> float | None:
    """The target line of one replay-mode panel: a number applies to every panel, a dict (replay mode ->
    target) only to the panels of the modes it names (the end-to-end item's target is not the other mode's)."""
    return target.get(mode) if isinstance(target, dict) else target


def setting_title(setting: Setting) -> str:
    """The end-to-end setting in a figure's title."""
    return f"{setting.workers} workers, batch x{setting.batch_multiple}"


# ----------------------------------------------------------------------------- composition
def plot_composition(metrics: Sequence[RunMetrics], figure_dir: Path, setting: Setting | None = None,
                     name: str = "composition") -> list[Path]:
    """Average time composition of an iteration per system, one panel per replay mode; a reference
    baseline (DDP) gets its own narrow axis with its own scale beside each panel, so that its long
    iterations do not flatten the systems the paper compares."""
    setting = setting or base_setting(metrics)
    panels = mode_panels(metrics, setting)
    if not panels:
        return []
    runs_all = [m.run for m in metrics]
    split = [(mode, [m for m in ms if not H.is_reference(m)], [m for m in ms if H.is_reference(m)]) for mode, ms in panels]
    n_ref = max(len(ref) for *_, ref in split)
    n_cmp = max(max(len(c) for _, c, _ in split), 1)
    width_in = max(5.5, 0.75 * (n_cmp + n_ref) + 1.5 + (1.0 if n_ref else 0.0))
    fig = plt.figure(figsize=(width_in * len(split), 4.2), layout="constrained")
    ratios = [r for _ in split for r in ((n_cmp, n_ref + 0.8) if n_ref else (1,))]
    gs = fig.add_gridspec(1, len(ratios), width_ratios=ratios)
    cmp_axes, ref_axes, missing = [], [], []
    col = 0
    for mode, cmp_ms, ref_ms in split:
        ax = fig.add_subplot(gs[0, col], sharey=cmp_axes[0][0] if cmp_axes else None)
        col += 1
        missing += H.composition_axis(ax, cmp_ms, runs_all)
        ax.set_title(H.mode_title(mode), fontsize=10)
        cmp_axes.append((ax, cmp_ms))
        if n_ref:
            rax = fig.add_subplot(gs[0, col], sharey=ref_axes[0][0] if ref_axes else None)
            col += 1
            missing += H.composition_axis(rax, ref_ms, runs_all)
            rax.set_title("reference, own scale", fontsize=8)
            rax.set_facecolor("#f4f4f4")
            ref_axes.append((rax, ref_ms))
    cmp_axes[0][0].set_ylabel("time per iteration (s)")
    H.cut_outlier(cmp_axes)
    if ref_axes:
        H.cut_outlier(ref_axes)
        ref_axes[0][0].set_ylabel("time per iteration (s)", fontsize=8)
    H.component_legend(cmp_axes[-1][0], missing=missing, base=H.bar_colour([m for _, ms in cmp_axes for m in ms], runs_all),
                       fig=fig)  # outside the axes: it never covers a bar
    fig.suptitle(f"Average time composition of an iteration ({setting_title(setting)}; means over workers; "
                 f"{testbed_title(runs_all)})", fontsize=11)
    return H.save_figure(fig, figure_dir, name)


# ----------------------------------------------------------------------------- accuracy curves
def _line_panels(metrics, setting, figure_dir, name, xkey, xlabel_fn, title, target=None):
    panels = mode_panels(metrics, setting)
    panels = [(mode, [m for m in ms if not m.run.accuracy.empty]) for mode, ms in panels]
    panels = [(mode, ms) for mode, ms in panels if ms]
    if not panels:
        return []
    runs_all = [m.run for m in metrics]
    n = len(panels)
    xmax = max(float(m.run.accuracy[xkey].max()) for _, ms in panels for m in ms)
    xlim = None
    if xkey == "time_s":  # a run whose last iteration ends far past the equal budget (DDP) must not squeeze the rest
        budgets = [float(b) for m in metrics if (b := m.run.time_budget_s) is not None]
        if budgets and xmax > 1.15 * max(budgets):
            xlim = 1.15 * max(budgets)
            xmax = xlim
    scale, unit = H.time_unit(xmax) if xkey == "time_s" else (1.0, "")
    fig, axes = plt.subplots(1, n, figsize=(6.0 * n, 4.2), sharey=True, squeeze=False)
    for ax, (mode, ms) in zip(axes[0], panels):
        vary = H.seeds_vary(ms)
        for m in ms:
            a = m.run.accuracy.sort_values(xkey)
            label = run_label(m.run, vary)
            if xlim is not None and float(a[xkey].max()) > xlim:
                label += f" (to {float(a[xkey].max()) / scale:.0f} {unit}, off the axis)"
            ax.plot(a[xkey] / scale, a["accuracy_pct"], marker="o", markersize=2.5, linewidth=1.4,
                    label=label, **H.system_style(m.run, runs_all))
        line = _panel_target(target, mode)
        if line is not None:
            ax.axhline(line, color="#777777", linewidth=0.8, linestyle=(0, (4, 3)))
            ax.text(0.01, line, f" target {line:.1f} %", transform=ax.get_yaxis_transform(), va="bottom",
                    fontsize=8, color="#555555")
        if xlim is not None:
            ax.set_xlim(0, xlim / scale)
        ax.set_xlabel(xlabel_fn(unit))
        ax.set_title(H.mode_title(mode), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel("test accuracy (%)")
    fig.suptitle(f"{title} ({setting_title(setting)}; {testbed_title([m.run for _, ms in panels for m in ms])})",
                 fontsize=11)
    fig.tight_layout()
    return H.save_figure(fig, figure_dir, name)


def plot_accuracy_vs_iterations(metrics, figure_dir: Path, setting: Setting | None = None,
                                name: str = "accuracy_vs_iterations") -> list[Path]:
    """Statistical efficiency: test accuracy against iterations."""
    setting = setting or base_setting(metrics)
    return _line_panels(metrics, setting, figure_dir, name, "iteration", lambda u: "iterations (mean over the tested workers)",
                        "Statistical efficiency")


def plot_accuracy_vs_time(metrics, figure_dir: Path, setting: Setting | None = None,
                          target: float | dict | None = None,
                          name: str = "accuracy_vs_time") -> list[Path]:
    """Test accuracy against wall-clock time since the run start, with the common target (a dict: replay
    mode -> target, for the panels of those modes only)."""
    setting = setting or base_setting(metrics)
    return _line_panels(metrics, setting, figure_dir, name, "time_s", lambda u: f"wall-clock time since start ({u})",
                        "Accuracy over training time", target)


def energy_caption(runs, sources: Sequence[str], width: int = 105) -> str:
    """The energy figure's caption in plain words, two lines at most: where the joules come from (modelled from
    the device profile's watts, or which sensor measured them) and the testbed (summary.md has the details)."""
    import textwrap

    profiles = sorted({model_pricing(r).profile for r in runs if is_model_source(model_pricing(r).source)})
    parts = [f"modelled, not measured: each worker's compute, communication and stall time x the "
             f"{', '.join(profiles)} profile's watts"] if profiles and any(is_model_source(s) for s in sources) else []
    measured = [s for s in sources if not is_model_source(s)]
    parts += [f"measured by {', '.join(measured)}"] if measured else []
    lines = textwrap.wrap(f"Energy {'; '.join(parts)} ({testbed_title(runs)}; details in summary.md).", width)
    return "\n".join(lines[:2]) + (" ..." if len(lines) > 2 else "")


def plot_energy_vs_accuracy(metrics, figure_dir: Path, setting: Setting | None = None,
                            target: float | dict | None = None,
                            name: str = "energy_vs_accuracy", levels: int = 60) -> list[Path]:
    """Energy of all workers until each accuracy level is first reached; the energy source in the legend."""
    setting = setting or base_setting(metrics)
    panels = [(mode, [m for m in ms if not m.run.accuracy.empty]) for mode, ms in mode_panels(metrics, setting)]
    panels = [(mode, ms) for mode, ms in panels if ms]
    if not panels:
        return []
    runs_all = [m.run for m in metrics]
    curves = {}
    for _, ms in panels:
        for m in ms:
            a = m.run.accuracy["accuracy_pct"]
            lv = np.linspace(float(a.iloc[0]), float(a.max()), levels)
            curves[id(m)] = (lv, energy_to_accuracy(m.run, lv, m.energy_source, m.accuracy_curve))
    emax = max((np.nanmax(e) for _, e in curves.values() if np.isfinite(e).any()), default=0.0)
    scale, unit = (1e3, "kJ") if emax > 5e3 else (1.0, "J")
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(6.0 * n, 4.2), sharey=True, squeeze=False)
    for ax, (mode, ms) in zip(axes[0], panels):
        vary = H.seeds_vary(ms)
        for m in ms:
            lv, e = curves[id(m)]
            ax.plot(lv, e / scale, linewidth=1.5, label=run_label(m.run, vary), **H.system_style(m.run, runs_all))
        line = _panel_target(target, mode)
        if line is not None:
            ax.axvline(line, color="#777777", linewidth=0.8, linestyle=(0, (4, 3)))
            ax.text(line, 0.98, f" target {line:.1f} %", transform=ax.get_xaxis_transform(), va="top",
                    fontsize=8, color="#555555")
        sources = sorted({m.energy_source for m in ms})
        ax.legend(fontsize=8, loc="best", title=f"energy source: {', '.join(sources)}", title_fontsize=7)
        ax.set_xlabel("test accuracy reached (%)")
        ax.set_title(H.mode_title(mode), fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"energy of all workers until reached ({unit})")
    fig.suptitle(f"Energy to reach an accuracy ({setting_title(setting)}; parameter server excluded)", fontsize=11)
    all_sources = sorted({m.energy_source for _, ms in panels for m in ms})
    shown = [m.run for _, ms in panels for m in ms]
    caption = energy_caption(shown, all_sources, width=int(105 * n))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.text(0.5, 0.01, caption, ha="center", va="bottom", fontsize=8, color="#333333")
    return H.save_figure(fig, figure_dir, name)


