"""run.py --help opens with a short usage line and the "common" group (the flags most runs use), then shows the
other flags in argument groups by concern (testbed, links, workload, synchronisation, ATP,
schedule, streams, compression, injection, device, faults, output), in that order, none left in the catch-all
list; a mechanism's module puts its flags into the group of their concern."""

from __future__ import annotations

import argparse

from rog.experiment.cli import build_parser

CONCERNS = ("common", "testbed", "links", "workload", "synchronisation", "ATP", "schedule", "streams", "compression", "injection",
            "device", "faults", "output")


def _groups(p: argparse.ArgumentParser) -> dict[str, list[str]]:
    return {g.title: [a.option_strings[0] for a in g._group_actions if a.help != argparse.SUPPRESS]
            for g in p._action_groups}


def test_every_flag_sits_in_a_group_of_one_concern():
    groups = _groups(build_parser())
    assert groups.pop("options") == ["-h"]  # nothing but --help outside the concern groups
    assert groups.pop("positional arguments") == []
    assert [t.split(":")[0].split(" ")[0] for t in groups] == list(CONCERNS)  # one heading per concern, in order
    assert all(flags for flags in groups.values())  # no empty heading
    every = [f for flags in groups.values() for f in flags]
    assert len(every) == len(set(every))
    of = {k.split(":")[0].split(" ")[0]: v for k, v in groups.items()}
    assert of["ATP"] == ["--budget-rule", "--prefix-order"]  # ROG's Options (rog.policies.rog), options_group "atp"
    assert of["schedule"] == ["--schedule", "--schedule-epoch-iterations", "--pacing"]  # rog.experiment.schedule_options
    assert of["injection"] == ["--inject-alpha", "--inject-beta", "--inject-mode"]  # rog.experiment.topk_options
    assert "--topk-ratio" in of["compression"] and "--compression" in of["compression"]
    assert {"--partition", "--quick-model", "--workload"} <= set(of["workload"])
    assert "--stream-rate" in of["streams"] and "--lr-scaling" in of["streams"]  # rog.experiment.stream_options
    assert "--adsp-gamma-s" in of["synchronisation"] and "--compute-ratios" in of["device"]  # sync_options
    assert "--global-eval-every-s" in of["output"]
    assert of["common"] == ["--testbed", "-c", "--library", "--threshold", "--workers", "--iterations", "--budget-s",
                            "--seed", "--device", "--result-dir", "--json"]  # what a newcomer needs, first


def test_help_opens_with_a_one_line_usage_and_the_common_flags():
    text = build_parser().format_help()
    lines = text.splitlines()
    assert lines[0] == "usage: run.py [options]; see --help"
    assert text.index("common: the flags most runs use") < text.index("testbed: where the processes run")


def test_help_prints_the_headings(run_py_command):
    out = run_py_command(["--help"], check=True).stdout
    for title in _groups(build_parser()):
        if title not in ("positional arguments",):
            assert f"\n{title}:\n" in out, title
