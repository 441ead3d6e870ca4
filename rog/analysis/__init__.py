"""Results analysis: read run folders under ``result/``, compute the paper's measures, write summaries.

* :mod:`.load`: one run folder -> :class:`~rog.analysis.load.RunData` (config, per-rank events as
  pandas tables, per-iteration composition per worker, accuracy, replay and power logs);
* :mod:`.metrics`: time composition, accuracy vs iterations and time, the common target, time and
  energy to target, accuracy at equal iterations;
* :mod:`.summary`: assembles ``result/summary.json`` and ``result/summary.md`` from the runs table and the
  reproduced papers' sections; :mod:`.claim_table`: the helpers a paper's claims table is built from;
  :mod:`.tables`: the one markdown table writer and number formatter every summary uses;
* :mod:`.figures`: matplotlib figures into ``figure/`` (imported on demand: the rest needs no
  matplotlib); :mod:`.figure_files`: the one way to write a figure (the formats asked, one dpi);
* :mod:`.paper_sections`: the reproduced papers' own summary sections and figures, reached by module path
  (each lives in its home ``rog.papers.<paper>``; this package never imports ``rog.papers`` and trains no model).

Everything is computed from the per-rank event logs (:mod:`rog.runtime.events`) plus the
accuracy, replay and power files a run folder holds; nothing here writes into a run folder.
"""

from .load import RunData, find_runs, iteration_table, load_run, load_runs, run_label
from .metrics import (
    JETSON_WATTS,
    MODEL_SOURCE,
    RunMetrics,
    accuracy_at_iteration,
    compute_metrics,
    composition,
    equal_iteration_count,
    select_target,
    time_to_target_s,
)

__all__ = [
    "RunData", "find_runs", "iteration_table", "load_run", "load_runs", "run_label",
    "JETSON_WATTS", "MODEL_SOURCE", "RunMetrics", "accuracy_at_iteration", "compute_metrics", "composition",
    "equal_iteration_count", "select_target", "time_to_target_s",
]
