"""tc command building (exact argv), queue sizing, and qdisc state save/restore on a real veth (root)."""

from __future__ import annotations

import os
import subprocess

import pytest

from rog.testbed.netns import have_root_netns
from rog.testbed.tc import (MIN_RATE_MBIT, IngressRedirect, QdiscState, Shaper, Target, TcError, check_restorable,
                            ifb_name_for, parse_qdisc_json, restore_argvs, restore_state, run_all, save_state,
                            shape_params)

ROOT_OK = have_root_netns()
needs_root = pytest.mark.skipif(not ROOT_OK, reason="needs root and working 'ip netns' (CI runs as root)")


def test_shape_params_by_hand():
    # 8 Mbit/s = 1e6 B/s: burst 2 ms = 2000 B < 2 frames -> 3028; limit 20 ms = 20000 B > 8 frames (12112)
    p = shape_params(8.0)
    assert (p.rate_bit, p.burst_bytes, p.limit_bytes) == (8_000_000, 3028, 20000)
    # 100 Mbit/s = 12.5e6 B/s: burst 25000 B, limit 250000 B
    p = shape_params(100.0)
    assert (p.rate_bit, p.burst_bytes, p.limit_bytes) == (100_000_000, 25000, 250000)
    # latency 40 ms doubles the queue
    assert shape_params(100.0, latency_ms=40).limit_bytes == 500000


def test_zero_rate_is_a_tiny_rate():
    p = shape_params(0.0)
    assert p.rate_bit == int(MIN_RATE_MBIT * 1e6) == 10_000
    assert p.limit_bytes == 8 * 1514 and p.burst_bytes == 2 * 1514


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_rate_rejected(bad):
    with pytest.raises(ValueError, match="rate_mbit"):
        shape_params(bad)


def test_bad_sizes_and_kind_rejected():
    with pytest.raises(ValueError, match="latency_ms"):
        shape_params(1.0, latency_ms=0)
    with pytest.raises(ValueError, match="kind"):
        Shaper(Target("eth0"), "fq_codel")
    with pytest.raises(ValueError, match="dev"):
        Target("a-name-longer-than-15")


def test_tbf_argvs_exact():
    s = Shaper(Target("veth0", "ns1"))
    assert s.setup_argvs(8.0) == [["tc", "-n", "ns1", "qdisc", "replace", "dev", "veth0", "root", "handle", "1:",
                                   "tbf", "rate", "8000000bit", "burst", "3028", "limit", "20000"]]
    assert s.change_argvs(0) == [["tc", "-n", "ns1", "qdisc", "change", "dev", "veth0", "root", "handle", "1:",
                                  "tbf", "rate", "10000bit", "burst", "3028", "limit", "12112"]]


def test_htb_argvs_exact():
    s = Shaper(Target("eth1"), "htb")
    assert s.setup_argvs(100.0) == [
        ["tc", "qdisc", "replace", "dev", "eth1", "root", "handle", "1:", "htb", "default", "1"],
        ["tc", "class", "add", "dev", "eth1", "parent", "1:", "classid", "1:1", "htb", "rate", "100000000bit",
         "ceil", "100000000bit", "burst", "25000", "cburst", "25000", "quantum", "1514"],
        ["tc", "qdisc", "add", "dev", "eth1", "parent", "1:1", "handle", "10:", "bfifo", "limit", "250000"],
    ]
    change = s.change_argvs(100.0)
    assert [a[1:3] for a in change] == [["class", "change"], ["qdisc", "change"]]  # in place, never del/add


def test_netem_argvs_count_packets():
    s = Shaper(Target("eth1"), "netem")
    # 100 Mbit/s: 250000 B queue = 165 full frames (netem's limit counts packets)
    assert s.change_argvs(100.0) == [["tc", "qdisc", "change", "dev", "eth1", "root", "handle", "1:", "netem",
                                      "rate", "100000000bit", "limit", "165"]]


