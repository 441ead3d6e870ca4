"""Golden outputs of the summary writers, recorded from the existing tests' fixtures (issue 54, items 2 and 3).

A pytest plugin, not a test module: it wraps every summary, section, table and markdown function of
``rog.analysis``, ``rog.papers`` and ``rog.inference`` while the tests run, keeps each text it returns, and at the
end of the session reads every ``summary.md``/``summary.json``/figure file the tests left under their temporary
folders. ``ROG_TABLE_GOLDEN=record`` writes them to ``tests/data/table_golden.json``; ``ROG_TABLE_GOLDEN=check``
compares against that file: JSON and figure names must be identical, texts may differ only in the whitespace
inside a markdown table row (``| a |b|`` equals ``|a | b |``). Run over the summary tests, without xdist:

    ROG_TABLE_GOLDEN=check PYTHONPATH=tests .venv/bin/python -m pytest -p table_golden -p no:cacheprovider -n 0 \\
        tests/test_papers.py tests/test_adsp.py ...   (the list in GOLDEN_TESTS below)
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

GOLDEN = Path(__file__).parent / "data" / "table_golden.json"
SCOPES = ("rog.analysis", "rog.papers", "rog.inference")
WRITER = "rog.analysis.tables"  # the table writer itself: its pieces are in the texts of its callers
# a function whose name holds one of these words renders text we keep
WORDS = ("markdown", "table", "summar", "section", "lines", "row", "text", "cell", "report", "render")
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")
GOLDEN_TESTS = """test_adsp.py test_adsp_fig3bc.py test_adsp_fig4_steps.py test_adsp_fig56.py test_adsp_rates.py
test_analysis.py test_analysis_dynacomm_sweep.py test_atp.py test_causes.py test_compare_analysis.py
test_dynacomm_scaling.py test_efficiency.py test_figures.py test_grades.py test_inference_analysis.py
test_intradp_paper.py test_intradp_streaming.py test_long_horizon.py test_papers.py test_replica_figures.py
test_robustness.py test_scadles_figs.py test_scadles_item.py test_scadles_noniid_four.py test_scadles_seeds.py
test_scadles_table5.py test_scadles_table6.py test_scadles_topk_analysis.py test_scadles_verdicts.py
test_summary_provenance.py""".split()

# the one change the writer made on purpose: a header whose joined list was empty ended in a stray empty cell
# (``| CR | delta | paper CNC ... |  |`` over a 3-column rule); markdown_table writes the 3 cells only
STRAY_EMPTY_CELL = ("rog.papers.scadles.topk.table_v_lines", "rog.papers.scadles.topk.scadles_topk_markdown")

_texts: Dict[str, List[str]] = {}
_current = ["<none>"]
_wrapped: set = set()


def _is_text(v: Any) -> bool:
    if isinstance(v, str):
        return "|" in v or "\n" in v
    return isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v) and any("|" in x for x in v)


def _wrap(fn):
    @functools.wraps(fn)
    def recorded(*a, **k):
        out = fn(*a, **k)
        if _is_text(out):
            text = out if isinstance(out, str) else "\n".join(out)
            _texts.setdefault(f"{_current[0]} :: {fn.__module__}.{fn.__qualname__}", []).append(text)
        return out
    recorded.__table_golden__ = True
    return recorded


def _patch_loaded() -> None:
    """Replace each matching function in every loaded module of the scopes (module globals and re-exports)."""
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith(SCOPES) or name in _wrapped or name == WRITER:
            continue
        _wrapped.add(name)
        for attr, fn in list(vars(mod).items()):
            if (inspect.isfunction(fn) and not getattr(fn, "__table_golden__", False)
                    and fn.__module__.startswith(SCOPES) and fn.__module__ != WRITER
                    and any(w in attr.lower() for w in WORDS)):
                setattr(mod, attr, _wrap(fn))
    # modules that imported a function before it was wrapped hold the original: point them at the wrapper
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith(SCOPES + ("tests", "test_")):
            continue
        for attr, fn in list(vars(mod).items()):
            if inspect.isfunction(fn) and not getattr(fn, "__table_golden__", False) \
                    and fn.__module__.startswith(SCOPES) and fn.__module__ != WRITER:
                home = sys.modules.get(fn.__module__)
                w = getattr(home, fn.__name__, None)
                if getattr(w, "__table_golden__", False) and getattr(w, "__wrapped__", None) is fn:
                    setattr(mod, attr, w)


def _mode() -> str:
    return os.environ.get("ROG_TABLE_GOLDEN", "")


def pytest_runtest_setup(item):
    if _mode():
        _patch_loaded()
        _current[0] = item.nodeid


def _norm_line(line: str) -> str:
    if not line.lstrip().startswith("|"):
        return line.rstrip()
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    cells = [re.sub(r"^(:?)-+(:?)$", r"\1---\2", c) for c in cells]
    return "|" + "|".join(cells) + "|"


def normalise(text: str, base: str) -> str:
    """The text with the session's temporary folder replaced and table rows' cell padding removed."""
    text = text.replace(base, "<tmp>")
    text = re.sub(r"pytest-\d+", "pytest-N", text)
    return "\n".join(_norm_line(x) for x in text.splitlines())


def _files(base: Path) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for p in sorted(base.rglob("*")):
        if not p.is_file():
            continue
        rel = str(p.relative_to(base))
        if p.name == "summary.json" or p.suffix == ".md":
            out[rel] = p.read_text(errors="replace")
        elif p.suffix in FIGURE_SUFFIXES:
            out[rel] = "<figure>"
    return out


def _stray_cell_only(key: str, want: Any, now: Any) -> bool:
    """True when ``key`` is one of STRAY_EMPTY_CELL's and dropping a trailing empty cell (``||`` at a line's
    end) from the golden texts gives the texts now."""
    if not key.endswith(STRAY_EMPTY_CELL):
        return False
    return [re.sub(r"\|\|$", "|", t, flags=re.M) for t in want] == now


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1e-6 * max(abs(a), abs(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == b


def _json_close(key: str, want: str, now: str) -> bool:
    """Two summary.json texts equal up to floats' 7th significant digit: fixtures stamp times as unix seconds
    at a microsecond, so a relative time (10 s) comes back as 9.99999976 or 10.0 with the clock's value."""
    if not key.endswith(".json"):
        return False
    try:
        return _close(json.loads(want), json.loads(now))
    except ValueError:
        return False


