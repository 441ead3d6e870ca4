"""``bash scripts/run_all.sh --hosts FILE outdoors --budget-s 6 --runs-regex '^(ROG4|DDP)-'`` end to end on
emulated devices (slow: about 4 minutes on a loaded 2-core machine; root and sshd only).

``python -m rog.testbed.emulated_hosts --workers 4 --out FILE`` makes the devices (a namespace each, with its
own sshd) and writes their hosts file; the whole item then runs through the real-device path (run.py
--testbed hosts, Fabric), then checkpoint testing, summary and figures.  Checked: every run DONE on the hosts
testbed with every host's folder collected, the summary and figures, each device's qdiscs the same after the
plan as before it (every run's tc replay restored them), and after the teardown (also when the test fails)
no namespace, link, qdisc, sshd, key or work folder of the devices left.  ``ROG_E2E_REPORT=PATH`` writes the
measured numbers (wall time, runs DONE, files per host, summary.md's header) there as JSON.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rog.experiment import items as I

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "result" / ".cache"
TAG = "rgh"  # this suite's testbed prefix tag
# Training seconds per run.  The test checks the plan's plumbing over Fabric (DONE on the hosts testbed, every
# host's folder collected, checkpoint tests, summary, figures, qdiscs restored), none of which reads how far a run
# trained: a run stops at the first iteration boundary past its budget (counted from the join), so every run does
# at least one iteration whatever the budget, and 6 s spans three of the quick profile's 2 s checkpoint periods
# (the budget of the threshold item's end-to-end test).  30 s added only time: ~25 s per run, ~85 s for DDP,
# whose all-reduce over the replayed uplink takes tens of seconds per iteration.
BUDGET_S = 6
# Two of the item's seven runs: ROG-4 (the PS and a policy with ATP over Fabric) and DDP (its own children, whose
# ring crosses the devices' links).  BSP, SSP-4, SSP-20, FLOWN-4 and ROG-20 take ROG-4's path (another --library /
# --threshold) and added about 25 s each here (BSP over Fabric runs in test_run_fabric_emulated.py).
RUNS = r"^(ROG4|DDP)-"  # a regular expression: --runs-regex


def _qdiscs(prefix: str) -> dict[str, list]:
    """Every qdisc of every namespace of ``prefix`` (without counters), per namespace."""
    from rog.testbed.netns import list_netns

    out = {}
    for ns in sorted(n for n in list_netns() if n.startswith(prefix)):
        r = subprocess.run(["ip", "netns", "exec", ns, "tc", "-j", "qdisc", "show"], capture_output=True, text=True)
        rows = json.loads(r.stdout or "[]")
        out[ns] = sorted(json.dumps({k: v for k, v in q.items() if k not in ("refcnt",)}, sort_keys=True) for q in rows)
    return out


def _left(prefix: str) -> list[str]:
    from rog.experiment.emulated import WORK_BASE_DIR, leftovers
    from rog.testbed.sshd import SSHD_BASE_DIR

    left = leftovers(prefix)
    return left + [str(p) for base in (SSHD_BASE_DIR, WORK_BASE_DIR) if base.is_dir() for p in base.glob(f"{prefix}-*")]


def start_devices(hosts: Path, workers: int, tag: str) -> tuple[subprocess.Popen, str]:
    """``python -m rog.testbed.emulated_hosts`` writing ``hosts``; returns the process and the devices' prefix."""
    env = dict(os.environ, ROG_TESTBED_PREFIX=tag)
    dev = subprocess.Popen([sys.executable, "-m", "rog.testbed.emulated_hosts", "--workers", str(workers), "--out",
                            str(hosts)], cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while not hosts.exists():
        if dev.poll() is not None or time.monotonic() > end:
            stop_devices(dev, None)
            pytest.fail(f"the emulated devices did not come up: {dev.stderr.read()[-2000:]}")
        time.sleep(0.2)
    doc = yaml.safe_load(hosts.read_text())
    return dev, doc["hosts"][1]["interface"][:8]  # <prefix>v1w: worker 0's veth


def stop_devices(dev: subprocess.Popen, prefix: str | None) -> None:
    """SIGINT the devices' command and wait; anything of ``prefix`` still there is removed and fails the test."""
    if dev.poll() is None:
        dev.send_signal(signal.SIGINT)
    try:
        dev.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        dev.kill()
        dev.communicate()
    if prefix is not None and _left(prefix):
        from rog.testbed.netns import cleanup_prefix

        left = _left(prefix)
        cleanup_prefix(prefix)
        pytest.fail(f"the emulated devices left {left}")


@pytest.mark.slow
def test_run_all_on_emulated_hosts_outdoors(tmp_path):
    from rog.testbed.netns import root_netns_status
    from rog.testbed.sshd import find_sshd

    ok, why = root_netns_status()
    if not ok:
        pytest.skip(f"needs root and network namespaces: {why}")
    if find_sshd() is None:
        pytest.skip("sshd is not installed; bash scripts/setup_sshd.sh installs it")
    hosts, res, fig = tmp_path / "hosts.yaml", tmp_path / "result", tmp_path / "figure"
    dev, prefix = start_devices(hosts, 4, TAG)
    try:
        doc = yaml.safe_load(hosts.read_text())
        assert prefix.startswith(TAG) and [h["name"] for h in doc["hosts"]] == ["ps", "w0", "w1", "w2", "w3"]
        before = _qdiscs(prefix)
        assert len(before) == 5 and all(before.values())
        t0 = time.monotonic()
        r = subprocess.run(["bash", str(ROOT / "scripts" / "run_all.sh"), "--hosts", str(hosts), "outdoors",
                            "--budget-s", str(BUDGET_S), "--runs-regex", RUNS, "--result-dir", str(res), "--figure-dir", str(fig),
                            "--cache-dir", str(CACHE)], capture_output=True, text=True, timeout=3600, cwd=str(ROOT))
        wall_s = time.monotonic() - t0
        after = _qdiscs(prefix)
        ids = [I.run_id(s) for s in I.ITEMS["outdoors"].runs if re.search(RUNS, I.run_id(s))]
        done = [rid for rid in ids if (res / rid / "DONE").exists()]
        files = {h: sorted(p.name for p in (res / ids[0] / "hosts" / h).iterdir())
                 for h in ("ps", "w0", "w1", "w2", "w3") if (res / ids[0] / "hosts" / h).is_dir()}
        summary_md = (res / "summary.md").read_text() if (res / "summary.md").exists() else ""
        report = dict(wall_s=round(wall_s, 1), returncode=r.returncode, done=done, files_per_host=files,
                      summary_header="\n".join(summary_md.splitlines()[:12]), figures=sorted(p.name for p in fig.glob("*")),
                      load=os.getloadavg())
        if os.environ.get("ROG_E2E_REPORT"):
            Path(os.environ["ROG_E2E_REPORT"]).write_text(json.dumps(report, indent=2) + "\n")
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-3000:]
        assert len(ids) == 2 and done == ids
        others = [I.run_id(s) for s in I.ITEMS["outdoors"].runs if I.run_id(s) not in ids]
        assert others and not [rid for rid in others if (res / rid).exists()]  # --runs held: nothing else ran
        for rid in ids:
            cfg = yaml.safe_load((res / rid / "config.yaml").read_text())
            assert cfg["testbed"] == "hosts" and cfg["launcher"] == "fabric" and cfg["time_budget_s"] == float(BUDGET_S)
            assert set(cfg["hosts"]["devices"]) == {"ps", "w0", "w1", "w2", "w3"}
            for k in range(4):  # every host's run folder came back with its events and exit code 0
                h = res / rid / "hosts" / f"w{k}"
                assert (h / "worker.rc").read_text().strip() == "0" and (h / f"events-w{k}.jsonl").stat().st_size > 0
                assert (res / rid / f"events-w{k}.jsonl").is_file() and (h / "replay.log").is_file()
            assert (res / rid / "hosts" / "ps" / "ps.rc").read_text().strip() == "0"
        summ = json.loads((res / "summary.json").read_text())
        assert set(ids) <= set(summ["runs"]) and "outdoors" in summ["items"]
        assert list(fig.glob("*.png")) and summary_md
        assert after == before  # every run's tc replay restored every device's qdiscs
    finally:
        stop_devices(dev, prefix)  # the command failed to clean up: do it, then fail
    assert dev.returncode == 0 and not hosts.exists()
