"""``scripts/run.py --testbed emulated`` through Fabric end to end (root and sshd only): BSP with the default launcher
(Fabric where sshd exists), ROG with ``--launcher fabric``.

The run is deployed exactly as on real devices: one private sshd per namespace, Fabric ships the code,
config, layout, weights and trace, starts the PS, the held trace replays and the workers,
releases links and training together once every worker is ready, stops everything and copies every
host's run folder back.  Checked on the collected result folder: DONE, per-rank events with the right
iteration counts, replay logs on the event clock following the run's own per-worker schedules,
manifest hosts = the namespace addresses Fabric reached, the hosts' logs, and nothing left behind
(namespaces, sshd processes, key and work folders).  A second run is interrupted with SIGINT mid-run:
INCOMPLETE, logs still collected, nothing left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fabric  # noqa: F401  (a declared dependency: a broken install fails, it does not skip)
import yaml
from test_run_emulated import assert_tracking_accounts_for_every_transfer

# slow tier (about 35 s quiet, 60 s loaded): the default tier's budget is 15 min, and the slow tier's
# run_all.sh --hosts test deploys through Fabric too
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "scripts" / "run.py"
CACHE = ROOT / "result" / ".cache"  # the quick workload's default weight cache (pre-trained once per machine)
TAG = "rgf"  # this suite's testbed prefix tag (rog.experiment.emulated.new_prefix)
ITERATIONS = 6


@pytest.fixture(scope="module")
def ready():
    """Skip unless root with namespaces, Fabric and sshd; pre-train the quick model once."""
    from rog.testbed.netns import root_netns_status
    from rog.testbed.sshd import find_sshd

    ok, why = root_netns_status()
    if not ok:
        pytest.skip(f"needs root and network namespaces: {why}")
    if find_sshd() is None:
        pytest.skip("sshd is not installed; bash scripts/setup_sshd.sh installs it")
    from rog.workloads import QuickWorkload

    QuickWorkload(seed=0, n_workers=2, cache_dir=CACHE).pretrained_state()


def _start(args: list[str], result_dir: Path) -> subprocess.Popen:
    env = dict(os.environ, ROG_TESTBED_PREFIX=TAG)
    env.pop("ROG_SECRET", None)
    cmd = [sys.executable, str(RUN), "--testbed", "emulated", "--workers", "2",
           "-c", "outdoors", "--result-dir", str(result_dir), "--cache-dir", str(CACHE), "--no-progress", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT))


def _left(prefix: str) -> list[str]:
    """Anything of the run still present: namespaces, sshd or other processes of the run, key and work folders."""
    from rog.experiment.emulated import WORK_BASE_DIR, leftovers
    from rog.testbed.sshd import SSHD_BASE_DIR

    left = leftovers(prefix)
    left += [str(p) for base in (SSHD_BASE_DIR, WORK_BASE_DIR) if base.is_dir() for p in base.glob(f"{prefix}-*")]
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if f"/{prefix}-" in cmd or f" {prefix}w" in cmd or f" {prefix}ps" in cmd:
                left.append(f"process {d.name}: {cmd[:150]}")
    return left


def _records(path: Path) -> list[dict]:
    from rog.runtime import read_events

    return read_events(path, allow_partial_last_line=True)[1]


def _schedule_rates(cfg: dict, k: int, n: int) -> list[float]:
    """The first ``n`` rates worker ``k``'s link must replay, computed here from config.yaml alone."""
    from rog.experiment.emulated import schedule_for
    from rog.experiment.traceplan import load_for_replay, replay_options

    out = []
    from rog.experiment.run_config import RunConfig

    typed = RunConfig.from_dict(cfg)
    for _, r in schedule_for(load_for_replay(typed), replay_options(typed, k)).iter_changes():
        out.append(round(r, 6))
        if len(out) >= n:
            break
    return out


def _is_subsequence(short: list[float], long: list[float]) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


@pytest.fixture(scope="module")
def runs(ready, tmp_path_factory):
    """Both runs start at once (most of a run's wall time is start-up latency, not CPU): a complete one, BSP through
    the default launcher (Fabric, since sshd exists: also what test_run_emulated.py's BSP run through the default
    launcher checked, merged here), and a ROG one with ``--launcher fabric`` that the second test interrupts."""
    base = tmp_path_factory.mktemp("fabric")
    procs = {"ok": _start(["--library", "BSP", "--iterations", str(ITERATIONS), "--eval-every", "3", "-n", "ok"],
                          base / "ok"),
             "int": _start(["--launcher", "fabric", "--iterations", "100000", "-n", "int"], base / "int")}
    yield base, procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=300)


