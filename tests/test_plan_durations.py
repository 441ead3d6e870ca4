"""One number per fact: the default plan's duration is `run_all.sh --dry-run`'s estimate.  Every duration that
README.md, docs/*.md, scripts/run_all.sh or the driver's docstring states for the default plan (a sentence
that names "the default plan", or the bare `bash scripts/run_all.sh  # ...` command) must match that estimate
within its stated rounding: the digits given (56.9: 0.05 min), or, for "~N" / "about N" with N a multiple of
5, the nearest 5 min (2.5 min)."""

from __future__ import annotations

import re
from pathlib import Path

from rog.experiment import items as I

ROOT = Path(__file__).resolve().parents[1]
SUBJECT = re.compile(r"default plan|run_(all\.sh|items\.py)\s+#", re.I)
OTHER = re.compile(r"not (in|part of) the default plan|opt-in", re.I)  # a sentence about another item
DURATION = re.compile(r"(~|about\s+)?(\d+(?:\.\d+)?)\s*(min\b|minutes\b|h\b|hours?\b)")


def default_plan_estimate_min() -> float:
    """What `run_all.sh --dry-run` prints for the default plan from scratch (rog.experiment.driver)."""
    prof = I.PROFILES["quick"]
    runs = I.plan_runs(I.items_for(None), prof.workload, prof, None)
    return I.estimate_plan_s(runs, prof)["total_s"] / 60.0


def sentences(text: str) -> list[str]:
    """The text's sentences (paragraphs joined; a code line or comment line stands alone)."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        lines = para.splitlines()
        if any(ln.lstrip().startswith(("bash ", "#", "python ", ".venv/")) for ln in lines):
            out += lines
            continue
        out += re.split(r"(?<=[.!?])\s+(?=[A-Z`*(\[])", " ".join(ln.strip() for ln in lines))
    return out


def stated(text: str) -> list[tuple[float, float, str]]:
    """(minutes, rounding, sentence) of every duration stated for the default plan in ``text``."""
    found = []
    for s in sentences(text):
        if not SUBJECT.search(s) or OTHER.search(s):
            continue
        for m in DURATION.finditer(s):
            value, unit = float(m.group(2)), m.group(3)
            minutes = value * 60 if unit.startswith("h") else value
            decimals = len(m.group(2).split(".")[1]) if "." in m.group(2) else 0
            rounding = 0.5 * 10 ** -decimals
            if m.group(1) and decimals == 0 and value % 5 == 0:
                rounding = 2.5
            found.append((minutes, rounding * (60 if unit.startswith("h") else 1), s.strip()))
    return found


def _sources() -> dict[str, str]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "scripts" / "run_all.sh"]
    out = {str(f.relative_to(ROOT)): f.read_text() for f in files}
    from rog.experiment import driver

    out["rog/experiment/driver.py (docstring)"] = driver.__doc__ or ""
    return out


def test_every_stated_default_plan_duration_is_the_dry_run_estimate():
    est = default_plan_estimate_min()
    found = {name: stated(text) for name, text in _sources().items()}
    every = [(name, *f) for name, fs in found.items() for f in fs]
    assert len(every) >= 4, every  # README (twice), docs/reproduction.md, run_all.sh at least: the collector works
    assert {"README.md", "docs/reproduction.md", "scripts/run_all.sh"} <= {n for n, *_ in every}
    wrong = [f"{name}: {minutes:g} min (rounding {rounding:g}) in: {s[:160]}" for name, minutes, rounding, s in every
             if abs(minutes - est) > rounding + 1e-9]
    assert not wrong, f"--dry-run estimates the default plan at {est:.1f} min; these state otherwise: {wrong}"


def test_the_collector_flags_a_stale_duration_and_ignores_other_items():
    text = ("The default plan took **39.6 min** here. `compare` takes 37.9 min.\n"
            "`adsp` (opt-in, not in the default plan) takes 40 min.\n"
            "The default plan is unchanged.\n\nbash scripts/run_all.sh   # everything (~55 min here)\n")
    got = stated(text)
    assert [(m, r) for m, r, _ in got] == [(39.6, 0.05), (55.0, 2.5)]
