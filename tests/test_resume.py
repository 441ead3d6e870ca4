"""Resume, field by field (rog.experiment.resume): a complete run counts as a planned run only when every entry
of its config.yaml is the one the planned run's run.py child would write.

The configurations compared come from run.py's own parser and resolution of the planned run's arguments
(``cli.parse_args`` + ``config.resolve_config``, what a real run writes), one of them from a real loopback run;
the fields are walked from those configurations, not listed by hand, and each is changed by a rule of this
file (``_changed``), independent of the module under test."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rog.experiment import cli
from rog.experiment import items as I
from rog.experiment import resume as R
from rog.experiment.config import resolve_config

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "result" / ".cache"  # the quick workload's cache: the payload size the resolution reads
HOSTS = ROOT / "configs" / "hosts.example.yaml"
PROF = I.PROFILES["quick"]


def _spec(item: str, tag: str) -> I.RunSpec:
    return next(s for s in I.ITEMS[item].runs if s.tag == tag)


def _argv(spec: I.RunSpec, res: Path, budget_s: float = 150.0, hosts: Path | None = None) -> list[str]:
    return I.run_args(spec, PROF, budget_s, res, "resume-test", hosts) + ["--cache-dir", str(CACHE)]


def _written(argv: list[str]) -> dict:
    """The config.yaml run.py writes for ``argv`` (its parser and resolution; not resume.planned_config)."""
    return resolve_config(cli.parse_args(argv))


def _leaves(cfg, prefix: str = "") -> list[tuple[str, tuple]]:
    """(dotted path, key path) of every entry that holds no mapping (a list or an empty mapping is one entry)."""
    out = []
    for k, v in cfg.items():
        if isinstance(v, dict) and v:
            out += [(p, (k, *keys)) for p, keys in _leaves(v, f"{prefix}{k}.")]
        else:
            out.append((f"{prefix}{k}", (k,)))
    return out


def _changed(value):
    """Another value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 1.0
    if isinstance(value, str):
        return value + "-x"
    if isinstance(value, list):
        return value + [value[-1]] if value else ["x"]
    if isinstance(value, dict):
        return {"x": 1}
    assert value is None, value
    return "x"


def _get(cfg: dict, keys: tuple):
    for k in keys:
        cfg = cfg[k]
    return cfg


def _with(cfg: dict, keys: tuple, value) -> dict:
    out = copy.deepcopy(cfg)
    cur = out
    for k in keys[:-1]:
        cur = cur[k]
    cur[keys[-1]] = value
    return out


def _done(run_dir: Path, cfg: dict) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.dump(cfg, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))
    (run_dir / "DONE").write_text("{}\n")
    return run_dir


def _run_time(path: str) -> bool:
    return any(path == f or path.startswith(f + ".") for f in R.RUN_TIME_FIELDS)


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    """Planned configurations of runs with every mechanism entry: ROG with ATP and the gated Top-k (compare),
    ScaDLES's streams (compare), ADSP on the U-shape grid (adsp), and a run on the hosts testbed."""
    res = tmp_path_factory.mktemp("res")
    specs = {"rog4-topk": (_spec("compare", "cmp-rog4-topk"), None), "scadles": (_spec("compare", "cmp-scadles"), None),
             "adsp": (_spec("adsp", "ushape-k2"), None), "hosts": (I.RunSpec("BSP"), HOSTS)}
    return {name: (spec, hosts, _argv(spec, res, hosts=hosts), _written(_argv(spec, res, hosts=hosts)))
            for name, (spec, hosts) in specs.items()}


def test_every_field_of_a_planned_run_is_compared(configs, tmp_path):
    spec, _, argv, planned = configs["rog4-topk"]
    run_dir = tmp_path / I.run_id(spec)
    assert R.decide(_done(run_dir, planned), planned).action == "skip"  # the same config: skipped
    assert R.decide(run_dir, lambda: R.planned_config(argv)).action == "skip"  # resume's own resolution agrees
    leaves = _leaves(planned)
    paths = [p for p, _ in leaves]
    for named in ("batch_multiple", "workers", "compression_options.ratio", "compression_options.gate", "compression_options.delta", "policy_options.budget_rule",
                  "trace.sha256", "run_semantics", "schedule.name", "checkpoint.workers", "regime.payload_bytes"):
        assert named in paths, named  # the walk reaches them (none is hidden under an excluded entry)
    compared, run_time = 0, set()
    for path, keys in leaves:
        entry = next((f for f in R.RUN_TIME_FIELDS if path == f or path.startswith(f + ".")), None)
        if entry in run_time:
            continue  # one entry under each run-time field is enough
        old = _get(planned, keys)
        new = _changed(old)
        dec = R.decide(_done(run_dir, _with(planned, keys, new)), planned)
        if entry is not None:
            assert dec.action == "skip", (path, dec.why)
            run_time.add(entry)
            continue
        compared += 1
        assert dec.action == "rerun" and dec.aside_as == "stale", path
        assert f"{path}: found {new!r}, planned {old!r}"[:60] in dec.why, (path, dec.why)
        assert dec.why.count(": found ") == 1, dec.why  # only that field
    assert compared > 100  # most of config.yaml: everything but the run-time entries


