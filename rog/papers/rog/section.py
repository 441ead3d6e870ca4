"""ROG's section of ``summary.{json,md}`` (registered in :mod:`rog.analysis.paper_sections`).

Two parts, where summary.md has always had them:

* after the runs table (:func:`claims_markdown`): the time composition next to the artifact's logs, the
  claims table (ours, the artifact's, the paper's, the acceptance bound, a sentence computed from them;
  :mod:`.claims`), where the time to target is decided, and the two replay modes;
* after the runs' notes: the claims over the trace x seed replicas (summary.json ``robustness``,
  :mod:`.robustness`), why a claim fails on some replicas (``robustness_causes``, also there), worker
  0's model alone (``worker0``) and the target's position (``target_sensitivity``, :mod:`.claims`),
  statistical efficiency (``efficiency``, :mod:`.efficiency`), the ATP's budgets and shares (``atp``,
  :mod:`.atp`) and the ``outdoors_long`` item at the paper's horizons (``long_horizon``, :mod:`.horizons`).

Its figures (:func:`draw_figures`): the end-to-end ones (:mod:`.figures`), the micro events, the sensitivity
studies and the long horizon (:mod:`.figures_studies`), and the replicas' (:mod:`rog.analysis.replica_figures`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rog.analysis.claim_table import Setting, base_setting, fmt, mean, select
from rog.analysis.metrics import RunMetrics, ratio
from rog.analysis.grades import counts, counts_markdown
from rog.analysis.paper_sections import AFTER_NOTES, AFTER_RUNS, FigureContext, SectionPart, SummaryContext
from rog.analysis.tables import markdown_table, row

from .claims import claim_rows, crossing_paragraph, crossing_table, replay_paragraph
from .grading import SCALED as SCALED_NOTE
from .grading import claim_graded_rows
from .item_groups import ItemGroups, item_groups, study_groups
from .references import ARTIFACT, reference_sources_line

__all__ = ["claims_markdown", "replicas_part", "summary_section", "figure_target", "draw_figures"]


def claims_markdown(metrics: Sequence[RunMetrics], target: float | None, setting: Setting, groups: ItemGroups,
                    budgets_s: dict[str, float] | None, robustness: Sequence[dict[str, Any]] | None,
                    graded: list | None = None) -> str:
    """summary.md's text after the runs table: time composition, claims, the target's crossing, replay modes
    (``groups``: the items' runs, :mod:`.item_groups`; ``budgets_s`` and ``robustness`` (the claims over the
    replicas): for the sensitivity items' decidability rule, :mod:`.robustness`).  The claims' graded rows
    (:mod:`.grading`) are appended to ``graded`` when given."""
    from .robustness import NOT_DECIDABLE, reasons

    lines = ["", "## Time composition next to the artifact's logs", "",
             "Seconds per iteration, means over workers (the artifact: one Jetson worker). Our compute is paced "
             "to a scaled device profile, so compare the shares (stall / compute, comm / compute), not seconds.", "",
             *markdown_table(["system", "ours s/iter", "ours compute", "ours comm", "ours stall", "ours stall/compute",
                              "artifact s/iter", "artifact compute", "artifact comm", "artifact stall",
                              "artifact stall/compute", "sentence"])]
    labels = []
    for m in metrics:
        if m.run.label not in labels:
            labels.append(m.run.label)
    for lab in labels:
        ms = select(metrics, lab, setting)
        if not ms:
            continue
        c, co, sl, i = (mean(ms, g) for g in (lambda m: m.compute_s, lambda m: m.comm_s, lambda m: m.stall_s,
                                                 lambda m: m.iter_s))
        ours_share = ratio(sl, c)
        art = ARTIFACT.get(lab, {})
        art_share = ratio(art.get("stall_s"), art.get("compute_s"))
        if ours_share is None or art_share is None:
            sent = "No artifact log for this system." if not art else "A value is missing."
        else:
            rel = ours_share / art_share if art_share else float("inf")
            sent = (f"Our stall is {ours_share:.2f}x compute against the artifact's {art_share:.2f}x "
                    + ("(close)." if 0.67 <= rel <= 1.5 else f"({'more' if rel > 1 else 'less'} stall relative to compute).")
                    )
        lines.append(row([lab, fmt(i, 3), fmt(c, 3), fmt(co, 3), fmt(sl, 3), fmt(ours_share), fmt(art.get("iter_s")),
                          fmt(art.get("compute_s")), fmt(art.get("comm_s")), fmt(art.get("stall_s")), fmt(art_share),
                          sent]))
    systems = {m.run.label for m in metrics}
    if len(systems) <= 1:  # every claim compares two systems: none can be read, and 16 rows would only say so
        lines += ["", "## Claims", "",
                  f"{'One run' if len(metrics) == 1 else 'One system'}: claims need the compared systems (BSP, SSP, "
                  "FLOWN beside ROG, as `bash scripts/run_all.sh` runs them).", ""]
        return "\n".join(lines)
    claims = claim_rows(metrics, setting, groups.sensitivity, groups.threshold)
    undecided = reasons(claims, budgets_s, robustness)
    rows = claim_graded_rows(claims, set(undecided))
    grade_of = {r.claim: r.grade for r in rows}
    if graded is not None:
        graded.extend(rows)
    lines += ["", "## Claims", "",
              "Ratios are ours / baseline in the end-to-end setting (other settings where named); 'points' are "
              "accuracy differences; several runs of a system (seeds) are averaged over those with a value, and the "
              "'ours' cell says how many had one. " + reference_sources_line(), "",
              f"Grades of the claims with a bound (rules: `rog/analysis/grades.py`; setting: {SCALED_NOTE}):", "",
              *counts_markdown(counts(rows), "ROG"),
              *markdown_table(["comparison", "ours", "artifact", "paper", "acceptance", "verdict", "grade", "sentence"])]
    for c in claims:
        unit = "x" if c.unit == "x" else " pts"
        ours = fmt(c.ours, unit=unit) + (f" ({c.reached()})" if c.reached() else "")
        bound = "-" if c.bound is None else f"{c.bound[0]} {c.bound[1]:g}{unit}"
        verdict, sentence = c.verdict(), c.sentence()
        if c.name in undecided:
            verdict = NOT_DECIDABLE
            sentence = f"{undecided[c.name][0].upper()}{undecided[c.name][1:]}; ours is shown, not judged. {sentence}"
        lines.append(row([c.name, ours, fmt(c.artifact, unit=unit), c.paper_text, bound, verdict,
                          grade_of.get(c.name, "-"), sentence]))
    lines += ["", "## Where the time to target is decided", "", crossing_paragraph(metrics, target, setting), ""]
    lines += crossing_table(metrics, setting)
    horizon = groups.replay_horizon_s
    lines += ["", "## Replay modes", "",
              (f"Both modes read over their first {horizon:g} s (the shorter of the two items' budgets). " if horizon else "")
              + replay_paragraph(groups.replay or metrics, setting), ""]
    return "\n".join(lines)


def replicas_part(ctx: SummaryContext, robust: list, per_replica: dict) -> tuple[dict[str, Any], str]:
    """summary.json's keys and summary.md's text after the runs' notes (the module docstring's second part)."""
    from .atp import atp_markdown, atp_table
    from .claims import single_worker_markdown, single_worker_measures, target_sensitivity, target_sensitivity_markdown
    from .efficiency import efficiency_section  # iterations to each level of the rise, where the target falls
    from .horizons import long_horizon, long_horizon_markdown  # outdoors_long at 150 s, 30 and 60 paper-minutes
    from .robustness import causes_markdown, explain, robustness_markdown  # and why a claim fails on some replicas

    views = ctx.views
    doc: dict[str, Any] = {"robustness": robust}
    md = [robustness_markdown(robust, per_replica, views.budgets_s if views is not None else None)] if len(per_replica) > 1 else []
    # one replica: the claims table above is the whole story (summary.json keeps "robustness")
    why = explain(robust, per_replica,
                  [m for ms in (views.item_sets or {}).values() for m in ms] if views is not None else ctx.metrics)
    if why:  # some claim fails on some replicas
        doc["robustness_causes"] = why
        md.append(causes_markdown(why))
    first_runs = views.first_runs if views is not None and views.first_runs is not None else ctx.runs
    single = single_worker_measures(first_runs, 0, ctx.target_fraction, ctx.power, ctx.smooth_tests)
    if single is not None:
        doc["worker0"] = single
        md.append(single_worker_markdown(single))
    sens_rows = target_sensitivity(first_runs, power=ctx.power, smooth_tests=ctx.smooth_tests)
    doc["target_sensitivity"] = sens_rows
    md.append(target_sensitivity_markdown(sens_rows))
    eff = efficiency_section(first_runs, ctx.target_fraction, ctx.power, ctx.smooth_tests) if ctx.items else None
    if eff is not None:
        doc["efficiency"] = eff[0]
        md.append(eff[1])
    atp = atp_table(ctx.runs)  # every ROG run's budgets and delivered shares, over its whole event logs
    doc["atp"] = atp
    if atp:
        md.append(atp_markdown(atp))
    lh = long_horizon(ctx.runs, ctx.items, ctx.budgets_s, target_fraction=ctx.target_fraction, power=ctx.power,
                      smooth_tests=ctx.smooth_tests) if ctx.items else None
    if lh is not None:
        doc["long_horizon"] = lh
        md.append(long_horizon_markdown(lh))
    return doc, "\n".join(md)


def summary_section(ctx: SummaryContext) -> list[SectionPart] | None:
    """ROG's two parts whenever there are runs (a claim without its systems' runs reads 'not decidable')."""
    from .robustness import robustness

    if not ctx.runs:
        return None
    robust, per_replica = robustness(ctx.item_sets, ctx.metrics)
    graded: list = []
    text = claims_markdown(ctx.metrics, ctx.target_acc, base_setting(ctx.metrics), item_groups(ctx),
                           ctx.views.budgets_s if ctx.views is not None else None, robust, graded)
    doc, replicas_md = replicas_part(ctx, robust, per_replica)
    return [SectionPart({}, text, AFTER_RUNS, graded=tuple(graded)), SectionPart(doc, replicas_md, AFTER_NOTES)]


def figure_target(ctx: FigureContext) -> float | dict | None:
    """The target line of the end-to-end figures: without a plan the common target, on every panel; with one
    the first item's (as in summary.json), as replay mode -> target for the modes of that item's runs only."""
    if not ctx.items:
        return ctx.target_acc
    if not ctx.per_item:
        return None
    first = next(iter(ctx.per_item))
    ids = set(ctx.items.get(first, ()))
    return {m.run.replay_mode: ctx.per_item[first]["target_acc"] for m in ctx.metrics if m.run.run_id in ids}


def draw_figures(ctx: FigureContext) -> list[Path]:
    """ROG's figures, where their runs are there: with several replicas of the end-to-end item, its replicas'
    accuracy and composition (the other figures then show its first replica); ``accuracy_vs_time_long``;
    ``composition``, ``accuracy_vs_iterations``, ``accuracy_vs_time``, ``energy_vs_accuracy``,
    ``micro_events`` and ``sensitivity`` (the batch / worker / threshold items over their own budgets)."""
    if not ctx.runs:
        return []
    from rog.analysis import figure_helpers as H
    from rog.analysis.replica_figures import (main_replica_ids, plot_replica_accuracy, plot_replica_composition,
                                              replica_groups)

    from .figures import plot_accuracy_vs_iterations, plot_accuracy_vs_time, plot_composition, plot_energy_vs_accuracy
    from .figures_studies import plot_long_accuracy, plot_micro_events, plot_sensitivity

    H.set_formats(ctx.formats)
    fdir, views, target = ctx.figure_dir, ctx.views, figure_target(ctx)
    groups = study_groups(ctx.item_sets)
    metrics = list(ctx.metrics)
    out: list[Path] = []
    main_ids = main_replica_ids(ctx.items) if ctx.items else None
    if main_ids is not None:  # several replicas: small multiples and spreads; the rest show the first replica
        keys = next(iter(replica_groups(ctx.items).values()))  # the first multi-replica item (run_all's end-to-end one)
        targets = {k: (ctx.per_item.get(k) or {}).get("target_acc") for k in keys}
        out += plot_replica_accuracy(ctx.item_sets, targets, keys, fdir, H.system_style, H.is_reference, H.save_figure)
        out += plot_replica_composition(ctx.item_sets, keys, fdir, H.system_style, H.is_reference, H.save_figure)
        metrics = [m for m in metrics if m.run.run_id in main_ids]
    if views is not None:  # the long item over its whole runs, its horizons marked (.horizons)
        out += plot_long_accuracy(views.item_sets, ctx.per_item, ctx.budgets_s, fdir)
    setting = base_setting(metrics)
    out += plot_composition(metrics, fdir, setting)
    out += plot_accuracy_vs_iterations(metrics, fdir, setting)
    out += plot_accuracy_vs_time(metrics, fdir, setting, target)
    out += plot_energy_vs_accuracy(metrics, fdir, setting, target)
    out += plot_micro_events(metrics, fdir, ctx.micro_run, ctx.micro_worker, setting=setting)
    out += plot_sensitivity(metrics, fdir, setting, sensitivity=groups.sensitivity, threshold=groups.threshold)
    return out
