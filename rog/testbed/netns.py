"""The emulated testbed: a parameter-server namespace and N worker namespaces joined by shaped veths.

Topology (point-to-point, no bridge)::

    {prefix}w1 [{prefix}v1w 10.213.1.2/24] ==veth== [{prefix}v1p 10.213.1.1/24] {prefix}ps
    {prefix}w2 [{prefix}v2w 10.213.2.2/24] ==veth== [{prefix}v2p 10.213.2.1/24] {prefix}ps  ...

Why point-to-point rather than a bridge: every worker link then has its own interface at the PS,
so each direction of each link is shaped by one ``tbf`` on the sending side of its veth end
(uplink = worker end's egress, downlink = PS end's egress), with no classifier and no filters
to get wrong; the PS reaches worker ``w`` on link ``w``'s address.  Addresses come from a
private range (default ``10.213.0.0/16``, one /24 per link, link ``w`` uses the ``w``-th /24)
that exists only inside these namespaces: nothing is routed to or from the root namespace.

GRO/GSO/TSO are turned off on every veth (``ethtool -K`` when installed, else the same legacy
``SIOCETHTOOL`` ioctls from Python, so ethtool is optional).  Recent kernels build GSO packets in
TCP whatever the device's ``gso`` flag says (they are split after the qdisc), so every veth also
gets ``gso_max_segs 1``: then each skb is one wire packet and the shapers see wire-sized packets.

Why that matters: tbf can never send a queued packet longer than its bucket.  A 25-64 KB GSO
packet queued at a high rate, followed by a drop to a low rate (bucket 3 KB), blocks the link
until the rate rises again.  Before ``gso_max_segs 1``, BBR (large pacing-sized GSO packets) hit
this and stalled for 10-30 s in ``scripts/bench_replay.py`` (corr 0.76); now BBR and cubic both
give corr 1.0.

TCP congestion control: the namespaces default to ``cubic`` (``tcp_cc``), Linux's usual default
and what the paper's devices ran, whatever the host's default (this project's machines use
``bbr``).  A non-root namespace may only default to an algorithm on the root's
``tcp_allowed_congestion_control`` list, so :meth:`Testbed.create` adds ``tcp_cc`` there if
missing and :meth:`Testbed.destroy` puts the list back.

Shared-channel cap (``cap_mbit``, the shared access point of docs/fleet.md): every packet the PS
ends of the worker links receive (uplinks) and send (downlinks) is redirected by a ``clsact`` filter
(ingress and egress hooks) to one ifb ``{prefix}cap`` in the PS namespace, shaped by ONE htb class at
``cap_mbit`` with a short FIFO leaf: uplinks and downlinks of every worker share that one capacity,
in both directions together (a radio carries one frame at a time), and the flows share it as TCP
shares a FIFO bottleneck (about equally at equal round-trip times; the simulator's model is exactly
max-min fair).  A downlink packet passes the cap first, then its worker's own downlink ``tbf`` (the
ifb hands an egress packet back to the device it came from); an uplink packet passes its worker's
uplink ``tbf`` first.  ``cap_both=False`` caps the uplink only (what this testbed did before).

TCP slow start after idle (``slow_start_after_idle``): when a connection has sent nothing for a
retransmission timeout, Linux shrinks its congestion window (halved per timeout idle, down to the initial
window) and the next transfer slow-starts again (``net.ipv4.tcp_slow_start_after_idle``, on by default;
RFC 5681 section 4.1); a push after a compute phase and a pull after a stall are such transfers.  The setting is per network namespace and a new namespace starts with
the kernel's default (on), whatever the host's; ``slow_start_after_idle=False`` writes 0 inside every
namespace of the testbed (the isolation run of docs/fleet.md), never the host's own.

Cleanup: :class:`Testbed` is a context manager that destroys on exit, on SIGTERM/SIGHUP and at
interpreter exit; :meth:`Testbed.create` first removes leftovers of the same prefix
(:func:`cleanup_prefix`), so a crash (even SIGKILL) is repaired by the next start.  Destroying
kills the processes still inside the namespaces (by pid, from ``ip netns pids``), since a
namespace with live processes outlives ``ip netns del``.

Workers are numbered 1..N everywhere (names, addresses, arguments); the PS is ``"ps"``.

Without root (:func:`have_root_netns` is False) the runtime falls back to loopback with the
transport's own token bucket following the same traces, and prints :data:`NO_NETNS_WARNING`.

Host-level helpers (root check, offloads, names, cleanup, inspection) are in
:mod:`rog.testbed.netns_host`, the probes started inside namespaces (TCP echo, bulk sender and
receiver; ``python -m rog.testbed.netns CMD`` still runs them) in :mod:`rog.testbed.netns_probes`;
both are re-exported here.
"""

