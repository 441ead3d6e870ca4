"""The recipes for a mechanism with an option (docs/architecture.md): one new module with the mechanism and its
Options, one registry line, and nothing else.  A throwaway "SSP with jitter" policy and a throwaway "noisy raw"
codec, each written to a temporary module and registered for one test only, get their flag in run.py --help
(under synchronisation, under compression), are recorded in config.yaml by resolve (policy_options,
compression_options), are rerun by --config, are rerun by resume when only their option changes, and the policy
is labelled in the summary, without any other file knowing their names."""

from __future__ import annotations

import importlib
import textwrap

import pytest
import yaml

from rog.codecs.codec_registry import CODECS, make_codec
from rog.experiment import cli
from rog.experiment import resume as R
from rog.experiment import sync_options as SO
from rog.experiment import topk_options as TO
from rog.experiment.config import resolve_config
from rog.experiment.run_config import RunConfig
from rog.policies.registry import POLICIES, make_policy, system_label

TEMPLATE = '''
"""{doc} (a throwaway mechanism of tests/test_option_recipes.py)."""
from dataclasses import dataclass

from rog.errors import ConfigError
from rog.options import option
from {base_module} import {base}


@dataclass(frozen=True)
class Options:
    """{cls}'s options."""

    {field}: float = option(0.0, "{help}")

    def __post_init__(self):
        if not self.{field} >= 0:
            raise ConfigError(f"{flag} must be a number >= 0, got {{self.{field}!r}}; e.g. 0.1")


class {cls}({base}):
    """{doc}."""

    {attrs}
    options = Options
    run_options = "{prefix}"

    def __init__(self, {args}{field}: float = Options.{field}) -> None:
        {init}
        self.{field} = Options({field}).{field}
'''
SSP_JITTER = dict(doc="SSP(s) whose workers wait up to jitter_s before each push", base_module="rog.policies.ssp",
                  base="SSP", cls="SSPJitter", field="jitter_s", help="random delay before each push, in seconds",
                  flag="--sspj-jitter-s", attrs='name = "SSP_JITTER"', prefix="sspj", args="threshold: int = 4, ",
                  init="super().__init__(threshold)")
NOISY = dict(doc="Raw float32 values with a noise level", base_module="rog.codecs.compression", base="RawCodec",
             cls="NoisyCodec", field="noise_std", help="standard deviation of the noise added to each value",
             flag="--noisy-noise-std", attrs='name = "noisy"\n    codec_id = 97', prefix="noisy", args="",
             init="pass")


def _throwaway(tmp_path, monkeypatch, registry, name: str, spec: dict):
    """The module of ``spec``, imported from a temporary folder and registered as ``name`` for one test."""
    module_name = f"rog_test_{spec['prefix']}"
    (tmp_path / f"{module_name}.py").write_text(textwrap.dedent(TEMPLATE.format(**spec)), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = getattr(importlib.import_module(module_name), spec["cls"])
    registry.register(name, cls)  # the registry line
    return cls


@pytest.fixture
def jitter_policy(tmp_path, monkeypatch):
    yield _throwaway(tmp_path, monkeypatch, POLICIES, "SSP_JITTER", SSP_JITTER)
    POLICIES.unregister("SSP_JITTER")


@pytest.fixture
def noisy_codec(tmp_path, monkeypatch):
    yield _throwaway(tmp_path, monkeypatch, CODECS, "noisy", NOISY)
    CODECS.unregister("noisy")


def _group_of(p, flag: str) -> str:
    act = p._option_string_actions[flag]
    return next(g.title.split(":")[0] for g in p._action_groups if act in g._group_actions)


# ------------------------------------------------------------------ a policy with an option
def _policy_argv(tmp_path, *flags):
    return ["--testbed", "loopback", "-c", "none", "--result-dir", str(tmp_path / "res"), "--library", "SSP_JITTER",
            *flags]


def test_its_flag_appears_under_synchronisation(jitter_policy):
    p = cli.build_parser()
    act = p._option_string_actions["--sspj-jitter-s"]
    assert _group_of(p, "--sspj-jitter-s") == "synchronisation" and act.default == 0.0 and act.type is float
    assert act.help == "SSP_JITTER: random delay before each push, in seconds (default 0)"
    assert "SSP_JITTER" in p._option_string_actions["--library"].choices


def test_resolve_records_it_and_the_policy_is_built_with_it(jitter_policy, tmp_path):
    cfg = resolve_config(cli.parse_args(_policy_argv(tmp_path, "--sspj-jitter-s", "0.25")))
    assert cfg["policy_options"] == {"jitter_s": 0.25} and cfg["threshold"] == 4  # SSP's default threshold
    typed = RunConfig.from_dict(yaml.safe_load(yaml.safe_dump(cfg)))  # through config.yaml's text
    policy = make_policy("SSP_JITTER", typed.sync.threshold, **SO.policy_options(typed))
    assert isinstance(policy, jitter_policy) and policy.jitter_s == 0.25
    assert resolve_config(cli.parse_args(_policy_argv(tmp_path)))["policy_options"] == {"jitter_s": 0.0}  # the default
    assert resolve_config(cli.parse_args(_policy_argv(tmp_path)[:-2] + ["--library", "SSP"]))["policy_options"] is None


def test_a_bad_value_is_refused_naming_the_flag(jitter_policy, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.parse_args(_policy_argv(tmp_path, "--sspj-jitter-s", "-1"))
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "run.py: error: --sspj-jitter-s must be a number >= 0, got -1.0; e.g. 0.1; see run.py --help")


def test_config_reruns_it(jitter_policy, tmp_path):
    recorded = resolve_config(cli.parse_args(_policy_argv(tmp_path, "--sspj-jitter-s", "0.25")))
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(recorded), encoding="utf-8")
    again = resolve_config(cli.parse_args(["--config", str(path), "--result-dir", str(tmp_path / "res")]))
    assert again["policy_options"] == {"jitter_s": 0.25} and again["library"] == "SSP_JITTER"
    assert [d for d in R.config_differences(recorded, again)] == []
    other = resolve_config(cli.parse_args(["--config", str(path), "--result-dir", str(tmp_path / "res"),
                                           "--sspj-jitter-s", "0.5"]))  # a flag beside --config wins
    assert other["policy_options"] == {"jitter_s": 0.5}


