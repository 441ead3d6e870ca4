"""Options owned by the mechanism (rog.options): Adaptive ADACOMM's options as one frozen dataclass beside the
policy, its run.py flags made from it (same names and defaults as before), its checks in one place, and the
values on their way to config.yaml and the policy."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Optional

import pytest

from rog.errors import ConfigError
from rog.experiment import cli
from rog.experiment import sync_options as SO
from rog.experiment.config import resolve
from rog.options import add_option_flags, check_choices, field_flag, option, options_from
from rog.policies.adacomm_adaptive import AdaptiveADACOMM, Options
from rog.policies.registry import make_policy


def _action(p: argparse.ArgumentParser, flag: str) -> argparse.Action:
    return p._option_string_actions[flag]


def test_the_flags_are_made_from_the_options_in_the_synchronisation_group():
    p = cli.build_parser()
    sync = next(g for g in p._action_groups if g.title.startswith("synchronisation"))
    for name, default, words in (("period_s", 10.0, "AdaComm's T0"), ("shrink", 0.5, "a constant")):
        act = _action(p, "--adacomm-" + name.replace("_", "-"))
        assert act in sync._group_actions and act.dest == f"adacomm_{name}" and act.type is float
        assert act.default == default == getattr(Options(), name)  # the defaults the flags always had
        assert act.help.startswith("ADAPTIVE_ADACOMM: ") and words in act.help and f"(default {default:g})" in act.help


def test_the_options_reach_config_yaml_and_the_policy(tmp_path):
    a = cli.parse_args(["--testbed", "loopback", "-c", "none", "--library", "ADAPTIVE_ADACOMM", "--adacomm-period-s",
                        "4", "--adacomm-shrink", "0.25", "--result-dir", str(tmp_path)])
    cfg = resolve(a)
    assert cfg.to_dict()["policy_options"] == {"period_s": 4.0, "shrink": 0.25} == cfg.sync.options
    policy = make_policy("ADAPTIVE_ADACOMM", cfg.sync.threshold, **SO.policy_options(cfg))
    assert (policy.period_s, policy.shrink) == (4.0, 0.25)


@pytest.mark.parametrize("flag, value, words", [("--adacomm-period-s", "0", "positive number of seconds"),
                                                ("--adacomm-period-s", "inf", "positive number of seconds"),
                                                ("--adacomm-shrink", "1", "strictly between 0 and 1"),
                                                ("--adacomm-shrink", "-0.5", "strictly between 0 and 1")])
def test_a_bad_value_is_one_line_naming_the_flag(flag, value, words, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--library", "ADAPTIVE_ADACOMM", flag, value])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and err.startswith(f"run.py: error: {flag} (") and words in err


def test_the_checks_live_in_the_options_alone():
    with pytest.raises(ConfigError, match="--adacomm-period-s .*got 0"):
        Options(period_s=0)
    with pytest.raises(ConfigError, match="--adacomm-shrink .*got 1.0"):
        AdaptiveADACOMM(40, shrink=1.0)  # the policy checks through its Options: the same message
    with pytest.raises(dataclasses.FrozenInstanceError):
        Options().shrink = 0.1


@dataclass(frozen=True)
class _Toy:
    """A throwaway mechanism's options: an int and a str field."""

    rounds: int = option(3, "rounds per step")
    mode: str = option("fast", "how it runs")

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ConfigError(f"--toy-rounds must be >= 1, got {self.rounds}")


def test_any_mechanism_gets_its_flags_from_its_options():
    p = argparse.ArgumentParser()
    g = p.add_argument_group("toy")
    add_option_flags(g, _Toy, "toy", "TOY")
    assert options_from(p.parse_args([]), _Toy, "toy") == _Toy()
    assert options_from(p.parse_args(["--toy-rounds", "5", "--toy-mode", "slow"]), _Toy, "toy") == _Toy(5, "slow")
    assert _action(p, "--toy-mode").help == "TOY: how it runs (default fast)"
    with pytest.raises(ConfigError, match="--toy-rounds must be >= 1"):
        options_from(p.parse_args(["--toy-rounds", "0"]), _Toy, "toy")

    @dataclass(frozen=True)
    class Bad:
        ratios: list = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="Bad.ratios"):
        add_option_flags(g, Bad, "bad", "BAD")


@dataclass(frozen=True)
class _Scaled:
    """A throwaway mechanism with a kept flag name, a choice, an optional option and a scale."""

    period_s: float = option(60.0, "period", scaled=True)
    scale: float = option(1.0, "multiplies the period", scale=True)
    kind: str = option("a", "which kind", choices=("a", "b"))
    cap: Optional[int] = option(None, "an optional cap (default: none)", flag="--old-cap-name")

    def __post_init__(self) -> None:
        check_choices(self, "sc")


def test_kept_names_choices_optional_fields_and_a_scale():
    p = argparse.ArgumentParser()
    add_option_flags(p.add_argument_group("sc"), _Scaled, "sc", "SC")
    assert field_flag(_Scaled, "cap", "sc") == "--old-cap-name" and field_flag(_Scaled, "kind", "sc") == "--sc-kind"
    assert _action(p, "--old-cap-name").type is int and _action(p, "--old-cap-name").dest == "old_cap_name"
    assert _action(p, "--old-cap-name").help == "SC: an optional cap (default: none)"  # no default to show
    assert _action(p, "--sc-kind").choices is None and _action(p, "--sc-kind").metavar == "{a,b}"  # checked once: below
    got = options_from(p.parse_args(["--sc-period-s", "30", "--sc-scale", "0.5", "--old-cap-name", "7"]), _Scaled, "sc")
    assert got == _Scaled(period_s=15.0, scale=0.5, kind="a", cap=7)  # 30 s x 0.5
    assert options_from(p.parse_args([]), _Scaled, "sc") == _Scaled()
    with pytest.raises(ConfigError, match=r"^--sc-kind \(kind\) must be one of a, b, got 'c'$"):
        options_from(p.parse_args(["--sc-kind", "c"]), _Scaled, "sc")
