"""run.py --help shows its flags in argument groups by concern (testbed, links, workload, synchronisation,
schedule, streams, compression and injection, device, output, faults), none left in the catch-all list."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from rog.experiment.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
CONCERNS = ("testbed", "links", "workload", "synchronisation", "schedule", "streaming", "compression", "injection",
            "device", "output", "faults")


def _groups(p: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {g.title: [a.option_strings[0] for a in g._group_actions if a.help != argparse.SUPPRESS]
            for g in p._action_groups}


def test_every_flag_sits_in_a_group_of_one_concern():
    groups = _groups(build_parser())
    assert groups.pop("options") == ["-h"]  # nothing but --help outside the concern groups
    assert groups.pop("positional arguments") == []
    titles = " ".join(groups)
    assert [c for c in CONCERNS if c not in titles] == []
    assert all(flags for flags in groups.values())  # no empty heading
    every = [f for flags in groups.values() for f in flags]
    assert len(every) == len(set(every))
    assert "--budget-rule" in next(v for k, v in groups.items() if k.startswith("synchronisation"))
    assert "--topk-ratio" in next(v for k, v in groups.items() if k.startswith("compression"))


def test_help_prints_the_headings():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), "--help"], capture_output=True, text=True,
                         cwd=str(ROOT), check=True).stdout
    for title in _groups(build_parser()):
        if title not in ("positional arguments",):
            assert f"\n{title}:\n" in out, title