@pytest.mark.parametrize("name, mechanism", [("scadles", "stream"), ("adsp", "policy_options"), ("hosts", "hosts")])
def test_every_field_of_each_mechanism_entry_is_compared(configs, name, mechanism):
    _, _, _, planned = configs[name]
    assert isinstance(planned[mechanism], dict) and planned[mechanism]
    for path, keys in _leaves({mechanism: planned[mechanism]}):
        diff = R.config_differences(_with(planned, keys, "changed"), planned)
        if _run_time(path):
            assert diff == [], path
        else:
            head = f"{path}: found 'changed', planned "
            assert len(diff) == 1 and diff[0].startswith(head), diff
            assert repr(_get(planned, keys)).startswith(diff[0][len(head):].rstrip(".")), diff  # long values cut short


def test_an_items_extra_flags_and_options_are_compared(configs, tmp_path):
    """Edit the compare item's Top-k settings or an ADSP constant: the old run (same run id) is rerun, the
    difference named; the run ids do not show it."""
    res = tmp_path / "res"
    topk, _, argv, topk_cfg = configs["rog4-topk"]
    run_dir = _done(res / I.run_id(topk), topk_cfg)
    def topk_with(**changes):
        return replace(topk, options=tuple(o.with_values(**changes) if o.prefix == "topk" else o for o in topk.options))

    edited = topk_with(delta=0.4)  # --topk-gate-delta 0.4
    assert I.run_id(edited) == I.run_id(topk)
    dec = R.decide(run_dir, lambda: R.planned_config(_argv(edited, res)))
    assert dec.action == "rerun" and dec.why == "complete but with another config (compression_options.delta: found 0.3, planned 0.4)"
    ratio = topk_with(ratio=0.2)  # --topk-ratio 0.2
    assert R.decide(run_dir, lambda: R.planned_config(_argv(ratio, res))).why.endswith(
        "(compression_options.ratio: found 0.1, planned 0.2)")
    # an ADSP constant: the U-shape grid's commit floor (--adsp-floor-s), scaled by --adsp-time-scale
    adsp, _, _, recorded = configs["adsp"]
    run_dir = _done(res / I.run_id(adsp), recorded)
    floor = adsp.option("adsp", "floor_s")
    moved = replace(adsp, options=tuple(o.with_values(floor_s=floor + 1) for o in adsp.options))
    assert I.run_id(moved) == I.run_id(adsp)
    dec = R.decide(run_dir, lambda: R.planned_config(_argv(moved, res)))
    assert recorded["policy_options"]["floor_s"] == pytest.approx(floor * recorded["policy_options"]["time_scale"])
    assert dec.action == "rerun" and dec.why.count(": found ") == 1
    assert f"(policy_options.floor_s: found {recorded['policy_options']['floor_s']!r}, planned " in dec.why
    assert R.decide(run_dir, lambda: R.planned_config(_argv(adsp, res))).action == "skip"
    # batch_multiple and workers are in the run id, and in config.yaml: a folder renamed by hand is still told apart
    wide = replace(topk, batch_multiple=2, workers=6)
    dec = R.decide(_done(res / "renamed", topk_cfg), lambda: R.planned_config(_argv(wide, res)))
    assert "batch_multiple: found 1, planned 2" in dec.why and "workers: found 4, planned 6" in dec.why


def test_run_time_fields_name_real_entries_and_say_why(configs):
    every = set()
    for _, _, _, cfg in configs.values():
        every |= {p for p, _ in _leaves(cfg)} | set(cfg)
        every |= {".".join(keys[:n]) for _, keys in _leaves(cfg) for n in range(1, len(keys))}
    later = {"launcher", "deploy"}  # set after the resolution: by the command, by the Fabric launcher
    if not any(cfg["testbed"] == "emulated" for *_, cfg in configs.values()):
        later |= {"emulated.prefix", "emulated.subnet", "emulated.hosts"}  # no namespaces here: every run falls back
    for path, why in R.RUN_TIME_FIELDS.items():
        assert len(why.split()) >= 5, path  # each says why
        assert path in every or path in later, path


