"""scripts/run.py --testbed hosts --hosts FILE --dry-run: the deployment plan of configs/hosts.example.yaml
is printed without any connection (socket connects fail the test) and without a run folder; it names
every host, starts the parameter server before any worker, and carries no secret."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest
import yaml
from rog.experiment import cli
from rog.experiment import config as runcfg

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "scripts" / "run.py"
EXAMPLE = ROOT / "configs" / "hosts.example.yaml"
CACHE = ROOT / "result" / ".cache"


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to connect anywhere fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"--dry-run tried to connect: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_dry_run_prints_the_plan_of_the_example_hosts(tmp_path, capsys, no_network):
    rc = cli.main(["--testbed", "hosts", "--hosts", str(EXAMPLE), "--dry-run", "--result-dir", str(tmp_path),
                   "--cache-dir", str(CACHE), "--library", "ROG", "--threshold", "4"])
    out = capsys.readouterr().out
    assert rc == 0
    assert not any(tmp_path.iterdir())  # no run folder, no config written
    doc = yaml.safe_load(EXAMPLE.read_text())
    lines = out.splitlines()
    assert lines[0].startswith("deployment plan for run ROG4-outdoors-recorded-b1-w4-seed0")
    for h in doc["hosts"]:  # every host, with its address
        assert any(h["name"] in line and h["address"] in line for line in lines), h["name"]
    ps_start = [i for i, line in enumerate(lines) if "start: start the parameter server" in line]
    worker_starts = [i for i, line in enumerate(lines) if re.search(r"start: start worker \d", line)]
    assert len(ps_start) == 1 and len(worker_starts) == 4
    assert ps_start[0] < min(worker_starts)
    for k, h in enumerate(sorted((h for h in doc["hosts"] if h["role"] == "worker"), key=lambda h: h["worker_id"])):
        assert f"[{h['name']}] start: start worker {k}" in out
        assert f"--worker-id {k} --ps-address 192.168.50.10 --port 29500" in out
    # no secret: not a value, not an assignment on a command line, no key material
    assert not re.search(r"\b[0-9a-f]{64}\b", out)
    assert not re.search(r"ROG_SECRET=\S", out)
    assert "PRIVATE KEY" not in out and "password" not in out.lower()


def test_hosts_testbed_argument_checks(tmp_path, capsys):
    cases = (
        (["--testbed", "hosts", "--dry-run"], "--hosts FILE"),
        (["--dry-run"], "--dry-run"),
        (["--hosts", str(EXAMPLE)], "--hosts is for --testbed hosts"),
        (["--testbed", "hosts", "--hosts", str(EXAMPLE), "--workers", "5", "--dry-run"], "names 4 worker(s)"),
        (["--testbed", "hosts", "--hosts", str(EXAMPLE), "--workers", "0", "--dry-run"], "--workers 0"),
        (["--testbed", "hosts", "--hosts", str(tmp_path / "missing.yaml"), "--dry-run"], "missing.yaml"),
    )
    for args, msg in cases:
        with pytest.raises(SystemExit) as e:
            cli.parse_args(args)
        assert e.value.code == 2 and msg in capsys.readouterr().err, args
    bad = tmp_path / "hosts.yaml"  # a field the hosts file does not know
    bad.write_text(EXAMPLE.read_text().replace("    batch_size: 24\n", "    batch_size: 24\n    password: x\n", 1))
    with pytest.raises(SystemExit) as e:
        cli.parse_args(["--testbed", "hosts", "--hosts", str(bad), "--dry-run"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "password" in err and "robot1" in err
    assert cli.parse_args(["--testbed", "hosts", "--hosts", str(EXAMPLE), "--dry-run"]).workers == 4
    assert cli.parse_args([]).workers == runcfg.DEFAULT_WORKERS
    # without --dry-run the run is deployed over SSH; a missing key is refused before anything is written,
    # prepared or connected, naming every host it concerns
    keyless = tmp_path / "hosts-keyless.yaml"
    keyless.write_text(EXAMPLE.read_text().replace("key_file: ~/.ssh/id_ed25519", f"key_file: {tmp_path}/no-such-key"))
    assert cli.main(["--testbed", "hosts", "--hosts", str(keyless), "--result-dir", str(tmp_path / "r"),
                     "--cache-dir", str(CACHE)]) == 2
    msg = capsys.readouterr().err
    assert msg.count(f"{tmp_path}/no-such-key does not exist") == 5 and "robot4: key_file" in msg
    assert not (tmp_path / "r").exists()


def test_batch_multiple_scales_the_paced_compute_but_not_the_links(tmp_path):
    """-b accumulates b mini-batches per iteration: compute is paced to b x the profile's time (the paper's
    batch item: computation grows in proportion), while the links keep the x1 regime."""
    assert runcfg.paced_compute_s(0.28, 4) == pytest.approx(1.12)
    assert runcfg.paced_compute_s(0.28, 4, explicit=True) == pytest.approx(0.28)  # --compute-s is per iteration
    assert runcfg.paced_compute_s(None, 4) is None  # unpaced runs stay unpaced
    cfgs = {}
    for b in (1, 4):
        a = cli.parse_args(["--testbed", "loopback", "-c", "outdoors", "-b", str(b), "--result-dir", str(tmp_path),
                            "--cache-dir", str(CACHE)])
        cfgs[b] = runcfg.resolve_config(a)
    profile_s = cfgs[1]["compute_s"]
    assert profile_s > 0 and cfgs[4]["compute_s"] == pytest.approx(4 * profile_s)
    assert cfgs[4]["rate_scale"] == pytest.approx(cfgs[1]["rate_scale"])
    assert cfgs[4]["time_scale"] == pytest.approx(cfgs[1]["time_scale"])


def test_a_run_uses_the_first_workers_of_a_larger_hosts_file(tmp_path, capsys, no_network):
    """--workers N below the hosts file's count: the PS and the workers with ids 0..N-1 take part (config.yaml,
    the deployment plan); the others are not contacted."""
    a = cli.parse_args(["--testbed", "hosts", "--hosts", str(EXAMPLE), "--workers", "2", "--dry-run"])
    assert a.workers == 2
    assert [h.name for h in a.hosts_file.hosts] == ["ps", "robot1", "robot2"]
    assert [w.worker_id for w in a.hosts_file.workers] == [0, 1]
    rc = cli.main(["--testbed", "hosts", "--hosts", str(EXAMPLE), "--workers", "2", "--dry-run",
                   "--result-dir", str(tmp_path), "--cache-dir", str(CACHE)])
    out = capsys.readouterr().out
    assert rc == 0 and out.splitlines()[0].startswith("deployment plan for run ROG4-outdoors-recorded-b1-w2-seed0")
    assert "[robot2] start: start worker 1" in out and "robot3" not in out and "robot4" not in out
    assert "192.168.50.13" not in out and "192.168.50.14" not in out
