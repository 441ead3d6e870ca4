"""scripts/ holds thin commands (docs/architecture.md): each ``bench_*.py`` imports a ``benchmarks`` module's
``main`` and calls it, defining nothing itself; no script edits ``sys.path`` except the two root runs on a
device from the synced code folder, where nothing is installed.  Parsed, never imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ON_DEVICE_WITHOUT_INSTALL = {"tc_replay.py", "power_sampler.py"}  # the scripts that may put the checkout on sys.path


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _edits_sys_path(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in ("insert", "append") and isinstance(n.value, ast.Attribute)
               and n.value.attr == "path" and isinstance(n.value.value, ast.Name) and n.value.value.id == "sys"
               for n in ast.walk(tree))


def thick_bench_scripts(scripts: Path) -> list[str]:
    """``bench_*.py`` that define a function or class, or import from anything but ``sys`` and ``benchmarks``."""
    bad = []
    for path in sorted(scripts.glob("bench_*.py")):
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bad.append(f"{path.name}:{node.lineno}: defines {node.name}")
            elif isinstance(node, ast.Import) and any(a.name != "sys" for a in node.names):
                bad.append(f"{path.name}:{node.lineno}: imports {', '.join(a.name for a in node.names)}")
            elif isinstance(node, ast.ImportFrom) and not (node.module or "").startswith("benchmarks."):
                bad.append(f"{path.name}:{node.lineno}: imports from {node.module}")
    return bad


def test_every_bench_script_only_calls_its_benchmarks_main():
    assert sorted(p.name for p in (ROOT / "scripts").glob("bench_*.py")) == [
        "bench_ddp.py", "bench_engine.py", "bench_faults.py", "bench_gpu.py", "bench_replay.py", "bench_transport.py"]
    assert thick_bench_scripts(ROOT / "scripts") == []


def test_a_bench_script_with_logic_is_found(tmp_path):
    (tmp_path / "bench_x.py").write_text("import sys\nimport numpy\nfrom benchmarks.x import main\n\n"
                                         "def helper():\n    pass\n")
    (tmp_path / "bench_y.py").write_text("import sys\nfrom benchmarks.y import main\nsys.exit(main())\n")
    assert thick_bench_scripts(tmp_path) == ["bench_x.py:2: imports numpy", "bench_x.py:5: defines helper"]


def test_only_the_device_scripts_edit_sys_path():
    editing = {p.name for p in (ROOT / "scripts").glob("*.py") if _edits_sys_path(_tree(p))}
    assert editing == ON_DEVICE_WITHOUT_INSTALL
    assert not _edits_sys_path(ast.parse("import sys\nsys.argv.insert(0, 'x')\n"))
    assert _edits_sys_path(ast.parse("import sys\nsys.path.append('x')\n"))
