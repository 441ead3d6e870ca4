"""The DDP (gloo) reference baseline next to BSP on the emulated testbed, bytes measured on the wire.

    sudo .venv/bin/python scripts/bench_ddp.py --workers 4 --iterations 50 -c outdoors --replay-mode artifact

Runs ``scripts/run.py --library SYS`` for each of ``--systems`` (default BSP then DDP) with the same
command otherwise, one after the other.  While a run trains, every worker's veth counters are read
inside its namespace (``ip -n NS -s -j link show``: bytes the worker end sent = uplink, received =
downlink, Ethernet/IP/TCP headers and retransmissions included) every ``--poll-s`` seconds, with the
TCP segments retransmitted in that namespace (``/proc/net/snmp``) and the number of iterations
that worker has completed (its ``pull`` records).  Bytes per iteration per worker = the
counter's growth between the first sample after iteration 1 and the last sample before the final
iteration (so start-up, DDP's initial broadcast and ROG's final flush are left out), divided by the
iterations completed in between.

Physical references: DDP's ring all-reduce sends and receives ``2 (N-1) / N x S`` per worker and
iteration (``S`` = float32 gradient bytes, from the run's events); BSP pushes and pulls the frames
its events record (``push``/``pull`` ``bytes``).  ``wire_over_reference`` is measured / reference
(TCP/IP/Ethernet headers alone make it ~1.046 with 1448-byte segments in 1514-byte frames).

Time composition per system (``iter_s``, ``compute_s``, ``comm_s``, ``stall_s``: means per
iteration over workers) comes from :func:`rog.analysis.metrics.composition`, the summary's code.
The last line printed is JSON.  Needs root (the emulated testbed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import yaml

from rog.experiment.rundir import CONFIG_FILE

RUN = ROOT / "scripts" / "run.py"


def link_bytes(netns: str, dev: str) -> tuple[int, int] | None:
    """``(tx_bytes, rx_bytes)`` of ``dev`` inside ``netns`` (None once the namespace is gone)."""
    p = subprocess.run(["ip", "-n", netns, "-s", "-j", "link", "show", "dev", dev], capture_output=True, text=True,
                       check=False)
    if p.returncode != 0 or not p.stdout.strip():
        return None
    st = json.loads(p.stdout)[0]["stats64"]
    return int(st["tx"]["bytes"]), int(st["rx"]["bytes"])


def retrans_segments(netns: str) -> int | None:
    """TCP segments retransmitted so far inside ``netns`` (``/proc/net/snmp`` ``Tcp: RetransSegs``)."""
    p = subprocess.run(["ip", "netns", "exec", netns, "cat", "/proc/net/snmp"], capture_output=True, text=True,
                       check=False)
    tcp = [line.split() for line in p.stdout.splitlines() if line.startswith("Tcp:")]
    if p.returncode != 0 or len(tcp) < 2:
        return None
    return int(tcp[1][tcp[0].index("RetransSegs")])


def events_path(run_dir: Path, cfg: dict, k: int) -> Path:
    """Where worker ``k`` writes its events while the run lives: the run folder (``--launcher local``) or
    its host's folder of the Fabric launcher (copied back at the end)."""
    local = run_dir / f"events-w{k}.jsonl"
    if local.is_file() and pulls_done(local):
        return local
    remote = sorted(Path("/run/rog-testbed/work").glob(f"{cfg['emulated']['prefix']}-*/runs/{cfg['run_id']}/w{k}/events-w{k}.jsonl"))
    return remote[-1] if remote else local


def pulls_done(path: Path) -> int:
    """Iterations a worker has completed so far (its ``pull`` records)."""
    try:
        return path.read_bytes().count(b'"kind":"pull"')
    except OSError:
        return 0


class CounterSampler(threading.Thread):
    """Samples ``(t, iterations, tx, rx, retransmitted segments)`` per worker until stopped or the namespaces go."""

    def __init__(self, run_dir: Path, poll_s: float) -> None:
        super().__init__(daemon=True)
        self.run_dir, self.poll_s = run_dir, poll_s
        self.samples: dict[int, list[tuple]] = {}
        self.stop_flag = threading.Event()

    def run(self) -> None:
        cfg_path = self.run_dir / CONFIG_FILE
        while not cfg_path.exists() and not self.stop_flag.is_set():
            time.sleep(0.1)
        if self.stop_flag.is_set():
            return
        cfg = yaml.safe_load(cfg_path.read_text())
        hosts = {k: cfg["emulated"]["hosts"][f"w{k}"] for k in range(cfg["workers"])}
        while not self.stop_flag.is_set():
            for k, h in hosts.items():
                it = pulls_done(events_path(self.run_dir, cfg, k))
                c = link_bytes(h["netns"], h["uplink_dev"])
                r = retrans_segments(h["netns"])
                if c is not None and r is not None:
                    self.samples.setdefault(k, []).append((time.monotonic(), it, *c, r))
            self.stop_flag.wait(self.poll_s)


def per_iteration(samples: list[tuple], final: int) -> dict | None:
    """Counter growth per completed iteration between iteration 1 and the last iteration (exclusive)."""
    inside = [s for s in samples if 1 <= s[1] < final]
    if len(inside) < 2 or inside[-1][1] == inside[0][1]:
        return None
    a, b = inside[0], inside[-1]
    n = b[1] - a[1]
    return {"iterations": n, "tx_bytes": (b[2] - a[2]) / n, "rx_bytes": (b[3] - a[3]) / n,
            "retrans_segments": (b[4] - a[4]) / n}


