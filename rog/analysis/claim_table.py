"""Shared claim-table helpers: which runs a comparison reads, one comparison's numbers and its sentence.

A paper's claims table (e.g. ROG's, :mod:`rog.papers.rog.claims`) picks runs by system label in a
:class:`Setting` (:func:`select`), combines two systems' means over their seeds (:func:`pair`) and
keeps each comparison as a :class:`Claim`: ours, the artifact's, the paper's range and the
acceptance bound, with a verdict and a sentence computed from those numbers.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .load import RunData
from .metrics import RunMetrics, is_sensor, ratio
from .tables import fmt  # re-exported: the one number formatter

__all__ = ["Setting", "base_setting", "in_setting", "select", "mean", "mean_of", "MIXED_SOURCES", "mixed_sources",
           "Claim", "pair", "fmt"]


@dataclass(frozen=True)
class Setting:
    """Which runs a comparison reads: base workers / batch multiple / control and a replay mode."""

    workers: int | None
    batch_multiple: int | None
    replay_mode: str | None
    control: Any = None


def _mode(values: Sequence[Any], prefer: Any = None) -> Any:
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    if prefer is not None and prefer in vals:
        return prefer
    return Counter(vals).most_common(1)[0][0]


def base_setting(metrics: Sequence[RunMetrics]) -> Setting:
    """The end-to-end item's setting: 4 workers and batch x1 when present (else the most common),
    ``artifact`` replay mode when present (the paper's items run in it)."""
    runs = [m.run for m in metrics]
    return Setting(workers=_mode([r.workers for r in runs], 4), batch_multiple=_mode([r.batch_multiple for r in runs], 1),
                   replay_mode=_mode([r.replay_mode for r in runs], "artifact"), control=_mode([r.control for r in runs]))


def in_setting(run: RunData, setting: Setting, **override) -> bool:
    """Whether ``run`` belongs to ``setting`` (fields overridable by keyword; None workers/batch = any)."""
    s = {**setting.__dict__, **override}
    if s["workers"] is not None and run.workers != s["workers"]:
        return False
    if s["batch_multiple"] is not None and run.batch_multiple != s["batch_multiple"]:
        return False
    return run.replay_mode == s["replay_mode"] and run.control == s["control"]


def select(metrics: Sequence[RunMetrics], label: str, setting: Setting, **override) -> list[RunMetrics]:
    """The runs of system ``label`` (``ROG-4``, ``BSP``) in ``setting`` (fields overridable by keyword)."""
    return [m for m in metrics if m.run.label == label and in_setting(m.run, setting, **override)]


def mean(ms: Sequence[RunMetrics], get: Callable[[RunMetrics], float | None]) -> float | None:
    """The mean of ``get`` over the runs that have a value (None when none has)."""
    return mean_of(ms, get)[0]


def mean_of(ms: Sequence[RunMetrics], get: Callable[[RunMetrics], float | None]) -> tuple[float | None, int]:
    """The mean over the runs that have a value (seeds that reached the target) and how many did."""
    vals = [get(m) for m in ms]
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    return (float(np.mean(vals)) if vals else None), len(vals)


MIXED_SOURCES = "mixed energy sources"  # an energy ratio between a sensor reading and a model is not computed


def mixed_sources(runs: Sequence[RunMetrics]) -> str:
    """Why an energy ratio over ``runs`` is not computed (their energy sources differ), or ''."""
    by = {}
    for m in runs:
        by.setdefault(m.energy_source, []).append(m.run.label)
    if len(by) < 2:
        return ""
    kinds = sorted({"sensor" if is_sensor(s) else "model" for s in by}, reverse=True)
    what = " / ".join(kinds) if len(kinds) > 1 else " / ".join(sorted(by))
    detail = ", ".join(f"{'/'.join(dict.fromkeys(labs))} {src}" for src, labs in sorted(by.items()))
    return f"{MIXED_SOURCES} ({what}): {detail}"


@dataclass(frozen=True)
class Claim:
    """One comparison: our value, the artifact's, the paper's range (or words), the acceptance bound."""

    name: str
    ours: float | None
    artifact: float | None
    paper: tuple[float, float] | None
    paper_text: str
    bound: tuple[str, float] | None  # ('<=', 0.5) or ('>=', -1.5): the reproduction's acceptance bound
    unit: str  # 'x' (a ratio) or 'points'
    missing: str = ""  # why ours is None
    run_ids: tuple[str, ...] = ()  # the runs behind ours
    source: str = ""  # where the runs come from: '' (end to end), 'sensitivity' (worker / batch items) or 'threshold'
    counts: tuple[tuple[str, int, int], ...] = ()  # (system, runs with a value, runs) behind ours, over seeds

    def reached(self) -> str:
        """``ROG-4 reached 2 of 3, BSP 3 of 3`` when several runs (seeds) or a missing value stand behind ours."""
        word = "reached" if "to target" in self.name else "measured"
        if not any(k < n or (n > 1 and word == "reached") for _, k, n in self.counts):
            return ""
        return f"{word} " + ", ".join(f"{lab} {k} of {n}" for lab, k, n in self.counts)

    def sentence(self) -> str:
        """Agreement or disagreement, computed from the numbers."""
        if self.ours is None:
            if self.missing.startswith(MIXED_SOURCES):
                return f"Not measured: {self.missing}."
            return f"Not decidable: {self.missing or 'a run is missing or never reached the target'}."
        v = self.ours
        fmt = (lambda x: f"{x:.2f}x") if self.unit == "x" else (lambda x: f"{x:+.2f} points")
        parts = []
        if self.paper is not None:
            lo, hi = self.paper
            if self.unit == "x":
                rng = f"{lo:.2f}x" if lo == hi else f"{lo:.2f}x to {hi:.2f}x"
            else:
                rng = f"{lo:+.2f} points" if lo == hi else f"{lo:+.2f} to {hi:+.2f} points"
            where = "inside" if lo <= v <= hi else "below" if v < lo else "above"
            what = "the paper's value" if lo == hi else "the paper's range"
            if lo == hi:
                where = "close to" if abs(v - lo) <= 0.05 * max(abs(lo), 1e-9) else where
            parts.append(f"ours ({fmt(v)}) is {where} {what} {rng}")
        else:
            parts.append(f"ours is {fmt(v)}")
        if self.artifact is not None:
            d = v - self.artifact
            if self.unit == "x":
                rel = d / self.artifact if self.artifact else float("inf")
                word = "close to" if abs(rel) <= 0.15 else ("above" if d > 0 else "below")
                parts.append(f"{word} the artifact's logged {fmt(self.artifact)}" +
                             ("" if word == "close to" else f" ({abs(rel) * 100:.0f} % {'more' if d > 0 else 'less'})"))
            else:
                word = "close to" if abs(d) <= 1.0 else ("above" if d > 0 else "below")
                parts.append(f"{word} the artifact's logged {fmt(self.artifact)}")
        if self.bound is not None:
            op, b = self.bound
            ok = v <= b if op == "<=" else v >= b
            parts.append(f"{'meets' if ok else 'MISSES'} the acceptance bound {op} {fmt(b) if self.unit == 'x' else f'{b:+.2f} points'}")
        s = "; ".join(parts)
        return s[0].upper() + s[1:] + "."

    def verdict(self) -> str:
        """``pass`` / ``FAIL`` against the bound, ``-`` without one, ``not measured`` (mixed energy sources)
        or ``not decidable`` (an input is missing) without a value."""
        if self.ours is None:
            return "not measured" if self.missing.startswith(MIXED_SOURCES) else "not decidable"
        if self.bound is None:
            return "-"
        op, b = self.bound
        return "pass" if (self.ours <= b if op == "<=" else self.ours >= b) else "FAIL"


def pair(metrics, setting, a: str, b: str | Sequence[str], get, combine: str = "ratio", same_source: bool = False,
         **override):
    """Ours for ``a`` vs ``b`` (``b`` a list: the minimum, or the best, over those systems), why it is
    missing, the runs behind it and ``(system, runs with a value, runs)`` per system; with
    ``same_source`` (energy) no ratio between runs of different energy sources."""
    A = select(metrics, a, setting, **override)
    bs = [b] if isinstance(b, str) else list(b)
    B = {x: select(metrics, x, setting, **override) for x in bs}
    missing = [x for x, ms in {a: A, **B}.items() if not ms]
    va, ka = mean_of(A, get)
    means = {x: mean_of(ms, get) for x, ms in B.items() if ms}
    vbs = {x: v for x, (v, _) in means.items() if v is not None}
    ids = tuple(m.run.run_id for m in A) + tuple(m.run.run_id for ms in B.values() for m in ms)
    counts = tuple((lab, k, len(ms)) for lab, ms, k in [(a, A, ka)] + [(x, B[x], means[x][1]) for x in means])
    if va is None or not vbs or (isinstance(b, str) and b not in vbs):
        if missing:
            why = f"no run of {', '.join(missing)}"
        else:
            none = [lab for lab, k, _ in counts if k == 0]
            why = f"no value for {', '.join(none)} (no run of it reached the target, or none was tested in range)"
        return None, why, ids, counts
    if same_source:
        mixed = mixed_sources([m for m in A if get(m) is not None] + [m for x in vbs for m in B[x] if get(m) is not None])
        if mixed:
            return None, mixed, ids, counts
    if combine == "ratio":
        return ratio(va, min(vbs.values())), "", ids, counts
    if combine == "diff_best":
        return va - max(vbs.values()), "", ids, counts
    return va - min(vbs.values()), "", ids, counts

