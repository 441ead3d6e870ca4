"""One shape for every kind of mechanism (rog.registry.Registry): policies, schedules, codecs, workloads,
power sources and evaluation items.  For each kind a throwaway entry is registered and found where a
user would find it (run.py's flags, the run config, the items' plan, the codec round trip, the power
lookup), then removed again by the ``register`` fixture, also when the test fails.  Unknown names and
names registered twice are errors naming the kind, the name and the known names.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses

import numpy as np
import pytest

from rog.chunks import ChunkSpec
from rog.codecs.codec_registry import CODEC_BY_ID, CODECS, make_codec
from rog.codecs.compression import RawCodec
from rog.errors import ConfigError
from rog.experiment import cli, driver
from rog.experiment import config as runcfg
from rog.experiment import schedule_options as SCH
from rog.experiment import items as I
from rog.policies.registry import POLICIES, make_policy, segmented_systems, system_names
from rog.policies.ssp import SSP
from rog.power.energy import PowerSamples
from rog.power.sources import (POWER_SOURCES, PowerSource, detect_power_source, is_sensor, open_power_source,
                               probe_power_sources)
from rog.options import option
from rog.registry import DuplicateEntryError, RefusedEntryError, Registry, UnknownEntryError
from rog.rows import RowPartition
from rog.schedules import REPLAN, SCHEDULES, Schedule
from rog.schedules import sequential
from rog.schedules.planner import Profile
from rog.testbed import power_command
from rog.workloads.registry import WORKLOADS, WorkloadConfigError, WorkloadDefaults, make_workload, num_classes, \
    resolve_workload

# every registry of the toolkit, by kind (the name its unknown-name error uses) and one name it holds
REGISTRIES = [
    pytest.param(POLICIES, "policy", "BSP", id="policy"),
    pytest.param(SCHEDULES, "schedule", "dynacomm", id="schedule"),
    pytest.param(CODECS, "compression", "sign", id="codec"),
    pytest.param(WORKLOADS, "workload", "quick", id="workload"),
    pytest.param(POWER_SOURCES, "power source", "rapl", id="power-source"),
    pytest.param(I.ITEMS, "item", "outdoors", id="item"),
    pytest.param(I.MODULE_ITEMS, "module item", "scadles", id="module-item"),
]


@contextlib.contextmanager
def registering():
    """``add(registry, name, entry)`` inside the block; every entry added is removed at its end, pass or fail."""
    added: list[tuple[Registry, str]] = []

    def add(registry: Registry, name: str, entry):
        registry.register(name, entry)
        added.append((registry, name))
        return entry

    try:
        yield add
    finally:
        for registry, name in reversed(added):
            if name in registry:
                registry.unregister(name)


@pytest.fixture
def register():
    """``register(registry, name, entry)`` for one test; every entry added is removed afterwards, pass or fail."""
    with registering() as add:
        yield add


def _action(parser, flag: str):
    return next(a for a in parser._actions if flag in a.option_strings)


# ---------------------------------------------------------------------------------------------
# the shape


def test_registry_shape_by_hand():
    r = Registry("gadget", [("b", 2), ("a", 1)])
    assert r.names() == ("b", "a") and tuple(r) == ("b", "a") and len(r) == 2  # registration order
    assert r["a"] == 1 and r.lookup("b") == 2 and r == {"a": 1, "b": 2} and "a" in r and "c" not in r
    assert r.get("c") is None and r.get("c", 5) == 5 and [] not in r  # an unhashable name is simply absent
    with pytest.raises(UnknownEntryError) as e:
        r["c"]
    assert str(e.value) == "unknown gadget 'c'; choose one of b, a"
    assert isinstance(e.value, KeyError) and isinstance(e.value, ValueError)
    with pytest.raises(DuplicateEntryError, match="gadget 'a' is registered twice"):
        r.register("a", 3)
    assert r["a"] == 1  # the first entry stays
    with pytest.raises(RefusedEntryError, match="non-empty string name"):
        r.register("", 0)
    view = r.view("real")
    r.register("c", 3)
    assert dict(view) == {"b": 2, "a": 1, "c": 3}  # the view follows the registry
    assert r.unregister("c") == 3 and "c" not in view
    with pytest.raises(UnknownEntryError, match="unknown gadget 'c'"):
        r.unregister("c")


def test_a_check_refuses_an_entry_and_nothing_is_added():
    def positive(name, entry, registry):
        if entry <= 0:
            raise RefusedEntryError(f"gadget {name!r} must be positive")

    r = Registry("gadget", [("one", 1)], check=positive)
    with pytest.raises(RefusedEntryError, match="gadget 'zero' must be positive"):
        r.register("zero", 0)
    assert r.names() == ("one",)


@pytest.mark.parametrize("registry, kind, known", REGISTRIES)
def test_every_kind_is_one_registry_with_clear_errors(registry, kind, known):
    assert isinstance(registry, Registry) and registry.kind == kind and known in registry
    with pytest.raises(UnknownEntryError) as e:
        registry["no-such-thing"]
    assert str(e.value) == f"unknown {kind} 'no-such-thing'; choose one of {', '.join(registry.names())}"
    with pytest.raises(DuplicateEntryError, match=f"{kind} '{known}' is registered twice"):
        registry.register(known, registry[known])


def test_unknown_names_through_the_public_functions():
    with pytest.raises(ValueError, match="unknown policy 'nope'; choose one of BSP, SSP, FLOWN, ROG"):
        make_policy("nope")
    with pytest.raises(ValueError, match="unknown compression 'zip'; choose one of sign, none, topk"):
        make_codec("zip")
    with pytest.raises(WorkloadConfigError, match="unknown workload 'mnist'; choose one of quick, cruda"):
        resolve_workload("mnist")
    with pytest.raises(WorkloadConfigError, match="config.yaml: unknown workload 'mnist'"):
        make_workload({"workload": "mnist", "seed": 0, "workers": 2})
    with pytest.raises(ValueError, match="unknown power source 'gps'; choose one of jtop, rapl, nvml, model"):
        open_power_source("gps")
    with pytest.raises(ValueError, match="unknown power source 'gps'"):
        probe_power_sources(["gps"])
    with pytest.raises(ValueError, match="unknown item"):
        I.items_for(["no_such_item"])


# ---------------------------------------------------------------------------------------------
# one throwaway entry per kind, found where a user looks


class ToyPolicy(SSP):
    """A throwaway system: SSP with default threshold 9."""

    name = "TOYREG"
    default_threshold = 9


def test_policy_is_a_library_choice_and_resolves(register):
    register(POLICIES, "TOYREG", ToyPolicy)
    assert "TOYREG" in _action(cli.build_parser(), "--library").choices and "TOYREG" in system_names()
    cfg = runcfg.resolve_config(cli.parse_args(["--library", "toyreg", "--testbed", "loopback", "-c", "none"]))
    assert (cfg["library"], cfg["threshold"], cfg["run_id"]) == ("TOYREG", 9, "TOYREG9-none-b1-w4-seed0")
    assert isinstance(make_policy("toyreg"), ToyPolicy)
    # --schedule asks the policy (Policy.segmented_schedules, inherited from SSP here), not the system's name
    assert segmented_systems() == ("BSP", "SSP", "TOYREG")
    ns = dict(schedule="dynacomm", schedule_epoch_iterations=None, batchsize=1)
    SCH.check(argparse.Namespace(library="TOYREG", **ns), None, "cpu")
    with pytest.raises(ConfigError, match="add --library BSP or --library SSP or --library TOYREG"):
        SCH.check(argparse.Namespace(library="FLOWN", **ns), None, "cpu")


def test_schedule_is_a_schedule_choice(register):
    register(SCHEDULES, "toy-sched", Schedule(sequential.plan, "epoch"))
    assert "toy-sched" in _action(cli.build_parser(), "--schedule").choices
    assert cli.parse_args(["--schedule", "toy-sched", "--library", "BSP"]).schedule == "toy-sched"
    assert REPLAN["toy-sched"] == "epoch"
    profile = Profile(np.ones(3), np.ones(3), np.ones(3), np.ones(3), 0.0)
    mine, ref = SCHEDULES["toy-sched"](profile), sequential.plan(profile)
    assert (mine.fwd_segments, mine.bwd_segments) == (ref.fwd_segments, ref.bwd_segments)
    with pytest.raises(ValueError, match="re-plans never"):
        Schedule(sequential.plan, "hourly")


@dataclasses.dataclass(frozen=True)
class ToyScheduleOptions:
    """A throwaway schedule's one option, checked here."""

    jitter_s: float = option(0.0, "toy jitter per segment in seconds")

    def __post_init__(self) -> None:
        if self.jitter_s < 0:
            raise ConfigError(f"--schedule-jitter-s must be >= 0, got {self.jitter_s:g}")


