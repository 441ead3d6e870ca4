"""Every run.py flag that README.md or docs/ names after ``run.py`` is a flag run.py's parser knows: a renamed
or dropped flag (say, one a mechanism's options no longer generate) fails here, naming the page and line."""

from __future__ import annotations

import re
from pathlib import Path

from rog.experiment.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
COMMAND = re.compile(r"\brun\.py((?:\s+(?:--?[A-Za-z][\w-]*|(?!\S*\.py)[^\s`|;#]+))+)")  # run.py and its words
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def documented_flags() -> dict[str, list[str]]:
    """``{flag: [page:line, ...]}`` of the long flags written after ``run.py`` in README.md and docs/*.md."""
    out: dict[str, list[str]] = {}
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for command in COMMAND.finditer(line):
                for flag in FLAG.findall(command.group(1)):
                    out.setdefault(flag, []).append(f"{page.relative_to(ROOT)}:{i}")
    return out


def test_every_documented_run_py_flag_exists():
    flags = documented_flags()
    assert {"--budget-rule", "--prefix-order", "--config", "--testbed", "--library"} <= set(flags)  # it reads them
    known = set(build_parser()._option_string_actions)
    unknown = {flag: where for flag, where in flags.items() if flag not in known}
    assert unknown == {}
