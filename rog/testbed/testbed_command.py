"""Create, inspect, shape and destroy the emulated testbed (network namespaces + shaped veths). Needs root.

  python scripts/testbed.py create --workers 4 [--prefix rog] [--cap-mbit 100]
  python scripts/testbed.py inspect [--prefix rog]
  python scripts/testbed.py set-rate --worker 1 --direction up --rate-mbit 20 [--workers 4]
  python scripts/testbed.py destroy [--prefix rog]

'create' leaves the testbed in place (inspect/destroy find it again by its prefix); programs should
use rog.testbed.Testbed as a context manager instead, which always cleans up.  Namespaces are
{prefix}ps and {prefix}w1..wN; link w joins {prefix}v{w}w (worker) and {prefix}v{w}p (PS) with
addresses .2 (worker) and .1 (PS) in the w-th /24 of --subnet.
"""

from __future__ import annotations

import argparse
import signal
import sys

from rog.testbed.netns import (DEFAULT_PREFIX, DEFAULT_SUBNET, Testbed, cleanup_prefix, format_table,
                               inspect_prefix, root_netns_status)
from rog.testbed.tc import TcError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("create", "inspect", "destroy", "set-rate"):
        p = sub.add_parser(name)
        p.add_argument("--prefix", default=DEFAULT_PREFIX, help="name prefix of namespaces and devices")
        if name in ("create", "set-rate"):
            p.add_argument("--workers", type=int, default=4, help="number of worker namespaces")
            p.add_argument("--subnet", default=DEFAULT_SUBNET, help="private range, one /24 per link")
        if name == "create":
            p.add_argument("--cap-mbit", type=float, default=None, help="shared-channel cap on the PS uplink")
            p.add_argument("--rate-mbit", type=float, default=1000.0, help="initial rate of every link")
        if name == "set-rate":
            p.add_argument("--worker", type=int, required=True, help="worker number, 1..N")
            p.add_argument("--direction", choices=("up", "down", "both"), default="both")
            p.add_argument("--rate-mbit", type=float, required=True)
    a = ap.parse_args(argv)
    old = {}
    if a.cmd in ("create", "destroy"):  # SIGTERM/SIGHUP as Ctrl-C: a half-built testbed is destroyed, not left
        old = {sig: signal.signal(sig, _interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _command(a)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _command(a: argparse.Namespace) -> int:
    if a.cmd != "inspect":
        ok, why = root_netns_status()
        if not ok:
            print(f"testbed: error: {why}; the emulated testbed needs root and 'ip netns'", file=sys.stderr)
            return 1
    try:
        if a.cmd == "create":
            tb = Testbed(a.workers, a.prefix, a.subnet, a.cap_mbit, rate_mbit=a.rate_mbit).create(destroy_at_exit=False)
            print(format_table(tb.inspect_rows()))
            print(f"testbed: created {len(tb.namespaces)} namespaces (GRO/GSO/TSO off via {tb.offload_tool}); "
                  f"remove with: python scripts/testbed.py destroy --prefix {a.prefix}", flush=True)
        elif a.cmd == "inspect":
            print(format_table(inspect_prefix(a.prefix)))
        elif a.cmd == "set-rate":
            Testbed(a.workers, a.prefix, a.subnet).set_rate(a.worker, a.direction, a.rate_mbit)
            print(format_table(inspect_prefix(a.prefix)))
        else:
            removed = cleanup_prefix(a.prefix)
            print("testbed: removed " + (", ".join(removed) if removed else f"nothing (no '{a.prefix}' testbed)"))
    except ValueError as e:
        print(f"testbed: error: {e}", file=sys.stderr)
        return 2
    except TcError as e:
        print(f"testbed: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Testbed.create destroyed what it had built before this arrives
        signum = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
        if a.cmd == "create":  # the signal may land after create() returned (while printing): remove it all
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut the cleanup short
            cleanup_prefix(a.prefix)
        print(f"testbed: interrupted by {signal.Signals(signum).name}; nothing of '{a.prefix}' left", file=sys.stderr)
        return 128 + signum
    return 0


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(signum)
