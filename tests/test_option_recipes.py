"""The recipes for a mechanism with an option (docs/architecture.md): one new module with the mechanism and its
Options, one registry line, and nothing else.  A throwaway "SSP with jitter" policy and a throwaway "noisy raw"
codec, each written to a temporary module and registered for one test only, get their flag in run.py --help
(under synchronisation, under compression), are recorded in config.yaml by resolve (policy_options,
compression_options), are rerun by --config, are rerun by resume when only their option changes, and the policy
is labelled in the summary, without any other file knowing their names.  In the slow tier both recipes are also
applied to a copy of the tree (the module and its registry line) and run for real on the loopback testbed."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

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

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "result" / ".cache"  # the quick workload's pre-trained weights (made once, shared)

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


def _tree_with_the_recipes(tree: Path) -> None:
    """A copy of the repository's code with both recipes applied as a user would: each new module beside its
    kind (rog/policies/, rog/codecs/) and its import and registry line in that kind's registry, nothing else."""
    for part in ("rog", "scripts", "configs"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    for spec, folder, module, registry, edits in (
            (SSP_JITTER, "policies", "ssp_jitter", "registry.py",
             (("from .ssp import SSP\n", "from .ssp_jitter import SSPJitter\n"),
              ('    ("SSP", SSP),\n', '    ("SSP_JITTER", SSPJitter),\n'))),
            (NOISY, "codecs", "noisy", "codec_registry.py",
             (("from .compression import Codec, RawCodec, SignCodec\n", "from .noisy import NoisyCodec\n"),
              ('    ("none", RawCodec),\n', '    ("noisy", NoisyCodec),\n')))):
        (tree / "rog" / folder / f"{module}.py").write_text(textwrap.dedent(TEMPLATE.format(**spec)), encoding="utf-8")
        reg = tree / "rog" / folder / registry
        text = reg.read_text(encoding="utf-8")
        for anchor, line in edits:
            assert text.count(anchor) == 1, f"{registry} no longer has {anchor!r}: update this test's recipe"
            text = text.replace(anchor, anchor + line)
        reg.write_text(text, encoding="utf-8")


@pytest.mark.slow  # two real runs of its own (two workers each, loopback, at once: about 20 s of a loaded machine)
def test_real_loopback_runs_of_the_recipes_record_rerun_and_label_them(jitter_policy, noisy_codec, tmp_path):
    """Both recipes applied to a copy of the tree (one file and its registry line each): run.py runs the new
    policy and the new codec (its frames on the wire under its codec id) on the loopback testbed with their
    options, config.yaml and the PS's events record them, and this process (the same two registered) finds
    each completed run the one --config or an unchanged plan would make, plans a rerun when only the option
    changes, and labels the policy's run."""
    from rog.analysis.load import load_run
    from rog.runtime import read_events

    tree = tmp_path / "tree"
    _tree_with_the_recipes(tree)
    common = ["--workers", "2", "--iterations", "4", "--eval-every", "2", "--checkpoint-every-s", "0",
              "--cache-dir", str(CACHE), "--no-progress", "--json"]
    argvs = {"policy": (_policy_argv(tmp_path / "p", "--sspj-jitter-s", "0.05") + common, "--sspj-jitter-s"),
             "codec": (_codec_argv(tmp_path / "c", "--noisy-noise-std", "0.05") + common, "--noisy-noise-std")}
    env = dict(os.environ, PYTHONPATH=str(tree), ROG_NO_TENSORBOARD="1")
    env.pop("ROG_SECRET", None)  # the launcher makes its own
    procs = {k: subprocess.Popen([sys.executable, str(tree / "scripts" / "run.py"), *argv], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env, cwd=str(tree)) for k, (argv, _) in argvs.items()}
    outs = {k: p.communicate(timeout=600) for k, p in procs.items()}
    for k, (argv, flag) in argvs.items():
        out, err = outs[k]
        assert procs[k].returncode == 0, f"{k}: {err[-3000:]}"
        summary = json.loads(out.strip().splitlines()[-1])
        (run_dir,) = [d for d in (tmp_path / k[0] / "res").iterdir() if d.is_dir()]
        assert summary["status"] == "done" and summary["iterations"] == 4 and (run_dir / "DONE").exists()
        recorded = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        _, ps = read_events(run_dir / "events-ps.jsonl")
        (start,) = [e for e in ps if e["kind"] == "run_start"]
        pushes = [e for e in ps if e["kind"] == "push"]
        assert len(pushes) == 2 * 4 and all(e["rows_delivered"] == e["rows_planned"] for e in pushes)
        key, field_name = ("policy_options", "jitter_s") if k == "policy" else ("compression_options", "noise_std")
        assert recorded[key] == {field_name: 0.05}
        if k == "policy":
            assert (recorded["library"], recorded["threshold"], start["policy"]) == ("SSP_JITTER", 4, "SSP_JITTER")
            assert load_run(run_dir).label == "SSP_JITTER-4"
        else:
            assert (recorded["compression"], start["codec"]) == ("noisy", "noisy")
        assert R.decide(run_dir, lambda: R.planned_config(argv)).action == "skip", k  # the same plan finds it done
        again = R.planned_config(["--config", str(run_dir / "config.yaml"), "--result-dir", str(run_dir.parent)])
        assert again[key] == {field_name: 0.05} and R.decide(run_dir, again).action == "skip", k
        dec = R.decide(run_dir, lambda: R.planned_config([*argv, flag, "0.1"]))
        assert dec.action == "rerun" and dec.why == (
            f"complete but with another config ({key}.{field_name}: found 0.05, planned 0.1)"), k


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