def test_a_schedule_declares_its_options_beside_itself(register):
    """Its flag comes from its dataclass (help under the schedule group), the dataclass checks it at parse time,
    and config.yaml's schedule entry records it beside the name and the other schedules' options."""
    register(SCHEDULES, "toy-opts", Schedule(sequential.plan, None, ToyScheduleOptions))
    action = _action(cli.build_parser(), "--schedule-jitter-s")
    assert action.default == 0.0 and action.help == "toy-opts: toy jitter per segment in seconds (default 0)"
    assert "ibatch, dynacomm: " in _action(cli.build_parser(), "--schedule-epoch-iterations").help  # shared: once
    a = cli.parse_args(["--schedule", "toy-opts", "--library", "BSP", "--schedule-jitter-s", "0.25"])
    assert SCH.resolve(a, None, "cpu") == dict(name="toy-opts", epoch_iterations=None, jitter_s=0.25)
    with pytest.raises(SystemExit):
        cli.parse_args(["--schedule-jitter-s", "-1"])


class ToyCodec(RawCodec):
    """Raw float32 under another name and wire id."""

    codec_id = 9
    name = "toy"


def test_codec_is_a_compression_choice_and_round_trips(register):
    register(CODECS, "toy", ToyCodec)
    assert "toy" in _action(cli.build_parser(), "--compression").choices
    assert CODEC_BY_ID[9] is ToyCodec and 9 in CODEC_BY_ID
    codec = make_codec("toy")
    part = RowPartition.from_shapes([("w", (4, 3)), ("b", (5,))])
    acc = np.arange(part.n_elements, dtype=np.float32) - 7.5
    out = part.new_flat()
    chunk = ChunkSpec(np.array([[0, 1], [1, 1]]))  # one row per tensor
    enc = codec.encode(part, acc, codec.tensor_scales(part, acc), chunk)
    codec.decode_into(part, enc, (out,))
    assert np.array_equal(out, np.arange(part.n_elements, dtype=np.float32) - 7.5)


