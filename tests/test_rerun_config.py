"""``run.py --config result/<run-id>/config.yaml``: a recorded run resolves again to the same configuration,
a flag given beside ``--config`` overrides exactly its own entry, and a bad file is one clear error line."""

from __future__ import annotations

import copy

import pytest
import yaml

from rog.experiment import cli
from rog.experiment.config import resolve_config
from rog.experiment.rerun import differences
from rog.experiment.rundir import prepare_run_dir

# Flags touching most sections of the configuration: testbed, a replayed trace (regime, offsets),
# system and threshold, ROG's budget rule, -b pacing, workers, budget, learning rate, checkpoints, note.
FLAGS = ["--testbed", "loopback", "-c", "outdoors", "--library", "ROG", "--threshold", "4", "--budget-rule", "mandatory",
         "-b", "2", "--workers", "3", "--time-budget-s", "30", "--lr", "2e-5", "--checkpoint-workers", "all",
         "--eval-every", "7", "--note=-rerun", "--replay-mode", "artifact", "--seed", "3"]


def _record(tmp_path, argv):
    """Resolve ``argv`` and write the run folder's config.yaml exactly as run.py does; (config, its path)."""
    cfg = resolve_config(cli.parse_args([*argv, "--result-dir", str(tmp_path)]))
    run_dir = prepare_run_dir(cfg, str(tmp_path), overwrite=False)
    return cfg, run_dir / "config.yaml"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rerun")
    cfg, path = _record(tmp, FLAGS)
    return tmp, cfg, path


def test_a_recorded_run_resolves_again_to_the_same_configuration(recorded):
    tmp, cfg, path = recorded
    again = resolve_config(cli.parse_args(["--config", str(path), "--result-dir", str(tmp)]))
    # No entry may differ on this testbed: resolve_config derives every entry from the flags and the inputs
    # beside them (trace file, profiles, this machine), which are the same here.  The entries a rerun may
    # change are set after resolving (launcher, absolute cache_dir for Fabric, deploy) or are per-run
    # names (emulated: the namespaces' random prefix); none of them is produced on loopback, which this
    # asserts too, so the comparison below is of the whole configuration.
    assert not {"launcher", "deploy", "emulated"} & set(cfg)
    assert again == cfg
    assert differences(cfg, again) == []
    # and what config.yaml holds is the same file content (a YAML round trip of both)
    rerun_path = tmp / "again"
    again_dir = prepare_run_dir(again, str(rerun_path), overwrite=False)
    assert yaml.safe_load((again_dir / "config.yaml").read_text()) == yaml.safe_load(path.read_text())
    # the recorded flags are the parsed values, by long name (-c -> --control, -b -> --batchsize)
    flags = yaml.safe_load(path.read_text())["flags"]
    assert flags["--control"] == "outdoors" and flags["--batchsize"] == 2 and flags["--note"] == "-rerun"
    assert flags["--lr"] == 2e-5 and flags["--checkpoint-workers"] == "all" and "--result-dir" not in flags


def test_a_flag_beside_config_overrides_only_its_own_entry(recorded):
    tmp, cfg, path = recorded
    again = resolve_config(cli.parse_args(["--config", str(path), "--threshold", "8", "--result-dir", str(tmp)]))
    changed = {k for k in cfg if cfg[k] != again[k]}
    # the threshold, the run id that names it (ROG4 -> ROG8), and the record of the flags
    assert changed == {"threshold", "run_id", "flags"}
    assert again["threshold"] == 8 and again["run_id"] == cfg["run_id"].replace("ROG4-", "ROG8-", 1)
    flag_changes = {k for k in cfg["flags"] if cfg["flags"][k] != again["flags"].get(k)}
    assert flag_changes == {"--threshold"}


def test_the_rerun_says_which_entries_differ_from_the_record(recorded, capsys):
    tmp, cfg, path = recorded
    from rog.experiment.rerun import report_differences

    report_differences(str(path), cfg, file=None)  # the same configuration: nothing printed
    assert capsys.readouterr() == ("", "")
    other = copy.deepcopy(cfg)
    other["threshold"], other["flags"]["--threshold"] = 8, 8
    import sys

    report_differences(str(path), other, file=sys.stderr)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "differs from the recorded one in threshold" in err[0] and "--threshold 4 -> 8" in err[0]


def _edit(recorded, tmp_path, change) -> str:
    data = yaml.safe_load(recorded[2].read_text())
    change(data)
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(p)


def _error(argv, capsys) -> str:
    rc = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("change,expect", [
    (lambda d: d["flags"].update({"--thresold": 4}), "flags: --thresold: run.py has no such flag"),
    (lambda d: d["flags"].update({"--threshold": "four"}), "flags: --threshold: 'four' is not a valid value"),
    (lambda d: d["flags"].update({"--library": "XYZ"}), "flags: --library: 'XYZ' is not one of BSP, "),
    (lambda d: d["flags"].update({"--overwrite": True}), "flags: --overwrite: not a recorded flag"),
    (lambda d: d["flags"].update({"--random-init": "yes"}), "flags: --random-init: 'yes' is not true or false"),
    (lambda d: d.pop("flags"), "no 'flags' entry"),
    (lambda d: d.update({"flags": ["--threshold", 4]}), "flags: must map flag names"),
])
def test_a_bad_entry_is_one_line_naming_the_file_and_the_flag(recorded, tmp_path, capsys, change, expect):
    path = _edit(recorded, tmp_path, change)
    line = _error(["--config", path, "--result-dir", str(tmp_path)], capsys)
    assert line.startswith(f"run.py: error: --config {path}: ")
    assert expect in line


def test_a_missing_or_broken_file_is_one_line(tmp_path, capsys):
    missing = tmp_path / "nope" / "config.yaml"
    line = _error(["--config", str(missing)], capsys)
    assert line.startswith(f"run.py: error: --config {missing}: cannot read it") and "result/<run-id>/config.yaml" in line
    broken = tmp_path / "config.yaml"
    broken.write_text("flags: {--threshold: 4\nlibrary: [\n")
    line = _error(["--config", str(broken)], capsys)
    assert line.startswith(f"run.py: error: --config {broken}: line ") and "not valid YAML" in line
    broken.write_text("- just\n- a list\n")
    assert "not a run's config.yaml" in _error(["--config", str(broken)], capsys)
