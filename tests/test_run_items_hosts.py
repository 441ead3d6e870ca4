"""scripts/run_items.py --hosts FILE (bash scripts/run_all.sh --hosts FILE): every planned run on the hosts
testbed, items too large for the file skipped with a line, resume by testbed and hosts, a device lost mid-run
(INCOMPLETE naming the host, the plan goes on, a rerun finishes what is missing) and the --dry-run deployment
plan, driven with the fake run command (tests/fake_run_py.py) or without connecting anywhere."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rog.experiment import cli, driver
from rog.experiment import items as I

ROOT = Path(__file__).resolve().parents[1]
FAKE = Path(__file__).with_name("fake_run_py.py")
EXAMPLE = ROOT / "configs" / "hosts.example.yaml"
CACHE = ROOT / "result" / ".cache"
ROBOT5 = "\n  - name: robot5\n    address: 192.168.50.15\n    role: worker\n    worker_id: 4\n    batch_size: 24\n"


@pytest.fixture
def hosts5(tmp_path) -> Path:
    """The example's PS and four robots plus a fifth worker (id 4)."""
    f = tmp_path / "hosts5.yaml"
    f.write_text(EXAMPLE.read_text().rstrip("\n") + "\n" + ROBOT5)
    return f


def _items(tmp_path: Path, log: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, FAKE_LOG=str(log), **(env or {}))
    cmd = [sys.executable, str(ROOT / "scripts" / "run_items.py"), *args, "--budget-s", "5", "--no-post",
           "--run-py", str(FAKE), "--result-dir", str(tmp_path / "res"), "--figure-dir", str(tmp_path / "fig"),
           "--cache-dir", str(CACHE)]
    return subprocess.run(cmd, env=e, capture_output=True, text=True, cwd=str(ROOT), timeout=300)


def _starts(log: Path) -> list[str]:
    return [c.split()[1] for c in log.read_text().splitlines() if c.startswith("start")] if log.exists() else []


def test_every_run_goes_to_the_hosts_and_resume_knows_the_testbed(tmp_path, hosts5):
    ids = [I.run_id(s) for s in I.ITEMS["threshold"].runs]
    log, res = tmp_path / "calls.log", tmp_path / "res"
    r = _items(tmp_path, log, "threshold", "workers", "--hosts", str(hosts5))
    assert r.returncode == 0, r.stderr
    # the workers item needs 8 workers: one line says why it is left out; the file has 5
    assert f"skip item workers: its runs need up to 8 workers, the hosts file {hosts5.resolve()} names 5" in r.stdout
    assert _starts(log) == ids  # only the threshold item's runs, in plan order
    for rid in ids:
        cfg = yaml.safe_load((res / rid / "config.yaml").read_text())
        # run.py was called with --testbed hosts --hosts FILE; a 4-worker run on a 5-worker file uses ids 0..3
        assert cfg["testbed"] == "hosts" and cfg["hosts"]["file"] == str(hosts5.resolve())
        assert cfg["hosts"]["workers"] == ["robot1", "robot2", "robot3", "robot4"]
        assert (res / rid / "DONE").exists()
    plan = json.loads((res / "plan.json").read_text())
    assert plan["testbed"] == "hosts" and list(plan["items"]) == ["threshold"] and len(plan["skipped_items"]) == 1

    log.unlink()
    r = _items(tmp_path, log, "threshold", "--hosts", str(hosts5))  # the same command again: all complete
    assert r.returncode == 0 and _starts(log) == [] and r.stdout.count(" skip ") == len(ids)
    # the emulated testbed, or other worker hosts, do not count as the same runs
    r = _items(tmp_path, log, "threshold", "--dry-run")
    assert r.stdout.count("testbed: found 'hosts', planned 'emulated'") == len(ids)
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(hosts5.read_text().replace("name: robot2", "name: robotB"))
    r = _items(tmp_path, log, "threshold", "--hosts", str(renamed), "--dry-run")
    assert r.stdout.count("hosts.workers: found ['robot1', 'robot2', 'robot3', 'robot4'], planned ['robot1', "
                          "'robotB', 'robot3', 'robot4']") == len(ids)
    assert _starts(log) == []


