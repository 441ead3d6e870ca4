"""The paper's figures with matplotlib (Agg), as PDF and PNG into ``figure/``; reads only run tables.

* ``composition``: average time composition of an iteration (compute / communication / stall,
  stacked; means over workers with the same boundaries), one bar per system, one panel per
  replay mode (Fig. 1a / 6a);
* ``accuracy_vs_iterations`` (statistical efficiency, b), ``accuracy_vs_time`` (c),
  ``energy_vs_accuracy`` (d: team energy until each accuracy is first reached; the energy source
  in the legend);
* ``micro_events``: one worker over a time window: link rate (replay log), share of rows delivered
  per push, staleness (Fig. 8);
* ``sensitivity``: one row per study present (batch size, worker count, threshold): accuracy vs
  time and the time composition per setting (Fig. 9 / 10).

One colour per system in every figure (:data:`PALETTE`); thresholds of one system differ by line
style and shade.  Units on every axis.
"""

from __future__ import annotations

import sys

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .figure_files import save_figure  # noqa: E402
from .load import SYSTEMS, RunData, find_runs, load_run, run_label  # noqa: E402
from .metrics import RunMetrics, compute_metrics, energy_to_accuracy  # noqa: E402
from .provenance import model_energy_text, testbed_line, testbed_title  # noqa: E402
from .claim_table import Setting, base_setting  # noqa: E402

__all__ = ["PALETTE", "COMPONENTS", "system_style", "plot_composition", "plot_accuracy_vs_iterations",
           "plot_accuracy_vs_time", "plot_energy_vs_accuracy", "plot_micro_events", "plot_sensitivity", "draw_all", "set_formats", "FORMATS"]

PALETTE = {"BSP": "#d62728", "SSP": "#ff7f0e", "FLOWN": "#2ca02c", "ROG": "#1f77b4", "DDP": "#8c564b"}
_OTHER = "#333333"
COMPONENTS = (("compute_s", "computation", 0.0, ""), ("comm_s", "communication", 0.45, "///"),
              ("stall_s", "stall", 0.75, "xxx"), ("data_wait_s", "data wait", 0.9, "..."))  # (field, label, white mix, hatch)
_LINESTYLES = ("-", "--", "-.", ":")
_DPI = 150
FORMATS = ("pdf", "png")  # what _save writes; set_formats() changes it (e.g. PNG only for a quick look)
_formats = list(FORMATS)


def set_formats(formats: Sequence[str]) -> None:
    """Which files every figure is saved as (subset of ``pdf``, ``png``, ``svg``)."""
    bad = [f for f in formats if f not in ("pdf", "png", "svg")]
    if not formats or bad:
        raise ValueError(f"formats must be a non-empty subset of pdf, png, svg; got {list(formats)!r}")
    _formats[:] = list(formats)


def _mix(color: str, white: float) -> tuple[float, float, float]:
    c = np.array(mcolors.to_rgb(color))
    return tuple(c + (1.0 - c) * white)


def _variant(run: RunData, runs: Sequence[RunData]) -> int:
    """Rank of this run's threshold among the same system's thresholds in ``runs`` (0 = smallest)."""
    thr = sorted({r.threshold or 0 for r in runs if r.system == run.system})
    return thr.index(run.threshold or 0) if (run.threshold or 0) in thr else 0


def system_style(run: RunData, runs: Sequence[RunData]) -> dict:
    """Line colour (the system's), shade and line style (by threshold within the system)."""
    k = _variant(run, runs)
    base = PALETTE.get(run.system, _OTHER)
    return {"color": _mix(base, min(0.45, 0.22 * k)), "linestyle": _LINESTYLES[k % len(_LINESTYLES)]}


def _order(metrics: Sequence[RunMetrics]) -> list[RunMetrics]:
    sysrank = {s: i for i, s in enumerate(SYSTEMS)}
    return sorted(metrics, key=lambda m: (sysrank.get(m.run.system, 99), m.run.threshold or 0, m.run.workers,
                                          m.run.batch_multiple, str(m.run.replay_mode), m.run.seed or 0))