def test_fabric_run_through_sshd_collects_a_complete_result(runs):
    proc = runs[1]["ok"]
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    run_dir = Path(summary["run_dir"])
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    prefix = cfg["emulated"]["prefix"]
    assert prefix.startswith(TAG) and len(prefix) == 8
    assert (run_dir / "DONE").is_file() and not (run_dir / "INCOMPLETE").exists()
    # no --launcher: the default picks Fabric where sshd exists
    assert summary["status"] == "done" and summary["launcher"] == "fabric" and cfg["launcher"] == "fabric"
    assert cfg["library"] == "BSP" and run_dir.name == "BSP-outdoors-recorded-b1-w2-seed0-ok"
    assert cfg["deploy"]["weights_in_run_dir"]  # the pre-trained weights were shipped, not re-trained per host

    # events per rank: every worker did exactly ITERATIONS pulls, numbered 1..ITERATIONS; the PS served them
    for k in range(2):
        pulls = [r["iteration"] for r in _records(run_dir / f"events-w{k}.jsonl") if r["kind"] == "pull"]
        assert pulls == list(range(1, ITERATIONS + 1))
    assert summary["iterations"] == ITERATIONS
    assert any(r["kind"] == "run_start" for r in _records(run_dir / "events-ps.jsonl"))
    metrics = (run_dir / "metrics.csv").read_text().splitlines()
    assert [int(line.split(",")[0]) for line in metrics[1:]] == [0, 3, 6]  # worker 0 tested at 0, every 3 and the end

    # the hosts' run folders came back, with every process's log and exit code
    hosts = run_dir / "hosts"
    assert sorted(p.name for p in hosts.iterdir()) == ["ps", "w0", "w1"]
    assert (hosts / "ps" / "ps.rc").read_text().strip() == "0"
    for k in range(2):
        assert (hosts / f"w{k}" / "worker.rc").read_text().strip() == "0"
        assert (hosts / f"w{k}" / "worker.ready").is_file() and (hosts / f"w{k}" / "links.ready").is_file()
        for name in ("worker.log", "replay.log", "config.yaml", "layout.json"):
            assert (hosts / f"w{k}" / name).is_file(), name

    # replay logs: both directions, on the run's event clock, the run's own per-worker schedule from the go
    man = json.loads((run_dir / "manifest.json").read_text())
    for k in range(2):
        header, recs = json.loads((run_dir / f"events-w{k}.jsonl").read_text().splitlines()[0]), _records(
            run_dir / f"events-w{k}.jsonl")
        first_push = min(r["t_s"] for r in recs if r["kind"] == "push")
        for d in ("up", "down"):
            rows = np.loadtxt(run_dir / f"replay-w{k}-{d}.csv", delimiter=",", skiprows=1, ndmin=2)
            t, wall, rate = rows[:, 0], rows[:, 1], rows[:, 2]
            assert len(t) >= 2 and np.all(np.diff(t) > 0)
            np.testing.assert_allclose(wall - t, header["origin_unix_s"], atol=0.05)  # one clock with the events
            assert man["replay_start_t_s"] <= t[0] <= first_push  # released by the go, before training sent anything
            expected = _schedule_rates(cfg, k, 2 * len(rate) + 10)
            logged = [round(float(r), 6) for r in rate]
            assert logged[0] == expected[0] and _is_subsequence(logged, expected)
    assert _schedule_rates(cfg, 0, 1) != _schedule_rates(cfg, 1, 1)  # different offsets: the check tells workers apart
    assert_tracking_accounts_for_every_transfer(run_dir, workers=2)

    # manifest: the hosts are the namespace addresses Fabric reached over SSH
    assert man["launcher"] == "fabric" and man["exit_status"]["status"] == "done"
    em = cfg["emulated"]["hosts"]
    assert man["hosts"]["ps"]["ssh"] == f"root@{em['ps']['addresses'][0]}:2222"
    for k in range(2):
        h = man["hosts"][f"w{k}"]
        assert h["netns"] == f"{prefix}w{k + 1}" and h["address"] == f"10.213.{k + 1}.2"
        assert h["ssh"] == f"root@10.213.{k + 1}.2:2222" and h["runtime"] == "native"
    energy = json.loads((run_dir / "energy.json").read_text())
    assert set(energy["devices"]) == {"ps", "w0", "w1"} and all("error" not in d for d in energy["devices"].values())

    # nothing left: namespaces, sshd, keys, remote work folder, processes; the secret in no file
    assert man["leftovers_after_cleanup"] == [] and _left(prefix) == []
    texts = "".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file() and p.suffix != ".pt")
    assert "ROG_SECRET=" not in texts


def test_sigint_mid_run_is_incomplete_and_leaves_nothing(runs):
    proc = runs[1]["int"]
    run_dir = runs[0] / "int" / "ROG4-outdoors-recorded-b1-w2-seed0-int"
    ev = run_dir / "events-w0.jsonl"  # mirrored from the remote host while the run goes on
    end = time.monotonic() + 600
    while not (ev.exists() and '"push"' in ev.read_text()):
        assert proc.poll() is None and time.monotonic() < end, proc.stderr.read()[-3000:] if proc.poll() else "no training"
        time.sleep(0.2)
    prefix = yaml.safe_load((run_dir / "config.yaml").read_text())["emulated"]["prefix"]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "incomplete" and "leftovers" not in summary
    assert (run_dir / "INCOMPLETE").read_text().startswith("interrupted (Ctrl-C)") and not (run_dir / "DONE").exists()
    pulls = [r for r in _records(run_dir / "events-w0.jsonl") if r["kind"] == "pull"]
    assert 1 <= len(pulls) < 100000  # the partial run's events were collected
    assert (run_dir / "hosts" / "w1" / "worker.log").is_file()  # every host's folder came back
    man = json.loads((run_dir / "manifest.json").read_text())
    assert man["exit_status"]["status"] == "incomplete" and man["leftovers_after_cleanup"] == []
    assert _left(prefix) == []
