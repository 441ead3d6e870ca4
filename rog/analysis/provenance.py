"""Where a summary's numbers come from, in lines of ``summary.md`` and figure captions.

* the testbed each run used (``config.yaml``'s ``testbed``, ``testbed_requested`` and
  ``fallback_reason``: emulated, loopback or hosts, and why an emulated run fell back to loopback; an emulated
  run with TCP's slow-start restart after idle turned off says so, ``emulated.tcp_slow_start_after_idle``);
* the bandwidth trace it replayed (recorded, synthetic or a user file);
* the energy source, with the device profile whose watts priced a modelled energy (the same watts the
  run's ``energy.json`` uses; :func:`rog.analysis.metrics.model_pricing`).

A paper's reference columns name their own sources (ROG's: :mod:`rog.papers.rog.references`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Sequence

from rog.experiment.run_config import slow_start_after_idle
from ..traces import TRACE_SOURCES
from .load import RunData
from .metrics import RunMetrics, is_model_source, model_pricing

__all__ = ["testbed_of", "testbed_cell", "testbed_line", "testbed_title", "trace_source_line", "model_energy_text",
           "energy_source_line", "LOOPBACK_CAVEAT"]

LOOPBACK_CAVEAT = ("a loopback run shapes its links, if at all, inside the transport (a token bucket following the "
                   "trace): kernel queueing, TCP's reaction to tc and per-packet timing are not emulated")


def testbed_of(run: RunData) -> tuple[str, str | None]:
    """``(testbed, fallback)``: the testbed the run used (``'(not recorded)'`` when config.yaml lacks it) and
    why it fell back from the one requested (None: it did not)."""
    cfg = run.config
    used = cfg.get("testbed")
    reason = cfg.get("fallback_reason")
    requested = cfg.get("testbed_requested")
    if reason is None and requested is not None and used is not None and requested != used:
        reason = "(no reason recorded)"
    fallback = None if reason is None else f"fell back from {requested or 'emulated'}: {reason}"
    if used == "emulated" and not slow_start_after_idle(cfg.get("emulated")):
        used = "emulated, TCP slow start after idle off"
    return (str(used) if used is not None else "(not recorded)"), fallback


def testbed_cell(run: RunData) -> str:
    """The runs table's testbed cell: ``emulated``, ``loopback (fell back from emulated: not root (euid 1000))``."""
    used, fallback = testbed_of(run)
    return used if fallback is None else f"{used} ({fallback})"


SIMULATED_CAVEAT = ("simulated runs (scripts/simulate.py, docs/fleet.md) compose time only: their gradients are "
                    "synthetic, so they make no accuracy claim")


def testbed_line(runs: Sequence[RunData]) -> str:
    """summary.md's header line on the testbeds the runs used, with run counts and every fallback reason."""
    counts: Counter = Counter(testbed_of(r) for r in runs)
    if not counts:
        return "- Testbed: no runs."
    parts = [f"{used}{f' ({fb})' if fb else ''} ({n} run{'s' if n != 1 else ''})"
             for (used, fb), n in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]
    line = f"- Testbed: {'; '.join(parts)}."
    if any(used == "loopback" for used, _ in counts):
        line += f" Note: {LOOPBACK_CAVEAT}."
    if any(used == "simulated" for used, _ in counts):
        line += f" Note: {SIMULATED_CAVEAT}."
    return line


def testbed_title(runs: Sequence[RunData]) -> str:
    """A figure title's short form: ``testbed: emulated`` or ``testbeds: emulated, loopback (fell back from
    emulated: not root (euid 1000))``."""
    seen = sorted({testbed_cell(r) for r in runs})
    return f"testbed{'s' if len(seen) > 1 else ''}: {', '.join(seen) or '-'}"


def trace_source_line(runs: Sequence[RunData]) -> str:
    """summary.md's line on the bandwidth trace the runs replayed: recorded (downloaded), synthetic or a
    user file, with the file names and run counts (runs with unshaped links counted apart)."""
    counts: Counter = Counter()
    for r in runs:
        t = r.trace
        if t is not None:
            kind = TRACE_SOURCES.get(t.get("kind"), str(t.get("kind") or "unknown"))
            counts[(kind, Path(str(t.get("path") or "?")).name)] += 1
        else:
            counts[("none (unshaped links)", "")] += 1
    if not counts:
        return "- Trace source: no runs."
    parts = [f"{kind} ({name + ', ' if name else ''}{n} run{'s' if n != 1 else ''})"
             for (kind, name), n in sorted(counts.items())]
    line = f"- Trace source: {'; '.join(parts)}."
    if any(kind == "synthetic" for kind, _ in counts):
        line += (" A synthetic trace is generated, not recorded (configs/traces/README.md says how); "
                 "`bash utils/download_data.sh` fetches the recorded traces, which later runs replay.")
    return line


def model_energy_text(runs: Sequence[RunData], sources: Sequence[str]) -> list[str]:
    """One phrase per energy source of ``sources``: a model source names the profile whose watts priced it."""
    pricing = {}
    for r in runs:
        p = model_pricing(r)
        pricing.setdefault(p.source, p)
    out = []
    for s in sources:
        p = pricing.get(s)
        if is_model_source(s) and p is not None:
            w = p.watts
            out.append(f"{s} = state-based model, NOT a measurement: every worker's compute / communication / stall "
                       f"time x the {p.profile} profile's watts ({w['compute']:g} / {w['communication']:g} / "
                       f"{w['stall']:g} W, untracked time at {w['idle']:g} W; {p.basis})")
        elif is_model_source(s):
            out.append(f"{s} = state-based model, NOT a measurement")
        else:
            out.append(f"{s} = measured power, integrated")
    return out


def energy_source_line(metrics: Sequence[RunMetrics]) -> str:
    """summary.md's header line on the energy sources: which runs were measured and which modelled, at whose watts."""
    sources = sorted({m.energy_source for m in metrics})
    text = model_energy_text([m.run for m in metrics], sources)
    return (f"- Energy source: {', '.join(sources)} ({'; '.join(text)}; summed over the workers, the parameter server "
            "excluded). An energy ratio is computed only between runs of one source." if sources else "- Energy source: no runs.")

