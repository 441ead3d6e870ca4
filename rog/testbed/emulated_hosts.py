"""Emulated devices for the real-device path, without devices:

    python -m rog.testbed.emulated_hosts --workers 4 --out /tmp/rog-hosts.yaml &
    bash scripts/run_all.sh --hosts /tmp/rog-hosts.yaml outdoors --budget-s 30
    kill -INT %1          # tears the devices down (namespaces, sshd, keys, work folder) and deletes the file

One network namespace per device (a PS and N workers on veth links, :class:`rog.experiment.emulated.EmulatedNetwork`),
each with its own sshd (:class:`rog.testbed.sshd.NamespaceSshd`), exactly as the Fabric launcher's emulated
testbed builds them; the hosts file written names them as a user's hosts file names real devices (each
worker's ``interface`` is its veth, its replay shapes both directions, the ingress at the PS end), so
``run.py --testbed hosts`` and ``run_items.py --hosts`` deploy to them over SSH as to a laptop and Jetsons.
Every device reaches every other through the PS namespace (:func:`route_devices`), as on one Wi-Fi network.
The command holds the devices until SIGINT/SIGTERM (or ``--hold-s``), then removes everything and exits
0 when nothing is left (1 with what is left, on stderr).  Root and sshd are needed (``scripts/setup_sshd.sh``).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

__all__ = ["hosts_to_dict", "main"]


def hosts_to_dict(hf) -> dict:
    """A :class:`rog.deploy.hosts.HostsFile` as the YAML mapping :func:`rog.deploy.hosts.load_hosts` reads back."""
    hosts = []
    for h in hf.hosts:
        e = dict(name=h.name, address=h.address, port=h.port, user=h.user, role=h.role)
        if h.worker_id is not None:
            e.update(worker_id=h.worker_id, batch_size=h.batch_size)
        if h.ps_address is not None:
            e["ps_address"] = h.ps_address
        e.update(interface=h.interface, device_profile=h.device_profile, runtime=h.runtime, python=h.python,
                 work_dir=h.work_dir)
        if h.image is not None:
            e["image"] = h.image
        for key in ("key_file", "proxy_command"):
            if getattr(h, key) is not None:
                e[key] = getattr(h, key)
        r = h.replay
        rep = dict(direction=r.direction, ingress_via=r.ingress_via)
        for key in ("peer_interface", "peer_netns", "offset_s"):
            if getattr(r, key) is not None:
                rep[key] = getattr(r, key)
        e["replay"] = rep
        hosts.append(e)
    return dict(version=1, known_hosts=hf.known_hosts, accept_new_host_keys=hf.accept_new_host_keys, hosts=hosts)


def route_devices(testbed) -> None:
    """Let every device reach every other, as on a Wi-Fi network: the PS namespace forwards IPv4 and each
    worker routes the testbed's subnet through the PS end of its own link (so worker-to-worker traffic, e.g.
    DDP's gloo ring, crosses both shaped links, as on the emulated testbed)."""
    from rog.baselines.netpath import route_argv
    from rog.testbed.tc import run_argv

    run_argv(testbed.exec_argv(testbed.netns_of("ps"), ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"]))
    for w in range(1, testbed.n_workers + 1):
        argv = route_argv(str(testbed.subnet), testbed.ps_address(w), testbed.veth_names(w)[0])
        run_argv(testbed.exec_argv(testbed.netns_of(w), argv))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m rog.testbed.emulated_hosts", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=4, help="worker devices (default 4)")
    p.add_argument("--out", required=True, help="the hosts file to write (deleted at the end)")
    p.add_argument("--profile", default="quick-cpu", help="the workers' device profile (default quick-cpu)")
    p.add_argument("--ps-profile", default="laptop", help="the PS's device profile (default laptop)")
    p.add_argument("--hold-s", type=float, default=None, help="tear down after this many seconds (default: at SIGINT/SIGTERM)")
    a = p.parse_args(argv)
    if a.workers < 1:
        p.error("--workers must be >= 1")
    if a.hold_s is not None and not a.hold_s > 0:
        p.error("--hold-s must be a positive number of seconds")
    if Path(a.out).exists():
        p.error(f"--out {a.out} exists; give a new path (it is deleted when the devices go)")
    return a


def main(argv=None) -> int:
    """Create the devices, write the hosts file, hold, tear down; 0 when nothing was left behind."""
    import yaml

    from rog.experiment.emulated import EmulatedHosts, EmulatedNetwork
    from rog.testbed.netns import root_netns_status
    from rog.testbed.sshd import find_sshd

    a = parse_args(argv)
    ok, why = root_netns_status()
    if not ok or find_sshd() is None:
        print(f"emulated_hosts: error: needs root, network namespaces and sshd ({why if not ok else 'no sshd'}; "
              f"bash scripts/setup_sshd.sh installs sshd)", file=sys.stderr)
        return 2
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: stop.append(s))
    out = Path(a.out)
    site = EmulatedHosts(EmulatedNetwork(a.workers), python=sys.executable)
    left: list[str] = []
    try:
        hf = site.open(a.ps_profile, a.profile, "both", replay=True)
        route_devices(site.net.testbed)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(yaml.safe_dump(hosts_to_dict(hf), sort_keys=False))
        os.replace(tmp, out)
        print(f"emulated_hosts: {a.workers} worker(s) and a PS ready in namespaces {site.net.prefix}*; hosts file "
              f"{out}; SIGINT or SIGTERM tears them down", flush=True)
        end = None if a.hold_s is None else time.monotonic() + a.hold_s
        while not stop and (end is None or time.monotonic() < end):
            time.sleep(0.2)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the teardown is not cut short
        try:
            left = site.close()
        finally:
            out.unlink(missing_ok=True)
    if left:
        print(f"emulated_hosts: left behind: {left}", file=sys.stderr)
        return 1
    print("emulated_hosts: torn down, nothing left", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
