"""ScaDLES's fresh-seed rule (docs/scadles.md, "Rules for the next runs"): Fig. 6 and Table V on seeds 11-13.

``python -m rog.papers.scadles.item --seeds 11,12,13`` (``bash scripts/run_all.sh --seeds 11,12,13 scadles``) runs,
per seed, Fig. 6's eight runs (:func:`rog.papers.scadles.stream_steps.seed_steps`) and Table V's eleven
(:func:`rog.papers.scadles.table5_steps.steps` with the seed), each into ``<result>/scadles/seed<n>/``; the item's
other parts run their own seeds and are not repeated (:func:`notes` says which and why).

Read over the seeds (pure functions of per-seed numbers in :mod:`.grading`, tested on hand-made dicts):

* Fig. 6 (:func:`fig6_over_seeds`): per rate set the median over the seeds of the speed-up (fixed time over
  rate-proportional time to the pair's common target) and of the plateau difference (proportional - fixed, points),
  judged by :func:`rog.papers.scadles.verdicts.fig6_verdicts`;
* Table V (:func:`table_v_over_seeds`): per cell the median CNC over the seeds, the table judged by the band rule
  and the majority of judged cells (:func:`rog.papers.scadles.grading.table_v_row`, with the two trivial gates
  beside), the two telling cells (CR 0.1 at delta 0.3 and 0.4) on their own line.

A reading is decided only when every seed the rule names has its runs; until then the medians of the seeds that
have them are shown, the line names those seeds ("seed 11 only") and the rows are ``not decidable``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from rog.analysis.grades import GradedRow
from rog.analysis.tables import markdown_table

from .grading import (RULE_SEEDS, fig6_graded_rows, fig6_over_seeds, seeds_label, table_v_graded_row,
                      table_v_over_seeds)
from .nulls import gate_null_cnc
from .verdicts import FIG6_PAPER, TABLE_V_PAPER, table_v_cell

__all__ = ["RULE_SEEDS", "TELLING_CELLS", "steps", "notes", "estimate_s", "seeds_label", "fig6_over_seeds",
           "table_v_over_seeds", "telling_line", "fig6_graded_rows", "table_v_graded_row", "load_fig6_seed",
           "found_seeds", "seed_markdown", "graded_rows"]

TELLING_CELLS = ((0.1, 0.3), (0.1, 0.4))  # the cells where a working gate and the trivial ones differ
NOT_PER_SEED = (  # the item's parts the rule does not name: (part, the seed it runs, why it is not repeated)
    ("the buffer law and truncation steps", "seed 0", "consistency checks, not claims"),
    ("the ROG outdoors steps", "seed 0", "no paper number (Table VI's direction is read on its own seeds)"),
    ("the Top-k and non-IID steps (Figs. 8/9, the 30-iteration gate runs)", "seed 0",
     "Fig. 8's settings ran on fresh seeds 5-7 already; Table V's gate is rerun per seed by its table5 steps"),
    ("Table VI", "seeds 1, 2, 3", "its own three seeds, fixed before its runs"),
)


def steps(result_dir: Path, seeds: Sequence[int]) -> list[tuple[str, list[str]]]:
    """``(output folder, argv)`` of every run of the rule, seed by seed (a partial item still gives whole seeds)."""
    from . import stream_steps, table5_steps

    return [x for s in seeds for x in (*stream_steps.seed_steps(result_dir, s), *table5_steps.steps(result_dir, s))]


def notes(seeds: Sequence[int]) -> list[str]:
    """One line per part of the item that ``--seeds`` does not run, naming the seed it runs and why."""
    given = ",".join(map(str, seeds))
    return [f"[scadles] --seeds {given}: not run per seed: {part} ({seed}: {why}); run the item without --seeds for it"
            for part, seed, why in NOT_PER_SEED]


def estimate_s(seeds: Sequence[int]) -> float:
    """The rule's runs here: Fig. 6's eight runs and Table V's eleven per seed (their modules' per-run estimates)."""
    from . import stream_steps, table5_steps

    per_seed = (stream_steps.ESTIMATE_S / len(stream_steps.STEPS) * len(stream_steps.FIG6_STEPS)
                + table5_steps.ESTIMATE_S)
    return per_seed * len(seeds)


def telling_line(tv: Mapping[str, Any]) -> str:
    """The two telling cells on their own line: per seed, the median, its verdict, and what each trivial gate gets."""
    parts = []
    for c in TELLING_CELLS:
        if c not in tv["cnc"]:
            parts.append(f"CR {c[0]:g}, delta {c[1]:g}: not run")
            continue
        seeds = ", ".join(f"{s}: {v:.2f}" if v is not None else f"{s}: n/a" for s, v in tv["per_seed"][c].items())
        nulls = "; ".join(f"a gate that {n}: {table_v_cell(*c, gate_null_cnc(o, [c])[c])}"
                          for n, o in (("never opens", False), ("always opens", True)))
        parts.append(f"CR {c[0]:g}, delta {c[1]:g}: median CNC {tv['cnc'][c]:.2f} ({seeds}): "
                     f"**{table_v_cell(*c, tv['cnc'][c])}** ({nulls})")
    return "The cells that tell a working gate from a trivial one: " + " | ".join(parts) + "."


def load_fig6_seed(result_dir: Path, seed: int) -> dict[str, dict[str, float | None]]:
    """One seed's Fig. 6 numbers per rate set with both runs done (speed-up to the pair's target, both plateaus)."""
    from .stream_runs import load_step, plateau_pct, speedup_to_target
    from .stream_steps import seed_folders

    runs = {n: load_step(f) for n, f in seed_folders(result_dir, seed).items()}
    out = {}
    for regime in FIG6_PAPER:
        f, p = runs.get(f"{regime}-fixed"), runs.get(f"{regime}-proportional")
        if f is None or p is None or f.status != "done" or p.status != "done":
            continue
        out[regime] = dict(speedup=speedup_to_target(f, p)["speedup"], plateau_fixed=plateau_pct(f),
                           plateau_proportional=plateau_pct(p))
    return out


def found_seeds(result_dir: Path) -> list[int]:
    """The seeds with a folder ``<result>/scadles/seed<n>/``."""
    base = Path(result_dir) / "scadles"
    return sorted(int(p.name[4:]) for p in base.glob("seed*") if p.is_dir() and p.name[4:].isdigit())


def _rule_for(seeds: Sequence[int]) -> tuple[int, ...]:
    """The seeds a reading is judged over: the rule's when any of them ran, else the seeds that ran."""
    return tuple(sorted(set(seeds) | set(RULE_SEEDS))) if set(seeds) & set(RULE_SEEDS) else tuple(sorted(seeds))


