"""The typed run configuration (rog.experiment.run_config): a configuration resolved from real run.py
flags round-trips through RunConfig and config.yaml exactly (same keys, values and order), its
sections read what the flags set, and a bad entry is one ConfigError line naming the file and the
field, which run.py turns into one ``run.py: error:`` line and exit status 2."""

from __future__ import annotations

import copy
import dataclasses
import typing

import pytest
import yaml

from rog.errors import ConfigError
from rog.experiment import cli, rundir
from rog.experiment.config import resolve, resolve_config
from rog.experiment.run_config import KEY_ORDER, RunConfig
from rog.workloads.registry import WORKLOADS

SYSTEMS = {  # flags -> entries the sections must show (checked against the flags, not the resolver)
    "rog": (["--library", "ROG", "--threshold", "4", "-c", "outdoors", "--budget-rule", "mandatory"],
            lambda c: (c.sync.library, c.sync.threshold, c.sync.options["budget_rule"], c.links.control) == ("ROG", 4, "mandatory", "outdoors")),
    "bsp-dynacomm": (["--library", "BSP", "-c", "outdoors", "--schedule", "dynacomm", "--pacing", "layer"],
                     lambda c: (c.sync.library, c.schedule.plan.name, c.schedule.pacing, c.sync.options) == ("BSP", "dynacomm", "layer", None)),
    "scadles": (["--stream-rate", "100", "--compression", "topk", "--topk-ratio", "0.05"],
                lambda c: (c.compression.codec, c.compression.options["ratio"], c.stream["rates"]) == ("topk", 0.05, [100.0] * 4)),
    "inject": (["--compression", "topk", "--inject-alpha", "0.25", "--inject-beta", "0.5"],
               lambda c: (c.inject.alpha, c.inject.beta, c.stream) == (0.25, 0.5, None)),
    "adsp": (["--library", "ADSP", "--workers", "3"],
             lambda c: (c.sync.library, c.testbed.workers, c.sync.options["gamma_s"]) == ("ADSP", 3, 60.0)),
    "ddp": (["--library", "DDP", "--seed", "5"],
            lambda c: (c.sync.library, c.workload.seed, c.output.run_id) == ("DDP", 5, "DDP-none-b1-w4-seed5")),
}


def _resolved(tmp, name: str) -> dict:
    return resolve_config(cli.parse_args(["--testbed", "loopback", *SYSTEMS[name][0], "--result-dir", str(tmp)]))


@pytest.fixture(scope="module")
def rog_cfg(tmp_path_factory):
    return _resolved(tmp_path_factory.mktemp("runcfg"), "rog")


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_a_resolved_configuration_round_trips_exactly(tmp_path, name):
    tmp = tmp_path
    d = _resolved(tmp, name)
    cfg = RunConfig.from_dict(d)
    back = cfg.to_dict()
    assert back == d and list(back) == list(d)  # same keys, values and order
    assert yaml.safe_dump(back, sort_keys=False) == yaml.safe_dump(d, sort_keys=False)
    assert SYSTEMS[name][1](cfg)  # the sections hold what the flags asked for
    # through the run folder: config.yaml is the dict, read back typed and equal
    run_dir = rundir.prepare_run_dir(cfg, str(tmp / name), overwrite=False)
    assert yaml.safe_load((run_dir / rundir.CONFIG_FILE).read_text()) == d
    again = rundir.read_config(run_dir)
    assert isinstance(again, RunConfig) and again.to_dict() == d and again == cfg


def test_resolve_gives_the_typed_configuration_and_replace_checks_again(tmp_path):
    cfg = resolve(cli.parse_args(["--testbed", "loopback", "--workers", "2", "--result-dir", str(tmp_path)]))
    assert isinstance(cfg, RunConfig) and cfg.testbed.workers == 2 and cfg.testbed.launcher is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.testbed = None
    fab = cfg.replace(launcher="fabric")
    assert fab.testbed.launcher == "fabric" and list(fab.to_dict())[-1] == "launcher" and "launcher" not in cfg.to_dict()
    with pytest.raises(ConfigError, match="workers: expected an integer"):
        cfg.replace(workers="2")
    # a copy out is not the configuration's own value
    cfg.to_dict()["regime"]["changed"] = "x"
    assert cfg.links.regime.get("changed") != "x"


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("edit, field, says", [
    (lambda d: d.update(wrokers=4), "wrokers", "unknown field"),
    (lambda d: d.pop("threshold"), "threshold", "missing"),
    (lambda d: d.update(workers="four"), "workers", "expected an integer, got 'four'"),
    (lambda d: d.update(cap_applied=1), "cap_applied", "expected true/false"),
    (lambda d: d["faults"].update(evict_after_s="soon"), "faults.evict_after_s", "expected a number"),
    (lambda d: d["faults"].update(reconnect_timeout_s=-1.0), "faults", "--reconnect-timeout-s must be a number of "
                                                                       "seconds >= 0, got -1"),
    (lambda d: d["checkpoint"].update(every=3), "checkpoint.every", "unknown field"),
    (lambda d: d.update(policy_options=["artifact"]), "policy_options", "expected a mapping or null"),
    (lambda d: d.update(version="two"), "version", "expected an integer"),
    (lambda d: d.update(data_dir="/data"), "data_dir", "go with workload: cruda"),
    (lambda d: d.update(launcher=None), "launcher", "leave the entry out"),
])
def test_a_bad_entry_is_one_error_naming_the_file_and_field(rog_cfg, edit, field, says):
    d = yaml.safe_load(yaml.safe_dump(rog_cfg))
    edit(d)
    with pytest.raises(ConfigError) as e:
        RunConfig.from_dict(d, source="result/x/config.yaml")
    msg = _one_line(e)
    assert msg.startswith(f"result/x/config.yaml: {field}: ") and says in msg


