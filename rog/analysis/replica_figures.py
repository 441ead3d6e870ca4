"""Figures of a multi-replica plan (traces x seeds): small multiples and per-system spreads.

Drawn on one axis, twelve replicas of seven systems give 84 curves and 84 bars: the comparison the
paper makes (systems against each other on the same links) disappears.  So, when an item has several
replicas (``<item>:<trace>:seed<n>``, :func:`rog.analysis.plan_file.replica_of`):

* ``accuracy_vs_time_replicas``: one small panel per replica, every system's team curve in it, the
  replica's own target as a dashed line, one legend of systems for the whole figure;
* ``composition_replicas``: one bar per system, each time component the median over the replicas,
  stacked, with the range (min-max) of the replicas' seconds per iteration as a whisker; a reference
  baseline (DDP) on its own axis and scale.

The single-replica figures (``composition``, ``accuracy_vs_time``, ...) then show the first replica
only, which :func:`main_replica_ids` selects.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rog.paper_horizons import HORIZONS_MIN, QUICK_E2E_BUDGET_S  # noqa: E402

from .load import RunData, time_scale_of  # noqa: E402
from .plan_file import replica_of  # noqa: E402

__all__ = ["replica_groups", "main_replica_ids", "plot_replica_accuracy", "plot_replica_composition",
           "horizon_marks"]

COMPONENTS = (("compute_s", "computation", ""), ("comm_s", "communication", "////"), ("stall_s", "stall", "xxxx"),
              ("data_wait_s", "data wait", "...."))


def replica_groups(items: dict[str, Sequence[str]]) -> dict[str, list[str]]:
    """``{item: [its replica keys, in plan order]}`` for every item with two or more replicas."""
    out: dict[str, list[str]] = {}
    for key in items:
        if replica_of(key):
            out.setdefault(key.split(":", 1)[0], []).append(key)
    return {k: v for k, v in out.items() if len(v) > 1}


def main_replica_ids(items: dict[str, Sequence[str]]) -> set[str] | None:
    """Run ids the single-replica figures show: every item's runs, but of a multi-replica item only its
    first replica's (None when no item has several replicas)."""
    groups = replica_groups(items)
    if not groups:
        return None
    later = {k for keys in groups.values() for k in keys[1:]}
    return {i for key, ids in items.items() if key not in later for i in ids}


def _labels(ms) -> list[str]:
    seen: list[str] = []
    for m in ms:
        if m.label not in seen:
            seen.append(m.label)
    return seen