from __future__ import annotations

import atexit
import ipaddress
import re
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Sequence

from rog.errors import exit_on_signal
from rog.testbed.netns_host import (NO_NETNS_WARNING, _allowed_note, _check_prefix, _host_tcp_cc, cleanup_prefix,
                                    disable_offloads, format_table, have_root_netns, inspect_prefix, list_netns,
                                    netns_names, no_netns_warning, offload_state, root_netns_status)
from rog.testbed.netns_probes import _main, payload_per_frame, probe_argv, start_probe, wait_ready
from rog.testbed.replay import ReplayHandle, ReplayOptions, Replayer, Schedule, build_schedule
from rog.testbed.tc import DEFAULT_BURST_MS, DEFAULT_LATENCY_MS, Argv, Shaper, Target, TcError, run_argv, shape_params

__all__ = [
    "DEFAULT_PREFIX", "DEFAULT_SUBNET", "DEFAULT_TCP_CC", "DEFAULT_RATE_MBIT", "DIRECTIONS", "SLOW_START_AFTER_IDLE",
    "Testbed",
    # re-exported from rog.testbed.netns_host and rog.testbed.netns_probes
    "NO_NETNS_WARNING", "cleanup_prefix", "disable_offloads", "format_table", "have_root_netns", "inspect_prefix",
    "list_netns", "netns_names", "no_netns_warning", "offload_state", "root_netns_status",
    "payload_per_frame", "probe_argv", "start_probe", "wait_ready",
]

DEFAULT_PREFIX = "rog"
DEFAULT_SUBNET = "10.213.0.0/16"
DEFAULT_TCP_CC = "cubic"  # Linux's default and the paper's devices'; some hosts default to bbr (see module doc)
DEFAULT_RATE_MBIT = 1000.0  # "unshaped" link: tbf at 1 Gbit/s until a replay or set_rate changes it
DIRECTIONS = ("up", "down", "both")
SLOW_START_AFTER_IDLE = "/proc/sys/net/ipv4/tcp_slow_start_after_idle"  # per network namespace (read from inside)
_DIRECTION_ALIASES = {"up": "up", "uplink": "up", "down": "down", "downlink": "down", "both": "both"}


# ----------------------------------------------------------------------------------- testbed

