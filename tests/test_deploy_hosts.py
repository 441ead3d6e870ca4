"""The YAML hosts file: the example validates; every bad file gets a message naming file, host and field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from rog.deploy.hosts import HostsFileError, hosts_from_dict, load_hosts

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "configs" / "hosts.example.yaml"


def base() -> dict:
    """A small valid hosts mapping: one PS and two workers."""
    return {
        "defaults": {"user": "rog", "work_dir": "/home/rog/rog-work", "interface": "wlan0",
                     "device_profile": "jetson-xavier-nx"},
        "hosts": [
            {"name": "ps", "address": "192.168.50.10", "role": "ps", "device_profile": "laptop"},
            {"name": "robot1", "address": "192.168.50.11", "role": "worker", "worker_id": 0},
            {"name": "robot2", "address": "robot2.local", "role": "worker", "worker_id": 1},
        ],
    }


def edit(path: tuple, value=None, delete: bool = False):
    """A function that returns base() with one value set (or deleted) at ``path``."""
    def make() -> dict:
        d = base()
        node = d
        for key in path[:-1]:
            node = node[key]
        if delete:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return d
    return make


def with_hosts(*hosts):
    def make() -> dict:
        d = base()
        d["hosts"] = [copy.deepcopy(h) for h in hosts]
        return d
    return make


PS = {"name": "ps", "address": "10.0.0.1", "role": "ps"}
W0 = {"name": "robot1", "address": "10.0.0.2", "role": "worker", "worker_id": 0}
W1 = {"name": "robot2", "address": "10.0.0.3", "role": "worker", "worker_id": 1}

# (case id, builder, expected fragments of the message)
BAD = [
    ("unknown top-level key", edit(("host",), []), ["top level: field 'host': unknown field", "did you mean 'hosts'?"]),
    ("typo in a host field", edit(("hosts", 1, "adress"), "10.0.0.9"),
     ["hosts[1] 'robot1'", "field 'adress': unknown field", "did you mean 'address'?"]),
    ("a password is not a field", edit(("hosts", 2, "password"), "hunter2"),
     ["hosts[2] 'robot2'", "field 'password': unknown field"]),
    ("missing address", edit(("hosts", 1, "address"), delete=True),
     ["hosts[1] 'robot1'", "field 'address': missing", "IP address or DNS name"]),
    ("bad role", edit(("hosts", 1, "role"), "master"), ["field 'role': must be ps or worker, got 'master'"]),
    ("two parameter servers", with_hosts(PS, {**W0, "role": "ps", "worker_id": None}, W1),
     ["exactly one host must have role: ps, found 2 ('ps', 'robot1')"]),
    ("no worker", with_hosts(PS), ["at least one host must have role: worker"]),
    ("worker without id", edit(("hosts", 2, "worker_id"), delete=True),
     ["hosts[2] 'robot2'", "field 'worker_id': missing (every worker needs one)"]),
    ("ps with a worker id", edit(("hosts", 0, "worker_id"), 3), ["hosts[0] 'ps'", "the ps host has no worker id; remove it"]),
    ("duplicate worker id", with_hosts(PS, W0, {**W1, "worker_id": 0}),
     ["host 'robot2'", "field 'worker_id': 0 is also used by worker 'robot1'; give each worker its own id"]),
    ("gap in worker ids", with_hosts(PS, W0, {**W1, "worker_id": 2}),
     ["2 workers need the ids 0..1 each once; missing [1], out of range [2]"]),
    ("port out of range", edit(("hosts", 1, "port"), 70000), ["field 'port': must be an integer in 1..65535, got 70000"]),
    ("port as a string", edit(("defaults", "port"), "22"), ["field 'port': must be an integer in 1..65535, got '22'"]),
    ("docker without image", edit(("hosts", 1, "runtime"), "docker"),
     ["hosts[1] 'robot1'", "field 'image': missing (runtime: docker needs the image to run)"]),
    ("image with native runtime", edit(("hosts", 1, "image"), "rog:arm64"),
     ["field 'image': only used with runtime: docker; remove it or set runtime: docker"]),
    ("unknown runtime", edit(("hosts", 1, "runtime"), "podman"), ["field 'runtime': must be native or docker"]),
    ("unknown device profile", edit(("hosts", 2, "device_profile"), "jetson-xavier"),
     ["hosts[2] 'robot2'", "field 'device_profile': no profile 'jetson-xavier' in configs/devices",
      "did you mean 'jetson-xavier-nx'?"]),
    ("relative work_dir", edit(("defaults", "work_dir"), "rog-work"), ["field 'work_dir': 'rog-work' is not absolute"]),
    ("work_dir with ~", edit(("defaults", "work_dir"), "~/rog"), ["'~/rog' starts with ~, which is not expanded"]),
    ("zero batch size", edit(("hosts", 1, "batch_size"), 0), ["field 'batch_size': must be an integer >= 1, got 0"]),
    ("batch size on the ps", edit(("hosts", 0, "batch_size"), 16),
     ["hosts[0] 'ps'", "field 'batch_size': the ps does not train; remove it from the ps entry"]),
    ("interface with a space", edit(("hosts", 1, "interface"), "wlan 0"), ["field 'interface': not an interface name"]),
    ("duplicate host names", with_hosts(PS, W0, {**W1, "name": "robot1"}),
     ["host 'robot1'", "field 'name': also used by the entry", "host names must be unique"]),
    ("bad replay direction", edit(("hosts", 1, "replay"), {"direction": "up"}),
     ["field 'replay.direction': got 'up'", "both (uplink and downlink), egress (uplink only) or none"]),
    ("peer ingress without peer", edit(("hosts", 1, "replay"), {"ingress_via": "peer"}),
     ["field 'replay.peer_interface': missing"]),
    ("per-host field in defaults", edit(("defaults", "role"), "worker"),
     ["defaults: field 'role': differs per host; set it in each host entry instead"]),
    ("empty hosts list", edit(("hosts",), []), ["field 'hosts': must be a non-empty list of host entries"]),
    ("python with shell characters", edit(("hosts", 1, "python"), "python3; rm -rf /"),
     ["field 'python': must be one command or path without spaces or shell characters"]),
    ("not an address", edit(("hosts", 1, "address"), "robot one"), ["field 'address': not an IP address or host name"]),
]


@pytest.mark.parametrize("case,make,fragments", BAD, ids=[c[0] for c in BAD])
def test_bad_hosts_mapping_names_file_host_and_field(case, make, fragments):
    with pytest.raises(HostsFileError) as ei:
        hosts_from_dict(make(), source="configs/bad.yaml")
    msg = str(ei.value)
    assert isinstance(ei.value, ValueError)
    assert "configs/bad.yaml: " in msg
    for frag in fragments:
        assert frag in msg, f"{case}: {frag!r} not in {msg!r}"


BAD_FILES = [
    ("a key twice", "hosts:\n  - name: ps\n    name: ps2\n", ["line 3: field 'name' is given twice (first on line 2); keep one"]),
    ("broken YAML", "hosts:\n  - name: ps\n   address: [1\n", ["not valid YAML", "check indentation and quoting"]),
    ("empty file", "", ["must be a mapping with a 'hosts' list, got an empty file"]),
    ("a list at the top", "- name: ps\n", ["must be a mapping with a 'hosts' list, got list"]),
    ("version 2", "version: 2\nhosts: []\n", ["field 'version': only version 1 exists, got 2"]),
]


@pytest.mark.parametrize("case,text,fragments", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_hosts_file_names_the_file(tmp_path, case, text, fragments):
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    with pytest.raises(HostsFileError) as ei:
        load_hosts(path)
    msg = str(ei.value)
    assert str(path) in msg
    for frag in fragments:
        assert frag in msg, f"{case}: {frag!r} not in {msg!r}"


def test_missing_file_says_how_to_pass_one(tmp_path):
    with pytest.raises(HostsFileError, match=r"cannot read the hosts file.*pass --hosts PATH"):
        load_hosts(tmp_path / "nope.yaml")


def test_every_problem_is_reported_at_once_with_the_yaml_line(tmp_path):
    d = base()
    d["hosts"][1]["port"] = 0
    d["hosts"][2]["batch_size"] = -1
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(HostsFileError) as ei:
        load_hosts(path)
    assert len(ei.value.problems) == 2
    text = path.read_text().splitlines()
    line_robot2 = next(i + 1 for i, line in enumerate(text) if "name: robot2" in line)
    assert any(f"hosts[2] 'robot2' (line {line_robot2}): field 'batch_size'" in p for p in ei.value.problems)
    assert any("hosts[1] 'robot1'" in p and "field 'port'" in p for p in ei.value.problems)


def test_example_file_validates_with_defaults_applied():
    hf = load_hosts(EXAMPLE)
    assert [h.name for h in hf.hosts] == ["ps", "robot1", "robot2", "robot3", "robot4"]
    assert hf.ps.name == "ps" and hf.ps.runtime == "native" and hf.ps.image is None
    assert hf.ps.interface == "wlp2s0" and hf.ps.device_profile == "laptop" and hf.ps.batch_size is None
    assert [w.worker_id for w in hf.workers] == [0, 1, 2, 3]
    for w in hf.workers:
        assert (w.user, w.port, w.runtime, w.image, w.interface) == ("rog", 22, "docker", "rog:arm64", "wlan0")
        assert (w.device_profile, w.batch_size, w.work_dir) == ("jetson-xavier-nx", 24, "/home/rog/rog-work")
        assert w.key_file == "~/.ssh/id_ed25519" and w.replay.direction == "both" and w.replay.ingress_via == "ifb"
    assert [w.rank for w in hf.workers] == ["w0", "w1", "w2", "w3"]
    assert hf.known_hosts == "~/.ssh/known_hosts" and hf.accept_new_host_keys is False


def test_batch_size_defaults_to_the_device_profile():
    d = base()
    d["hosts"][2]["device_profile"] = "laptop"  # Table II: 16 on a laptop, 24 on a robot
    hf = hosts_from_dict(d)
    assert [w.batch_size for w in hf.workers] == [24, 16]
