"""Import cycles among rog/'s modules, found by parsing every import (module level and inside functions;
``if TYPE_CHECKING:`` blocks, which never run, left out) without importing anything.

None may run at module level, and none through function-level imports either: :data:`KNOWN_CYCLES` (each a
strongly connected set of modules) is empty, so any cycle fails; one a change has to keep would be listed there
with its reason, and the list only ever gets shorter (docs/architecture.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from test_layers import LAZY_EXPORTS

ROOT = Path(__file__).resolve().parents[1]

# The cycles left through function-level imports: none.  Issue 54 found 13 and broke them all (rog/inference's
# 7-module one and profiler/runner, rog/runtime, rog/transport, rog.traces, the device codecs, the testbed's compute
# fit, the codecs' make_codec shim, then experiment.config/push_bytes, the ADSP Fig. 5/6 readings, DynaComm's
# grading/summary and ROG's decidable/robustness and horizons/horizons_markdown).  A new one fails here.
KNOWN_CYCLES: list[set[str]] = []


def modules(root: Path) -> dict[str, Path]:
    """Module name -> file for every module under ``root/rog`` (a package by its ``__init__.py``)."""
    out = {}
    for path in sorted((root / "rog").rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def _imports(tree: ast.AST, package: str):
    """``(imported name, inside a function)`` for every import that can run (``if TYPE_CHECKING:`` bodies skipped)."""
    todo = [(tree, False)]
    while todo:
        node, in_function = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            todo += [(n, in_function) for n in node.orelse]
            continue
        if isinstance(node, ast.Import):
            yield from ((a.name, in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            yield from ((f"{target}.{a.name}", in_function) for a in node.names)  # pkg.name, else pkg (resolved below)
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        todo += [(n, inner) for n in ast.iter_child_nodes(node)]


def import_graphs(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(every import, module-level imports only): module -> the rog modules it imports (``from pkg import name``
    counts as an import of ``pkg.name`` when that is a module, else of ``pkg``)."""
    mods = modules(root)
    every: dict[str, set[str]] = {m: set() for m in mods}
    top: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for target, in_function in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path)), package):
            if not target.startswith("rog") or (mod, target) in LAZY_EXPORTS:
                continue
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != mod:
                every[mod].add(target)
                if not in_function:
                    top[mod].add(target)
    return every, top


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


@pytest.fixture(scope="module")
def graphs():
    return import_graphs(ROOT)


def test_no_import_cycle_at_module_level(graphs):
    found = cycles(graphs[1])
    assert not found, "import cycles at module level:\n" + "\n".join(sorted(", ".join(sorted(c)) for c in found))


def test_import_cycles_are_only_the_known_ones(graphs):
    found = set(cycles(graphs[0]))
    known = {frozenset(c) for c in KNOWN_CYCLES}
    new = sorted(", ".join(sorted(c)) for c in found - known)
    gone = sorted(", ".join(sorted(c)) for c in known - found)
    assert not new, "new or grown import cycles (break them: move the shared code down a layer):\n" + "\n".join(new)
    assert not gone, "known cycles that shrank or went: update KNOWN_CYCLES to what is left:\n" + "\n".join(gone)


def test_cycle_finder_on_a_made_up_graph():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}, "g": set()}
    assert set(cycles(g)) == {frozenset("abc"), frozenset("de")}
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_graph_reads_function_level_and_skips_type_checking(tmp_path):
    files = {
        "rog/__init__.py": "",
        "rog/a.py": "from .b import x\n",
        "rog/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n"
                    "def f():\n    from rog import a\n    return a\nx = 1\n",
        "rog/c.py": "import rog.b\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    every, top = import_graphs(tmp_path)
    assert every == {"rog": set(), "rog.a": {"rog.b"}, "rog.b": {"rog.a"}, "rog.c": {"rog.b"}}
    assert top["rog.b"] == set() and top["rog.a"] == {"rog.b"}
    assert cycles(every) == [frozenset({"rog.a", "rog.b"})] and cycles(top) == []
