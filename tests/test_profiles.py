"""Device profiles: the shipped YAML files, validation messages, scaling for the quick profile."""

from __future__ import annotations

import pytest
import yaml

from rog.testbed.profiles import (
    DEVICES_DIR,
    DeviceProfile,
    PowerFigures,
    ProfileError,
    ScaleRecord,
    available_profiles,
    dump_profile,
    load_profile,
    profile_from_dict,
    scale_profile,
)


def test_shipped_profiles_load_and_hold_the_papers_numbers():
    assert {"jetson-xavier-nx", "laptop", "quick-cpu"} <= set(available_profiles())
    j = load_profile("jetson-xavier-nx")
    assert j.device_class == "robot" and j.batch_size == 24  # Table II
    assert j.watts() == {"compute": 13.35, "communication": 4.25, "stall": 4.04, "idle": 4.04}  # Table III
    assert 1.1 <= j.compute_s_per_iteration <= 1.15  # ANCHORS: 1.11-1.15 s incl. compression
    assert j.power_sensor == ("jtop", "model") and not j.power_is_assumption
    assert j.model_source == "model:jetson-xavier-nx"
    lap = load_profile("laptop")
    assert lap.device_class == "laptop" and lap.batch_size == 16  # Table II
    assert lap.power_is_assumption  # the paper has no laptop power: labelled
    # dynamic batching: every device computes for the same time per iteration
    assert lap.compute_s_per_iteration == j.compute_s_per_iteration


def test_load_by_name_and_by_path_agree():
    by_name = load_profile("laptop")
    by_path = load_profile(DEVICES_DIR / "laptop.yaml")
    assert by_name == by_path and by_name.source_path.endswith("laptop.yaml")


def test_unknown_name_lists_the_available_profiles():
    with pytest.raises(ProfileError, match=r"no device profile named 'jetson-xavier'.*did you mean 'jetson-xavier-nx'"):
        load_profile("jetson-xavier")


def test_quick_cpu_is_the_jetson_scaled_by_a_quarter():
    j, q = load_profile("jetson-xavier-nx"), load_profile("quick-cpu")
    assert q.scaled_from == (ScaleRecord("jetson-xavier-nx", 0.25),)
    again = scale_profile(j, 0.25, name="quick-cpu", compute_basis=q.compute_basis, power_basis=q.power_basis,
                          power_sensor=["model"])
    assert again.compute_s_per_iteration == pytest.approx(q.compute_s_per_iteration, rel=1e-12)
    assert (again.power, again.batch_size, again.scaled_from, again.device_class) == \
        (q.power, q.batch_size, q.scaled_from, q.device_class)


def test_scale_profile_keeps_ratios_and_records_every_scale():
    j = load_profile("jetson-xavier-nx")
    once = scale_profile(j, 0.5)
    twice = scale_profile(once, 0.2, name="tiny")
    assert once.name == "jetson-xavier-nx-x0.5"
    assert twice.compute_s_per_iteration == pytest.approx(j.compute_s_per_iteration * 0.1)
    assert twice.scaled_from == (ScaleRecord("jetson-xavier-nx", 0.5), ScaleRecord("jetson-xavier-nx-x0.5", 0.2))
    # watts are powers, not times: stall/compute and communication/compute ratios unchanged
    assert twice.watts() == j.watts() and twice.batch_size == j.batch_size
    assert twice.compute_basis.startswith("derived:")
    assert ScaleRecord("x", 0.25).implied() == {"compute_time": 0.25, "trace_time": 0.25, "energy_per_run": 0.25,
                                                "power": 1.0, "batch_size": 1.0}
    for bad in (0, -1.0, float("nan"), "2", True):
        with pytest.raises(ValueError, match="compute_time_scale"):
            scale_profile(j, bad)


def test_pace_sleep_s():
    j = load_profile("jetson-xavier-nx")
    assert j.pace_sleep_s(0.12) == pytest.approx(j.compute_s_per_iteration - 0.12)
    assert j.pace_sleep_s(5.0) == 0.0
    with pytest.raises(ValueError, match="elapsed_s"):
        j.pace_sleep_s(-1)


def test_round_trip_through_yaml(tmp_path):
    q = load_profile("quick-cpu")
    path = tmp_path / "quick-cpu.yaml"
    path.write_text(dump_profile(q))
    assert load_profile(path) == q
    assert profile_from_dict(q.to_dict()) == q