def test_ingress_redirect_argvs():
    t = Target("wlan0")
    ing = IngressRedirect(t)
    ifb = ifb_name_for(t)
    assert ifb.startswith("rogi") and len(ifb) == 12 and ifb_name_for(Target("wlan0", "x")) != ifb
    assert ing.setup_argvs() == [
        ["ip", "link", "add", ifb, "type", "ifb"],
        ["ip", "link", "set", "dev", ifb, "up"],
        ["tc", "qdisc", "add", "dev", "wlan0", "handle", "ffff:", "ingress"],
        ["tc", "filter", "add", "dev", "wlan0", "parent", "ffff:", "protocol", "all", "prio", "1", "u32", "match",
         "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb],
    ]
    st = QdiscState(t, ({"kind": "mq", "handle": "0:", "root": True},))
    assert restore_argvs(st, ing) == [["tc", "qdisc", "del", "dev", "wlan0", "ingress"],
                                      ["ip", "link", "del", "dev", ifb],
                                      ["tc", "qdisc", "del", "dev", "wlan0", "root"]]


def test_restore_rebuilds_a_custom_tbf():
    js = '[{"kind":"tbf","handle":"5:","root":true,"options":{"rate":1250000,"burst":20480,"lat":20000}}]'
    st = QdiscState(Target("v0", "n"), parse_qdisc_json(js))
    assert not st.root_is_default
    # tc -j reports bytes/s: 1250000 B/s = 10 Mbit/s
    assert restore_argvs(st) == [["tc", "-n", "n", "qdisc", "replace", "dev", "v0", "root", "handle", "5:", "tbf",
                                  "rate", "10000000bit", "burst", "20480", "latency", "20000us"]]
    check_restorable(st, need_ingress=False)


def test_unrestorable_states_refused():
    fq = QdiscState(Target("v0"), ({"kind": "fq_codel", "handle": "8001:", "root": True, "options": {}},))
    with pytest.raises(TcError, match="cannot be restored"):
        check_restorable(fq, need_ingress=False)
    ing = QdiscState(Target("v0"), ({"kind": "noqueue", "handle": "0:", "root": True},
                                    {"kind": "ingress", "handle": "ffff:", "parent": "ffff:fff1"}))
    check_restorable(ing, need_ingress=False)
    with pytest.raises(TcError, match="ingress"):
        check_restorable(ing, need_ingress=True)
    assert parse_qdisc_json("  \n") == ()


@pytest.fixture
def scratch_veth():
    """A veth pair inside a scratch namespace, removed afterwards whatever happens."""
    ns = f"rogt{os.getpid()}tc"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "tva", "type", "veth", "peer", "name", "tvb"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "dev", "tva", "up"], check=True)
        yield Target("tva", ns)
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@needs_root
def test_save_restore_default_state(scratch_veth):
    t = scratch_veth
    before = save_state(t)
    assert before.root_is_default and before.root["kind"] == "noqueue"
    ing = IngressRedirect(t)
    run_all(ing.setup_argvs())
    s = Shaper(t)
    run_all(s.setup_argvs(5.0))
    run_all(s.change_argvs(7.0))
    mid = save_state(t)
    assert mid.root["kind"] == "tbf" and mid.root["options"]["rate"] * 8 == 7_000_000
    assert mid.ingress is not None
    assert restore_state(before, ing) == []
    after = save_state(t)
    assert [(q["kind"], q["handle"]) for q in after.qdiscs] == [("noqueue", "0:")]
    links = subprocess.run(["ip", "-n", t.netns, "-o", "link"], capture_output=True, text=True).stdout
    assert ing.ifb.dev not in links


@needs_root
def test_save_restore_custom_root(scratch_veth):
    t = scratch_veth
    run_all([t.tc("qdisc", "add", "dev", t.dev, "root", "handle", "7:", "tbf", "rate", "3mbit", "burst", "4000",
                  "limit", "30000")])
    before = save_state(t)
    check_restorable(before, need_ingress=False)
    s = Shaper(t)
    run_all(s.setup_argvs(50.0))
    assert save_state(t).root["handle"] == "1:"
    assert restore_state(before) == []
    r, b = save_state(t).root, before.root
    assert (r["kind"], r["handle"], r["options"]["rate"] * 8) == ("tbf", "7:", 3_000_000)
    # tc -j reports the queue as latency; the kernel rounds burst and latency to its tick grid
    assert abs(r["options"]["burst"] - b["options"]["burst"]) <= 2
    assert abs(r["options"]["lat"] - b["options"]["lat"]) <= 0.01 * b["options"]["lat"]


@needs_root
def test_missing_interface_is_a_clear_error(scratch_veth):
    with pytest.raises(TcError, match="does the interface exist"):
        save_state(Target("nosuchdev0", scratch_veth.netns))
