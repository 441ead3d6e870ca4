"""ROG's study figures (matplotlib, Agg), in every format of :func:`rog.analysis.figure_files.set_formats`:

* ``micro_events``: one worker over a time window: link rate (replay log), share of rows delivered per push,
  staleness (Fig. 8);
* ``sensitivity``: one row per study present (batch size, worker count, threshold): accuracy vs time and
  the time composition per setting (Fig. 9 / 10);
* ``accuracy_vs_time_long``: the ``outdoors_long`` item, one panel per replica, its horizons marked.
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
from rog.analysis.metrics import RunMetrics  # noqa: E402

from .figures import in_setting  # noqa: E402

__all__ = ["plot_micro_events", "plot_sensitivity", "plot_long_accuracy"]


# ----------------------------------------------------------------------------- micro events
def _pick_micro_run(metrics: Sequence[RunMetrics], setting: Setting) -> RunMetrics | None:
    pref = [("ROG-4", setting.replay_mode), ("ROG-4", None), ("ROG", None)]
    for lab, mode in pref:
        for m in metrics:
            r = m.run
            if r.iterations.empty:
                continue
            if lab == "ROG" and r.system == "ROG" or r.label == lab:
                if mode is None or (r.replay_mode == mode and in_setting(m, setting, mode)):
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
    color = H.PALETTE.get(run.system, H.OTHER_COLOR)
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
            ax.step(xs + [hi], ys + [ys[-1]], where="post", color=H.mix("#444444", 0.3 * k), linewidth=1.3,
                    label=f"replayed rate ({link})")
            drawn = True
    push = it[(it["t_start_s"] >= lo) & (it["t_start_s"] <= hi)]
    push_t = push["push_t_s"]
    goodput = push["push_bytes"].astype(float) * 8 / 1e6 / push["push_s"].replace(0, np.nan)
    ax.plot(push_t, goodput, "o", markersize=3, color=color, label="push goodput, measured")
    if not drawn:
        from rog.analysis.load import config_value

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
                color=H.mix(color, 0.45), label="pull: rows delivered / rows planned")
    ax.set_ylabel("rows transmitted (%)")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    # (c) staleness
    ax = axes[2]
    if w["staleness_max"].notna().any():
        ax.step(w["push_t_s"] + w["push_s"], w["staleness_max"], where="post", color=color, linewidth=1.3,
                label="max over rows")
        ax.plot(w["push_t_s"] + w["push_s"], w["staleness_mean"], "o", markersize=3, color=H.mix(color, 0.4),
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
    fig.suptitle(f"Micro-events of worker {worker}, {run.label} ({'; '.join(filter(None, (H.mode_title(run.replay_mode), f'run {run.run_id}')))})",
                 fontsize=10)
    fig.tight_layout()
    return H.save_figure(fig, figure_dir, name)


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
        ms = H.order(ms)
        values = sorted({getattr(m.run, field) for m in ms})
        fmt = {"batch_multiple": lambda v: f"x{v}", "workers": lambda v: f"{v} workers",
               "threshold": lambda v: f"s={v}"}[field]
        # left: accuracy vs time
        ax = row[0]
        with_acc = [m for m in ms if not m.run.accuracy.empty]
        xmax = max((float(m.run.accuracy["time_s"].max()) for m in with_acc), default=1.0)
        scale, unit = H.time_unit(xmax)
        for m in with_acc:
            a = m.run.accuracy.sort_values("time_s")
            st = H.system_style(m.run, runs_all)
            if field != "threshold":
                st["linestyle"] = H.LINESTYLES[values.index(getattr(m.run, field)) % len(H.LINESTYLES)]
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
                    missing += H.stacked_bars(ax, mm[:1], np.array([gi + (li - (len(series) - 1) / 2) * width]),
                                             width * 0.9, runs_all)
            ticks.append(gi)
        labels = series
        ax.set_xticks(ticks, [fmt(v) for v in values])
        ax.set_ylabel("time per iteration (s)")
        which = "one bar per threshold" if field == "threshold" else f"bars left to right: {', '.join(labels)}"
        ax.set_title(f"{title}: time composition ({which})", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        top = max(max((m.iter_s or 0.0), sum(getattr(m, f) or 0.0 for f, *_ in H.COMPONENTS)) for m in ms)
        ax.set_ylim(0, top * 1.4 if top > 0 else 1)
        H.component_legend(ax, loc="outside", missing=missing, base=H.bar_colour(ms, runs_all))  # never over a bar
    fig.suptitle("Sensitivity" + (f" ({H.mode_title(setting.replay_mode)})" if setting.replay_mode else ""), fontsize=11)
    fig.tight_layout()
    return H.save_figure(fig, figure_dir, name)


def plot_long_accuracy(item_sets: dict, per_item: dict, budgets_s: dict | None, fdir: Path) -> list[Path]:
    """``accuracy_vs_time_long``: one panel per replica of ``outdoors_long``, its horizons marked."""
    from rog.paper_horizons import E2E_ITEM, LONG_ITEM, QUICK_E2E_BUDGET_S

    from rog.analysis.plan_file import replica_of
    from rog.analysis.replica_figures import horizon_marks, plot_replica_accuracy

    keys = [k for k in item_sets if k.split(":", 1)[0] == LONG_ITEM]
    if not keys:
        return []
    rep = replica_of(keys[0])
    short = (budgets_s or {}).get(f"{E2E_ITEM}:{rep}" if rep else E2E_ITEM, QUICK_E2E_BUDGET_S)
    marks = horizon_marks([m.run for m in item_sets[keys[0]]], short)
    return plot_replica_accuracy(item_sets, {k: (per_item.get(k) or {}).get("target_acc") for k in keys}, keys, fdir,
                                 H.system_style, H.is_reference, H.save_figure, name="accuracy_vs_time_long", marks_s=marks,
                                 min_panels=1, title="Accuracy over the long runs, one panel per replica (dotted: "
                                 "the horizons the claims are read at; dashed: the 60-minute target)")