def _save(fig, figure_dir: Path, name: str) -> list[Path]:
    return save_figure(fig, figure_dir, name, _formats, _DPI)


def _in_setting(m: RunMetrics, s: Setting, mode: str | None) -> bool:
    r = m.run
    return ((s.workers is None or r.workers == s.workers) and (s.batch_multiple is None or r.batch_multiple == s.batch_multiple)
            and r.control == s.control and r.replay_mode == mode)


def _end_to_end(ms: Sequence[RunMetrics]) -> list[RunMetrics]:
    """Drop the threshold study's extra ROG runs (30, 40): the end-to-end item pairs ROG-4 / SSP-4 and
    ROG-20 / SSP-20, so ROG thresholds above both 20 and every SSP threshold present are left out."""
    top = max([20] + [m.run.threshold or 0 for m in ms if m.run.system == "SSP"])
    return [m for m in ms if m.run.system != "ROG" or (m.run.threshold or 0) <= top]


def _mode_panels(metrics: Sequence[RunMetrics], setting: Setting) -> list[tuple[str | None, list[RunMetrics]]]:
    """The end-to-end runs, split by replay mode (``artifact`` first)."""
    modes = sorted({m.run.replay_mode for m in metrics}, key=lambda x: (x != "artifact", str(x)))
    out = []
    for mode in modes:
        ms = _order(_end_to_end([m for m in metrics if _in_setting(m, setting, mode)]))
        if ms:
            out.append((mode, ms))
    return out


def _panel_target(target: float | dict | None, mode: str | None) -> float | None:
    """The target line of one replay-mode panel: a number applies to every panel, a dict (replay mode ->
    target) only to the panels of the modes it names (the end-to-end item's target is not the other mode's)."""
    return target.get(mode) if isinstance(target, dict) else target


def _setting_title(setting: Setting) -> str:
    return f"{setting.workers} workers, batch x{setting.batch_multiple}"


def _mode_title(mode: str | None) -> str:
    return f"replay mode: {mode}" if mode else "replay mode: not in the config"


def _seeds_vary(ms: Sequence[RunMetrics]) -> tuple[str, ...]:
    labels = [m.run.label for m in ms]
    return ("seed",) if len(set(labels)) < len(labels) else ()


def _time_unit(max_s: float) -> tuple[float, str]:
    return (60.0, "min") if max_s > 600 else (1.0, "s")


# ----------------------------------------------------------------------------- composition
def _stacked_bars(ax, ms: Sequence[RunMetrics], x: np.ndarray, width: float, runs_all: Sequence[RunData]) -> list[str]:
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
            ax.bar(xi, v, width, bottom=bottom, color=_mix(mcolors.to_hex(base), white), hatch=hatch,
                   edgecolor=_mix(mcolors.to_hex(base), 0.0), linewidth=0.6)
            bottom += v
        if m.iter_s is not None:
            ax.plot([xi - width / 2, xi + width / 2], [m.iter_s, m.iter_s], color="black", linewidth=1.2)
    return missing


def _component_legend(ax, loc="upper right", missing: Sequence[str] = ()) -> None:
    handles = [Patch(facecolor=_mix("#555555", white), edgecolor="#333333", hatch=hatch, label=label)
               for _, label, white, hatch in COMPONENTS]
    handles.append(plt.Line2D([], [], color="black", linewidth=1.2, label="wall-clock per iteration"))
    if missing:  # a segment without a value is left out, and said so
        handles.append(Patch(facecolor="none", edgecolor="none",
                             label=f"not drawn, no value: {', '.join(dict.fromkeys(missing))}"))
    ax.legend(handles=handles, loc=loc, fontsize=8, framealpha=0.9)


def _bar_total(m: RunMetrics) -> float:
    return max(m.iter_s or 0.0, sum(getattr(m, f) or 0.0 for f, *_ in COMPONENTS))


def _is_reference(m: RunMetrics) -> bool:
    from rog.policies.registry import reference_systems

    return m.run.config.get("library") in reference_systems()


