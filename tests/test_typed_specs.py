"""Items plan typed specs (rog.experiment.items.RunSpec's ``settings`` and ``options``, rog.options.option_values):
a mechanism's options are checked against its dataclass when the item is built, and what run.py parses from the
rendered flags is, value for value, what the spec holds, for every planned run of every item."""

from __future__ import annotations

import dataclasses
from dataclasses import fields, replace

import pytest

from rog.codecs.codecs_topk import TopKCodec
from rog.errors import ConfigError
from rog.experiment import cli
from rog.experiment import items as I
from rog.options import flag_text, option_values, options_from
from rog.policies.adsp import ADSP
from rog.streams import options as streams


def test_an_option_is_checked_against_its_dataclass_when_the_item_is_built():
    with pytest.raises(ValueError, match=r"rog\.policies\.adsp\.Options has no option 'rate' \(its options: gamma_s, "):
        option_values(ADSP, rate=4)  # the flag is --adsp-rate; the field is fixed_rate
    with pytest.raises(ValueError, match=r"Options\.fixed_rate takes int or None, got 3\.5"):
        option_values(ADSP, fixed_rate=3.5)
    with pytest.raises(ValueError, match=r"Options\.gate takes bool, got 1"):
        option_values(TopKCodec, gate=1)
    with pytest.raises(ValueError, match=r"Options\.ratio takes float, got '0\.1'"):
        option_values(TopKCodec, ratio="0.1")
    with pytest.raises(ConfigError, match=r"--adsp-rate \(fixed_rate\) must be an integer >= 1"):
        option_values(ADSP, fixed_rate=0)  # the dataclass's own check, the other options at their defaults
    with pytest.raises(ConfigError, match=r"--adsp-gamma-s \(gamma_s\) must be a positive number of seconds"):
        option_values(ADSP, time_scale=0.1, gamma_s=-1.0)


def test_option_flags_use_each_fields_flag_and_a_text_that_parses_back_exactly():
    v = option_values(ADSP, time_scale=0.1, fixed_rate=4, floor_s=1.0)
    assert v.argv() == ["--adsp-time-scale", "0.1", "--adsp-rate", "4", "--adsp-floor-s", "1"]
    assert option_values(TopKCodec, gate=False, delta=1 / 3).argv() == ["--topk-gate", "off", "--topk-gate-delta",
                                                                      repr(1 / 3)]  # %g would cut it to 0.333333
    assert v.with_values(fixed_rate=8).argv()[3] == "8" and v.get("fixed_rate") == 4 and v.get("mode") is None
    with pytest.raises(ConfigError):
        v.with_values(fixed_rate=0)
    for x in (0.1, 0.28, 1.0, 100.0, 1 / 3, 1e-7, 123456789.0):
        assert float(flag_text(x)) == x
    assert flag_text((1.0, 1.0, 3.0)) == "1,1,3" and flag_text(True) == "on"


def test_every_settings_field_is_the_run_py_flag_of_its_name():
    p = cli.build_parser()
    for f in fields(I.RunSettings):
        act = p._option_string_actions.get("--" + f.name.replace("_", "-"))
        assert act is not None and act.dest == f.name, f.name
    assert I.RunSpec.Settings is I.RunSettings and I.RunSpec("BSP").flags() == []


def _parsed_values(spec: I.RunSpec):
    """run.py's parse of the run's flags, read back per settings field and per mechanism's options."""
    a = cli.parse_args(I.run_args(spec, I.PROFILES["quick"], 60, "/nonexistent", "x"))
    got = {f.name: getattr(a, f.name) for f in fields(I.RunSettings) if getattr(spec.settings, f.name) is not None}
    if "compute_ratios" in got:
        got["compute_ratios"] = tuple(got["compute_ratios"])
    return got, [options_from(a, o.options, o.prefix) for o in spec.options]


def test_run_py_parses_back_every_planned_runs_settings_and_options():
    checked = 0
    for name, item in I.ITEMS.items():
        for spec in item.runs:
            got, opts = _parsed_values(spec)
            assert got == {k: v for k, v in dataclasses.asdict(spec.settings).items() if v is not None}, spec
            for o, parsed in zip(spec.options, opts):
                expected = option_values((o.options, o.prefix), **dict(o.values))  # the same, checked again
                scale = dict(expected.values).get("time_scale", 1.0) if o.prefix == "adsp" else 1.0
                for field_name, value in o.values:
                    f = next(x for x in fields(o.options) if x.name == field_name)
                    want = value * scale if f.metadata.get("scaled") else value
                    assert getattr(parsed, field_name) == want, (spec, field_name)
            checked += bool(spec.options) or spec.settings != I.RunSettings()
    assert checked >= 100  # the adsp and compare items' runs


def test_the_compare_items_scadles_entry_is_typed():
    sc = next(r for r in I.ITEMS["compare"].runs if r.tag == "cmp-scadles")
    assert sc.settings == I.RunSettings(pacing="layer", compression="topk")
    assert sc.option("topk", "delta") == 0.3 and sc.option("stream", "set") == "S1"
    assert sc.option("stream", "weighted_aggregation") is True and sc.option("adsp", "time_scale") is None
    assert [o.options for o in sc.options] == [streams.Options, TopKCodec.options]
    moved = replace(sc, options=tuple(o.with_values(delta=0.4) if o.prefix == "topk" else o for o in sc.options))
    assert I.run_id(moved) == I.run_id(sc) and "0.4" in moved.flags()