def test_resume_reruns_a_run_when_only_its_option_changed(jitter_policy, tmp_path):
    recorded = resolve_config(cli.parse_args(_policy_argv(tmp_path, "--sspj-jitter-s", "0.25")))
    run = tmp_path / "res" / recorded["run_id"]
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(recorded), encoding="utf-8")
    (run / "DONE").write_text("{}\n")
    assert R.decide(run, lambda: R.planned_config(_policy_argv(tmp_path, "--sspj-jitter-s", "0.25"))).action == "skip"
    planned = R.planned_config(_policy_argv(tmp_path, "--sspj-jitter-s", "0.5"))
    assert planned["run_id"] == recorded["run_id"]  # the run id does not show it
    dec = R.decide(run, planned)
    assert dec.action == "rerun" and dec.why == (
        "complete but with another config (policy_options.jitter_s: found 0.25, planned 0.5)")


def test_the_summary_labels_it(jitter_policy, tmp_path):
    from rog.analysis.load import RunData

    cfg = resolve_config(cli.parse_args(_policy_argv(tmp_path, "--threshold", "2")))
    run = RunData(run_dir=tmp_path, run_id=cfg["run_id"], config=cfg, status="done", t0_s=0.0, origin_unix_s=None)
    assert run.label == system_label("SSP_JITTER", 2) == "SSP_JITTER-2" and cfg["run_id"].startswith("SSP_JITTER2-")


# ------------------------------------------------------------------ a codec with an option
def _codec_argv(tmp_path, *flags):
    return ["--testbed", "loopback", "-c", "none", "--library", "BSP", "--result-dir", str(tmp_path / "res"),
            "--compression", "noisy", *flags]


def test_its_flag_appears_under_compression_and_is_checked_there(noisy_codec, tmp_path, capsys):
    p = cli.build_parser()
    act = p._option_string_actions["--noisy-noise-std"]
    assert _group_of(p, "--noisy-noise-std") == "compression" and act.default == 0.0
    assert "noisy" in p._option_string_actions["--compression"].choices
    assert act.help == "noisy: standard deviation of the noise added to each value (default 0)"
    with pytest.raises(SystemExit) as e:
        cli.parse_args(_codec_argv(tmp_path, "--noisy-noise-std", "-1"))
    assert e.value.code == 2 and "run.py: error: --noisy-noise-std must be a number >= 0, got -1.0" in capsys.readouterr().err


def test_resolve_config_and_resume_follow_its_option(noisy_codec, tmp_path):
    recorded = resolve_config(cli.parse_args(_codec_argv(tmp_path, "--noisy-noise-std", "0.25")))
    assert recorded["compression_options"] == {"noise_std": 0.25}
    typed = RunConfig.from_dict(yaml.safe_load(yaml.safe_dump(recorded)))
    codec = make_codec(typed.compression.codec, **TO.codec_options(typed, ps_workers=4))  # no ps_workers: not its
    assert isinstance(codec, noisy_codec) and codec.noise_std == 0.25
    run = tmp_path / "res" / recorded["run_id"]
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(recorded), encoding="utf-8")
    (run / "DONE").write_text("{}\n")
    again = resolve_config(cli.parse_args(["--config", str(run / "config.yaml"), "--result-dir", str(tmp_path / "res")]))
    assert R.config_differences(recorded, again) == []  # --config reruns it
    assert R.decide(run, again).action == "skip"
    dec = R.decide(run, R.planned_config(_codec_argv(tmp_path, "--noisy-noise-std", "0.5")))
    assert dec.action == "rerun" and dec.why == (
        "complete but with another config (compression_options.noise_std: found 0.25, planned 0.5)")
