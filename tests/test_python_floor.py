"""utils/check_python_floor.py: finds what needs a newer Python than pyproject's floor (3.8, the Jetson image).

Each synthetic file below uses one feature whose first Python version is known from the language
docs (PEP 585 generics 3.9, PEP 604 unions 3.10, str.removeprefix 3.9, match 3.10,
os.waitstatus_to_exitcode 3.9); the checker must report exactly those lines, and leave alone what
Python 3.8 runs (postponed annotations, local variable annotations, integer ``|``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

import vermin  # noqa: F401  (a declared dependency: a broken install fails, it does not skip)

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_python_floor", ROOT / "utils" / "check_python_floor.py")
floor = importlib.util.module_from_spec(spec)
sys.modules["check_python_floor"] = floor
spec.loader.exec_module(floor)

FUTURE = "from __future__ import annotations\n"

# Findings in other helpers' files that are known and reported to their owners; each must still be
# present (so this list cannot go stale) and is the only exception allowed.
PENDING = {("benchmarks/faults/wire_fuzz.py", "'tracemalloc.reset_peak' member")}


def found(tmp_path: Path, source: str) -> list[tuple[int, tuple[int, int]]]:
    f = tmp_path / "m.py"
    f.write_text(source)
    return [(line, ver) for line, _what, ver in floor.ast_findings(f)]


def test_runtime_generics_and_unions_are_found_even_with_postponed_annotations(tmp_path):
    src = FUTURE + ("from typing import Callable, Sequence\n"
                    "Interval = tuple[float, float, str]\n"            # line 3: evaluated at import -> 3.9
                    "Compute = float | Sequence[float]\n"              # line 4: -> 3.10
                    "def f(x: list[int] | None = None) -> dict[str, int]:\n"  # postponed: fine on 3.8
                    "    y: list[int] = []\n"
                    "    return {}\n"
                    "MASK = 0x1 | 0x2\n"                               # integers: fine
                    "name = 'events-w0'.removeprefix('events-')\n")    # line 9: -> 3.9
    assert found(tmp_path, src) == [(3, (3, 9)), (4, (3, 10)), (9, (3, 9))]


def test_annotations_are_evaluated_without_the_future_import(tmp_path):
    src = ("def f(x: list[int]) -> int | None:\n"   # line 1: both evaluated at def time
           "    y: dict[str, int] = {}\n"            # local annotation: never evaluated
           "    return None\n"
           "class C:\n"
           "    z: tuple[int, int] = (1, 2)\n")      # line 5: class-level annotation is evaluated
    assert found(tmp_path, src) == [(1, (3, 9)), (1, (3, 10)), (5, (3, 9))]


def test_dict_unions_with_a_display_are_found(tmp_path):
    src = ("from __future__ import annotations\nA = {'a': 1}\nB = A | {'b': 2}\nC = {k: 1 for k in 'x'} | A\n"
           "A |= {'c': 3}\nD = 1 | 2\nE = {**A, 'b': 2}\n")
    assert found(tmp_path, src) == [(3, (3, 9)), (4, (3, 9)), (5, (3, 9))]


def test_match_statement_is_found(tmp_path):
    src = "def f(x):\n    match x:\n        case 1:\n            return 1\n"
    assert found(tmp_path, src) == [(2, (3, 10))]


def test_python38_code_is_clean(tmp_path):
    src = FUTURE + ("from typing import List, Optional, Tuple, Union\n"
                    "Argv = List[str]\nPair = Tuple[int, int]\nMaybe = Union[int, None]\n"
                    "def g(a: Optional[int] = None) -> list[int]:\n    return [a or 0]\n")
    assert found(tmp_path, src) == []


def test_requires_python_floor_is_read_from_pyproject(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[project]\nname = "x"\nrequires-python = ">=3.8"  # comment\n')
    assert floor.requires_python_floor(p) == (3, 8)
    p.write_text('[project]\nname = "x"\n')
    with pytest.raises(ValueError, match="requires-python"):
        floor.requires_python_floor(p)


def test_vermin_pass_reports_standard_library_members(tmp_path):
    f = tmp_path / "w.py"
    f.write_text("import os\n\ndef code(status):\n    return os.waitstatus_to_exitcode(status)\n")
    out, minimum = floor.vermin_findings([f], (3, 8))
    assert [(line, ver) for _p, line, _w, ver in out] == [(4, (3, 9))]
    assert minimum == "3.9"
    out, _ = floor.vermin_findings([f], (3, 9))
    assert out == []


def test_the_project_runs_on_its_requires_python_floor(capsys):
    """Everything the images install (rog, scripts, benchmarks, data_gen, utils) and the examples meet pyproject's floor."""
    floor.main([])
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["target"] == "%d.%d" % floor.requires_python_floor()
    findings = {(ln.split(":", 1)[0], ln.split(": ", 1)[1].rsplit(" needs Python", 1)[0]) for ln in lines[:-1]}
    assert findings - PENDING == set(), "code needs a newer Python than requires-python:\n" + "\n".join(lines[:-1])
    assert PENDING <= findings, f"fixed: remove {sorted(PENDING - findings)} from PENDING"
