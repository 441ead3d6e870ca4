"""config.yaml's earlier shapes (tests/data/config_shapes/, one file each) through the one upgrader
(rog.experiment.config_upgrade): each loads to the RunConfig a fresh run with the then-defaults resolves today,
and every reader (RunConfig.from_dict, the analysis's loader, resume) sees the current shape."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
import yaml

from rog.experiment import cli
from rog.experiment import resume as R
from rog.experiment.config import resolve_config
from rog.experiment.config_upgrade import CONFIG_VERSION, upgrade_config
from rog.experiment.run_config import RunConfig

SHAPES = Path(__file__).parent / "data" / "config_shapes"
FRESH = ["--testbed", "loopback", "-c", "none", "--device", "cpu", "--result-dir", "result", "--cache-dir", "result/.cache"]
# each shape and the flags of a fresh run with the defaults of its time (ROG ran the mandatory rule and the
# importance prefix before config.yaml recorded them: docs/atp.md)
THEN = {
    "before_atp": ["--library", "ROG", "--budget-rule", "mandatory", "--prefix-order", "importance"],
    "policy_entries": ["--library", "ADSP", "--adsp-time-scale", "0.28", "--adsp-floor-s", "5", "--adsp-rate", "2",
                       "--compression", "topk", "--topk-ratio", "0.05", "--topk-gate", "off"],
    "current": ["--library", "ROG", "--threshold", "20", "--budget-rule", "mandatory"],
}


def _shape(name: str) -> dict:
    return yaml.safe_load((SHAPES / f"{name}.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(THEN))
def test_each_shape_loads_to_what_a_fresh_run_with_the_then_defaults_writes(name):
    old = _shape(name)
    fresh = resolve_config(cli.parse_args([*FRESH, *THEN[name]]))
    loaded = RunConfig.from_dict(old, source=f"{name}.yaml").to_dict()
    assert loaded["version"] == CONFIG_VERSION == 2 and not {"atp", "adsp", "adacomm", "topk"} & set(loaded)
    # entries written at run time aside (flags: not kept before 2026-11-22), and the code's run_semantics,
    # which the oldest run recorded as 3 (what the same flags measured then)
    diff = [d for d in R.config_differences(loaded, fresh) if not d.startswith("run_semantics:")]
    assert diff == []
    assert loaded["run_semantics"] == (3 if name == "before_atp" else fresh["run_semantics"])


def test_the_options_each_shape_ran_with():
    by_hand = {"before_atp": {"budget_rule": "mandatory", "prefix_order": "importance"},  # unrecorded: the old rule
               "policy_entries": {"gamma_s": 60 * 0.28, "epoch_s": 1200 * 0.28, "window_s": 60 * 0.28,
                                  "floor_s": 5 * 0.28, "time_scale": 0.28, "fixed_rate": 2, "mode": "paper",
                                  "target_loss": None, "loss_every_s": None},
               "current": {"budget_rule": "mandatory", "prefix_order": "artifact"}}
    for name, want in by_hand.items():
        got = RunConfig.from_dict(_shape(name)).sync.options
        assert got.keys() == want.keys() and all(got[k] == pytest.approx(v) for k, v in want.items()), name
    codec = {name: RunConfig.from_dict(_shape(name)).compression for name in by_hand}
    assert codec["policy_entries"].options == dict(ratio=0.05, gate=False, delta=0.3, smoothing=0.9, statistic="norm")
    assert codec["before_atp"].options is None and codec["current"].options is None  # the 1-bit codec: none


def test_an_older_runs_flags_still_rerun_it(tmp_path):
    """--config replays the flags an older run recorded (--topk-gate 'off' then, a bool option's on|off now)."""
    path = tmp_path / "config.yaml"
    shutil.copy(SHAPES / "policy_entries.yaml", path)
    again = resolve_config(cli.parse_args(["--config", str(path), "--result-dir", "result"]))
    diff = R.config_differences(upgrade_config(_shape("policy_entries")), again)
    assert diff == [] and again["compression_options"]["gate"] is False


def test_the_upgrader_leaves_its_input_alone_and_is_idempotent():
    old = _shape("policy_entries")
    kept = copy.deepcopy(old)
    once = upgrade_config(old)
    assert old == kept and upgrade_config(once) == once
    assert once["policy_options"] == old["adsp"] and once["compression_options"] == old["topk"] and "device" in once
    newer = dict(once, version=CONFIG_VERSION + 1)
    assert upgrade_config(newer) == newer  # a newer shape is not guessed at: RunConfig's checks name it
    assert upgrade_config({"run_id": "x"}) == {"run_id": "x"}  # not a run's config (no library): as it is


def test_a_reader_of_older_runs_sees_the_current_shape(tmp_path):
    from rog.analysis.load import load_run

    run = tmp_path / "ROG4-none-b1-w4-seed0"
    run.mkdir()
    shutil.copy(SHAPES / "before_atp.yaml", run / "config.yaml")
    cfg = load_run(run).config
    assert cfg["policy_options"] == {"budget_rule": "mandatory", "prefix_order": "importance"}
    assert cfg["schedule"] == {"name": "sequential", "epoch_iterations": None} and cfg["link_delay_ms"] == 0.0
    (run / "DONE").write_text("{}\n")  # resume: the old ROG run against today's default rule
    planned = resolve_config(cli.parse_args([*FRESH, "--library", "ROG"]))
    dec = R.decide(run, planned)
    assert dec.action == "rerun" and "policy_options.budget_rule: found 'mandatory', planned 'artifact'" in dec.why