def test_key_order_names_every_field_once():
    """A key KEY_ORDER knows but no field holds would pass from_dict's unknown-key check and be dropped."""
    def keys(cls):
        out = []
        for f in dataclasses.fields(cls):
            if f.name == "_flat":
                continue
            if f.metadata.get("flat"):  # a workload's own entries are flat keys of config.yaml
                out += list(dict.fromkeys(c.name for _, w in WORKLOADS.items() if w.entries
                                          for c in dataclasses.fields(w.entries)))
            elif f.name in ("testbed", "links", "workload", "sync", "schedule", "compression", "device", "faults",
                            "output") and cls is RunConfig:
                out += keys(typing.get_type_hints(RunConfig)[f.name])
            else:
                out.append(f.metadata.get("key", f.name))
        return out

    assert len(KEY_ORDER) == len(set(KEY_ORDER)) and sorted(KEY_ORDER) == sorted(keys(RunConfig))


def test_run_py_turns_a_bad_config_yaml_into_one_line_and_exit_2(rog_cfg, tmp_path, capsys):
    d = dict(rog_cfg, iterations=-1.5)  # a child reads config.yaml before anything else
    (tmp_path / rundir.CONFIG_FILE).write_text(yaml.safe_dump(d, sort_keys=False))
    assert cli.main(["--child", "ps", "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"run.py: error: {tmp_path / rundir.CONFIG_FILE}: iterations: expected an integer, got -1.5"


@dataclasses.dataclass(frozen=True)
class ToyEntries:
    """A throwaway workload's own config.yaml entry."""

    toy_dir: str


def _with_entries(cfg: dict, workload: str, entries: dict) -> dict:
    """``cfg`` as a run of ``workload`` would write it: its own entries right after ``workload``."""
    out = {}
    for k, v in cfg.items():
        out[k] = workload if k == "workload" else v
        if k == "workload":
            out.update(entries)
    return out


CRUDA = dict(data_dir="/d", train_file="/d/train.h5", test_file="/d/test.h5", weights=None, random_init=True,
             split="pachinko", image_size=224, normalize="cifar100", test_limit=50)


def test_a_workload_owns_its_config_entries(rog_cfg):
    """CRUDA's flat entries are its registry entry's dataclass (no branch on its name); a throwaway workload's
    entries load the same way once registered, and one workload's entry beside another workload is refused."""
    d = _with_entries(copy.deepcopy(rog_cfg), "cruda", CRUDA)
    cfg = RunConfig.from_dict(d)
    assert isinstance(cfg.workload.entries, WORKLOADS["cruda"].entries)
    assert dataclasses.asdict(cfg.workload.entries) == CRUDA
    assert cfg.to_dict() == d and list(cfg.to_dict()) == list(d)
    assert RunConfig.from_dict(rog_cfg).workload.entries is None
    with pytest.raises(ConfigError, match=r"^config.yaml: split: missing"):
        RunConfig.from_dict({k: v for k, v in d.items() if k != "split"})
    WORKLOADS.register("toy", dataclasses.replace(WORKLOADS["quick"], entries=ToyEntries))
    try:
        toy = _with_entries(copy.deepcopy(rog_cfg), "toy", dict(toy_dir="/t"))
        assert RunConfig.from_dict(toy).workload.entries == ToyEntries("/t")
        assert list(RunConfig.from_dict(toy).to_dict()) == list(toy)
        with pytest.raises(ConfigError, match=r"^config.yaml: toy_dir: the toy entries go with workload: toy "
                                              r"\(workload is 'cruda'\)"):
            RunConfig.from_dict(dict(d, toy_dir="/t"))
    finally:
        WORKLOADS.unregister("toy")