def run_system(system: str, common: list[str], result_dir: Path, poll_s: float) -> dict:
    """One run.py run of ``system`` with counters sampled; returns its measured figures."""
    from rog.analysis.load import load_run
    from rog.analysis.metrics import composition
    from rog.runtime import read_events

    out_dir = result_dir / system
    out_dir.mkdir(parents=True, exist_ok=True)
    started_unix = time.time() - 1.0
    cmd = [sys.executable, str(RUN), "--library", system, *common, "--result-dir", str(out_dir), "--no-progress",
           "--overwrite"]
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    sampler = None
    t0 = time.monotonic()
    while proc.poll() is None and sampler is None:
        new = [p for p in out_dir.iterdir() if (p / CONFIG_FILE).is_file()
               and (p / CONFIG_FILE).stat().st_mtime >= started_unix]
        if new:
            sampler = CounterSampler(new[0], poll_s)
            sampler.start()
        else:
            time.sleep(0.05)
    stdout, stderr = proc.communicate()
    wall_s = time.monotonic() - t0
    if sampler is not None:
        sampler.stop_flag.set()
        sampler.join()
    summary = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {"status": "failed"}
    if proc.returncode != 0 or summary.get("status") != "done":
        raise SystemExit(f"bench_ddp: the {system} run failed: {summary.get('reason') or stderr[-2000:]}")
    run_dir = Path(summary["run_dir"])
    run = load_run(run_dir)
    comp = composition(run)
    cfg = run.config
    n_workers = int(cfg["workers"])
    final = int(summary["iterations"])
    wire = {}
    app = {}
    for k in range(n_workers):
        wire[k] = per_iteration(sampler.samples.get(k, []) if sampler else [], final)
        _, recs = read_events(run_dir / f"events-w{k}.jsonl")
        push = [r["bytes"] for r in recs if r["kind"] == "push"]
        pull = [r["bytes"] for r in recs if r["kind"] == "pull"]
        app[k] = {"push_bytes": sum(push) / len(push) if push else 0.0, "pull_bytes": sum(pull) / len(pull) if pull else 0.0}
    if system == "DDP":
        S = app[0]["pull_bytes"]  # float32 gradient bytes
        ref_tx = ref_rx = 2 * (n_workers - 1) / n_workers * S
        ref_rule = f"ring all-reduce: 2(N-1)/N x S, S = {int(S)} B float32 gradient, N = {n_workers}"
    else:
        ref_tx = sum(a["push_bytes"] for a in app.values()) / n_workers
        ref_rx = sum(a["pull_bytes"] for a in app.values()) / n_workers
        ref_rule = "the push and pull frame bytes the events record"
    measured = [w for w in wire.values() if w]
    tx = sum(w["tx_bytes"] for w in measured) / len(measured) if measured else None
    rx = sum(w["rx_bytes"] for w in measured) / len(measured) if measured else None
    retrans = sum(w["retrans_segments"] for w in measured) / len(measured) if measured else None
    return {
        "system": system, "run_dir": str(run_dir), "iterations": comp["iterations"], "wall_s": round(wall_s, 1),
        **{k: (None if comp[k] is None else round(comp[k], 4)) for k in ("iter_s", "compute_s", "comm_s", "stall_s")},
        "final_accuracy": summary.get("final_accuracy"),
        "wire_tx_bytes_per_iter": None if tx is None else round(tx), "wire_rx_bytes_per_iter": None if rx is None else round(rx),
        "retrans_segments_per_iter": None if retrans is None else round(retrans, 2),
        "reference_tx_bytes_per_iter": round(ref_tx), "reference_rx_bytes_per_iter": round(ref_rx),
        "reference": ref_rule,
        "wire_over_reference_tx": None if tx is None or not ref_tx else round(tx / ref_tx, 4),
        "wire_over_reference_rx": None if rx is None or not ref_rx else round(rx / ref_rx, 4),
        "per_worker_wire": {f"w{k}": w for k, w in wire.items()},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--systems", default="BSP,DDP", help="comma-separated --library values, run in this order")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("-c", "--control", default="outdoors")
    ap.add_argument("--replay-mode", default="artifact")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--poll-s", type=float, default=0.5, help="counter sampling period")
    ap.add_argument("--result-dir", default="result/bench-ddp")
    ap.add_argument("extra", nargs="*", help="further run.py arguments (after --)")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench_ddp: needs root (the emulated testbed)")
    common = ["--testbed", "emulated", "--workers", str(a.workers), "--iterations", str(a.iterations),
              "-c", a.control, "--replay-mode", a.replay_mode, "--seed", str(a.seed), *a.extra]
    rows = [run_system(s.strip().upper(), common, Path(a.result_dir), a.poll_s) for s in a.systems.split(",") if s.strip()]
    for r in rows:
        print(f"{r['system']:>4}: iter {r['iter_s']} s = compute {r['compute_s']} + comm {r['comm_s']} + stall "
              f"{r['stall_s']} (+ other); wire/iteration/worker tx {r['wire_tx_bytes_per_iter']} B rx "
              f"{r['wire_rx_bytes_per_iter']} B vs reference {r['reference_tx_bytes_per_iter']} B "
              f"({r['reference']}); TCP retransmitted segments/iteration/worker {r['retrans_segments_per_iter']}",
              flush=True)
    print(json.dumps({"command": common, "runs": rows}), flush=True)
    return 0