def graded_rows(result_dir: Path, seeds: Sequence[int] | None = None) -> list[GradedRow]:
    """The rule's graded rows from ``<result>/scadles/seed<n>/`` (``seeds``: default those found; [] when none)."""
    from .table5_steps import seed_cnc

    seeds = found_seeds(result_dir) if seeds is None else list(seeds)
    if not seeds:
        return []
    rule = _rule_for(seeds)
    f6 = fig6_over_seeds({s: load_fig6_seed(result_dir, s) for s in seeds}, rule)
    tv = table_v_over_seeds({s: seed_cnc(result_dir, s) for s in seeds}, rule)
    return fig6_graded_rows(f6, rule) + ([table_v_graded_row(tv, rule)] if tv["cnc"] else [])


def seed_markdown(result_dir: Path, seeds: Sequence[int]) -> str:
    """``result/scadles/summary.md``'s part for the rule: Fig. 6 and Table V over the seeds."""
    from .table5_steps import seed_cnc

    rule = _rule_for(seeds)
    f6 = fig6_over_seeds({s: load_fig6_seed(result_dir, s) for s in seeds}, rule)
    tv = table_v_over_seeds({s: seed_cnc(result_dir, s) for s in seeds}, rule)
    lines = [f"## The fresh-seed rule: Fig. 6 and Table V on seeds {', '.join(map(str, rule))}", "",
             *markdown_table(["Fig. 6 set", "paper", "seeds", "per seed (speed-up, proportional - fixed points)",
                              "median speed-up", "median difference", "verdicts on the medians"])]
    for regime, x in f6.items():
        per = "; ".join(f"{s}: {'n/a' if a is None else f'{a:.2f}x'}, {'n/a' if d is None else f'{d:+.1f}'}"
                        for s, (a, d) in x["per_seed"].items()) or "-"
        sp, df = x["speedup_median"], x["plateau_diff_median"]
        verdict = "; ".join(f"{k}: {v}" for k, v in x["verdicts"]) if x["decided"] else "not decided (a seed is missing)"
        lines.append(f"| {regime} | {FIG6_PAPER[regime]['text']} | {seeds_label(x['seeds'], rule)} | {per} | "
                     f"{'n/a' if sp is None else f'{sp:.2f}x'} | {'n/a' if df is None else f'{df:+.1f}'} | {verdict} |")
    lines += ["", *markdown_table(["CR", "delta", "CNC per seed", "median CNC", "verdict", "paper ResNet152 / VGG19"])]
    for c, med in tv["cnc"].items():
        per = ", ".join(f"{s}: {'n/a' if v is None else f'{v:.2f}'}" for s, v in tv["per_seed"][c].items())
        lines.append(f"| {c[0]:g} | {c[1]:g} | {per} | {med:.2f} | {table_v_cell(*c, med)} | "
                     f"{' / '.join(f'{x:g}' for x in TABLE_V_PAPER.get(c, ()))} |")
    row = table_v_graded_row(tv, rule) if tv["cnc"] else None
    if row is not None:
        nulls = "; ".join(f"{n.name}: {n.value} ({n.outcome})" for n in row.nulls)
        lines += ["", f"Table V ({row.reading}, {seeds_label(tv['seeds'], rule)}): {row.ours} agree: "
                      f"**{row.outcome}**; beside it, {nulls}. A table the never-opening gate also passes is built in.",
                  "", telling_line(tv)]
    return "\n".join(lines) + "\n"