def plot_replica_accuracy(item_sets: dict, targets: dict[str, float | None], keys: Sequence[str], figure_dir: Path,
                          style, is_reference, save, name: str = "accuracy_vs_time_replicas",
                          marks_s: Sequence[tuple[float, str]] = (), title: str | None = None,
                          min_panels: int = 2) -> list[Path]:
    """One panel per replica key of ``keys`` (``item_sets[key]``: its runs' metrics; ``targets[key]``: its
    target %), every system's accuracy over time (the x axis ends just past the last non-reference run,
    ``is_reference(metrics)``); ``marks_s``: ``(seconds, label)`` drawn as dotted vertical lines (the long
    item's horizons); ``style(run, runs)`` colours, ``save(fig, dir, name)`` saves; nothing with fewer than
    ``min_panels`` panels."""
    keys = [k for k in keys if item_sets.get(k)]
    if len(keys) < max(1, min_panels):
        return []
    cols = min(4, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.7 * rows + 0.9), sharey=True, squeeze=False)
    runs_all = [m.run for k in keys for m in item_sets[k]]
    handles: dict[str, object] = {}
    for ax, key in zip(axes.flat, keys):
        ends = [float(m.run.accuracy["time_s"].max()) for m in item_sets[key]
                if not is_reference(m) and m.run.accuracy is not None and not m.run.accuracy.empty]
        if ends:  # a reference run (DDP) far past the others' end must not squeeze them
            ax.set_xlim(0, 1.05 * max(ends))
        for m in item_sets[key]:
            a = m.run.accuracy
            if a is None or a.empty:
                continue
            a = a.sort_values("time_s")
            st = dict(style(m.run, runs_all))
            st.pop("label", None)
            (h,) = ax.plot(a["time_s"], a["accuracy_pct"], linewidth=1.2, **st)
            handles.setdefault(m.label, h)
        t = targets.get(key)
        if t is not None:
            ax.axhline(t, color="#777777", linewidth=0.8, linestyle=(0, (4, 3)))
        for x, label in marks_s:
            ax.axvline(x, color="#444444", linewidth=0.7, linestyle=":")
            ax.annotate(label, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(-2, -2),
                        textcoords="offset points", ha="right", va="top", fontsize=7, color="#444444")
        ax.set_title(replica_of(key).replace(":", ", "), fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    for ax in list(axes.flat)[len(keys):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("test accuracy (%)", fontsize=9)
    for ax in axes[-1, :]:
        ax.set_xlabel("time since start (s)", fontsize=9)
    top = 1.0 - 0.75 / (2.7 * rows + 0.9)
    fig.suptitle(title or f"Accuracy over training time, one panel per replica ({len(keys)} replicas; dashed: "
                 "the replica's target; a reference run past the axis is cut)", fontsize=10, y=0.995)
    fig.legend(list(handles.values()), list(handles), loc="upper center", bbox_to_anchor=(0.5, top + 0.005),
               ncol=min(len(handles), 8), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, top - 0.03))
    return save(fig, figure_dir, name)


def _spread(item_sets: dict, keys: Sequence[str]) -> dict[str, dict]:
    """Per system label: the median over replicas of each component, and the min / max of iter_s."""
    by: dict[str, list] = {}
    order: list[str] = []
    for k in keys:
        for m in item_sets.get(k, ()):
            if m.iter_s is None:
                continue
            if m.label not in by:
                order.append(m.label)
            by.setdefault(m.label, []).append(m)
    out = {}
    for lab in order:
        ms = by[lab]
        comp, have = {}, {}
        for f, _, _ in COMPONENTS:  # the median over the replicas with a value; None (not 0) when none has one
            vals = [getattr(m, f) for m in ms if getattr(m, f) is not None]
            comp[f], have[f] = (float(np.median(vals)) if vals else None), len(vals)
        its = [m.iter_s for m in ms]
        out[lab] = dict(components=comp, have=have, median_iter_s=float(np.median(its)), min_iter_s=min(its),
                        max_iter_s=max(its), n=len(ms), run=ms[0].run)
    return out


def plot_replica_composition(item_sets: dict, keys: Sequence[str], figure_dir: Path, style, is_reference, save,
                             name: str = "composition_replicas") -> list[Path]:
    """One stacked bar per system (medians over the replicas ``keys``) with the replicas' range of seconds
    per iteration as a whisker; reference systems (``is_reference(metrics)``) on their own axis."""
    keys = [k for k in keys if item_sets.get(k)]
    if len(keys) < 2:
        return []
    sp = _spread(item_sets, keys)
    ref_labels = {m.label for k in keys for m in item_sets[k] if is_reference(m)}
    cmp = [lab for lab in sp if lab not in ref_labels]
    ref = [lab for lab in sp if lab in ref_labels]
    runs_all = [m.run for k in keys for m in item_sets[k]]
    ratios = [max(len(cmp), 1)] + ([len(ref) + 0.8] if ref else [])
    fig, axes = plt.subplots(1, len(ratios), figsize=(0.9 * (len(cmp) + len(ref)) + 3.0, 4.2),
                             gridspec_kw=dict(width_ratios=ratios), squeeze=False)
    missing = []  # segments left out (no replica has a value) or read from fewer replicas: named in the legend
    for ax, labels in zip(axes[0], [cmp, ref]):
        for x, lab in enumerate(labels):
            s = sp[lab]
            color = style(s["run"], runs_all).get("color")
            bottom = 0.0
            for f, part, hatch in COMPONENTS:
                v = s["components"][f]
                if s["have"][f] < s["n"]:
                    missing.append(f"{lab} {part} ({s['have'][f]} of {s['n']} replicas)")
                if v is not None and v > 0:
                    ax.bar(x, v, 0.65, bottom=bottom, color=color, hatch=hatch, edgecolor="white", linewidth=0.5)
                    bottom += v
            ax.errorbar(x, s["median_iter_s"], yerr=[[s["median_iter_s"] - s["min_iter_s"]],
                                                     [s["max_iter_s"] - s["median_iter_s"]]],
                        fmt="_", color="black", capsize=4, linewidth=1.0, markersize=10)
        ax.set_xticks(range(len(labels)), labels, fontsize=8, rotation=30 if len(labels) > 6 else 0)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("time per iteration (s)")
    if ref:
        axes[0][1].set_title("reference, own scale", fontsize=8)
        axes[0][1].set_facecolor("#f4f4f4")
    from matplotlib.patches import Patch

    axes[0][0].legend([Patch(facecolor="#999999", hatch=h, edgecolor="white") for _, _, h in COMPONENTS]
                      + [plt.Line2D([], [], color="black", marker="_", linestyle="none", markersize=10)]
                      + ([Patch(facecolor="none", edgecolor="none")] if missing else []),
                      [n for _, n, _ in COMPONENTS] + ["median and range of the replicas' s / iteration"]
                      + ([f"median of replicas with a value; not drawn without one: {', '.join(missing)}"] if missing else []),
                      fontsize=7, loc="upper right")
    fig.suptitle(f"Time composition of an iteration: medians over {len(keys)} replicas (traces x seeds)", fontsize=10)
    fig.tight_layout()
    return save(fig, figure_dir, name)


def horizon_marks(runs: Sequence[RunData], short_s: float | None = QUICK_E2E_BUDGET_S) -> list[tuple[float, str]]:
    """``(seconds, label)`` of the horizons a long run is read at (the figure's vertical lines); [] without a
    time scale."""
    ts = time_scale_of(runs)
    if ts is None:
        return []
    pts = ([(float(short_s), f"{float(short_s):g} s")] if short_s else []) + [
        (60.0 * m * ts, f"{m:g} min") for m in HORIZONS_MIN]
    return sorted(pts)