def pytest_sessionfinish(session, exitstatus):
    mode = _mode()
    if not mode:
        return
    base = Path(session.config._tmp_path_factory.getbasetemp())
    b = str(base)
    doc = {"texts": {k: [normalise(t, b) for t in v] for k, v in sorted(_texts.items())},
           "files": {k: normalise(v, b) if not k.endswith(".json") else v.replace(b, "<tmp>")
                     for k, v in _files(base).items()}}
    if mode == "record":
        GOLDEN.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"\ntable_golden: recorded {len(doc['texts'])} text keys and {len(doc['files'])} files to {GOLDEN}")
        return
    want = json.loads(GOLDEN.read_text())
    problems = []
    for part in ("texts", "files"):
        for k in sorted(set(want[part]) | set(doc[part])):
            if k not in doc[part]:
                problems.append(f"{part}: missing now: {k}")
            elif k not in want[part]:
                problems.append(f"{part}: new: {k}")
            elif want[part][k] != doc[part][k] and not _stray_cell_only(k, want[part][k], doc[part][k]) \
                    and not _json_close(k, want[part][k], doc[part][k]):
                problems.append(f"{part}: differs: {k}")
    report = Path(os.environ.get("ROG_TABLE_GOLDEN_REPORT", str(base / "table_golden_diff.json")))
    report.write_text(json.dumps({"problems": problems, "now": doc}, indent=1, sort_keys=True))
    print(f"\ntable_golden: {len(problems)} differences (details: {report})")
    for p in problems[:60]:
        print("  " + p)
    if problems:
        session.exitstatus = 1
