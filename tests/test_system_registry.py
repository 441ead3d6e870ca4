"""One registry of systems (rog.policies.registry): a system registered there, and nowhere else, is a
``run.py --library`` choice with its own default threshold, gets the same run id from the evaluation
items' plan as from run.py (so a complete run is skipped, not rerun), and its label in the analysis.

The throwaway system TOY has a default threshold of 7 (not the 4 most systems use) and, like FLOWN,
a label without its threshold: without the registry each of those would come out differently.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rog.analysis.load import load_run, run_label
from rog.experiment import cli
from rog.experiment import config as runcfg
from rog.experiment import items as I
from rog.experiment import resume as R
from rog.experiment.rundir import CONFIG_FILE, DONE_FILE
from rog.policies import registry
from rog.policies.ssp import SSP

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "result" / ".cache"


class Toy(SSP):
    """A throwaway system: SSP under another name, default threshold 7, labelled without it."""

    name = "TOY"
    default_threshold = 7
    threshold_in_label = False


@pytest.fixture
def toy(monkeypatch):
    """TOY registered for one test (monkeypatch removes the entry afterwards)."""
    monkeypatch.setitem(registry.POLICIES, "TOY", Toy)
    return "TOY"


def test_registered_system_is_a_run_py_choice_with_its_default_threshold(toy, tmp_path):
    assert "TOY" in cli.build_parser().format_help()
    a = cli.parse_args(["--library", "toy", "--testbed", "loopback", "-c", "none", "--result-dir", str(tmp_path)])
    cfg = runcfg.resolve_config(a)
    assert (cfg["library"], cfg["threshold"]) == ("TOY", 7)
    assert cfg["run_id"] == "TOY7-none-b1-w4-seed0"
    cfg = runcfg.resolve_config(cli.parse_args(["--library", "TOY", "--threshold", "2", "--testbed", "loopback",
                                                "-c", "none", "--result-dir", str(tmp_path)]))
    assert cfg["run_id"] == "TOY2-none-b1-w4-seed0"


def test_unregistered_system_is_refused_after_cleanup():
    assert "TOY" not in registry.system_names()  # the fixture's entry did not leak
    with pytest.raises(SystemExit):
        cli.parse_args(["--library", "TOY"])


def test_planned_item_of_a_registered_system_matches_what_run_py_writes(toy, tmp_path):
    item = I.Item("toy", (I.RunSpec("TOY"), I.RunSpec("BSP")), "a throwaway system next to BSP")
    planned = I.plan_runs([item])
    assert [p.run_id for p in planned] == ["TOY7-outdoors-artifact-b1-w4-seed0", "BSP-outdoors-artifact-b1-w4-seed0"]
    assert [p.spec.system for p in planned] == ["TOY", "BSP"]
    prof = I.PROFILES["quick"]
    run, res = planned[0], tmp_path / "res"
    argv = I.run_args(run.spec, prof, run.budget_s, res, item.name) + ["--cache-dir", str(CACHE)]
    cfg = runcfg.resolve_config(cli.parse_args(argv))  # the config.yaml run.py writes for this planned run
    assert cfg["run_id"] == run.run_id and cfg["threshold"] == 7
    run_dir = res / cfg["run_id"]
    run_dir.mkdir(parents=True)
    (run_dir / CONFIG_FILE).write_text(yaml.safe_dump(cfg, sort_keys=False))
    (run_dir / DONE_FILE).write_text("{}\n")
    decision = R.decide(run_dir, lambda: R.planned_config(argv))  # what run_all.sh decides for it
    assert decision.action == "skip", decision.why
    retuned = R.decide(run_dir, lambda: R.planned_config(argv + ["--threshold", "8"]))
    assert retuned.action == "rerun" and "threshold: found 7, planned 8" in retuned.why


def test_analysis_labels_a_registered_system_from_the_registry(toy, tmp_path):
    d = tmp_path / "TOY7-run"
    d.mkdir()
    (d / CONFIG_FILE).write_text(yaml.safe_dump(dict(library="TOY", threshold=7, workers=2)))
    run = load_run(d)
    assert run.label == "TOY"  # threshold_in_label = False, as FLOWN
    assert run_label(run, ("threshold",)) == "TOY-7"  # a threshold sweep still tells them apart
    assert registry.system_label("FLOWN", 4) == "FLOWN" and registry.system_label("ROG", 20) == "ROG-20"
    assert registry.system_label("BSP", 0) == "BSP" and registry.system_label("DDP", 0) == "DDP"


def test_unregistered_system_keeps_its_threshold_in_label_and_run_id(tmp_path):
    d = tmp_path / "OTHER3-run"
    d.mkdir()
    (d / CONFIG_FILE).write_text(yaml.safe_dump(dict(library="OTHER", threshold=3, workers=2)))
    assert load_run(d).label == "OTHER-3"
    assert registry.run_id_system("OTHER", 3) == "OTHER3"


def test_run_py_help_lists_every_registered_system(run_py_command):
    out = run_py_command(["--help"], timeout_s=120, check=True).stdout
    assert "{" + ",".join(registry.system_names()) + "}" in out
    assert registry.system_names() == ("BSP", "SSP", "FLOWN", "ROG", "ADSP", "ADACOMM", "ADAPTIVE_ADACOMM", "DDP")


def test_capabilities_replace_system_names_in_the_experiment_layer():
    from rog.policies.registry import has_own_runtime, run_options_of

    assert [n for n in registry.system_names() if has_own_runtime(n)] == ["DDP"]
    assert {n: run_options_of(n) for n in registry.system_names() if run_options_of(n)} == {
        "ROG": "atp", "ADSP": "adsp", "ADAPTIVE_ADACOMM": "adacomm"}  # the prefixes of their options' flags
    assert run_options_of("rog") == "atp"  # case-insensitive, as --library
    # no module of the experiment layer compares --library with a system's name (the evaluation items,
    # which name the systems they run, live in rog/papers/<paper>/)
    import re
    from pathlib import Path

    exp = Path(registry.__file__).resolve().parents[1] / "experiment"
    hits = [f"{p.name}:{i}" for p in sorted(exp.glob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"""(library|lib)\b[^#\n]*[=!]=\s*["'](DDP|ROG|BSP|SSP|FLOWN|ADSP|ADACOMM)["']""", line)]
    assert hits == []



@pytest.mark.parametrize("flags,what", [(["--stream-rate", "40"], "--stream-*"),
                                        (["--inject-alpha", "0.25", "--inject-beta", "0.25"], "data injection")])
def test_scadles_checks_refuse_a_system_with_its_own_runtime(flags, what, capsys):
    """The ScaDLES option checks ask the registry, not a name: the refusal names the engine's systems."""
    from rog.experiment.cli import parse_args

    with pytest.raises(SystemExit) as e:
        parse_args(["--testbed", "loopback", "--library", "DDP", "--workers", "2", *flags])
    err = capsys.readouterr().err
    assert e.value.code == 2 and what in err and "DDP" in err
    engine = [n for n in registry.system_names() if not registry.has_own_runtime(n)]
    assert ", ".join(engine) in err  # every engine system offered, from the registry
    parse_args(["--testbed", "loopback", "--library", "BSP", "--workers", "2", *flags])  # an engine system passes
