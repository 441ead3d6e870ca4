"""ScaDLES's Fig. 1 (streaming latency per rate set and batch) and Fig. 5 (effective rate as streams grow):
the rules that judge the measurements (docs/scadles.md, "Fig. 1 and Fig. 5", written before the runs), the
summary rows and the figures.  Inputs are the ``result.json`` of :mod:`rog.papers.scadles.stream_latency` and
:mod:`rog.papers.scadles.stream_producers`.

Every verdict reads the *measured* latencies (real sleeps) or rates; ``b / S`` appears only as the
consistency column (measured within the sleep-granularity tolerance), never as a verdict.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Sequence

from rog.analysis.figure_files import MODULE_FORMATS, save_figure
from rog.analysis.tables import markdown_table

__all__ = ["FIG1_STARVED_PAPER", "RATE_HELD_FRACTION", "fig5_paper_holds", "rises_with_batch", "slowest_is_straggler",
           "starved", "rate_held", "fig1_verdicts", "fig1_readings", "fig5_verdicts", "markdown_rows", "plot_figures"]

# The paper (section II-A, V-D): S1 and S1' are the low-volume sets whose slowest device waits on its stream,
# S2 and S2' the high-volume sets with no waiting at the fixed batch.  True: the slowest stream's wait for
# the fixed batch exceeds the compute of that batch (the worker is starved).
FIG1_STARVED_PAPER = {"S1": True, "S1p": True, "S2": False, "S2p": False}
SET_LABEL = {"S1": "S1", "S1p": "S1'", "S2": "S2", "S2p": "S2'"}
RATE_HELD_FRACTION = 0.95  # Fig. 5: a stream count holds the target iff the median stream's effective rate >= 95 %


def fig5_paper_holds(target: float, streams: int) -> bool | None:
    """The paper's Fig. 5: 100 samples/s held up to 32 streams; 600 samples/s held up to 16, degraded beyond."""
    if target == 100.0 and streams <= 32:
        return True
    if target == 600.0:
        return streams <= 16
    return None


def rises_with_batch(latencies_s: Sequence[float]) -> bool:
    """Fig. 1's "latency increases with larger batches": strictly increasing along the batch list."""
    return len(latencies_s) >= 2 and all(b > a for a, b in zip(latencies_s, latencies_s[1:]))


def slowest_is_straggler(rates: Sequence[float], latencies_s: Sequence[float], tolerance_s: float) -> bool:
    """Fig. 1's "the device with the lowest streaming rate (and maximum latency)": the lowest-rate worker's
    measured latency is the largest, or within ``tolerance_s`` of it."""
    slow = min(range(len(rates)), key=lambda i: rates[i])
    return latencies_s[slow] >= max(latencies_s) - tolerance_s


def starved(wait_s: float, compute_s: float) -> bool:
    """The slowest stream's wait for a batch exceeds that batch's compute (``t S / b < 1``)."""
    return wait_s > compute_s


def rate_held(effective: Sequence[float], target: float, fraction: float = RATE_HELD_FRACTION) -> bool:
    """Fig. 5's rule: the median stream's effective rate is at least ``fraction`` of the target."""
    return statistics.median(effective) >= fraction * target


def fig1_verdicts(res: dict, first: int | None = None) -> dict:
    """Per rate set: the three rules on the measured latencies of the first ``first`` workers (default all)
    and the consistency count against ``b / S``."""
    batches, compute = res["batches"], res["compute_s"]
    j_fixed = batches.index(res["fixed_batch"])
    out = {}
    for name, s in res["sets"].items():
        rates, rows = s["rates"][:first], s["workers"][:first]
        slow = min(range(len(rates)), key=lambda i: rates[i])
        measured = [[m["measured_s"] for m in row] for row in rows]
        straggler = [slowest_is_straggler(rates, [measured[w][j] for w in range(len(rows))], rows[slow][j]["tolerance_s"])
                     for j in range(len(batches))]
        within = sum(abs(m["measured_s"] - m["analytic_s"]) <= m["tolerance_s"] for row in rows for m in row)
        wait = measured[slow][j_fixed]
        is_starved = starved(wait, compute[j_fixed])
        paper = FIG1_STARVED_PAPER.get(name)
        out[name] = dict(
            workers=len(rows), rates=(min(rates), max(rates)), slowest_worker=slow, slowest_rate=rates[slow],
            slowest_measured_s=measured[slow], rises=all(rises_with_batch(m) for m in measured),
            straggler_batches=sum(straggler), straggler=all(straggler), fixed_wait_s=wait,
            fixed_compute_s=compute[j_fixed], starved=is_starved, paper_starved=paper,
            starved_agrees=None if paper is None else is_starved == paper, within_tolerance=within,
            measurements=sum(len(r) for r in rows))
    return out


