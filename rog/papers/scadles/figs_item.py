"""The ``scadles-figs`` item (opt-in): ScaDLES's Fig. 1 and Fig. 5, which need no training run.

``bash scripts/run_all.sh scadles-figs`` (or ``python -m rog.papers.scadles.figs_item``) runs two steps,
each skipped when its folder already holds ``result.json`` (delete the folder to rerun):

* ``R/scadles-figs/fig1``: :mod:`rog.papers.scadles.stream_latency` (the streaming latency to gather a batch,
  real sleeps on the toolkit's stream source, per rate set, worker and batch, with compute per batch);
* ``R/scadles-figs/fig5``: :mod:`rog.papers.scadles.stream_producers` (effective rate per stream for 1-32
  producers at 100 and 600 samples/s, this machine's producer in place of Kafka);

then writes ``R/scadles-figs/summary.md`` and ``F/scadles_fig1.png``, ``F/scadles_fig5.png``
(:mod:`rog.papers.scadles.figs15`) and prints the verdicts as JSON on the last line.

Run as ``python -m rog.papers.scadles.figs_item --result-dir R --figure-dir F [--dry-run]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rog.experiment.module_item import ModuleItem, Summary, item_main, python_step

__all__ = ["NAME", "ESTIMATE_S", "steps", "ITEM", "main"]

NAME = "scadles-figs"
# Measured here: Fig. 1 42 s (4 sets x 16 workers x 5 batches x 3 takes of <= 0.05 s real, load average 5),
# Fig. 5 about 55 s (10 cells of 0.2 + 0.5 + 4 + 0.3 s + start-up), summary and figures about 5 s.
ESTIMATE_S = 105.0
# run_all.sh --seeds: refused (rog.experiment.items.module_item_seeds), with this reason
SEEDS_REFUSED = ("no training run: Fig. 1 times the stream source's sleeps for the rate draw of seed 0 and Fig. 5 a "
                 "producer with no seed; both are graded built in")


def steps(result_dir: Path) -> list[tuple[Path, list[str]]]:
    """``(output folder, argv)`` of the two measurements (python ``-m`` commands run from the repository root)."""
    base = Path(result_dir) / NAME
    return [(base / "fig1", ["-m", "rog.papers.scadles.stream_latency", "--out", str(base / "fig1")]),
            (base / "fig5", ["-m", "rog.papers.scadles.stream_producers", "--out", str(base / "fig5")])]


def _read(folder: Path) -> dict | None:
    p = Path(folder) / "result.json"
    return json.loads(p.read_text()) if p.exists() else None


def _summarise(a, rc: int) -> Summary:
    from rog.analysis.grades import section_opening

    from .figs15 import fig1_readings, fig5_verdicts, markdown_rows, plot_figures
    from .grading import figs_rows

    (f1_dir, _), (f5_dir, _) = steps(Path(a.result_dir))
    fig1, fig5 = _read(f1_dir), _read(f5_dir)
    md = "\n".join(["# ScaDLES Fig. 1 and Fig. 5 on this machine", ""]
                   + section_opening(figs_rows(fig1, fig5), "ScaDLES Figs. 1 and 5") + markdown_rows(fig1, fig5))
    figs = plot_figures(fig1, fig5, Path(a.figure_dir))
    verdict = dict(item=NAME, summary=str(Path(a.result_dir) / NAME / "summary.md"), figures=[str(p) for p in figs],
                   fig1=fig1_readings(fig1) if fig1 else None, fig5=fig5_verdicts(fig5) if fig5 else None)
    return Summary(md, figures=figs, complete=fig1 is not None and fig5 is not None, last_line=verdict)


ITEM = ModuleItem(
    tag=NAME, folder=NAME, prog="python -m rog.papers.scadles.figs_item", doc=__doc__,
    steps=lambda a: (python_step(args, (folder / "result.json").exists()) for folder, args in steps(Path(a.result_dir))),
    summarise=_summarise, estimate_s=lambda a: ESTIMATE_S)


def main(argv=None) -> int:
    return item_main(ITEM, argv)


if __name__ == "__main__":
    sys.exit(main())
