"""The library starts its child processes as ``python -m rog.<module>``, never as a file under ``scripts/``.

Two checks: (1) every module the library launches runs with ``python -m`` and prints the same help as
the ``scripts/`` command that wraps it (one ``main`` behind both, so users' commands do not change);
(2) no code under ``rog/`` names a file under ``scripts/`` as something to run: an argv element or path
that is exactly ``scripts/<file>.py|.sh``, or a path joined onto a ``"scripts"`` folder (docstrings,
messages and help texts may still mention the user's commands).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the script a user types -> the module the library runs (the same main)
ENTRY_POINTS = {
    "run.py": "rog.experiment",
    "power_sampler.py": "rog.testbed.power_command",
    "tc_replay.py": "rog.testbed.replay_command",
    "test_checkpoints.py": "rog.checkpoint_accuracy",
    "summarize.py": "rog.analysis.summarize_command",
    "plot.py": "rog.analysis.plot_command",
    "run_inference.py": "rog.inference.experiment",
    "simulate.py": "rog.experiment.simulate",
}
SCRIPT_PATH = re.compile(r"^(\./)?scripts/[\w./-]+\.(py|sh)$")


def _help(argv: list[str]) -> subprocess.CompletedProcess:
    # -W error: runpy's "found in sys.modules ... prior to execution" (a module imported twice) fails the run
    return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", *argv, "--help"], capture_output=True,
                          text=True, cwd=str(ROOT), timeout=120)


@pytest.mark.parametrize("script,module", sorted(ENTRY_POINTS.items()))
def test_each_launched_module_runs_with_dash_m_and_matches_its_script(script, module):
    by_module, by_script = _help(["-m", module]), _help([str(ROOT / "scripts" / script)])
    assert by_module.returncode == 0, by_module.stderr[-2000:]
    assert by_script.returncode == 0, by_script.stderr[-2000:]
    assert by_module.stdout.startswith("usage: ") and by_module.stdout == by_script.stdout


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def script_launches(root: Path) -> list[str]:
    """``path:line: why`` for every place under ``root/rog`` that names a file under ``scripts/`` to run."""
    found = []
    for path in sorted((root / "rog").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        docs = _docstring_nodes(tree)
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and SCRIPT_PATH.match(node.value)):
                found.append(f"{rel}:{node.lineno}: names {node.value!r} (start python -m rog.<module> instead)")
            elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant)
                  and node.right.value == "scripts"):
                found.append(f"{rel}:{node.lineno}: joins a path onto 'scripts' (start python -m rog.<module> instead)")
    return found


def test_nothing_in_rog_launches_a_script():
    bad = script_launches(ROOT)
    assert not bad, "\n".join(bad)


def test_the_check_finds_each_kind_of_script_launch(tmp_path):
    (tmp_path / "rog").mkdir()
    (tmp_path / "rog" / "a.py").write_text(
        '"""Run ``scripts/run.py``: a docstring may name it."""\n'
        'import sys\n'
        'ROOT = None\n'
        'CMD = [sys.executable, "scripts/run.py", "--child", "ps"]\n'
        'TOOL = ROOT / "scripts" / "tool.py"\n'
        'MSG = "see scripts/run_items.py for the plan"\n'
        'OK = [sys.executable, "-m", "rog.experiment"]\n'
        'SH = ["bash", "scripts/setup.sh"]\n')
    assert script_launches(tmp_path) == [
        "rog/a.py:4: names 'scripts/run.py' (start python -m rog.<module> instead)",
        "rog/a.py:5: joins a path onto 'scripts' (start python -m rog.<module> instead)",
        "rog/a.py:8: names 'scripts/setup.sh' (start python -m rog.<module> instead)",
    ]


# commands whose parser (and so --help) must not import torch: a second of CPU and more on a Jetson per call
TORCH_FREE_COMMANDS = ("rog.experiment.cli", "rog.inference.experiment")


@pytest.mark.parametrize("module", TORCH_FREE_COMMANDS)
def test_the_command_s_parser_imports_no_torch(module):
    code = (f"import sys, {module} as m\n"
            "p = m.build_parser()\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] == 'torch'))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "[]", f"{module} imports torch: {p.stdout.strip()[:300]}"