def fig1_readings(res: dict) -> dict:
    """``{"item": verdicts of the scadles item's workers, "paper": verdicts of every worker measured}``."""
    return {"item": fig1_verdicts(res, res["item_workers"]), "paper": fig1_verdicts(res)}


def _readings_shown(res: dict) -> list[tuple[str, dict]]:
    r = fig1_readings(res)
    if res["n_workers"] == res["item_workers"]:
        return [("item", r["item"])]
    return [("item", r["item"]), ("paper's count", r["paper"])]


def fig5_verdicts(res: dict) -> list[dict]:
    """Per (target, streams): the median effective rate, whether it holds the target, and the paper's cell."""
    out = []
    for m in res["runs"]:
        held = rate_held(m["effective"], m["target"])
        paper = fig5_paper_holds(m["target"], m["streams"])
        out.append(dict(target=m["target"], streams=m["streams"], median=statistics.median(m["effective"]),
                        min=min(m["effective"]), held=held, paper_held=paper,
                        agrees=None if paper is None else held == paper, load=m.get("load_avg_before")))
    return out


def _yn(x) -> str:
    return "n/a" if x is None else ("yes" if x else "no")


def _load(x) -> str:
    return "?" if not x else f"{x[0]:.2f}"


def _load_range(runs: list) -> str:
    loads = [m["load_avg_before"][0] for m in runs if m.get("load_avg_before")]
    return f"{min(loads):.2f}-{max(loads):.2f}" if loads else "?"


def markdown_rows(fig1: dict | None, fig5: dict | None) -> list[str]:
    """The summary's Fig. 1 and Fig. 5 sections (what is missing is said, never skipped)."""
    lines = ["## ScaDLES Fig. 1: streaming latency vs compute (measured with real sleeps)", ""]
    if fig1 is None:
        lines += ["Not measured (no stream_latency result.json).", ""]
    else:
        lines += [f"Measured {fig1['started_utc']}, seed {fig1['seed']}, {fig1['takes']} takes per point, load average "
                  f"{_load(fig1['load_avg_before'])} -> {_load(fig1['load_avg_after'])}, {fig1['wall_s']} s; batches "
                  f"{fig1['batches']} here (the paper's {fig1['paper_batches']}); times in the toolkit's scale "
                  f"(x {fig1['to_paper_time']:.2f} for the paper's). Compute per batch (quick-cpu pacing): "
                  f"{', '.join(f'{c:.3f}' for c in fig1['compute_s'])} s.", "",
                  *markdown_table(["set", "workers", "rates (/s)", "slowest wait per batch (s)", "rises",
                                   "lowest rate is the straggler",
                                   "starved at the fixed batch (wait vs compute)", "paper",
                                   "agrees", "measured within tolerance of b/S"])]
        shown = _readings_shown(fig1)
        for name in fig1["sets"]:
            for label, v in shown:
                x = v[name]
                lines.append(
                    f"| {SET_LABEL.get(name, name)} | {x['workers']} ({label}) | {x['rates'][0]:g}-{x['rates'][1]:g} | "
                    f"{', '.join(f'{w:.3f}' for w in x['slowest_measured_s'])} | {_yn(x['rises'])} | "
                    f"{x['straggler_batches']} of {len(fig1['batches'])} | {_yn(x['starved'])} "
                    f"({x['fixed_wait_s']:.3f} vs {x['fixed_compute_s']:.3f}) | {_yn(x['paper_starved'])} | "
                    f"{_yn(x['starved_agrees'])} | {x['within_tolerance']} of {x['measurements']} |")
        lines.append("")
    lines += ["## ScaDLES Fig. 5: effective rate per stream (this machine's producer in place of Kafka)", ""]
    if fig5 is None:
        lines += ["Not measured (no stream_producers result.json).", ""]
    else:
        lines += [f"Measured {fig5['started_utc']} on {fig5['cpus']} shared cores (nice {fig5['nice']}), "
                  f"{fig5['wall_s']} s; {fig5['producer']}. Rule: held iff the median stream's effective rate "
                  f">= {RATE_HELD_FRACTION:.0%} of the target.", "",
                  *markdown_table(["target (/s)", "streams", "median effective (/s)", "slowest stream (/s)", "held",
                                   "paper", "agrees", "load"])]
        rows = fig5_verdicts(fig5)
        for r in rows:
            lines.append(f"| {r['target']:g} | {r['streams']} | {r['median']:.1f} | {r['min']:.1f} | {_yn(r['held'])} | "
                         f"{_yn(r['paper_held'])} | {_yn(r['agrees'])} | {_load(r['load'])} |")
        judged = [r for r in rows if r["agrees"] is not None]
        lines += ["", f"Cells agreeing with the paper's shape: {sum(r['agrees'] for r in judged)} of {len(judged)}.", ""]
    return lines