def test_dataclass_rejects_bad_values_directly():
    with pytest.raises(ValueError, match="stall_w"):
        PowerFigures(13.35, 4.25, -1.0)
    with pytest.raises(ValueError, match="device_class"):
        DeviceProfile("x", "drone", 1.0, "measured: a", 1, PowerFigures(1, 1, 1), "measured: b")


# ---------------------------------------------------------------------------------------------
# the validation table: each bad file -> fragments its error must contain (besides the file path)


def _base() -> dict:
    return load_profile("jetson-xavier-nx").to_dict()


def _with(**changes) -> dict:
    d = _base()
    for key, value in changes.items():
        if "__" in key:
            outer, inner = key.split("__")
            if value is _DROP:
                del d[outer][inner]
            else:
                d[outer][inner] = value
        elif value is _DROP:
            del d[key]
        else:
            d[key] = value
    return d


_DROP = object()

BAD_PROFILES = [
    ("unknown top-level key", {**_base(), "batchsize": 24}, ["'batchsize'", "unknown field", "did you mean 'batch_size'"]),
    ("missing stall watts", _with(power_w__stall=_DROP), ["'power_w.stall'", "missing"]),
    ("negative watts", _with(power_w__compute=-13.35), ["'power_w.compute'", "watts > 0", "-13.35"]),
    ("unknown power state", _with(power_w__gpu=3.0), ["'power_w.gpu'", "unknown field"]),
    ("bad device class", _with(device_class="drone"), ["'device_class'", "robot | laptop | server"]),
    ("fractional batch", _with(batch_size=24.5), ["'batch_size'", "integer >= 1"]),
    ("boolean batch", _with(batch_size=True), ["'batch_size'", "integer >= 1"]),
    ("compute time as text", _with(compute_s_per_iteration="1.1"), ["'compute_s_per_iteration'", "seconds > 0"]),
    ("zero compute time", _with(compute_s_per_iteration=0), ["'compute_s_per_iteration'", "seconds > 0"]),
    ("unlabelled power basis", _with(power_basis="Table III"), ["'power_basis'", "'assumption:'"]),
    ("sensor after model", _with(power_sensor=["model", "jtop"]), ["'power_sensor'", "put 'model' last"]),
    ("unknown sensor", _with(power_sensor=["gps"]), ["'power_sensor'", "unknown power sensor 'gps'"]),
    ("name differs from file", _with(name="other"), ["'name'", "differs from the file name"]),
    ("missing field", _with(batch_size=_DROP), ["'batch_size'", "missing", "Table II"]),
    ("scale entry incomplete", _with(scaled_from=[{"profile": "jetson-xavier-nx"}]),
     ["'scaled_from[0].compute_time_scale'", "missing"]),
]


@pytest.mark.parametrize("label, data, fragments", BAD_PROFILES, ids=[b[0] for b in BAD_PROFILES])
def test_bad_profiles_are_rejected_with_file_field_and_fix(tmp_path, label, data, fragments):
    path = tmp_path / "jetson-xavier-nx.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert str(path) in msg
    for frag in fragments:
        assert frag in msg, f"{label}: {frag!r} not in {msg!r}"


BAD_TEXTS = [
    ("duplicate key", "name: a\nname: a\n", ["line 2", "'name' is given twice", "first on line 1"]),
    ("empty file", "", ["empty device profile"]),
    ("not a mapping", "- 1\n- 2\n", ["must be a mapping"]),
    ("broken yaml", "name: [a\nbatch_size: 3\n", ["not valid YAML", "line"]),
]


@pytest.mark.parametrize("label, text, fragments", BAD_TEXTS, ids=[b[0] for b in BAD_TEXTS])
def test_bad_yaml_texts_are_rejected(tmp_path, label, text, fragments):
    path = tmp_path / "a.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert str(path) in msg
    for frag in fragments:
        assert frag in msg, f"{label}: {frag!r} not in {msg!r}"


def test_every_problem_is_listed_at_once(tmp_path):
    path = tmp_path / "jetson-xavier-nx.yaml"
    path.write_text(yaml.safe_dump(_with(batch_size=0, device_class="drone", power_w__stall=-1)))
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    msg = str(err.value)
    assert "'batch_size'" in msg and "'device_class'" in msg and "'power_w.stall'" in msg
    assert "\n" not in msg  # one line: the commands print it as one error: line