def test_the_config_yaml_run_py_writes_is_the_planned_one(tmp_path):
    """run.py's own writer (the typed RunConfig of the resolved flags, the launcher's entry, prepare_run_dir):
    the folder counts as the planned run; with one ScaDLES option changed in the plan it does not."""
    from rog.experiment.config import resolve
    from rog.experiment.rundir import prepare_run_dir

    for spec in (_spec("compare", "cmp-rog4-topk"), _spec("compare", "cmp-adsp"), _spec("compare", "cmp-scadles")):
        argv = _argv(spec, tmp_path)
        run_dir = prepare_run_dir(resolve(cli.parse_args(argv)).replace(launcher="local"), str(tmp_path), False)
        (run_dir / "DONE").write_text("{}\n")
        assert run_dir.name == I.run_id(spec)
        assert R.decide(run_dir, lambda: R.planned_config(argv)).action == "skip", spec.tag
    dec = R.decide(tmp_path / I.run_id(spec), lambda: R.planned_config(argv + ["--stream-buffer", "persistence"]))
    assert dec.action == "rerun" and dec.why.endswith("(stream.buffer: found 'truncate', planned 'persistence')")


def test_a_complete_run_whose_plan_cannot_resolve_stops_the_plan_with_one_line(tmp_path, capsys, monkeypatch):
    """run.py refusing a planned run's flags is an error naming the run, not a silent rerun or skip; a plan of
    runs not started yet resolves nothing (nothing to compare)."""
    from rog.errors import ConfigError
    from rog.experiment import driver

    with pytest.raises(ConfigError, match="run.py refuses the flags --workers 0"):
        R.planned_config(["--workers", "0"])
    assert "--workers must be >= 1" in capsys.readouterr().err  # argparse's own line
    res = tmp_path / "r"
    argv = ["threshold", "--dry-run", "--result-dir", str(res), "--figure-dir", str(tmp_path / "f"),
            "--cache-dir", str(CACHE), "--allow-loopback"]
    assert driver.main(argv) == 0 and "5 distinct runs, 5 to run" in capsys.readouterr().out
    rid = I.run_id(I.ITEMS["threshold"].runs[0], "cruda")
    _done(res / rid, {"library": "BSP"})  # complete, but the CRUDA data it was made with is gone: run.py refuses it
    monkeypatch.setenv("ROG_DATA_DIR", str(tmp_path / "no-data"))
    assert driver.main(argv + ["--workload", "cruda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"run_all.sh: error: {rid}: --workload cruda: "), err


@pytest.mark.slow
def test_a_real_loopback_run_is_skipped_and_a_changed_flag_reruns_it(tmp_path):
    """A real run.py run (loopback, 2 workers, a 3 s budget) of a planned run's arguments: its config.yaml is the
    planned one; with one flag changed the plan reruns it and names that field alone."""
    spec = I.RunSpec("ROG", 4, "artifact", workers=2)
    prof = replace(PROF, checkpoint_every_s=0.0, extra=("--iterations", "6"))
    argv = I.run_args(spec, prof, 3.0, tmp_path, "resume-test") + ["--cache-dir", str(CACHE), "--testbed", "loopback"]
    env = dict(os.environ, ROG_NO_TENSORBOARD="1")
    env.pop("ROG_SECRET", None)  # the launcher makes its own
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), *argv], capture_output=True, text=True,
                       env=env, cwd=str(ROOT), timeout=300)
    run_dir = tmp_path / I.run_id(spec)
    assert r.returncode == 0 and (run_dir / "DONE").exists(), r.stderr[-2000:]
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert recorded["launcher"] == "local" and recorded["testbed"] == "loopback"  # run-time entries it added
    dec = R.decide(run_dir, lambda: R.planned_config(argv))
    assert dec.action == "skip", dec.why
    dec = R.decide(run_dir, lambda: R.planned_config(argv + ["--prefix-order", "importance"]))
    assert dec.action == "rerun" and dec.aside_as == "stale"
    assert dec.why == ("complete but with another config (policy_options.prefix_order: found 'artifact', "
                       "planned 'importance')")
    dec = R.decide(run_dir, lambda: R.planned_config(argv + ["--chunk-share", "0.05"]))
    assert dec.action == "rerun" and "chunk_share: found 0.030023718737802865, planned 0.05" in dec.why