def test_codec_registry_refuses_a_taken_wire_id_and_a_non_codec():
    class Clash(RawCodec):
        codec_id, name = 1, "clash"  # the 1-bit codec's wire id

    with pytest.raises(DuplicateEntryError, match="wire codec id 1 is 'sign'"):
        CODECS.register("clash", Clash)
    with pytest.raises(RefusedEntryError, match="not a rog.codecs.compression.Codec subclass"):
        CODECS.register("clash", object)
    assert "clash" not in CODECS and CODEC_BY_ID[1] is CODECS["sign"]


def test_workload_is_a_workload_choice_and_is_built(register):
    built = []

    def resolve(d, **flags):
        return dict(workload="toyload", model=d.model, base_batch=d.base_batch, default_lr=d.lr)

    def build(spec):  # a WorkloadSpec: the config's workload entries, typed
        built.append((spec.seed, spec.workers))
        return "toy workload object"

    register(WORKLOADS, "toyload", WorkloadDefaults(model="convmlp_quick", num_classes=7, lr=0.25, base_batch=8,
                                                    profile="quick-cpu", resolve=resolve, build=build))
    assert cli.parse_args(["--workload", "toyload"]).workload == "toyload"  # run.py's choices are the registry
    assert resolve_workload("toyload") == dict(workload="toyload", model="convmlp_quick", base_batch=8, default_lr=0.25)
    assert num_classes("toyload") == 7
    assert make_workload({"workload": "toyload", "seed": 3, "workers": 2}) == "toy workload object"
    assert built == [(3, 2)]


def test_item_is_in_the_run_items_plan(register, tmp_path, capsys):
    register(I.ITEMS, "toy_item", I.Item("toy_item", (I.RunSpec("SSP", 11), I.RunSpec("BSP")), "a throwaway item"))
    rc = driver.main(["toy_item", "--dry-run", "--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f")])
    out = capsys.readouterr().out
    assert rc == 0 and not (tmp_path / "r").exists()
    assert "2 distinct runs, 2 to run" in out and "SSP11-outdoors-artifact-b1-w4-seed0" in out
    with pytest.raises(RefusedEntryError, match="must be an Item named 'other'"):
        I.ITEMS.register("other", I.ITEMS["toy_item"])


