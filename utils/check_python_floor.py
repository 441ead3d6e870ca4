#!/usr/bin/env python
"""Check statically that the code runs on the oldest Python the project supports (``requires-python``).

Why: the robots of the paper are Jetson Xavier NX boards, which stop at JetPack 5 (L4T R35), whose
images and NVIDIA PyTorch builds are Python 3.8; ``Dockerfile_arm64`` runs the toolkit there.

Two passes over the given paths (default: ``rog scripts benchmarks data_gen examples utils``):

1. ``vermin`` (pip package, in the ``test`` extra) for standard-library members and syntax
   (e.g. ``os.waitstatus_to_exitcode`` 3.9, ``zip(strict=)`` 3.10).
2. An AST pass for what vermin does not report in modules with ``from __future__ import annotations``
   but Python still evaluates at run time: builtin generics outside annotations (``Interval =
   tuple[float, float]``, 3.9), ``X | Y`` unions of types outside annotations (3.10),
   ``str.removeprefix``/``removesuffix`` (3.9), ``|`` / ``|=`` with a dict display on one side (3.9; a
   union of two dict variables is not seen), ``match`` (3.10), ``except*`` (3.11), and evaluated
   annotations (modules without the ``__future__`` import) using either form.

    python utils/check_python_floor.py                 # target: pyproject.toml's requires-python floor
    python utils/check_python_floor.py --target 3.8 rog/sim.py

Prints one line per finding (``path:line: feature needs Python X.Y``) and a JSON summary last;
exit status 1 if anything needs a newer Python than the target.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = ("rog", "scripts", "benchmarks", "data_gen", "examples", "utils")
BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}
BUILTIN_TYPES = BUILTIN_GENERICS | {"int", "float", "str", "bytes", "bool", "complex", "object", "bytearray"}
TYPING_MODULES = {"typing", "collections.abc", "typing_extensions"}


def requires_python_floor(pyproject: Path = ROOT / "pyproject.toml") -> tuple[int, int]:
    """``(3, 8)`` from ``requires-python = ">=3.8"`` in ``pyproject``; ValueError if absent or not a ``>=`` floor."""
    m = re.search(r'^requires-python\s*=\s*"\s*>=\s*(\d+)\.(\d+)', pyproject.read_text(), re.M)
    if not m:
        raise ValueError(f"{pyproject}: no requires-python = \">=X.Y\" line")
    return int(m.group(1)), int(m.group(2))


def _version(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"expected a version like 3.8; got {text!r}")
    return int(m.group(1)), int(m.group(2))


def python_files(paths) -> list[Path]:
    """Every ``.py`` file under ``paths`` (files or folders), sorted, caches skipped."""
    out: set[Path] = set()
    for p in map(Path, paths):
        if p.is_file() and p.suffix == ".py":
            out.add(p)
        elif p.is_dir():
            out.update(f for f in p.rglob("*.py") if "__pycache__" not in f.parts)
    return sorted(out)


class _Finder(ast.NodeVisitor):
    """Collects ``(line, feature, version)`` for run-time uses of newer typing syntax and str methods."""

    def __init__(self, postponed: bool) -> None:
        self.postponed = postponed  # from __future__ import annotations: annotations are never evaluated
        self.typing_names: set[str] = set()
        self.found: list[tuple[int, str, tuple[int, int]]] = []

    # annotations: evaluated only without the __future__ import (and local variable annotations never)
    def _annotation(self, node: ast.AST | None, evaluated: bool) -> None:
        if node is None:
            return
        if evaluated and not self.postponed:
            self.visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module in TYPING_MODULES:
            self.typing_names.update(a.asname or a.name for a in node.names)
        self.generic_visit(node)

    def _function(self, node) -> None:
        for d in node.decorator_list:
            self.visit(d)
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                self._annotation(arg.annotation, evaluated=True)
        for d in [*a.defaults, *a.kw_defaults]:
            if d is not None:
                self.visit(d)
        self._annotation(node.returns, evaluated=True)
        outer = getattr(self, "_in_function", False)
        self._body(node.body, in_function=True)
        self._in_function = outer

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _body(self, body, in_function: bool) -> None:
        for stmt in body:
            if isinstance(stmt, ast.AnnAssign):
                self._annotation(stmt.annotation, evaluated=not in_function)
                if stmt.value is not None:
                    self.visit(stmt.value)
                self.visit(stmt.target)
            else:
                self._in_function = in_function
                self.visit(stmt)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for n in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(n)
        self._body(node.body, in_function=False)

    def visit_Module(self, node: ast.Module) -> None:
        self._body(node.body, in_function=False)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:  # nested (if/for/with bodies)
        self._annotation(node.annotation, evaluated=not getattr(self, "_in_function", False))
        if node.value is not None:
            self.visit(node.value)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.value, ast.Name) and node.value.id in BUILTIN_GENERICS:
            self.found.append((node.lineno, f"builtin generic {node.value.id}[...] evaluated at run time", (3, 9)))
        self.generic_visit(node)

    def _typeish(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and node.value is None:
            return True
        if isinstance(node, ast.Name):
            return node.id in BUILTIN_TYPES or node.id in self.typing_names
        if isinstance(node, ast.Subscript):
            return self._typeish(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self._typeish(node.left) or self._typeish(node.right)
        return False

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.BitOr) and self._typeish(node.left) and self._typeish(node.right):
            self.found.append((node.lineno, "type union X | Y evaluated at run time", (3, 10)))
            return  # one finding per union expression
        dicts = (ast.Dict, ast.DictComp)
        if isinstance(node.op, ast.BitOr) and (isinstance(node.left, dicts) or isinstance(node.right, dicts)):
            self.found.append((node.lineno, "dict union d1 | d2", (3, 9)))  # a dict display on either side
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.BitOr) and isinstance(node.value, (ast.Dict, ast.DictComp)):
            self.found.append((node.lineno, "dict update d |= {...}", (3, 9)))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in ("removeprefix", "removesuffix"):
            self.found.append((node.lineno, f"str.{node.attr}", (3, 9)))
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        if type(node).__name__ == "Match":
            self.found.append((node.lineno, "match statement", (3, 10)))
        elif type(node).__name__ == "TryStar":
            self.found.append((node.lineno, "except*", (3, 11)))
        super().generic_visit(node)


def ast_findings(path: Path) -> list[tuple[int, str, tuple[int, int]]]:
    """Run-time uses of newer syntax in one file (see the module docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    postponed = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                    any(a.name == "annotations" for a in n.names) for n in tree.body)
    f = _Finder(postponed)
    f.visit(tree)
    return sorted(set(f.found))


