"""Replay a bandwidth trace on a network interface with tc (egress, ingress via ifb, or both).

Examples:
  python scripts/tc_replay.py --dev wlan0 --trace traces/outdoors.csv --dry-run
  sudo python scripts/tc_replay.py --dev wlan0 --trace t.csv --direction both --log result/bw.csv
  sudo python scripts/tc_replay.py --netns rogw1 --dev rogv1w --trace t.csv --loop --duration-s 600

Egress is shaped by tbf (default) or htb on the interface's root; ingress by redirecting it to an
ifb device (ingress qdisc + u32/mirred) shaped the same way, or, with --ingress-via peer, by
shaping the egress of the other end of the link (--peer-dev/--peer-netns: the emulated testbed's
way).  Rates change in place (tc qdisc/class change).  A rate of 0 is replayed as 10 kbit/s (tbf
and htb cannot do 0).  Every applied change is logged as CSV t_s,wall_time,rate_mbit.  The
previous qdisc state (tc -j qdisc show) is saved first and restored on normal exit, SIGINT,
SIGTERM, SIGHUP and errors (not SIGKILL: then remove the qdiscs by hand, or let the testbed's
next create remove its namespaces).  Exit status: 0 done, 2 bad arguments or trace, 1 runtime
error, 128+N after signal N (state restored).

GSO caveat: tbf cannot send a queued packet longer than its bucket (2 ms of the rate, >= 3028 B).
TCP hands the qdisc GSO packets of up to 64 KB, so one queued at a high rate blocks the link after
a drop to a low rate until the rate rises again.  The emulated testbed sets gso_max_segs 1 on its
veths; on a real interface do the same (ip link set dev DEV gso_max_segs 1) for faithful low
rates.  tc_replay leaves the interface's offload settings alone.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading

from rog.testbed.replay import REPLAY_MODES, ReplayOptions, Replayer, Schedule, build_schedule
from rog.testbed.signal_stop import stop_on_signals
from rog.testbed.tc import (SHAPER_KINDS, IngressRedirect, Shaper, Target, TcError, check_restorable,
                            format_argv, is_root, netem_available, parse_qdisc_json, QdiscState, restore_argvs,
                            restore_state, run_argv, save_state)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="tc_replay.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--dev", "-i", required=True, help="interface to shape")
    ap.add_argument("--trace", "-t", required=True, help="trace file (CSV t_s,mbps or 'seconds Mbps' records)")
    ap.add_argument("--netns", default=None, help="network namespace the interface lives in (default: root)")
    ap.add_argument("--direction", choices=("egress", "ingress", "both"), default="egress")
    ap.add_argument("--ingress-via", choices=("ifb", "peer"), default="ifb",
                    help="ingress shaping: redirect to an ifb device, or shape the peer end's egress")
    ap.add_argument("--peer-dev", default=None, help="with --ingress-via peer: the other end of the link")
    ap.add_argument("--peer-netns", default=None, help="with --ingress-via peer: the peer's namespace")
    ap.add_argument("--qdisc", choices=SHAPER_KINDS, default="tbf", help="netem only where the kernel has it")
    ap.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per trace second")
    ap.add_argument("--rate-scale", type=float, default=1.0, help="multiply every rate")
    ap.add_argument("--start-offset-s", type=float, default=0.0, help="trace second to start at")
    ap.add_argument("--loop", action="store_true", help="repeat the trace (until --duration-s or a signal)")
    ap.add_argument("--duration-s", type=float, default=None, help="stop after this many wall seconds")
    ap.add_argument("--replay-mode", choices=REPLAY_MODES, default="recorded",
                    help="'artifact' = the original artifact's 10-90 s holds (explicit, off by default)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the artifact mode's holds")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="queue length in ms at the current rate")
    ap.add_argument("--burst-ms", type=float, default=2.0, help="token bucket size in ms at the current rate")
    ap.add_argument("--origin-monotonic-s", type=float, default=None,
                    help="log t_s as time.monotonic() minus this (a run's event-clock origin); default: start")
    ap.add_argument("--start-after", default=None, metavar="FILE",
                    help="prepare (imports, trace, saved qdisc state), then start the replay when FILE exists "
                         "(a run's go file: the first rate is applied within milliseconds of it)")
    ap.add_argument("--log", default=None, help="CSV log of applied changes (default: tc_replay_<dev>.csv)")
    ap.add_argument("--dry-run", action="store_true", help="print the exact tc commands and exit")
    return ap.parse_args(argv)


def fail(msg: str, code: int) -> int:
    print(f"tc_replay: error: {msg}", file=sys.stderr)
    return code


def build_plan(a: argparse.Namespace):
    """(shapers, ingress redirect or None, targets whose state is saved/restored)."""
    main = Target(a.dev, a.netns)
    shapers, ingress, saved = [], None, []
    if a.direction in ("egress", "both"):
        shapers.append(Shaper(main, a.qdisc, a.latency_ms, a.burst_ms))
        saved.append(main)
    if a.direction in ("ingress", "both"):
        if a.ingress_via == "ifb":
            ingress = IngressRedirect(main)
            shapers.append(Shaper(ingress.ifb, a.qdisc, a.latency_ms, a.burst_ms))
            if main not in saved:
                saved.append(main)
        else:
            if not a.peer_dev:
                raise ValueError("--ingress-via peer needs --peer-dev (and --peer-netns if it lives in one)")
            peer = Target(a.peer_dev, a.peer_netns)
            shapers.append(Shaper(peer, a.qdisc, a.latency_ms, a.burst_ms))
            saved.append(peer)
    return shapers, ingress, saved


def dry_run(a, schedule: Schedule, shapers, ingress, saved) -> None:
    out = print
    end = "until stopped" if math.isinf(schedule.end_s) else f"{schedule.end_s:.3f} s"
    out(f"# tc_replay dry run: {len(schedule.changes)} changes per pass, {end}"
        + (f", looping every {schedule.period_s:.3f} s (one pass shown)" if math.isinf(schedule.end_s) else ""))
    if a.qdisc == "netem":
        out("# netem: availability is probed at run time (this kernel may not have it)")
    states = []
    for t in saved:
        out("# save: " + format_argv(t.tc("-j", "qdisc", "show", "dev", t.dev)))
        p = run_argv(t.tc("-j", "qdisc", "show", "dev", t.dev), check=False)
        if p.returncode == 0:
            states.append(QdiscState(t, parse_qdisc_json(p.stdout)))
        else:
            out(f"# ({t} not readable now: restore assumes the kernel's default root qdisc)")
            states.append(QdiscState(t, ()))
    if ingress is not None:
        for argv in ingress.setup_argvs():
            out(format_argv(argv))
    once = Schedule(schedule.changes, schedule.period_s, None) if math.isinf(schedule.end_s) else schedule
    first = True
    for t_s, rate in once.iter_changes():
        out(f"# t={t_s:.3f} rate_mbit={rate:g}")
        for s in shapers:
            for argv in (s.setup_argvs(rate) if first else s.change_argvs(rate)):
                out(format_argv(argv))
        first = False
    out("# restore")
    for i, st in enumerate(states):
        for argv in restore_argvs(st, ingress if st.target == Target(a.dev, a.netns) else None):
            out(format_argv(argv))


def main(argv=None) -> int:
    a = parse_args(argv)
    from rog.traces import TraceError, load_trace

    try:
        opts = ReplayOptions(time_scale=a.time_scale, rate_scale=a.rate_scale, start_offset_s=a.start_offset_s,
                             loop=a.loop, duration_s=a.duration_s, replay_mode=a.replay_mode, seed=a.seed)
        shapers, ingress, saved = build_plan(a)
    except ValueError as e:
        return fail(str(e), 2)
    try:
        trace = load_trace(a.trace)
    except TraceError as e:
        return fail(f"bad trace {e}", 2)
    except OSError as e:
        return fail(f"cannot read trace {a.trace}: {e.strerror}", 2)
    try:
        schedule = build_schedule(trace, opts)
    except ValueError as e:
        return fail(str(e), 2)
    if a.dry_run:
        dry_run(a, schedule, shapers, ingress, saved)
        return 0

    if not is_root():
        return fail("changing qdiscs needs root (CAP_NET_ADMIN); run with sudo, or use --dry-run", 1)
    if a.qdisc == "netem" and not netem_available():
        return fail("this kernel has no netem qdisc; use --qdisc tbf or htb", 1)
    try:
        states = [save_state(t) for t in saved]
        for st in states:
            check_restorable(st, need_ingress=ingress is not None and st.target == ingress.target)
    except TcError as e:
        return fail(str(e), 1)

    stop = threading.Event()
    got: list[int] = []
    stop_on_signals(stop, got=got)  # no lock taken in the handler (rog.testbed.signal_stop)
    log_path = a.log or f"tc_replay_{a.dev}.csv"
    where = f"{a.dev}" + (f" in netns {a.netns}" if a.netns else "")
    end = "until stopped" if math.isinf(schedule.end_s) else f"for {schedule.end_s:.1f} s"
    print(f"tc_replay: {a.direction} {a.qdisc} on {where}, {end}; log {log_path}", file=sys.stderr, flush=True)
    code = 0
    ingress_done = None
    try:
        if ingress is not None:
            ingress_done = ingress  # partial setup is undone too
            for argv in ingress.setup_argvs():
                run_argv(argv)
        if a.start_after is not None:
            while not os.path.exists(a.start_after) and not stop.wait(0.01):
                pass
        stats = Replayer(shapers, schedule, log_path, origin_monotonic_s=a.origin_monotonic_s).run(stop)
        print(f"tc_replay: applied {stats.applied} changes, skipped {stats.skipped} late ones, "
              f"worst lateness {stats.max_late_s * 1e3:.1f} ms", file=sys.stderr)
    except TcError as e:
        code = fail(str(e), 1)
    except ValueError as e:
        code = fail(str(e), 2)
    finally:
        errors = []
        for st in states:
            errors += restore_state(st, ingress_done if ingress_done and st.target == ingress_done.target else None)
        if errors:
            print("tc_replay: restore left problems:\n  " + "\n  ".join(errors), file=sys.stderr)
            code = code or 1
        else:
            print("tc_replay: previous qdisc state restored", file=sys.stderr)
    if got and code == 0:
        code = 128 + got[0]
    return code


if __name__ == "__main__":
    sys.exit(main())