def test_module_item_is_planned_and_a_missing_module_is_refused(register, tmp_path, capsys, monkeypatch):
    register(I.MODULE_ITEMS, "toy_module", "rog.experiment.module_item")
    calls = []
    monkeypatch.setattr(driver.subprocess, "call", lambda argv, **kw: calls.append(argv) or 0)
    rc = driver.main(["toy_module", "--dry-run", "--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f")])
    assert rc == 0 and "item toy_module: python -m rog.experiment.module_item (its own steps)" in capsys.readouterr().out
    assert [c[1:3] for c in calls] == [["-m", "rog.experiment.module_item"]] and "--dry-run" in calls[0]
    with pytest.raises(RefusedEntryError, match="module 'rog.experiment.no_such_item' is not in this tree"):
        I.MODULE_ITEMS.register("ghost", "rog.experiment.no_such_item")
    with pytest.raises(RefusedEntryError, match="already an item"):
        I.MODULE_ITEMS.register("outdoors", "rog.experiment.module_item")
    assert "ghost" not in I.MODULE_ITEMS


class ToySensor(PowerSource):
    """A live sensor that always reads 5 W."""

    name = "toysensor"

    def read_w(self) -> float:
        return 5.0


def test_power_source_is_found_by_its_lookup(register, tmp_path):
    register(POWER_SOURCES, "toysensor", lambda sysfs_root, jetson_root, interval_s: ToySensor())
    with open_power_source("toysensor") as src:
        assert src.read_w() == 5.0
    assert probe_power_sources(["toysensor"]) == {"toysensor": None}
    assert detect_power_source(["toysensor", "model"]) == "toysensor" and is_sensor("toysensor")
    assert not is_sensor("model")
    assert power_command.parse_args(["--out", str(tmp_path / "p.csv"), "--source", "toysensor"]).source == "toysensor"
    s = PowerSamples(np.array([0.0, 1.0]), np.array([5.0, 5.0]), "toysensor")  # an energy report accepts its label
    assert s.source == "toysensor"


TOY_NAMES = {"policy": "TOYREG", "schedule": "toy-sched", "codec": "toy", "workload": "toyload",
             "power-source": "toysensor", "item": "toy_item", "module-item": "toy_module"}


def test_throwaway_entries_are_removed_also_when_the_test_fails():
    """The ``register`` fixture's removal, on its own (the leak check below holds vacuously when no other test
    of this file ran first): a throwaway entry in every registry, found there, then gone after a failure."""
    toys = {"policy": ToyPolicy, "schedule": Schedule(sequential.plan, "epoch"), "codec": ToyCodec,
            "workload": WorkloadDefaults(model="convmlp_quick", num_classes=7, lr=0.25, base_batch=8, profile="quick-cpu",
                                         resolve=dict, build=lambda spec: None),
            "power-source": lambda sysfs_root, jetson_root, interval_s: ToySensor(),
            "item": I.Item("toy_item", (I.RunSpec("BSP"),), "a throwaway item"),
            "module-item": "rog.experiment.module_item"}
    registries = {p.id: p.values[0] for p in REGISTRIES}
    assert sorted(registries) == sorted(toys) == sorted(TOY_NAMES)
    with pytest.raises(RuntimeError, match="the test failed"):
        with registering() as add:
            for kind, entry in toys.items():
                add(registries[kind], TOY_NAMES[kind], entry)
                assert registries[kind][TOY_NAMES[kind]] is entry
            raise RuntimeError("the test failed")
    assert [kind for kind, name in TOY_NAMES.items() if name in registries[kind]] == []


def test_throwaway_entries_did_not_leak():
    assert "TOYREG" not in POLICIES and "toy-sched" not in SCHEDULES and "toy" not in CODECS
    assert "toyload" not in WORKLOADS and "toysensor" not in POWER_SOURCES
    assert "toy_item" not in I.ITEMS and "toy_module" not in I.MODULE_ITEMS


def test_architecture_doc_lists_every_registry_and_its_recipes_name_these_tests():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"tests/test_registries\.py::(\w+)", doc))
    assert named and sorted(n for n in named if not callable(globals().get(n))) == []
    table = doc[doc.index("## Registries"):doc.index("## Recipes")]
    for name in ("POLICIES", "SCHEDULES", "CODECS", "WORKLOADS", "POWER_SOURCES", "ITEMS", "MODULE_ITEMS"):
        assert f"`{name}`" in table, name


def test_every_workload_builds_its_checkpoint_test_set_through_the_registry():
    """scripts/test_checkpoints.py takes its workload choices, evaluation batch and test-set builder from the
    workload registry: no list of its own to forget when a workload is added."""
    from rog.checkpoint_accuracy import parse_args
    from rog.workloads.registry import WORKLOADS

    for name in WORKLOADS:
        d = WORKLOADS[name]
        assert callable(d.build_eval) and d.eval_batch >= 1, name
        assert parse_args(["some-run", "--workload", name]).workload == name
    with pytest.raises(SystemExit):
        parse_args(["some-run", "--workload", "no-such-workload"])