def vermin_findings(files: list[Path], target: tuple[int, int]) -> tuple[list[tuple[str, int, str, tuple[int, int]]], str]:
    """``[(path, line, feature, version)]`` that vermin reports above ``target``, and its 'Minimum' line.

    RuntimeError (saying how to install it) if vermin is missing."""
    code = "import sys; from vermin.main import main; sys.argv[0] = 'vermin'; sys.exit(main())"
    cmd = [sys.executable, "-c", code, "--no-tips", "--no-parse-comments", "--format", "parsable", "--violations",
           "--backport", "dataclasses", "-t=%d.%d-" % target, *map(str, files)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if "No module named 'vermin'" in proc.stderr or "No module named vermin" in proc.stderr:
        raise RuntimeError("vermin is not installed: pip install 'vermin>=1.6' (it is in the project's test extra)")
    out: list[tuple[str, int, str, tuple[int, int]]] = []
    minimum = ""
    for line in proc.stdout.splitlines():  # parsable: file:line:col:py2:py3:feature
        parts = line.split(":", 5)
        if len(parts) != 6 or not re.fullmatch(r"\d+\.\d+", parts[4]):
            continue
        ver = tuple(int(x) for x in parts[4].split("."))
        if not parts[0]:
            minimum = parts[4]  # the summary line
        elif parts[1] and ver > target:
            out.append((parts[0], int(parts[1]), parts[5], ver))
    return out, minimum


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="*", help=f"files or folders (default: {' '.join(DEFAULT_PATHS)} in the repository)")
    p.add_argument("--target", type=_version, default=None, help="oldest Python to support (default: pyproject's floor)")
    p.add_argument("--no-vermin", action="store_true", help="only the AST pass")
    a = p.parse_args(argv)
    target = a.target or requires_python_floor()
    files = python_files(a.paths or [ROOT / d for d in DEFAULT_PATHS])
    findings: list[tuple[str, int, str, tuple[int, int]]] = []
    for f in files:
        findings += [(str(f), line, what, ver) for line, what, ver in ast_findings(f) if ver > target]
    vermin_min = None
    if not a.no_vermin:
        try:
            vf, vermin_min = vermin_findings(files, target)
        except RuntimeError as e:
            print(f"check_python_floor: error: {e}", file=sys.stderr)
            return 2
        findings += vf
    findings = sorted(set(findings))
    for path, line, what, ver in findings:
        rel = Path(path).resolve()
        rel = rel.relative_to(ROOT) if ROOT in rel.parents else rel
        print(f"{rel}:{line}: {what} needs Python {ver[0]}.{ver[1]}")
    newest = max((ver for *_, ver in findings), default=None)
    print(json.dumps(dict(target="%d.%d" % target, files=len(files), findings=len(findings),
                          needs=None if newest is None else "%d.%d" % newest, vermin_minimum=vermin_min)))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