def test_a_device_lost_mid_run_marks_it_incomplete_and_the_plan_goes_on(tmp_path):
    ids = [I.run_id(s) for s in I.ITEMS["threshold"].runs]
    log, res = tmp_path / "calls.log", tmp_path / "res"
    r = _items(tmp_path, log, "threshold", "--hosts", str(EXAMPLE), env={"FAKE_UNREACHABLE": f"{ids[1]}:robot3"})
    assert r.returncode == 1
    assert _starts(log) == ids  # the plan went on with the next runs
    assert f"{ids[1]}: INCOMPLETE (exit 1)" in r.stdout
    assert f"{ids[1]}: INCOMPLETE: robot3: status poll failed" in r.stdout  # the host named in the driver's log
    assert (res / ids[1] / "INCOMPLETE").read_text().startswith("robot3: ")
    assert all((res / i / "DONE").exists() for i in ids if i != ids[1])
    assert f"not complete: {ids[1]}" in r.stdout
    log.unlink()
    (tmp_path / "robot3.back").write_text("")  # the device is reachable again: the same command finishes the plan
    r = _items(tmp_path, log, "threshold", "--hosts", str(EXAMPLE), env={"FAKE_UNREACHABLE": f"{ids[1]}:robot3"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert _starts(log) == [ids[1]]
    assert (res / ids[1] / "DONE").exists() and (res / f"{ids[1]}.incomplete-1" / "INCOMPLETE").exists()


def test_hosts_flag_refusals(tmp_path, capsys, hosts5):
    common = ["--result-dir", str(tmp_path / "r"), "--figure-dir", str(tmp_path / "f"), "--dry-run"]
    cases = [
        (["outdoors", "--hosts", str(tmp_path / "none.yaml")], "none.yaml"),
        (["outdoors", "--hosts", str(EXAMPLE), "--parallel", "2"], "drop --parallel"),
        (["outdoors", "intradp", "--hosts", str(EXAMPLE)], "intradp run on this machine"),
        (["workers", "--hosts", str(hosts5)], "no item fits the hosts file's workers"),
    ]
    for args, msg in cases:
        with pytest.raises(SystemExit) as e:
            driver.parse_args(args + common)
        assert e.value.code == 2 and msg in capsys.readouterr().err, args
    assert not (tmp_path / "r").exists()


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"--dry-run tried to connect: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_dry_run_prints_every_runs_deployment_steps(tmp_path, capsys, no_network):
    ids = [I.run_id(s) for s in I.ITEMS["threshold"].runs]
    rc = driver.main(["threshold", "--hosts", str(EXAMPLE), "--dry-run", "--result-dir", str(tmp_path / "r"),
                      "--figure-dir", str(tmp_path / "f"), "--cache-dir", str(CACHE)])
    out = capsys.readouterr().out
    assert rc == 0 and not (tmp_path / "r").exists()
    assert "estimate:" in out and f"{len(ids)} distinct runs, {len(ids)} to run" in out
    # the first run's plan in full: the very text run.py --testbed hosts --dry-run prints for that run
    first = out[out.index(f"deployment plan for run {ids[0]}"):out.index(f"deploy {ids[0]}:")]
    prof = I.PROFILES["quick"]
    args = I.run_args(I.ITEMS["threshold"].runs[0], prof, prof.budget_for("threshold"), tmp_path / "r", "threshold",
                      EXAMPLE.resolve())
    assert cli.main([*args, "--dry-run", "--cache-dir", str(CACHE)]) == 0
    assert capsys.readouterr().out.strip() == first.strip()
    rendered_steps = sum(1 for line in first.splitlines() if line.startswith("  [") and "] " in line)
    counts = {}
    for line in out.splitlines():
        if line.startswith("deploy ") and " steps on " in line:
            rid, rest = line[len("deploy "):].split(": ", 1)
            counts[rid] = int(rest.split()[0])
            assert "on 5 hosts" in rest
    assert list(counts) == ids and counts[ids[0]] == rendered_steps  # every run; the count is the plan's steps
    assert f"deployment: {len(ids)} run(s), {sum(counts.values())} steps in all" in out


def test_config_records_each_hosts_profile_interface_and_runtime(tmp_path, hosts5):
    """config.yaml's hosts.devices: every host of the run (the PS and the first --workers workers) with the
    profile, interface and runtime its hosts-file entry gives (defaults applied), read here from the YAML."""
    from rog.experiment.config import resolve_config

    doc = yaml.safe_load(hosts5.read_text())
    a = cli.parse_args(["--testbed", "hosts", "--hosts", str(hosts5), "--workers", "3", "--result-dir", str(tmp_path),
                        "--cache-dir", str(CACHE)])
    devices = resolve_config(a)["hosts"]["devices"]
    assert list(devices) == ["ps", "robot1", "robot2", "robot3"]  # robot4 and robot5 take no part
    for h in doc["hosts"][:4]:
        want = {**doc["defaults"], **h}
        d = devices[h["name"]]
        assert (d["device_profile"], d["interface"], d["runtime"], d["image"]) == (
            want["device_profile"], want["interface"], want["runtime"], want["image"])
        assert d["rank"] == ("ps" if h["role"] == "ps" else f"w{h['worker_id']}")
        assert d["target"] == f"{want['user']}@{h['address']}:{want['port']}"
    assert devices["ps"]["runtime"] == "native" and devices["robot1"]["runtime"] == "docker"
