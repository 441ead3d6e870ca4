"""The streaming steps of the ``scadles`` item: the buffer law, fixed vs rate-proportional batches in the
starved (S1, S1') and flooded (S2, S2') regimes, and ScaDLES's streaming pieces combined with ROG on the
replayed outdoor trace (:mod:`rog.papers.scadles.item` runs them; :mod:`rog.papers.scadles.stream_runs` reads them).

Every regime step is BSP, 4 workers, unshaped loopback, quick-cpu compute pacing (0.28 s per mini-batch of 32;
a streamed pass of b samples follows the profile's measured ``compute_fit``), ScaDLES's
rate set for the regime (seed 0, scaled to this machine, docs/scadles.md), a :data:`BUDGET_S` second
training budget and a test every 5 iterations; rate-proportional steps use weighted aggregation and the
linear learning-rate rule.  The ROG steps run ROG-4 on the emulated testbed replaying the outdoor trace.
"""

from __future__ import annotations

from pathlib import Path

from rog.experiment.config import RUN_MODULE

BUDGET_S = 90.0  # training seconds per run (--budget-s)
COMMON = ["--workers", "4", "--profile", "quick-cpu", "--eval-every", "5", "--budget-s", f"{BUDGET_S:g}",
          "--no-progress", "--item", "scadles"]
REGIME = ["--testbed", "loopback", "-c", "none", "--library", "BSP"]
ROG_OUTDOORS = ["--library", "ROG", "-c", "outdoors"]
PROPORTIONAL = ["--batch-policy", "rate_proportional", "--weighted-aggregation", "on", "--lr-scaling", "linear"]
# step name -> run.py flags (beyond COMMON); "S2-fixed" is the buffer-persistence run
STEPS = {
    "buffer-persistence": REGIME + ["--stream-set", "S2", "--stream-buffer", "persistence"],
    "buffer-truncate": REGIME + ["--stream-set", "S2", "--stream-buffer", "truncate"],
    "S2-proportional": REGIME + ["--stream-set", "S2"] + PROPORTIONAL,
    "S1-fixed": REGIME + ["--stream-set", "S1"],
    "S1-proportional": REGIME + ["--stream-set", "S1"] + PROPORTIONAL,
    "S1p-fixed": REGIME + ["--stream-set", "S1p"],
    "S1p-proportional": REGIME + ["--stream-set", "S1p"] + PROPORTIONAL,
    "S2p-fixed": REGIME + ["--stream-set", "S2p"],
    "S2p-proportional": REGIME + ["--stream-set", "S2p"] + PROPORTIONAL,
    "rog-outdoors-fixed": ROG_OUTDOORS + ["--stream-set", "S1"],
    "rog-outdoors-scadles": ROG_OUTDOORS + ["--stream-set", "S1", "--stream-buffer", "truncate"] + PROPORTIONAL,
}
ALIASES = {"S2-fixed": "buffer-persistence"}
FIG6_SETS = ("S1", "S1p", "S2", "S2p")  # Fig. 6's rate sets: a fixed and a rate-proportional run each
FIG6_STEPS = tuple(f"{s}-{p}" for s in FIG6_SETS for p in ("fixed", "proportional"))
# per run: the budget, start-up and tear-down with 4 workers (items.STARTUP_S + 4 x STARTUP_PER_WORKER_S), the tail
ESTIMATE_S = len(STEPS) * (BUDGET_S + 9.0 + 4 * 7.5 + 6.0)


def _folders(result_dir: Path) -> dict[str, Path]:
    base = Path(result_dir) / "scadles"
    out = {name: base / name for name in STEPS}
    out.update({alias: base / target for alias, target in ALIASES.items()})
    return out


def steps(result_dir: Path) -> list[tuple[str, list[str]]]:
    """``(output folder, argv)`` of every run: ``-m rog.experiment`` (``scripts/run.py``) with its flags, into the folder."""
    out = []
    for name, flags in STEPS.items():
        folder = Path(result_dir) / "scadles" / name
        out.append((str(folder), ["-m", RUN_MODULE, *flags, *COMMON, "-n", f"scadles-{name}", "--result-dir", str(folder)]))
    return out


def seed_folders(result_dir: Path, seed: int) -> dict[str, Path]:
    """Fig. 6's run folders of one seed (``<result>/scadles/seed<n>/<step>``), by step name."""
    return {name: Path(result_dir) / "scadles" / f"seed{int(seed)}" / name for name in FIG6_STEPS}


def seed_steps(result_dir: Path, seed: int) -> list[tuple[str, list[str]]]:
    """Fig. 6's eight runs on ``seed`` (the flags of :data:`STEPS`, ``S2-fixed`` as its alias), into :func:`seed_folders`."""
    out = []
    for name, folder in seed_folders(result_dir, seed).items():
        flags = STEPS[ALIASES.get(name, name)]
        out.append((str(folder), ["-m", RUN_MODULE, *flags, *COMMON, "--seed", str(int(seed)), "-n",
                                  f"scadles-{name}-seed{int(seed)}", "--result-dir", str(folder)]))
    return out


def markdown(result_dir: Path) -> str:
    """The streaming rows of ``result/scadles/summary.md``."""
    from .stream_runs import stream_markdown_rows

    return "\n".join(stream_markdown_rows(_folders(result_dir))) + "\n"


def plot(result_dir: Path, figure_dir: Path) -> list[Path]:
    """``figure/scadles_buffer.png`` and ``figure/scadles_accuracy.png``."""
    from .stream_runs import plot_stream_figures

    return plot_stream_figures(_folders(result_dir), figure_dir)
