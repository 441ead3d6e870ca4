"""The emulated testbed's shared access point (rog/testbed/netns.py ``cap_mbit``): uplinks and downlinks share one htb."""

import itertools
import json
import os
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from rog.testbed.netns import Testbed, cleanup_prefix, root_netns_status
from rog.testbed.netns_probes import payload_per_frame, probe_argv, start_probe, wait_ready

ROOT_OK, WHY = root_netns_status()
needs_root = pytest.mark.skipif(not ROOT_OK, reason=f"needs root and working 'ip netns' ({WHY})")
_seq = itertools.count()


@pytest.fixture
def prefix():
    p = f"r55c{os.getpid() % 10000}{next(_seq)}"[:10]
    yield p
    cleanup_prefix(p)


def test_cap_commands_cover_both_directions_or_uplink_only():
    both = Testbed(n_workers=2, prefix="r55x", cap_mbit=20.0).create_argvs()
    up = Testbed(n_workers=2, prefix="r55x", cap_mbit=20.0, cap_both=False).create_argvs()
    redirects = lambda cmds: sorted(c[c.index("dev") + 1] + ":" + c[c.index("dev") + 2]  # noqa: E731
                                    for c in cmds if "mirred" in c)
    assert redirects(both) == ["r55xv1p:egress", "r55xv1p:ingress", "r55xv2p:egress", "r55xv2p:ingress"]
    assert redirects(up) == ["r55xv1p:ingress", "r55xv2p:ingress"]
    assert all(c[-1] == "r55xcap" for c in both if "mirred" in c)  # one ifb, one htb class for all of them


def _bulk(tb, src, dst_ns, host, port, nbytes, out, results):
    rx = start_probe(tb, dst_ns, "bulk-recv", "--host", host, "--port", str(port), "--out", str(out))
    wait_ready(rx)
    tx = subprocess.run(tb.exec_argv(src, probe_argv("bulk-send", "--host", host, "--port", str(port),
                                                     "--bytes", str(nbytes))), capture_output=True, text=True,
                        timeout=120)
    rx.wait(timeout=60)
    results[port] = (json.loads(tx.stdout), np.load(out))


@needs_root
def test_an_uplink_and_a_downlink_share_the_cap(prefix, tmp_path):
    """w1 pushes and w2 pulls 1.5 MB at once through a 12 Mbit/s cap: together they need the cap's time for
    both (about 2 s of wire bits), where an uncapped downlink would finish the pair in half that."""
    cap_mbit, nbytes = 12.0, 1_500_000
    with Testbed(n_workers=2, prefix=prefix, cap_mbit=cap_mbit) as tb:
        results: dict = {}
        jobs = [threading.Thread(target=_bulk, args=(tb, 1, "ps", tb.ps_address(1), 7101, nbytes,
                                                     tmp_path / "up.npz", results)),
                threading.Thread(target=_bulk, args=(tb, "ps", 2, tb.worker_address(2), 7102, nbytes,
                                                     tmp_path / "down.npz", results))]
        for j in jobs:
            j.start()
        for j in jobs:
            j.join(180)
    assert set(results) == {7101, 7102}
    t_first = min(float(d["t"][0]) for _, d in results.values())
    t_last = max(float(d["t"][-1]) for _, d in results.values())
    wire_bits = sum(nbytes * payload_per_frame(info["mss"]) * 8 for info, _ in results.values())
    # one-sided: the pair cannot beat the shared capacity (10 % allowance for the bucket and the first recv)
    assert t_last - t_first >= 0.9 * wire_bits / (cap_mbit * 1e6), (t_last - t_first, wire_bits)
    assert Path(tmp_path / "up.npz").exists()
