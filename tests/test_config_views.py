"""The small typed views of configuration dicts read outside the config module: a workload's entries of
``config.yaml`` (:class:`rog.workloads.spec.WorkloadSpec`), the live inference processes' JSON
(:class:`rog.inference.live_config.LiveConfig`) and ScaDLES's Top-k reading
(:class:`rog.papers.scadles.topk.RunEntries`): each reads a file of any age by attribute and names the file
and field of a missing or mistyped entry."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import yaml

from rog.errors import ConfigError
from rog.inference.live_config import LiveConfig
from rog.papers.scadles.topk import RunEntries, run_summary
from rog.workloads.spec import WorkloadSpec


def test_workload_spec_reads_a_run_config_and_ignores_the_rest(run_config):
    cfg = run_config().to_dict()
    spec = WorkloadSpec.from_dict(cfg)
    assert (spec.workload, spec.model, spec.seed, spec.workers) == (cfg["workload"], cfg["model"], cfg["seed"],
                                                                      cfg["workers"])
    assert spec.cache_dir == cfg["cache_dir"] and spec.data_dir is None and spec.random_init is False
    # an older quick run's entries, a Path as the launcher passes it, the defaults of an absent entry
    old = WorkloadSpec.from_dict({"seed": 2, "workers": 3, "noise": "fog", "split": "iid", "alpha": 1,
                                  "cache_dir": Path("/tmp/c"), "library": "ROG"})
    assert (old.workload, old.noise, old.split, old.alpha, old.cache_dir) == ("quick", "fog", "iid", 1.0, "/tmp/c")


@pytest.mark.parametrize("d, field", [
    ({"workers": 2}, "seed: missing"),
    ({"seed": "3"}, "seed: expected an integer"),
    ({"seed": True}, "seed: expected an integer"),
    ({"seed": 1, "workers": 2.5}, "workers: expected an integer"),
    ({"seed": 1, "image_size": None, "split": 4}, "split: expected a string"),
    ({"seed": 1, "random_init": "yes"}, "random_init: expected true/false"),
    ({"seed": 1, "data_dir": 7}, "data_dir: expected a path"),
])
def test_workload_spec_names_the_file_and_field(d, field):
    with pytest.raises(ConfigError, match=f"^run/config.yaml: {field}"):
        WorkloadSpec.from_dict(d, source="run/config.yaml")


def test_make_workload_needs_workers_to_train():
    from rog.workloads.registry import make_workload

    with pytest.raises(ConfigError, match="workers: missing"):
        make_workload({"seed": 0})


def _live(**over) -> dict:
    d = {"model": "mobilenet", "seed": 3, "port": 9100, "server": "10.0.0.1", "times": {"robot_s": [0.1]},
         "tables": {"intra-dp": [{"rate_mbit": 5.0}]}, "trace": None, "replay": {"loop": True, "duration_s": 60.0},
         "estimate": "oracle", "records": "/tmp/r.jsonl", "tcp_cc": None, "period_s": 0.5}
    d.update(over)
    return d


def test_live_config_by_attribute_and_defaults(tmp_path):
    c = LiveConfig.from_dict(_live(), source="config-robot.json").for_role("robot")
    assert (c.model, c.seed, c.port, c.server, c.estimate, c.period_s) == ("mobilenet", 3, 9100, "10.0.0.1",
                                                                           "oracle", 0.5)
    assert c.trace is None and c.tcp_cc is None and c.fixed_mbit is None and c.replay["duration_s"] == 60.0
    assert c.tables == {"intra-dp": [{"rate_mbit": 5.0}]}
    bare = LiveConfig.from_dict({"model": "m", "times": {}})  # what the cost-model bound needs, nothing more
    assert (bare.seed, bare.tables, bare.replay, bare.estimate, bare.period_s) == (0, {}, {}, "passive", 0.0)
    with pytest.raises(ConfigError, match="^f.json: server: missing"):
        LiveConfig.from_dict({"model": "m", "times": {}, "port": 1}).for_role("robot", source="f.json")
    with pytest.raises(ConfigError, match="port: missing"):
        bare.for_role("server")


@pytest.mark.parametrize("over, field", [
    ({"model": None}, "model: expected a string"),
    ({"port": "9100"}, "port: expected an int"),
    ({"times": [1]}, "times: expected a mapping"),
    ({"tables": {"intra-dp": [1]}}, "tables.intra-dp: expected a list of table rows"),
    ({"period_s": True}, "period_s: expected a number"),
])
def test_live_config_names_the_field(over, field):
    d = _live(**over)
    if over.get("model", 1) is None:
        del d["model"]
        field = "model: missing"
    with pytest.raises(ConfigError, match=f"^cfg.json: {field}"):
        LiveConfig.from_dict(d, source="cfg.json")


def test_live_config_round_trips_the_launchers_file(tmp_path):
    """LiveSession._config writes the dict the live processes read back as a LiveConfig."""
    from rog.inference.runner import PORT, LiveSession

    me = types.SimpleNamespace(
        prep=types.SimpleNamespace(model="mobilenet", times=types.SimpleNamespace(to_dict=lambda: {"robot_s": [0.2]}),
                                   tables={"intra-dp": [types.SimpleNamespace(to_dict=lambda: {"rate_mbit": 8.0})]}),
        seed=5, net=types.SimpleNamespace(testbed=types.SimpleNamespace(ps_address=lambda k: "10.9.0.1")),
        trace=tmp_path / "t.csv", replay={"loop": True, "duration_s": 30.0}, estimate="passive",
        run_dir=tmp_path, tcp_cc="bbr", period_s=0.25)
    path = LiveSession._config(me, "robot")
    c = LiveConfig.from_dict(json.loads(path.read_text()), source=str(path)).for_role("robot")
    assert (c.model, c.seed, c.port, c.server, c.times) == ("mobilenet", 5, PORT, "10.9.0.1", {"robot_s": [0.2]})
    assert (c.trace, c.tcp_cc, c.period_s, c.records) == (str(tmp_path / "t.csv"), "bbr", 0.25,
                                                          str(tmp_path / "records.jsonl"))
    assert c.tables == {"intra-dp": [{"rate_mbit": 8.0}]} and c.replay == {"loop": True, "duration_s": 30.0}


def test_scadles_run_entries_defaults_and_errors(tmp_path):
    e = RunEntries.from_dict({"workers": 2, "partition": None, "library": "BSP"}, source="c.yaml")
    assert (e.workers, e.workload, e.model, e.partition, e.inject, e.topk) == (2, "quick", "convmlp_quick",
                                                                               "label_sorted", None, None)
    with pytest.raises(ConfigError, match="^c.yaml: workers: expected an integer"):
        RunEntries.from_dict({"partition": "iid"}, source="c.yaml")
    with pytest.raises(ConfigError, match="^c.yaml: compression_options: expected a mapping"):  # topk: its older name
        RunEntries.from_dict({"workers": 1, "topk": 0.1}, source="c.yaml")
    with pytest.raises(ConfigError, match="^c.yaml: compression_options.ratio: expected a number"):
        e.topk_ratio("c.yaml")
    assert RunEntries.from_dict({"workers": 1, "topk": {"ratio": 0.25}}, source="c.yaml").topk_ratio("c") == 0.25


def test_scadles_run_summary_names_a_config_without_workers(tmp_path):
    run = tmp_path / "BSP-x"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"library": "BSP", "partition": "iid"}))
    with pytest.raises(ConfigError, match=f"{run / 'config.yaml'}: workers"):
        run_summary(run)
