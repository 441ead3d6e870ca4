"""The host side of the emulated testbed: whether namespaces are usable, the veths' offloads, the names
a prefix owns, cleaning a prefix up (also after a crash) and reading back what is live.

:class:`rog.testbed.netns.Testbed` builds on these; they are re-exported there.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import time
from pathlib import Path

from rog.testbed.tc import parse_qdisc_json, qdisc_rate_mbit, run_argv

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")

NO_NETNS_WARNING = (
    "WARNING: the emulated testbed needs root and working network namespaces ({reason}); falling back "
    "to loopback with shaping inside the transport (a token bucket following the same traces). "
    "Kernel queueing, TCP's reaction to tc and per-packet timing are NOT emulated in this mode; "
    "run as root for the namespace testbed."
)


def have_root_netns() -> bool:
    """True when the namespace testbed can run: euid 0, iproute2 present and ``ip netns add`` works."""
    return root_netns_status()[0]


def root_netns_status() -> tuple[bool, str]:
    """``(ok, reason)``: whether namespaces are usable, and why not (for :data:`NO_NETNS_WARNING`)."""
    if os.geteuid() != 0:
        return False, f"not root (euid {os.geteuid()})"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return False, "iproute2 (ip, tc) not found on PATH"
    ns = f"rogprobe{os.getpid()}"
    p = run_argv(["ip", "netns", "add", ns], check=False)
    if p.returncode != 0:
        return False, f"'ip netns add' failed: {p.stderr.strip()}"
    run_argv(["ip", "netns", "del", ns], check=False)
    return True, "ok"


def no_netns_warning() -> str:
    """The warning text for the loopback fallback, with the reason filled in."""
    return NO_NETNS_WARNING.format(reason=root_netns_status()[1])


# ----------------------------------------------------------------------------------- offloads

_SIOCETHTOOL = 0x8946
_ETHTOOL_GET = {"tso": 0x1E, "gso": 0x23, "gro": 0x2B}
_ETHTOOL_SET = {"tso": 0x1F, "gso": 0x24, "gro": 0x2C}


def _ethtool_ioctl(dev: str, cmd: int, data: int = 0) -> int:
    buf = (ctypes.c_uint32 * 2)(cmd, data)
    ifr = struct.pack("16sP", dev.encode(), ctypes.addressof(buf))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), _SIOCETHTOOL, ifr)
    return int(buf[1])


def offload_state(dev: str) -> dict[str, bool]:
    """GRO/GSO/TSO of ``dev`` in the current namespace (legacy ethtool ioctls)."""
    return {k: bool(_ethtool_ioctl(dev, c)) for k, c in _ETHTOOL_GET.items()}


def disable_offloads(dev: str) -> str:
    """Turn GRO/GSO/TSO off on ``dev`` in the current namespace; returns which tool did it."""
    if shutil.which("ethtool"):
        run_argv(["ethtool", "-K", dev, "gro", "off", "gso", "off", "tso", "off"])
        return "ethtool"
    for c in _ETHTOOL_SET.values():
        _ethtool_ioctl(dev, c, 0)
    return "ioctl"


# ----------------------------------------------------------------------------------- naming

def _check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix):
        raise ValueError(f"prefix must be 1-10 lowercase letters/digits starting with a letter "
                         f"(interface names are at most 15 characters), got {prefix!r}")
    return prefix


def netns_names(prefix: str) -> re.Pattern:
    """Pattern of the namespace names a testbed with ``prefix`` owns."""
    return re.compile(rf"^{re.escape(prefix)}(ps|w\d+)$")


def _link_names(prefix: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(prefix)}(v\d+[wp]|cap)$")


def list_netns() -> list[str]:
    """Names of all named network namespaces (``ip netns list``)."""
    p = run_argv(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def _kill_netns_pids(ns: str, grace_s: float = 1.0) -> None:
    pids = [int(x) for x in run_argv(["ip", "netns", "pids", ns], check=False).stdout.split() if x.isdigit()]
    pids = [p for p in pids if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            try:
                os.kill(pid, sig)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(p) for p in alive):
            time.sleep(0.02)
        pids = [p for p in alive if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def cleanup_prefix(prefix: str) -> list[str]:
    """Remove everything a testbed with ``prefix`` owns: its namespaces (and processes inside them),
    and stray veth/ifb devices of that prefix left in the root namespace by a crash mid-create.
    Returns what was removed."""
    _check_prefix(prefix)
    removed = []
    pat = netns_names(prefix)
    for ns in list_netns():
        if pat.match(ns):
            _kill_netns_pids(ns)
            run_argv(["ip", "netns", "del", ns], check=False)
            removed.append(f"netns {ns}")
    links = run_argv(["ip", "-j", "link", "show"], check=False).stdout.strip()
    lpat = _link_names(prefix)
    for link in json.loads(links) if links else []:
        name = link.get("ifname", "")
        if lpat.match(name):
            run_argv(["ip", "link", "del", "dev", name], check=False)
            removed.append(f"link {name}")
    note = _allowed_note(prefix)
    if note.is_file():  # this prefix's testbed added its tcp_cc to the allowed list: put the list back
        try:
            Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").write_text(note.read_text())
            note.unlink()
            removed.append("tcp_allowed_congestion_control entry")
        except OSError:
            pass
    return removed


def _allowed_note(prefix: str) -> Path:
    return Path("/run/rog-testbed") / f"{prefix}.tcp_allowed_congestion_control"

def _host_tcp_cc() -> str:
    try:
        return Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    except OSError:
        return "unknown"


def inspect_prefix(prefix: str) -> list[dict]:
    """Rows describing the live namespaces of ``prefix`` (read from the system, not from an object)."""
    rows = []
    pat = netns_names(prefix)
    for ns in sorted(n for n in list_netns() if pat.match(n)):
        addr = run_argv(["ip", "-j", "-n", ns, "addr", "show"], check=False).stdout.strip()
        qd = parse_qdisc_json(run_argv(["tc", "-j", "-n", ns, "qdisc", "show"], check=False).stdout)
        for link in json.loads(addr) if addr else []:
            dev = link.get("ifname")
            if dev == "lo":
                continue
            ips = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", []) if a.get("family") == "inet"]
            mine = [q for q in qd if q.get("dev") == dev]
            root = next((q for q in mine if q.get("root")), None)
            ingress = next((q.get("kind") for q in mine if q.get("kind") in ("ingress", "clsact")), None)
            rate = qdisc_rate_mbit(root) if root else None
            if root and root.get("kind") == "htb":
                rate = _htb_rate_mbit(ns, dev)
            rows.append({
                "netns": ns, "dev": dev, "address": ",".join(ips) or "-",
                "qdisc": (root.get("kind") if root else "-") + (f"+{ingress}" if ingress else ""),
                "rate_mbit": rate, "state": link.get("operstate", "?"),
            })
    return rows


def _htb_rate_mbit(ns: str, dev: str) -> float | None:
    out = run_argv(["tc", "-n", ns, "class", "show", "dev", dev], check=False).stdout
    m = re.search(r"class htb 1:1 .*?rate (\S+)", out)
    return _parse_tc_rate(m.group(1)) if m else None


def _parse_tc_rate(s: str) -> float | None:
    m = re.match(r"^([\d.]+)([KMG]?)bit$", s)
    if not m:
        return None
    return float(m.group(1)) * {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}[m.group(2)]


def format_table(rows: list[dict]) -> str:
    """Aligned text table of :func:`inspect_prefix` rows."""
    if not rows:
        return "(no namespaces)"
    cols = ["netns", "dev", "address", "state", "qdisc", "rate_mbit"]
    cells = [[("-" if r[c] is None else f"{r[c]:g}" if isinstance(r[c], float) else str(r[c])) for c in cols]
             for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(x.ljust(w) for x, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
