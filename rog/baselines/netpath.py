"""Worker-to-worker paths for collective baselines on the emulated testbed, and gloo's interface.

The emulated testbed (:mod:`rog.testbed.netns`) is a star: worker ``w`` has one veth link to the
parameter-server namespace and an address in its own /24; nothing routes between workers, because
ROG's workers only ever talk to the PS.  A ring all-reduce (gloo) sends worker to worker.  On a
robot team that traffic would cross the Wi-Fi hotspot: up the sender's wireless link, down the
receiver's.  :func:`enable_forwarding` (run inside the PS namespace) and :func:`route_via_ps` (run
inside a worker namespace) build exactly that path: the PS namespace forwards IPv4 between its
veth ends, and each worker sends the testbed's whole subnet through its PS end.  A packet from
worker ``i`` to worker ``j`` then leaves on ``i``'s uplink (its ``tbf``) and enters ``j`` through
``j``'s downlink (the PS end's ``tbf``), so each hop meets the same two shaped directions a
push and a pull meet.  Both settings live in the namespaces and vanish with them.

:func:`interface_for` names the local interface that reaches an address (for
``GLOO_SOCKET_IFNAME``: gloo otherwise resolves the machine's hostname, which in a namespace is
an address that does not exist there).
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
import subprocess
from pathlib import Path

_SIOCGIFADDR = 0x8915
_IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


class NetPathError(RuntimeError):
    """A route, the forwarding switch or the interface lookup failed (the message says which and why)."""


def enable_forwarding(path: Path = _IP_FORWARD) -> None:
    """Forward IPv4 between interfaces in the calling process's network namespace (the PS namespace)."""
    try:
        path.write_text("1\n")
    except OSError as e:
        raise NetPathError(f"cannot enable IPv4 forwarding ({path}: {e.strerror}); the DDP baseline needs root "
                           f"inside the parameter-server namespace") from None


def route_argv(subnet: str, ps_address: str, dev: str) -> list[str]:
    """The ``ip route`` command that sends the testbed ``subnet`` through the PS end ``ps_address``."""
    net = ipaddress.ip_network(subnet)
    ipaddress.ip_address(ps_address)
    return ["ip", "route", "replace", str(net), "via", ps_address, "dev", dev]


def route_via_ps(subnet: str, ps_address: str, dev: str) -> None:
    """In the calling process's namespace (a worker's): route ``subnet`` via the PS end of its link."""
    argv = route_argv(subnet, ps_address, dev)
    p = subprocess.run(argv, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise NetPathError(f"'{' '.join(argv)}' failed: {p.stderr.strip() or p.returncode}")


def local_address_to(host: str) -> str:
    """The local IPv4 address this namespace uses to reach ``host`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 9))
        except OSError as e:
            raise NetPathError(f"no route to {host} from this network namespace: {e.strerror}") from None
        return s.getsockname()[0]


def interface_address(name: str) -> str | None:
    """IPv4 address of interface ``name`` in this namespace, or None."""
    ifr = struct.pack("256s", name.encode()[:15])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            out = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, ifr)
        except OSError:
            return None
    return socket.inet_ntoa(out[20:24])


def interface_for(host: str) -> str:
    """Name of the local interface whose address is the one used to reach ``host`` (``lo`` for 127.0.0.1)."""
    addr = local_address_to(host)
    for _, name in socket.if_nameindex():
        if interface_address(name) == addr:
            return name
    raise NetPathError(f"no interface in this namespace holds {addr} (the address used to reach {host}); "
                       f"set GLOO_SOCKET_IFNAME yourself")