class Testbed:
    """A PS namespace and ``n_workers`` worker namespaces with one shaped veth link each.

    ``cap_mbit``: optional shared-channel cap at the PS (htb on an ifb): uplinks and downlinks together,
    or, with ``cap_both=False``, the uplinks only.
    ``rate_mbit``: initial rate of every link in both directions (tbf; default 1 Gbit/s).
    ``latency_ms`` / ``burst_ms``: queue and bucket sizing of every shaper (see
    :func:`rog.testbed.tc.shape_params`).  ``tcp_cc``: default TCP congestion control inside
    the namespaces (``cubic``; None keeps the host's, which may be bbr: see :meth:`_set_tcp_cc`).
    ``slow_start_after_idle``: False turns TCP's slow-start restart after idle off in every namespace
    (True leaves the kernel's default, on).
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, n_workers: int = 4, prefix: str = DEFAULT_PREFIX, subnet: str = DEFAULT_SUBNET,
                 cap_mbit: float | None = None, rate_mbit: float = DEFAULT_RATE_MBIT,
                 latency_ms: float = DEFAULT_LATENCY_MS, burst_ms: float = DEFAULT_BURST_MS,
                 tcp_cc: str | None = DEFAULT_TCP_CC, cap_both: bool = True,
                 slow_start_after_idle: bool = True) -> None:
        if not isinstance(n_workers, int) or not 1 <= n_workers <= 999:
            raise ValueError(f"n_workers must be an integer in 1..999, got {n_workers!r}")
        self.prefix = _check_prefix(prefix)
        try:
            net = ipaddress.ip_network(subnet)
        except ValueError as e:
            raise ValueError(f"subnet must be an IPv4 network like '10.213.0.0/16', got {subnet!r}: {e}") from e
        if net.version != 4 or not net.is_private:
            raise ValueError(f"subnet must be a private IPv4 range (it exists only inside the namespaces), "
                             f"got {subnet!r}")
        new_prefix = 24 if net.prefixlen <= 16 else 30
        if net.prefixlen > new_prefix or 2 ** (new_prefix - net.prefixlen) < n_workers + 1:
            raise ValueError(f"subnet {subnet} is too small for {n_workers} links of /{new_prefix}; "
                             f"use a larger range such as 10.213.0.0/16")
        self.subnet = net
        self._link_prefixlen = new_prefix
        if cap_mbit is not None and not cap_mbit > 0:
            raise ValueError(f"cap_mbit must be > 0 Mbit/s or None (no cap), got {cap_mbit!r}")
        self.n_workers = n_workers
        self.cap_mbit = cap_mbit
        self.cap_both = bool(cap_both)
        self.rate_mbit = float(rate_mbit)
        self.latency_ms = latency_ms
        self.burst_ms = burst_ms
        shape_params(self.rate_mbit, latency_ms, burst_ms)  # validates
        self.created = False
        self._replays: list[ReplayHandle] = []
        self._old_handlers: dict[int, object] = {}
        self._lock = threading.Lock()
        self.offload_tool: str | None = None
        if tcp_cc is not None and not re.match(r"^[a-z0-9_]{1,15}$", str(tcp_cc)):
            raise ValueError(f"tcp_cc must be a congestion control name such as 'cubic', or None, got {tcp_cc!r}")
        self.tcp_cc = tcp_cc
        if not isinstance(slow_start_after_idle, bool):
            raise ValueError(f"slow_start_after_idle must be True or False, got {slow_start_after_idle!r}")
        self.slow_start_after_idle = slow_start_after_idle
        self.tcp_cc_used = _host_tcp_cc()  # what TCP sockets in the namespaces use (set by create)

    # ---- names and addresses
    def _check_worker(self, w) -> int:
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= self.n_workers:
            raise ValueError(f"worker must be an integer in 1..{self.n_workers} (workers are numbered from 1), "
                             f"got {w!r}")
        return w

    def netns_of(self, who) -> str:
        """Namespace name of ``"ps"`` or worker ``w`` (1..N)."""
        if who == "ps":
            return f"{self.prefix}ps"
        return f"{self.prefix}w{self._check_worker(who)}"

    @property
    def namespaces(self) -> list[str]:
        """All namespaces of this testbed, PS first."""
        return [self.netns_of("ps")] + [self.netns_of(w) for w in range(1, self.n_workers + 1)]

    def _link_net(self, w: int) -> ipaddress.IPv4Network:
        return _nth_subnet(self.subnet, self._link_prefixlen, w)

    def ps_address(self, worker: int) -> str:
        """The PS's address as seen from ``worker`` (the PS end of that worker's link)."""
        return str(self._link_net(self._check_worker(worker))[1])

    def worker_address(self, w: int) -> str:
        """Worker ``w``'s address (its end of its link)."""
        return str(self._link_net(self._check_worker(w))[2])

    def veth_names(self, w: int) -> tuple[str, str]:
        """``(worker end, PS end)`` interface names of worker ``w``'s link."""
        self._check_worker(w)
        return f"{self.prefix}v{w}w", f"{self.prefix}v{w}p"

    def uplink_dev(self, w: int) -> Target:
        """Where worker ``w``'s uplink (worker -> PS) is shaped: the worker end's egress."""
        return Target(self.veth_names(w)[0], self.netns_of(w))

    def downlink_dev(self, w: int) -> Target:
        """Where worker ``w``'s downlink (PS -> worker) is shaped: the PS end's egress."""
        return Target(self.veth_names(w)[1], self.netns_of("ps"))

    @property
    def cap_dev(self) -> Target:
        """The ifb carrying the capped aggregate uplink at the PS."""
        return Target(f"{self.prefix}cap", self.netns_of("ps"))

    def exec_argv(self, ns: str, argv: Sequence[str]) -> list[str]:
        """``ip netns exec NS argv...``: run a command inside a namespace (``ns`` may be "ps" or w)."""
        if not (isinstance(ns, str) and ns.startswith(self.prefix) and ns in self.namespaces):
            ns = self.netns_of(ns)
        return ["ip", "netns", "exec", ns, *argv]

    def shaper(self, w: int, direction: str) -> Shaper:
        """The tbf shaper of one direction (``up``/``down``) of worker ``w``'s link."""
        d = _direction(direction)
        if d == "both":
            raise ValueError("direction must be 'up' or 'down' here, got 'both'")
        t = self.uplink_dev(w) if d == "up" else self.downlink_dev(w)
        return Shaper(t, "tbf", self.latency_ms, self.burst_ms)

    def _shapers(self, w: int, direction: str) -> list[Shaper]:
        d = _direction(direction)
        return [self.shaper(w, x) for x in (("up", "down") if d == "both" else (d,))]

    # ---- lifecycle
    def create_argvs(self) -> list[Argv]:
        """Every command :meth:`create` runs, in order; ``#`` entries are done in Python: ``#tcp_cc``
        (:meth:`_set_tcp_cc`) and ``#offloads`` (:func:`disable_offloads`, between add and move)."""
        cmds: list[Argv] = []
        for ns in self.namespaces:
            cmds += [["ip", "netns", "add", ns], ["ip", "-n", ns, "link", "set", "dev", "lo", "up"]]
        if self.tcp_cc:
            cmds.append(["#tcp_cc", self.tcp_cc])
        if not self.slow_start_after_idle:  # per namespace; a new one starts at the kernel's default, 1
            cmds += [self.exec_argv(ns, ["sh", "-c", f"printf 0 > {SLOW_START_AFTER_IDLE}"]) for ns in self.namespaces]
        ps = self.netns_of("ps")
        for w in range(1, self.n_workers + 1):
            vw, vp = self.veth_names(w)
            wns, plen = self.netns_of(w), self._link_prefixlen
            cmds += [
                ["ip", "link", "add", vw, "type", "veth", "peer", "name", vp],
                ["#offloads", vw, vp],
                ["ip", "link", "set", "dev", vw, "gso_max_segs", "1"],
                ["ip", "link", "set", "dev", vp, "gso_max_segs", "1"],
                ["ip", "link", "set", "dev", vw, "netns", wns],
                ["ip", "link", "set", "dev", vp, "netns", ps],
                ["ip", "-n", wns, "addr", "add", f"{self.worker_address(w)}/{plen}", "dev", vw],
                ["ip", "-n", ps, "addr", "add", f"{self.ps_address(w)}/{plen}", "dev", vp],
                ["ip", "-n", wns, "link", "set", "dev", vw, "addrgenmode", "none"],
                ["ip", "-n", ps, "link", "set", "dev", vp, "addrgenmode", "none"],
                ["ip", "-n", wns, "link", "set", "dev", vw, "up"],
                ["ip", "-n", ps, "link", "set", "dev", vp, "up"],
            ]
            for d in ("up", "down"):
                cmds += self.shaper(w, d).setup_argvs(self.rate_mbit)
        if self.cap_mbit is not None:
            cap = self.cap_dev
            cmds += [cap.ip("link", "add", cap.dev, "type", "ifb"), cap.ip("link", "set", "dev", cap.dev, "up")]
            cmds += Shaper(cap, "htb", self.latency_ms, self.burst_ms).setup_argvs(self.cap_mbit)
            for w in range(1, self.n_workers + 1):
                t = self.downlink_dev(w)
                cmds.append(t.tc("qdisc", "add", "dev", t.dev, "clsact"))
                cmds += [t.tc("filter", "add", "dev", t.dev, hook, "protocol", "all", "prio", "1", "u32", "match",
                              "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", cap.dev)
                         for hook in (("ingress", "egress") if self.cap_both else ("ingress",))]
        return cmds

    def create(self, destroy_at_exit: bool = True) -> "Testbed":
        """Remove leftovers of this prefix, then build namespaces, links, addresses and shapers.

        ``destroy_at_exit``: also destroy when the interpreter exits (``atexit``); only the
        command-line ``create`` that leaves a testbed standing passes False.
        """
        cleanup_prefix(self.prefix)
        if destroy_at_exit:
            atexit.register(self.destroy)
        self.created = True
        try:
            for argv in self.create_argvs():
                if argv[0] == "#tcp_cc":
                    self._set_tcp_cc()
                    continue
                if argv[0] == "#offloads":
                    for dev in argv[1:]:
                        self.offload_tool = disable_offloads(dev)
                    continue
                if argv[-2:] == ["addrgenmode", "none"]:
                    run_argv(argv, check=False)
                    continue
                run_argv(argv)
        except BaseException:
            self.destroy()
            raise
        return self

    def _set_tcp_cc(self) -> None:
        """Make ``tcp_cc`` the default congestion control inside every namespace of the testbed.

        A namespace other than the root one may only default to an algorithm on the root's
        ``tcp_allowed_congestion_control`` list (kernel rule), so ``tcp_cc`` is added to that list
        first if missing, and :func:`cleanup_prefix` (so :meth:`destroy`, the CLI's destroy and the
        next create after a crash) puts the list back from a note in ``/run/rog-testbed``.  If that is impossible the
        namespaces keep the host's default, with a warning; :attr:`tcp_cc_used` says which.
        """
        sysctl = Path("/proc/sys/net/ipv4")
        try:
            available = (sysctl / "tcp_available_congestion_control").read_text().split()
            if self.tcp_cc not in available:
                raise OSError(f"not available in this kernel (available: {' '.join(available)})")
            allowed = (sysctl / "tcp_allowed_congestion_control").read_text().split()
            if self.tcp_cc not in allowed:
                note = _allowed_note(self.prefix)  # lets cleanup_prefix undo it, even after a crash
                note.parent.mkdir(parents=True, exist_ok=True)
                note.write_text(" ".join(allowed))
                (sysctl / "tcp_allowed_congestion_control").write_text(" ".join(allowed + [self.tcp_cc]))
            for ns in self.namespaces:
                run_argv(["ip", "netns", "exec", ns, "sh", "-c",
                          f"printf %s {self.tcp_cc} > /proc/sys/net/ipv4/tcp_congestion_control"])
            self.tcp_cc_used = self.tcp_cc
        except (OSError, TcError) as e:
            warnings.warn(f"testbed: cannot make {self.tcp_cc!r} the namespaces' TCP congestion control ({e}); "
                          f"they use the host's default {self.tcp_cc_used!r}", RuntimeWarning, stacklevel=3)

    def destroy(self) -> list[str]:
        """Stop replays, kill processes inside the namespaces, delete namespaces and stray links."""
        with self._lock:
            self.stop_replays()
            removed = cleanup_prefix(self.prefix)
            self.created = False
            atexit.unregister(self.destroy)
            return removed

    def exists(self) -> bool:
        """True when all of this testbed's namespaces exist."""
        have = set(list_netns())
        return all(ns in have for ns in self.namespaces)

    def __enter__(self) -> "Testbed":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGHUP):
                self._old_handlers[sig] = signal.signal(sig, exit_on_signal)
        try:
            return self.create()
        except BaseException:
            self._restore_handlers()
            raise

    def __exit__(self, *exc) -> None:
        try:
            self.destroy()
        finally:
            self._restore_handlers()

    def _restore_handlers(self) -> None:
        for sig, h in self._old_handlers.items():
            signal.signal(sig, h)
        self._old_handlers.clear()

    # ---- shaping
    def set_rate(self, w: int, direction: str, rate_mbit: float) -> None:
        """Change one or both directions of worker ``w``'s link to ``rate_mbit`` in place."""
        for s in self._shapers(w, direction):
            for argv in s.change_argvs(rate_mbit):
                run_argv(argv)

    def set_cap(self, cap_mbit: float) -> None:
        """Change the shared-channel cap in place (only when created with ``cap_mbit``)."""
        if self.cap_mbit is None:
            raise ValueError("this testbed has no shared-channel cap; create it with cap_mbit=...")
        for argv in Shaper(self.cap_dev, "htb", self.latency_ms, self.burst_ms).change_argvs(cap_mbit):
            run_argv(argv)

    def start_replay(self, w: int, direction: str, trace, log_path: str | Path | None,
                     options: ReplayOptions | None = None, origin_monotonic_s: float | None = None) -> ReplayHandle:
        """Replay ``trace`` (a Trace, a trace file path or a Schedule) on worker ``w``'s link in a
        background thread; ``direction`` is ``up``, ``down`` or ``both``.  The log's ``t_s`` counts
        from ``origin_monotonic_s`` (a run's event-clock origin) or from the replay's start."""
        if isinstance(trace, Schedule):
            schedule = trace
        else:
            if isinstance(trace, (str, Path)):
                from rog.traces import load_trace
                trace = load_trace(trace)
            schedule = build_schedule(trace, options or ReplayOptions())
        rep = Replayer(self._shapers(w, direction), schedule, log_path, installed=True,
                       origin_monotonic_s=origin_monotonic_s)
        h = ReplayHandle(rep, name=f"replay-{self.prefix}-w{w}-{_direction(direction)}").start()
        self._replays.append(h)
        return h

    def stop_replays(self) -> None:
        """Stop every background replay of this testbed (the last applied rates stay)."""
        while self._replays:
            self._replays.pop().stop()

    # ---- inspection
    def inspect_rows(self) -> list[dict]:
        """One row per interface of this testbed: namespace, device, address, qdisc, rate."""
        return inspect_prefix(self.prefix)


def _nth_subnet(net: ipaddress.IPv4Network, new_prefix: int, n: int) -> ipaddress.IPv4Network:
    size = 2 ** (32 - new_prefix)
    return ipaddress.ip_network(f"{ipaddress.ip_address(int(net.network_address) + n * size)}/{new_prefix}")


def _direction(direction: str) -> str:
    d = _DIRECTION_ALIASES.get(direction) if isinstance(direction, str) else None
    if d is None:
        raise ValueError(f"direction must be one of {DIRECTIONS} (or uplink/downlink), got {direction!r}")
    return d



if __name__ == "__main__":
    sys.exit(_main())