def plot_figures(fig1: dict | None, fig5: dict | None, figure_dir: Path,
                 formats: Sequence[str] = MODULE_FORMATS) -> list[Path]:
    """``figure/scadles_fig1.png`` (per set: every worker's measured latency, the slowest bold, b/S dotted,
    compute per batch) and ``figure/scadles_fig5.png`` (per target: per-stream rates as boxes per count), one
    file per format."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    if fig1 is not None:
        names = list(fig1["sets"])
        fig, axes = plt.subplots(1, len(names), figsize=(3.1 * len(names), 3.2), squeeze=False, sharey=True)
        b = fig1["batches"]
        for ax, name in zip(axes[0], names):
            s = fig1["sets"][name]
            slow = min(range(len(s["rates"])), key=lambda i: s["rates"][i])
            k = fig1["item_workers"]
            slow_item = min(range(k), key=lambda i: s["rates"][i])
            for w, row in enumerate(s["workers"]):
                bold = w == slow
                ax.plot(b, [m["measured_s"] for m in row], "o-" if bold else ".-", lw=2 if bold else 0.8,
                        color="C3" if bold else "C0", alpha=1 if bold else 0.5,
                        label=f"slowest of {len(s['rates'])} ({s['rates'][w]:g}/s)" if bold else None)
                ax.plot(b, [m["analytic_s"] for m in row], ":", color="gray", lw=0.8)
            if slow_item != slow:
                ax.plot(b, [m["measured_s"] for m in s["workers"][slow_item]], "^-", color="C1", lw=1.5,
                        label=f"slowest of the item's {k} ({s['rates'][slow_item]:g}/s)")
            ax.plot(b, fig1["compute_s"], "s--", color="black", lw=1.2, label="compute (quick-cpu)")
            ax.axvline(fig1["fixed_batch"], color="gray", lw=0.5)
            ax.set_xscale("log", base=2)
            ax.set_xticks(b, [str(x) for x in b])
            ax.set_yscale("log")
            ax.set_title(f"{SET_LABEL.get(name, name)}: {min(s['rates']):g}-{max(s['rates']):g}/s", fontsize=9)
            ax.set_xlabel("batch (samples)")
            ax.legend(fontsize=6)
        axes[0][0].set_ylabel("seconds (toolkit scale)")
        fig.suptitle("Fig. 1: wait to gather a batch (measured, real sleeps; dotted b/S) vs compute per batch; "
                     f"grey line: fixed batch {fig1['fixed_batch']}", fontsize=9)
        fig.tight_layout()
        out += save_figure(fig, figure_dir, "scadles_fig1", formats)
    if fig5 is not None:
        targets = sorted({m["target"] for m in fig5["runs"]})
        fig, axes = plt.subplots(1, len(targets), figsize=(4.2 * len(targets), 3.4), squeeze=False)
        for ax, tgt in zip(axes[0], targets):
            runs = sorted((m for m in fig5["runs"] if m["target"] == tgt), key=lambda m: m["streams"])
            data = [[x for row in m["buckets"] for x in row] for m in runs]
            ax.boxplot(data, showfliers=True)
            ax.set_xticks(range(1, len(runs) + 1), [str(m["streams"]) for m in runs])
            ax.axhline(tgt, color="C2", lw=0.8, label="target")
            ax.axhline(RATE_HELD_FRACTION * tgt, color="C3", lw=0.8, ls="--", label=f"{RATE_HELD_FRACTION:.0%} of target")
            ax.set_title(f"target {tgt:g} samples/s", fontsize=9)
            ax.set_xlabel("concurrent streams")
            ax.legend(fontsize=6)
        axes[0][0].set_ylabel(f"rate per stream per {fig5['runs'][0]['bucket_s']:g} s (samples/s)")
        fig.suptitle("Fig. 5: this machine's producer (loopback TCP, spawned processes) in place of Kafka; "
                     f"{fig5['cpus']} shared cores, 1-min load {_load_range(fig5['runs'])}", fontsize=8)
        fig.tight_layout()
        out += save_figure(fig, figure_dir, "scadles_fig5", formats)
    return out