def _composition_axis(ax, ms: Sequence[RunMetrics], runs_all: Sequence[RunData]) -> list[str]:
    x = np.arange(len(ms))
    missing = _stacked_bars(ax, ms, x, 0.62, runs_all)
    vary = _seeds_vary(ms)
    ax.set_xticks(x, [run_label(m.run, vary) for m in ms], rotation=30 if len(ms) > 5 else 0,
                  ha="right" if len(ms) > 5 else "center")
    ax.grid(axis="y", alpha=0.3)
    return missing


def _cut_outlier(axes_ms: Sequence[tuple[object, Sequence[RunMetrics]]]) -> None:
    """One y range for ``axes_ms``; a bar over 4x the next tallest is cut and labelled with its value."""
    totals = sorted(_bar_total(m) for _, ms in axes_ms for m in ms)
    top = totals[-1] if totals else 0.0
    if len(totals) > 1 and totals[-2] > 0 and top > 4 * totals[-2]:
        top = totals[-2]
        for ax, ms in axes_ms:
            for xi, m in enumerate(ms):
                v = _bar_total(m)
                if v > top * 1.35:
                    ax.annotate(f"{v:.1f} s\n(axis cut)", (xi, top * 1.3), ha="center", va="top", fontsize=7,
                                color="black", bbox=dict(boxstyle="round,pad=0.2", facecolor="white", edgecolor="#555555"))
    for ax, _ in axes_ms:
        ax.set_ylim(0, top * 1.35 if top > 0 else 1)


def plot_composition(metrics: Sequence[RunMetrics], figure_dir: Path, setting: Setting | None = None,
                     name: str = "composition") -> list[Path]:
    """Average time composition of an iteration per system, one panel per replay mode; a reference
    baseline (DDP) gets its own narrow axis with its own scale beside each panel, so that its long
    iterations do not flatten the systems the paper compares."""
    setting = setting or base_setting(metrics)
    panels = _mode_panels(metrics, setting)
    if not panels:
        return []
    runs_all = [m.run for m in metrics]
    split = [(mode, [m for m in ms if not _is_reference(m)], [m for m in ms if _is_reference(m)]) for mode, ms in panels]
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
        missing += _composition_axis(ax, cmp_ms, runs_all)
        ax.set_title(_mode_title(mode), fontsize=10)
        cmp_axes.append((ax, cmp_ms))
        if n_ref:
            rax = fig.add_subplot(gs[0, col], sharey=ref_axes[0][0] if ref_axes else None)
            col += 1
            missing += _composition_axis(rax, ref_ms, runs_all)
            rax.set_title("reference, own scale", fontsize=8)
            rax.set_facecolor("#f4f4f4")
            ref_axes.append((rax, ref_ms))
    cmp_axes[0][0].set_ylabel("time per iteration (s)")
    _cut_outlier(cmp_axes)
    if ref_axes:
        _cut_outlier(ref_axes)
        ref_axes[0][0].set_ylabel("time per iteration (s)", fontsize=8)
    _component_legend(cmp_axes[-1][0], loc="upper center", missing=missing)  # the tallest compared bars sit at the ends (BSP left)
    fig.suptitle(f"Average time composition of an iteration ({_setting_title(setting)}; means over workers; "
                 f"{testbed_title(runs_all)})", fontsize=11)
    return _save(fig, figure_dir, name)


