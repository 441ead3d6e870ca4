"""rog.testbed.emulated_hosts: the hosts file it writes for the emulated devices reads back (rog.deploy.load_hosts)
as the very hosts the Fabric launcher's emulated testbed uses; its flags are checked (no root needed)."""

from __future__ import annotations

import sys

import pytest
import yaml

from rog.deploy.hosts import hosts_from_dict
from rog.testbed import emulated_hosts as EH
from rog.testbed.netns import Testbed
from rog.testbed.sshd import NamespaceSshd


@pytest.mark.parametrize("n", [1, 4])
def test_written_hosts_file_reads_back_as_the_same_hosts(n):
    tb = Testbed(n_workers=n, prefix="rgtq1234")
    hf = NamespaceSshd(tb, python=sys.executable).hosts_file(python=sys.executable, work_dir="/run/x", device_profile="laptop",
                                                            worker_profile="quick-cpu", shared_work_dir=True)
    back = hosts_from_dict(yaml.safe_load(yaml.safe_dump(EH.hosts_to_dict(hf), sort_keys=False)), source="x.yaml")
    assert back.hosts == hf.hosts and back.known_hosts == hf.known_hosts and not back.accept_new_host_keys
    assert back.n_workers == n and back.ps.replay.direction == "none"
    w = back.workers[-1]  # a worker shapes both directions of its own veth, the ingress at the PS end
    assert w.interface == f"rgtq1234v{n}w" and w.replay.peer_interface == f"rgtq1234v{n}p"
    assert w.replay.peer_netns == "rgtq1234ps" and w.ps_address == tb.ps_address(n)


def test_flags_are_checked(tmp_path, capsys):
    (tmp_path / "there.yaml").write_text("")
    for args, msg in ((["--out", str(tmp_path / "h.yaml"), "--workers", "0"], "--workers"),
                      (["--out", str(tmp_path / "there.yaml")], "exists"),
                      (["--out", str(tmp_path / "h.yaml"), "--hold-s", "0"], "--hold-s")):
        with pytest.raises(SystemExit) as e:
            EH.parse_args(args)
        assert e.value.code == 2 and msg in capsys.readouterr().err
