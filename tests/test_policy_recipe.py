"""The recipe for a policy with an option (docs/architecture.md): one new module with the policy and its Options,
one registry line, and nothing else.  A throwaway "SSP with jitter" policy, written to a temporary module and
registered for the test only, gets its flag in run.py --help under synchronisation, is recorded in config.yaml by
resolve, is rerun by --config, is rerun by resume when only its option changes, and is labelled in the summary,
without any other file knowing its name."""

from __future__ import annotations

import importlib
import textwrap

import pytest
import yaml

from rog.experiment import cli
from rog.experiment import resume as R
from rog.experiment import sync_options as SO
from rog.experiment.config import resolve_config
from rog.experiment.run_config import RunConfig
from rog.policies.registry import POLICIES, make_policy, system_label

MODULE = '''
"""SSP(s) with a jitter before each push (a throwaway policy of tests/test_policy_recipe.py)."""
from dataclasses import dataclass

from rog.errors import ConfigError
from rog.options import option
from rog.policies.ssp import SSP


@dataclass(frozen=True)
class Options:
    """SSP_JITTER's options."""

    jitter_s: float = option(0.0, "random delay before each push, in seconds")

    def __post_init__(self):
        if not self.jitter_s >= 0:
            raise ConfigError(f"--sspj-jitter-s must be a number of seconds >= 0, got {self.jitter_s!r}; e.g. 0.1")


class SSPJitter(SSP):
    """SSP(s) whose workers wait up to ``jitter_s`` before each push."""

    name = "SSP_JITTER"
    options = Options
    run_options = "sspj"

    def __init__(self, threshold: int = 4, jitter_s: float = Options.jitter_s) -> None:
        super().__init__(threshold)
        self.jitter_s = Options(jitter_s).jitter_s
'''


@pytest.fixture
def jitter_policy(tmp_path, monkeypatch):
    """The throwaway module, imported from a temporary folder and registered for this test only."""
    (tmp_path / "rog_test_ssp_jitter.py").write_text(textwrap.dedent(MODULE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("rog_test_ssp_jitter")
    POLICIES.register("SSP_JITTER", module.SSPJitter)  # the registry line
    yield module
    POLICIES.unregister("SSP_JITTER")


def _argv(tmp_path, *flags):
    return ["--testbed", "loopback", "-c", "none", "--result-dir", str(tmp_path / "res"), "--library", "SSP_JITTER",
            *flags]


def test_its_flag_appears_under_synchronisation(jitter_policy):
    p = cli.build_parser()
    sync = next(g for g in p._action_groups if g.title.startswith("synchronisation"))
    act = p._option_string_actions["--sspj-jitter-s"]
    assert act in sync._group_actions and act.default == 0.0 and act.type is float
    assert act.help == "SSP_JITTER: random delay before each push, in seconds (default 0)"
    assert "SSP_JITTER" in p._option_string_actions["--library"].choices


def test_resolve_records_it_and_the_policy_is_built_with_it(jitter_policy, tmp_path):
    cfg = resolve_config(cli.parse_args(_argv(tmp_path, "--sspj-jitter-s", "0.25")))
    assert cfg["policy_options"] == {"jitter_s": 0.25} and cfg["threshold"] == 4  # SSP's default threshold
    typed = RunConfig.from_dict(yaml.safe_load(yaml.safe_dump(cfg)))  # through config.yaml's text
    policy = make_policy("SSP_JITTER", typed.sync.threshold, **SO.policy_options(typed))
    assert isinstance(policy, jitter_policy.SSPJitter) and policy.jitter_s == 0.25
    assert resolve_config(cli.parse_args(_argv(tmp_path)))["policy_options"] == {"jitter_s": 0.0}  # the default
    assert resolve_config(cli.parse_args(_argv(tmp_path)[:-2] + ["--library", "SSP"]))["policy_options"] is None


def test_a_bad_value_is_refused_naming_the_flag(jitter_policy, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(_argv(tmp_path, "--sspj-jitter-s", "-1"))
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "run.py: error: --sspj-jitter-s must be a number of seconds >= 0, got -1.0; e.g. 0.1; see run.py --help")


def test_config_reruns_it(jitter_policy, tmp_path):
    recorded = resolve_config(cli.parse_args(_argv(tmp_path, "--sspj-jitter-s", "0.25")))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(recorded), encoding="utf-8")
    again = resolve_config(cli.parse_args(["--config", str(path), "--result-dir", str(tmp_path / "res")]))
    assert again["policy_options"] == {"jitter_s": 0.25} and again["library"] == "SSP_JITTER"
    assert [d for d in R.config_differences(recorded, again)] == []
    other = resolve_config(cli.parse_args(["--config", str(path), "--result-dir", str(tmp_path / "res"),
                                           "--sspj-jitter-s", "0.5"]))  # a flag beside --config wins
    assert other["policy_options"] == {"jitter_s": 0.5}


def test_resume_reruns_a_run_when_only_its_option_changed(jitter_policy, tmp_path):
    recorded = resolve_config(cli.parse_args(_argv(tmp_path, "--sspj-jitter-s", "0.25")))
    run = tmp_path / "res" / recorded["run_id"]
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(recorded), encoding="utf-8")
    (run / "DONE").write_text("{}\n")
    assert R.decide(run, lambda: R.planned_config(_argv(tmp_path, "--sspj-jitter-s", "0.25"))).action == "skip"
    planned = R.planned_config(_argv(tmp_path, "--sspj-jitter-s", "0.5"))
    assert planned["run_id"] == recorded["run_id"]  # the run id does not show it
    dec = R.decide(run, planned)
    assert dec.action == "rerun" and dec.why == (
        "complete but with another config (policy_options.jitter_s: found 0.25, planned 0.5)")


def test_the_summary_labels_it(jitter_policy, tmp_path):
    from rog.analysis.load import RunData

    cfg = resolve_config(cli.parse_args(_argv(tmp_path, "--threshold", "2")))
    run = RunData(run_dir=tmp_path, run_id=cfg["run_id"], config=cfg, status="done", t0_s=0.0, origin_unix_s=None)
    assert run.label == system_label("SSP_JITTER", 2) == "SSP_JITTER-2" and cfg["run_id"].startswith("SSP_JITTER2-")