# ----------------------------------------------------------------------------- accuracy curves
def _line_panels(metrics, setting, figure_dir, name, xkey, xlabel_fn, title, target=None):
    panels = _mode_panels(metrics, setting)
    panels = [(mode, [m for m in ms if not m.run.accuracy.empty]) for mode, ms in panels]
    panels = [(mode, ms) for mode, ms in panels if ms]
    if not panels:
        return []
    runs_all = [m.run for m in metrics]
    n = len(panels)
    xmax = max(float(m.run.accuracy[xkey].max()) for _, ms in panels for m in ms)
    xlim = None
    if xkey == "time_s":  # a run whose last iteration ends far past the equal budget (DDP) must not squeeze the rest
        budgets = [float(b) for m in metrics if (b := m.run.config.get("time_budget_s")) is not None]
        if budgets and xmax > 1.15 * max(budgets):
            xlim = 1.15 * max(budgets)
            xmax = xlim
    scale, unit = _time_unit(xmax) if xkey == "time_s" else (1.0, "")
    fig, axes = plt.subplots(1, n, figsize=(6.0 * n, 4.2), sharey=True, squeeze=False)
    for ax, (mode, ms) in zip(axes[0], panels):
        vary = _seeds_vary(ms)
        for m in ms:
            a = m.run.accuracy.sort_values(xkey)
            label = run_label(m.run, vary)
            if xlim is not None and float(a[xkey].max()) > xlim:
                label += f" (to {float(a[xkey].max()) / scale:.0f} {unit}, off the axis)"
            ax.plot(a[xkey] / scale, a["accuracy_pct"], marker="o", markersize=2.5, linewidth=1.4,
                    label=label, **system_style(m.run, runs_all))
        line = _panel_target(target, mode)
        if line is not None:
            ax.axhline(line, color="#777777", linewidth=0.8, linestyle=(0, (4, 3)))
            ax.text(0.01, line, f" target {line:.1f} %", transform=ax.get_yaxis_transform(), va="bottom",
                    fontsize=8, color="#555555")
        if xlim is not None:
            ax.set_xlim(0, xlim / scale)
        ax.set_xlabel(xlabel_fn(unit))
        ax.set_title(_mode_title(mode), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0][0].set_ylabel("test accuracy (%)")
    fig.suptitle(f"{title} ({_setting_title(setting)}; {testbed_title([m.run for _, ms in panels for m in ms])})",
                 fontsize=11)
    fig.tight_layout()
    return _save(fig, figure_dir, name)


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


def plot_energy_vs_accuracy(metrics, figure_dir: Path, setting: Setting | None = None,
                            target: float | dict | None = None,
                            name: str = "energy_vs_accuracy", levels: int = 60) -> list[Path]:
    """Energy of all workers until each accuracy level is first reached; the energy source in the legend."""
    setting = setting or base_setting(metrics)
    panels = [(mode, [m for m in ms if not m.run.accuracy.empty]) for mode, ms in _mode_panels(metrics, setting)]
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
        vary = _seeds_vary(ms)
        for m in ms:
            lv, e = curves[id(m)]
            ax.plot(lv, e / scale, linewidth=1.5, label=run_label(m.run, vary), **system_style(m.run, runs_all))
        line = _panel_target(target, mode)
        if line is not None:
            ax.axvline(line, color="#777777", linewidth=0.8, linestyle=(0, (4, 3)))
            ax.text(line, 0.98, f" target {line:.1f} %", transform=ax.get_xaxis_transform(), va="top",
                    fontsize=8, color="#555555")
        sources = sorted({m.energy_source for m in ms})
        ax.legend(fontsize=8, loc="best", title=f"energy source: {', '.join(sources)}", title_fontsize=7)
        ax.set_xlabel("test accuracy reached (%)")
        ax.set_title(_mode_title(mode), fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"energy of all workers until reached ({unit})")
    fig.suptitle(f"Energy to reach an accuracy ({_setting_title(setting)}; parameter server excluded)", fontsize=11)
    all_sources = sorted({m.energy_source for _, ms in panels for m in ms})
    shown = [m.run for _, ms in panels for m in ms]
    caption = ("Energy: " + "; ".join(model_energy_text(shown, all_sources)) + ". "
               + testbed_line(shown)[2:].split(" Note: ")[0])  # without the list dash and the loopback note
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.text(0.5, 0.01, caption, ha="center", va="bottom", fontsize=8, color="#333333", wrap=True)
    return _save(fig, figure_dir, name)


