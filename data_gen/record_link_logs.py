"""Record link logs in the formats people have, over an emulated link that replays a recorded trace.

Two files, for checking that ``--trace`` reads them and ``tc`` replays them (docs/fleet.md):

* ``<stem>-iperf3.json``: a real ``iperf3 --json`` log (``iperf3 -c PS -t SECONDS -i 1 -J``) over worker 1's
  uplink while it replays trace seconds ``[0, SECONDS)``;
* ``<stem>-mahimahi.up``: a Mahimahi delivery-opportunity trace captured the way Mahimahi's own traces were,
  from a saturating flow: a bulk TCP sender over the uplink replaying trace seconds ``[200, 200 + SECONDS)``,
  one opportunity (line: the millisecond since the replay's start) per full 1448-byte segment received (one
  1514-byte frame on the wire, the 1500-byte packet Mahimahi counts).

Needs root, network namespaces and ``iperf3`` (``apt-get install iperf3``)::

    python -m data_gen.record_link_logs --trace tests/data/recorded_traces/outdoors-w2.csv --out DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np

SEGMENT_BYTES = 1448  # TCP payload of one 1514-byte frame on a 1500-MTU veth
MM_OFFSET_S = 200.0  # trace second the Mahimahi capture starts at (another stretch than the iperf3 log's)


def main(argv=None) -> int:
    from rog.testbed.netns import Testbed, probe_argv, root_netns_status, start_probe, wait_ready
    from rog.testbed.replay import ReplayOptions, build_schedule
    from rog.traces import load_trace

    ap = argparse.ArgumentParser(prog="python -m data_gen.record_link_logs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True, help="trace the link replays")
    ap.add_argument("--out", required=True, help="folder for the two files")
    ap.add_argument("--seconds", type=float, default=90.0, help="seconds of each recording (default 90)")
    ap.add_argument("--prefix", default="r55rec", help="namespace prefix of the testbed")
    a = ap.parse_args(argv)
    ok, why = root_netns_status()
    if not ok:
        print(f"record_link_logs: needs root and network namespaces: {why}")
        return 1
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = Path(a.trace).stem
    tr = load_trace(a.trace)
    with Testbed(n_workers=1, prefix=a.prefix) as tb:
        ps = tb.ps_address(1)
        srv = subprocess.Popen(tb.exec_argv("ps", ["iperf3", "-s", "-1", "-B", ps, "-p", "5301"]),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        h = tb.start_replay(1, "up", build_schedule(tr.window(0.0, a.seconds + 5), ReplayOptions()), None)
        cli = subprocess.run(tb.exec_argv(1, ["iperf3", "-c", ps, "-p", "5301", "-t", str(int(a.seconds)), "-i", "1",
                                              "-J"]), capture_output=True, text=True, timeout=a.seconds + 60)
        (out / f"{stem}-iperf3.json").write_text(cli.stdout)
        h.stop()
        srv.wait(timeout=10)
        rx_file = out / "rx.npz"
        rx = start_probe(tb, "ps", "bulk-recv", "--host", ps, "--port", "5302", "--out", str(rx_file),
                         "--timeout-s", "30")
        wait_ready(rx)
        tx = subprocess.Popen(tb.exec_argv(1, probe_argv("bulk-send", "--host", ps, "--port", "5302", "--duration-s",
                                                         f"{a.seconds + 1:.1f}")), stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)  # connection up before the replay starts
        sched = build_schedule(tr.window(MM_OFFSET_S, MM_OFFSET_S + a.seconds + 5), ReplayOptions())
        h = tb.start_replay(1, "up", sched, None)
        t_start = time.monotonic()
        tx.communicate(timeout=a.seconds + 60)
        rx.wait(timeout=30)
        h.stop()
    d = np.load(rx_file)
    keep = d["t"] >= t_start
    t, cum = d["t"][keep] - t_start, np.cumsum(d["n"][keep])
    segments = np.arange(1, int(cum[-1] // SEGMENT_BYTES) + 1) * SEGMENT_BYTES
    stamps = np.floor(t[np.searchsorted(cum, segments)] * 1000).astype(np.int64)
    stamps = stamps[stamps < a.seconds * 1000]
    (out / f"{stem}-mahimahi.up").write_text("".join(f"{s}\n" for s in stamps.tolist()))
    rx_file.unlink()
    print(json.dumps({"iperf3": str(out / f"{stem}-iperf3.json"), "mahimahi": str(out / f"{stem}-mahimahi.up"),
                      "opportunities": int(stamps.size)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
