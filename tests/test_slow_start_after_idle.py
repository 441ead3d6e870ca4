"""``run.py --tcp-slow-start-after-idle off``: TCP's slow-start restart after idle turned off inside every namespace
of the emulated testbed (the isolation run of docs/fleet.md), recorded in config.yaml's ``emulated`` entry,
compared by resume, named by the analysis, and refused where it would change the host's own setting."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from rog.analysis import provenance
from rog.errors import ConfigError
from rog.experiment import cli
from rog.experiment import config as runcfg
from rog.experiment import resume as R
from rog.experiment.run_config import slow_start_after_idle
from rog.paths import repo_root
from rog.testbed.netns import SLOW_START_AFTER_IDLE, Testbed, root_netns_status

ROOT_OK, WHY = root_netns_status()


def _writes(tb: Testbed) -> list[list[str]]:
    return [c for c in tb.create_argvs() if SLOW_START_AFTER_IDLE in c[-1]]


def test_off_writes_zero_inside_every_namespace_and_on_writes_nothing():
    off = Testbed(n_workers=2, prefix="r55y", slow_start_after_idle=False)
    assert [c[:4] for c in _writes(off)] == [["ip", "netns", "exec", ns] for ns in ("r55yps", "r55yw1", "r55yw2")]
    assert all(c[4:] == ["sh", "-c", f"printf 0 > {SLOW_START_AFTER_IDLE}"] for c in _writes(off))
    assert _writes(Testbed(n_workers=2, prefix="r55y")) == []  # the default: the kernel's own, untouched
    with pytest.raises(ValueError, match="slow_start_after_idle"):
        Testbed(n_workers=1, prefix="r55y", slow_start_after_idle="off")


def _read(argv_prefix: list[str]) -> str:
    return subprocess.run([*argv_prefix, "cat", SLOW_START_AFTER_IDLE], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(not ROOT_OK, reason=f"needs root and working 'ip netns' ({WHY})")
def test_a_testbed_with_it_off_reads_zero_inside_and_leaves_the_host_alone():
    prefix = f"r55s{os.getpid() % 100000}"  # the context manager removes it, and a crash's leftovers on the next start
    host_before = Path(SLOW_START_AFTER_IDLE).read_text().strip()
    with Testbed(n_workers=1, prefix=prefix, slow_start_after_idle=False, tcp_cc=None) as tb:
        inside = {ns: _read(["ip", "netns", "exec", ns]) for ns in tb.namespaces}
        host_during = Path(SLOW_START_AFTER_IDLE).read_text().strip()
    assert inside == {f"{prefix}ps": "0", f"{prefix}w1": "0"}
    assert host_during == host_before == Path(SLOW_START_AFTER_IDLE).read_text().strip()


def _args(*flags: str, tmp_path: Path):
    return cli.parse_args(["--rate-mbit", "10", "--workers", "2", *flags, "--result-dir", str(tmp_path)])


def test_loopback_and_hosts_refuse_the_flag_with_one_line(tmp_path, capsys):
    hosts = repo_root() / "configs" / "hosts.example.yaml"
    for flags in (["--testbed", "loopback"], ["--testbed", "hosts", "--hosts", str(hosts)], ["--serve-only"]):
        for value in ("on", "off"):  # "on" too: the host's own value may be 0
            with pytest.raises(SystemExit) as e:
                _args(*flags, "--tcp-slow-start-after-idle", value, tmp_path=tmp_path)
            err = capsys.readouterr().err.strip().splitlines()
            assert e.value.code == 2 and len(err) == 1, err
            assert "--tcp-slow-start-after-idle" in err[0] and "host's own setting" in err[0], err


def test_the_config_records_off_in_the_emulated_entry_and_a_fallback_refuses(tmp_path, monkeypatch):
    import rog.testbed.netns as netns

    monkeypatch.setattr(netns, "root_netns_status", lambda: (True, ""))  # names and addresses only: nothing built
    off = runcfg.resolve_config(_args("--tcp-slow-start-after-idle", "off", tmp_path=tmp_path))
    on = runcfg.resolve_config(_args("--tcp-slow-start-after-idle", "on", tmp_path=tmp_path))
    default = runcfg.resolve_config(_args(tmp_path=tmp_path))
    assert off["testbed"] == "emulated" and off["emulated"]["tcp_slow_start_after_idle"] == "off"
    assert "tcp_slow_start_after_idle" not in on["emulated"] and "tcp_slow_start_after_idle" not in default["emulated"]
    assert [slow_start_after_idle(c["emulated"]) for c in (off, on, default)] == [False, True, True]
    runcfg.RunConfig.from_dict(off, source="test")  # the typed view takes it
    monkeypatch.setattr(netns, "root_netns_status", lambda: (False, "not root (euid 1000)"))
    with pytest.raises(ConfigError, match=r"--tcp-slow-start-after-idle .*not root \(euid 1000\).*host's own"):
        runcfg.resolve_config(_args("--tcp-slow-start-after-idle", "off", tmp_path=tmp_path))
    assert runcfg.resolve_config(_args(tmp_path=tmp_path))["testbed"] == "loopback"  # without the flag: the fallback


def _emulated(prefix: str, **extra) -> dict:
    return {"testbed": "emulated", "workers": 2,
            "emulated": dict(prefix=prefix, subnet="10.213.0.0/16", hosts={"ps": {"netns": f"{prefix}ps"}}, **extra)}


def test_resume_compares_the_setting_but_not_the_namespace_names():
    planned = _emulated("rogaaaa")
    assert R.config_differences(_emulated("rogbbbb"), planned) == []  # another run's prefix: the same run
    assert R.config_differences(_emulated("rogbbbb", tcp_slow_start_after_idle="off"), planned) == [
        "emulated.tcp_slow_start_after_idle: found 'off', planned None"]
    assert R.config_differences(planned, _emulated("rogb", tcp_slow_start_after_idle="off")) == [
        "emulated.tcp_slow_start_after_idle: found None, planned 'off'"]
    hosts = {"testbed": "hosts", "workers": 2, "hosts": {"file": "/x/h.yaml", "ps": "laptop"}}
    assert R.config_differences(hosts, planned) == [  # an entry on one side: only what is not run-time in it
        "testbed: found 'hosts', planned 'emulated'", "hosts: found {'ps': 'laptop'}, planned None"]
    assert R.config_differences(hosts, _emulated("r", tcp_slow_start_after_idle="off"))[1:] == [
        "emulated: found None, planned {'tcp_slow_start_after_idle': 'off'}", "hosts: found {'ps': 'laptop'}, planned None"]


def test_the_analysis_names_it_and_refuses_a_bad_value():
    assert provenance.testbed_cell(SimpleNamespace(config=_emulated("r", tcp_slow_start_after_idle="off"))) == \
        "emulated, TCP slow start after idle off"
    assert provenance.testbed_cell(SimpleNamespace(config=_emulated("r"))) == "emulated"
    with pytest.raises(ConfigError, match="emulated.tcp_slow_start_after_idle: expected 'on' or 'off', got 'of'"):
        slow_start_after_idle({"tcp_slow_start_after_idle": "of"})