# ----------------------------------------------------------------------------- micro events
def _pick_micro_run(metrics: Sequence[RunMetrics], setting: Setting) -> RunMetrics | None:
    pref = [("ROG-4", setting.replay_mode), ("ROG-4", None), ("ROG", None)]
    for lab, mode in pref:
        for m in metrics:
            r = m.run
            if r.iterations.empty:
                continue
            if lab == "ROG" and r.system == "ROG" or r.label == lab:
                if mode is None or (r.replay_mode == mode and _in_setting(m, setting, mode)):
                    return m
    return next((m for m in metrics if not m.run.iterations.empty), None)


def plot_micro_events(metrics: Sequence[RunMetrics], figure_dir: Path, run_id: str | None = None, worker: int = 0,
                      window_s: tuple[float, float] | None = None, setting: Setting | None = None,
                      name: str = "micro_events") -> list[Path]:
    """Link rate, share of rows delivered per push and staleness of one worker over a time window.

    Default run: ROG-4 in the end-to-end setting; default window: 40 iterations around the middle.
    """
    setting = setting or base_setting(metrics)
    if run_id is not None:
        chosen = next((m for m in metrics if m.run.run_id == run_id), None)
        if chosen is None:
            raise ValueError(f"run_id {run_id!r} is not among the loaded runs ({[m.run.run_id for m in metrics]})")
    else:
        chosen = _pick_micro_run(metrics, setting)
    if chosen is None:
        return []
    run = chosen.run
    it = run.iterations[run.iterations["worker"] == worker].sort_values("iteration")
    if it.empty:
        raise ValueError(f"run {run.run_id}: worker {worker} has no complete iteration; pick another worker")
    if window_s is None:
        span = float(it["span_s"].median()) * 40
        t_mid = 0.5 * (float(it["t_start_s"].iloc[0]) + float(it["t_end_s"].iloc[-1]))
        lo = max(float(it["t_start_s"].iloc[0]), t_mid - span / 2)
        window_s = (lo, min(float(it["t_end_s"].iloc[-1]), lo + span))
    lo, hi = window_s
    if not hi > lo:
        raise ValueError(f"window_s must be (start, end) with end > start, got {window_s!r}")
    w = it[(it["t_start_s"] >= lo) & (it["t_start_s"] <= hi)]
    color = PALETTE.get(run.system, _OTHER)
    fig, axes = plt.subplots(3, 1, figsize=(8.0, 6.6), sharex=True)
    # (a) bandwidth
    ax = axes[0]
    rep = run.replay[run.replay["worker"] == worker] if not run.replay.empty else run.replay
    drawn = False
    for k, (link, df) in enumerate(rep.groupby("link")):
        df = df.sort_values("time_s")
        before = df[df["time_s"] <= lo].tail(1)
        inside = df[(df["time_s"] > lo) & (df["time_s"] <= hi)]
        xs = ([lo] if len(before) else []) + inside["time_s"].tolist()
        ys = before["rate_mbit"].tolist() + inside["rate_mbit"].tolist()
        if ys:
            ax.step(xs + [hi], ys + [ys[-1]], where="post", color=_mix("#444444", 0.3 * k), linewidth=1.3,
                    label=f"replayed rate ({link})")
            drawn = True
    push = it[(it["t_start_s"] >= lo) & (it["t_start_s"] <= hi)]
    push_t = push["push_t_s"]
    goodput = push["push_bytes"].astype(float) * 8 / 1e6 / push["push_s"].replace(0, np.nan)
    ax.plot(push_t, goodput, "o", markersize=3, color=color, label="push goodput, measured")
    if not drawn:
        from .load import config_value

        rate = config_value(run.config, "rate_mbit")
        if rate:
            ax.axhline(float(rate), color="#444444", linewidth=1.2, label=f"token bucket rate (config, {float(rate):g})")
    ax.set_ylabel("bandwidth (Mbit/s)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)  # the rate steps and dots fill different corners per run
    ax.grid(alpha=0.3)
    # (b) share of rows delivered
    ax = axes[1]
    ax.plot(push_t, 100 * w["push_share"].astype(float), "o-", markersize=3, linewidth=1.0, color=color,
            label="push: rows delivered / rows planned")
    if w["pull_share"].notna().any():
        ax.plot(w["pull_t_s"], 100 * w["pull_share"].astype(float), "s--", markersize=3, linewidth=0.8,
                color=_mix(color, 0.45), label="pull: rows delivered / rows planned")
    ax.set_ylabel("rows transmitted (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    # (c) staleness
    ax = axes[2]
    if w["staleness_max"].notna().any():
        ax.step(w["push_t_s"] + w["push_s"], w["staleness_max"], where="post", color=color, linewidth=1.3,
                label="max over rows")
        ax.plot(w["push_t_s"] + w["push_s"], w["staleness_mean"], "o", markersize=3, color=_mix(color, 0.4),
                label="mean over rows")
        ax.legend(fontsize=7, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no staleness records", transform=ax.transAxes, ha="center", va="center", color="#777777")
    thr = run.threshold
    if thr is not None and thr > 0:
        ax.axhline(thr, color="#777777", linewidth=0.8, linestyle=(0, (4, 3)))
        ax.text(0.01, thr, f" threshold {thr}", transform=ax.get_yaxis_transform(), va="bottom", fontsize=8, color="#555555")
    ax.set_ylabel("staleness (iterations)")
    smax = float(np.nanmax(w["staleness_max"])) if w["staleness_max"].notna().any() else 1.0
    ax.set_ylim(0, 1.25 * max(smax, float(thr or 0), 1.0))
    ax.set_xlabel("wall-clock time since start (s)")
    ax.set_xlim(lo, hi)
    ax.grid(alpha=0.3)
    fig.suptitle(f"Micro-events of worker {worker}, {run.label} ({_mode_title(run.replay_mode)}; run {run.run_id})",
                 fontsize=10)
    fig.tight_layout()
    return _save(fig, figure_dir, name)


# ----------------------------------------------------------------------------- sensitivity
def _varied(ms: Sequence[RunMetrics], field: str) -> list[RunMetrics]:
    """The runs of the systems present at two or more values of ``field`` (empty if none is)."""
    values: dict[str, set] = {}
    for m in ms:
        values.setdefault(m.run.label, set()).add(getattr(m.run, field))
    keep = {lab for lab, v in values.items() if len(v) > 1}
    return [m for m in ms if m.run.label in keep]


def _studies(metrics: Sequence[RunMetrics], setting: Setting, sensitivity: Sequence[RunMetrics] | None = None,
             threshold: Sequence[RunMetrics] | None = None) -> list[tuple[str, str, list[RunMetrics]]]:
    """(title, varied field, runs) for every study with more than one setting present; the batch and
    worker studies read ``sensitivity`` and the threshold study ``threshold`` when given (those items'
    runs over their own budget), else ``metrics``."""
    mode = setting.replay_mode
    same = lambda m: m.run.replay_mode == mode and m.run.control == setting.control  # noqa: E731
    sens = metrics if sensitivity is None else sensitivity
    out = []
    batch = _varied([m for m in sens if same(m) and m.run.workers == setting.workers], "batch_multiple")
    if batch:
        out.append(("batch size", "batch_multiple", batch))
    work = _varied([m for m in sens if same(m) and m.run.batch_multiple == setting.batch_multiple], "workers")
    if work:
        out.append(("worker count", "workers", work))
    thr = [m for m in (metrics if threshold is None else threshold) if same(m) and m.run.system == "ROG"
           and m.run.workers == setting.workers and m.run.batch_multiple == setting.batch_multiple]
    if len({m.run.threshold for m in thr}) > 2:  # beyond the end-to-end item's ROG-4 / ROG-20
        out.append(("threshold", "threshold", thr))
    return out


def plot_sensitivity(metrics: Sequence[RunMetrics], figure_dir: Path, setting: Setting | None = None,
                     name: str = "sensitivity", sensitivity: Sequence[RunMetrics] | None = None,
                     threshold: Sequence[RunMetrics] | None = None) -> list[Path]:
    """One row per study present: accuracy vs time (left) and time composition per setting (right);
    ``sensitivity`` / ``threshold``: those items' runs over their own budget (see :func:`_studies`)."""
    setting = setting or base_setting(metrics)
    studies = _studies(metrics, setting, sensitivity, threshold)
    if not studies:
        return []
    runs_all = [m.run for m in metrics]
    fig, axes = plt.subplots(len(studies), 2, figsize=(12.5, 4.0 * len(studies)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.0, 1.25]})
    for row, (title, field, ms) in zip(axes, studies):
        ms = _order(ms)
        values = sorted({getattr(m.run, field) for m in ms})
        fmt = {"batch_multiple": lambda v: f"x{v}", "workers": lambda v: f"{v} workers",
               "threshold": lambda v: f"s={v}"}[field]
        # left: accuracy vs time
        ax = row[0]
        with_acc = [m for m in ms if not m.run.accuracy.empty]
        xmax = max((float(m.run.accuracy["time_s"].max()) for m in with_acc), default=1.0)
        scale, unit = _time_unit(xmax)
        for m in with_acc:
            a = m.run.accuracy.sort_values("time_s")
            st = system_style(m.run, runs_all)
            if field != "threshold":
                st["linestyle"] = _LINESTYLES[values.index(getattr(m.run, field)) % len(_LINESTYLES)]
            ax.plot(a["time_s"] / scale, a["accuracy_pct"], linewidth=1.3, label=run_label(m.run, (field,)), **st)
        ax.set_xlabel(f"wall-clock time since start ({unit})")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{title}: accuracy over time", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", ncol=2)
        # right: composition bars grouped by setting (one bar per series: a system label, or the system
        # itself in the threshold study, where the label is the setting)
        ax = row[1]
        key = (lambda m: m.run.system) if field == "threshold" else (lambda m: m.run.label)
        series: list[str] = []
        for m in ms:
            if key(m) not in series:
                series.append(key(m))
        width = 0.8 / max(1, len(series))
        ticks, missing = [], []
        for gi, v in enumerate(values):
            group = [m for m in ms if getattr(m.run, field) == v]
            for li, lab in enumerate(series):
                mm = [m for m in group if key(m) == lab]
                if mm:
                    missing += _stacked_bars(ax, mm[:1], np.array([gi + (li - (len(series) - 1) / 2) * width]),
                                             width * 0.9, runs_all)
            ticks.append(gi)
        labels = series
        ax.set_xticks(ticks, [fmt(v) for v in values])
        ax.set_ylabel("time per iteration (s)")
        which = "one bar per threshold" if field == "threshold" else f"bars left to right: {', '.join(labels)}"
        ax.set_title(f"{title}: time composition ({which})", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        top = max(max((m.iter_s or 0.0), sum(getattr(m, f) or 0.0 for f, *_ in COMPONENTS)) for m in ms)
        ax.set_ylim(0, top * 1.4 if top > 0 else 1)
        _component_legend(ax, loc="upper left", missing=missing)
    fig.suptitle(f"Sensitivity ({_mode_title(setting.replay_mode)})", fontsize=11)
    fig.tight_layout()
    return _save(fig, figure_dir, name)


# ----------------------------------------------------------------------------- everything
from .replica_figures import (main_replica_ids, plot_replica_accuracy,  # noqa: E402
                              plot_replica_composition, replica_groups)


def plot_long_accuracy(item_sets: dict, per_item: dict, budgets_s: dict | None, fdir: Path) -> list[Path]:
    """``accuracy_vs_time_long``: one panel per replica of ``outdoors_long``, its horizons marked."""
    from rog.paper_horizons import E2E_ITEM, LONG_ITEM, QUICK_E2E_BUDGET_S

    from .plan_file import replica_of
    from .replica_figures import horizon_marks

    keys = [k for k in item_sets if k.split(":", 1)[0] == LONG_ITEM]
    if not keys:
        return []
    rep = replica_of(keys[0])
    short = (budgets_s or {}).get(f"{E2E_ITEM}:{rep}" if rep else E2E_ITEM, QUICK_E2E_BUDGET_S)
    marks = horizon_marks([m.run for m in item_sets[keys[0]]], short)
    return plot_replica_accuracy(item_sets, {k: (per_item.get(k) or {}).get("target_acc") for k in keys}, keys, fdir,
                                 system_style, _is_reference, _save, name="accuracy_vs_time_long", marks_s=marks,
                                 min_panels=1, title="Accuracy over the long runs, one panel per replica (dotted: "
                                 "the horizons the claims are read at; dashed: the 60-minute target)")


def draw_all(result_dir: str | Path, figure_dir: str | Path, pattern: str | Sequence[str] = "*",
             power: str = "auto", micro_run: str | None = None, micro_worker: int = 0,
             formats: Sequence[str] = FORMATS, items: dict[str, Sequence[str]] | None = None,
             budgets_s: dict[str, float] | None = None) -> list[Path]:
    """Load the runs matching ``pattern`` under ``result_dir`` and draw every figure their runs support
    (each saved in every one of ``formats``).  With ``items`` (item -> run ids, run_items.py's plan)
    the target line is the first item's target (the end-to-end item), as in summary.json, drawn on the
    panels of that item's replay modes only, and with
    ``budgets_s`` (item -> seconds) the sensitivity figure reads each study's runs over its item's budget."""
    set_formats(formats)
    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    dirs = sorted({d for p in patterns for d in find_runs(result_dir, p)})
    if not dirs:
        raise ValueError(f"no run folder under {str(result_dir)!r} matches {patterns}; check --result-dir and --runs")
    runs = [load_run(d) for d in dirs]
    partial = [r.run_id for r in runs if r.status != "done"]
    if partial:  # a partial run's means and curves are not comparable with complete ones
        print(f"figures: left out {len(partial)} incomplete run(s): {', '.join(partial)}", file=sys.stderr)
        runs = [r for r in runs if r.status == "done"]
        if not runs:
            raise ValueError(f"no complete run under {str(result_dir)!r} matches {patterns} (all are INCOMPLETE)")
    views = None
    if items:
        from .summary import item_views

        metrics, per_item, views = item_views(runs, items, power=power, budgets_s=budgets_s)
        target = None
        if per_item:  # the first item's target, drawn only on the panels of its runs' replay modes
            first = next(iter(per_item))
            ids = set(items.get(first, ()))
            target = {m.run.replay_mode: per_item[first]["target_acc"] for m in metrics if m.run.run_id in ids}
    else:
        metrics, target, _, _ = compute_metrics(runs, power=power)
    fdir = Path(figure_dir)
    out: list[Path] = []
    main_ids = main_replica_ids(items) if items else None
    if main_ids is not None:  # several replicas: small multiples and spreads; the rest show the first replica
        keys = next(iter(replica_groups(items).values()))  # the first multi-replica item (run_all's end-to-end one)
        targets = {k: (per_item.get(k) or {}).get("target_acc") for k in keys}
        out += plot_replica_accuracy(views.item_sets, targets, keys, fdir, system_style, _is_reference, _save)
        out += plot_replica_composition(views.item_sets, keys, fdir, system_style, _is_reference, _save)
        metrics = [m for m in metrics if m.run.run_id in main_ids]
    if views is not None:  # the long item over its whole runs, its horizons marked (rog.papers.rog.horizons)
        out += plot_long_accuracy(views.item_sets, per_item, budgets_s, fdir)
    setting = base_setting(metrics)
    out += plot_composition(metrics, fdir, setting)
    out += plot_accuracy_vs_iterations(metrics, fdir, setting)
    out += plot_accuracy_vs_time(metrics, fdir, setting, target)
    out += plot_energy_vs_accuracy(metrics, fdir, setting, target)
    out += plot_micro_events(metrics, fdir, micro_run, micro_worker, setting=setting)
    out += plot_sensitivity(metrics, fdir, setting, sensitivity=views.sensitivity if views else None,
                            threshold=views.threshold if views else None)
    from .paper_sections import figures as paper_figures  # each reproduced paper's own (rog/papers/<paper>/)
    out += paper_figures(runs, views.item_sets if views is not None else None, fdir, _formats)
    return out
