"""One run's network: the namespace testbed with trace replay, or the loopback fallback's shaping.

:class:`EmulatedNetwork` owns a :class:`rog.testbed.netns.Testbed` with a run-specific prefix
(:func:`new_prefix`, 8 characters, so interface names stay within Linux's 15), replays each
worker's trace on its link (uplink = worker end's egress; downlink = PS end's egress when
``shape='both'``), and on :meth:`close` stops the replays, destroys the testbed and checks that
nothing of the prefix is left (:func:`leftovers`: namespaces, links, root-namespace qdiscs).

Crash safety: the prefix is random per run, so a later run cannot guess a dead run's prefix.
Each live run therefore keeps a lock file ``/run/rog-testbed/runs/<prefix>`` holding its
launcher's pid; :func:`reap_stale_runs` (called by every :meth:`EmulatedNetwork.open`) removes
the testbeds of runs whose launcher is gone, even after SIGKILL.

Workers are numbered from 0 in events and files (``events-w0.jsonl``, ``replay-w0-up.csv``) and
from 1 in the testbed (names, addresses): event rank ``k`` lives in testbed worker ``k + 1``.

Worker processes enter their namespace with :func:`enter_netns` (``setns(2)`` on
``/run/netns/<name>``) first thing: the worker host starts each as a fresh interpreter, which
enters its namespace before importing torch (a network namespace is per task, so ``setns`` is
done while the process still has one thread) and then opens its sockets inside it.

Fabric on the emulated testbed (``run.py --launcher fabric``, the default when sshd is installed):
:class:`EmulatedHosts` starts one private sshd per namespace (:class:`rog.testbed.sshd.NamespaceSshd`)
and turns the testbed into a :class:`rog.deploy.HostsFile`, so the run is deployed exactly as on real
devices (code sync, config, PS, gated trace replay with ``scripts/tc_replay.py``, workers, power
samplers, stop, collect); :meth:`EmulatedHosts.close` stops every sshd, deletes the per-run keys and
work folder, destroys the testbed and reports anything left.

Loopback fallback (no root or no working ``ip netns``): :class:`ScheduleRate` makes the same
per-worker schedule a ``rate_mbit_at`` callable for the transport's token bucket (a worker's
pushes), :class:`PerWorkerShaping` gives each of the PS's connections its worker's downlink
schedule, and :func:`write_planned_log` writes the replay logs from the schedule (rates planned,
not applied by ``tc``).
"""

from __future__ import annotations

import bisect
import ctypes
import json
import math
import os
import secrets
import time
from pathlib import Path
from typing import Callable

from rog.testbed.netns import DEFAULT_RATE_MBIT, Testbed, cleanup_prefix, list_netns
from rog.testbed.replay import LOG_HEADER, Schedule, build_schedule
from rog.testbed.tc import MIN_RATE_MBIT, run_argv

__all__ = ["SHAPES", "LOCK_DIR", "new_prefix", "reap_stale_runs", "leftovers", "tb_worker", "EmulatedNetwork",
           "EmulatedHosts", "WORK_BASE_DIR", "enter_netns", "ScheduleRate", "PerWorkerShaping", "write_planned_log", "schedule_for"]

SHAPES = ("uplink", "both")
LOCK_DIR = Path("/run/rog-testbed/runs")
CLONE_NEWNET = 0x40000000
WORK_BASE_DIR = Path("/run/rog-testbed/work")  # per-run remote work folders of the namespace hosts (code, run folders)
FIRST_RATE_TIMEOUT_S = 10.0  # start_replays: how long every link may take to get its first rate (tc calls)


PREFIX_TAG_ENV = "ROG_TESTBED_PREFIX"  # optional tag the random prefix starts with (e.g. one per user or test suite)
PREFIX_LEN = 8


def new_prefix() -> str:
    """A run-specific testbed prefix of 8 characters (fixed length: no prefix is a prefix of another):
    ``rg`` + 6 hex digits, or the tag in ``$ROG_TESTBED_PREFIX`` (2-5 lower-case letters or digits, a
    letter first) + random hex, so concurrent users of one machine can tell their testbeds apart."""
    import re

    tag = os.environ.get(PREFIX_TAG_ENV) or "rg"
    if not re.fullmatch(r"[a-z][a-z0-9]{1,4}", tag):
        raise ValueError(f"${PREFIX_TAG_ENV} must be 2-5 lower-case letters or digits starting with a letter, got {tag!r}")
    return tag + secrets.token_hex(4)[:PREFIX_LEN - len(tag)]


def tb_worker(k: int) -> int:
    """Testbed worker number (1..N) of event rank ``k`` (0..N-1)."""
    return int(k) + 1


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale_runs(lock_dir: Path = LOCK_DIR) -> list[str]:
    """Destroy the testbeds of runs whose launcher (pid in the lock file) is dead; returns what was removed."""
    removed: list[str] = []
    if not lock_dir.is_dir():
        return removed
    for lock in sorted(lock_dir.iterdir()):
        try:
            pid = int(json.loads(lock.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            pid = -1
        if pid > 0 and _pid_alive(pid):
            continue
        try:
            removed += cleanup_prefix(lock.name)
        except ValueError:
            pass  # not a prefix we could have written
        lock.unlink(missing_ok=True)
    return removed


def leftovers(prefix: str) -> list[str]:
    """Anything of ``prefix`` still present: namespaces, root-namespace links and their qdiscs."""
    out = [f"netns {n}" for n in list_netns() if n.startswith(prefix)]
    links = run_argv(["ip", "-j", "link", "show"], check=False).stdout.strip()
    for link in json.loads(links) if links else []:
        if str(link.get("ifname", "")).startswith(prefix):
            out.append(f"link {link['ifname']}")
    qd = run_argv(["tc", "-j", "qdisc", "show"], check=False).stdout.strip()
    for q in json.loads(qd) if qd else []:
        if str(q.get("dev", "")).startswith(prefix):
            out.append(f"qdisc {q.get('kind')} on {q['dev']}")
    return out


class EmulatedNetwork:
    """The run's testbed: ``n_workers`` worker namespaces and a PS namespace, replaying traces.

    ``shape``: ``uplink`` (worker egress only, as the original artifact) or ``both``; ``rate_mbit``:
    every link's rate until a replay changes it (default 1 Gbit/s, i.e. unshaped); ``cap_mbit``: the
    shared-channel cap; ``slow_start_after_idle``: False turns TCP's slow-start restart after idle off in
    every namespace (``--tcp-slow-start-after-idle off``).  :meth:`open`, then :meth:`start_replays`, then
    always :meth:`close`.
    """

    def __init__(self, n_workers: int, prefix: str | None = None, *, cap_mbit: float | None = None,
                 shape: str = "both", rate_mbit: float | None = None, lock_dir: Path = LOCK_DIR,
                 slow_start_after_idle: bool = True) -> None:
        if shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, got {shape!r}")
        self.prefix = prefix or new_prefix()
        kw = {} if rate_mbit is None else {"rate_mbit": float(rate_mbit)}
        self.testbed = Testbed(n_workers=n_workers, prefix=self.prefix, cap_mbit=cap_mbit,
                               slow_start_after_idle=slow_start_after_idle, **kw)
        self.n_workers = n_workers
        self.rate_mbit = rate_mbit
        self.shape = shape
        self.lock_dir = lock_dir
        self.handles: dict[tuple[int, str], object] = {}
        self.reaped: list[str] = []

    @property
    def lock_path(self) -> Path:
        return self.lock_dir / self.prefix

    def open(self) -> "EmulatedNetwork":
        """Reap dead runs' testbeds, take the lock, create the namespaces and links."""
        self.reaped = reap_stale_runs(self.lock_dir)
        self.lock_dir.mkdir(parents=True, exist_ok=True)
        self.lock_path.write_text(json.dumps({"pid": os.getpid(), "started_unix_s": time.time()}) + "\n")
        try:
            self.testbed.create()
            if self.rate_mbit is not None and self.shape == "uplink":  # the PS -> worker direction stays unshaped
                for w in range(1, self.n_workers + 1):
                    self.testbed.set_rate(w, "down", DEFAULT_RATE_MBIT)
        except BaseException:
            self.close()
            raise
        return self

    def hosts(self) -> dict:
        """Namespaces and addresses per device, keyed by event rank (``ps``, ``w0``, ...)."""
        tb = self.testbed
        out = {"ps": {"netns": tb.netns_of("ps"), "bind": "0.0.0.0",
                      "addresses": [tb.ps_address(w) for w in range(1, self.n_workers + 1)]}}
        for k in range(self.n_workers):
            w = tb_worker(k)
            up, down = tb.veth_names(w)
            out[f"w{k}"] = {"netns": tb.netns_of(w), "testbed_worker": w, "address": tb.worker_address(w),
                            "ps_address": tb.ps_address(w), "uplink_dev": up, "downlink_dev": down}
        return out

    def directions(self) -> tuple[str, ...]:
        """Link directions that replay: ``up``, plus ``down`` when shaping both."""
        return ("up", "down") if self.shape == "both" else ("up",)

    def start_replays(self, schedules: dict[int, Schedule], run_dir: Path, origin_monotonic_s: float,
                      log_name: Callable[[int, str], str]) -> None:
        """Replay each worker's schedule on its link (one thread per direction, logged on the event clock).

        Returns once every link carries its first rate: a worker released right after this must not
        transfer at the rate the link had before its replay began."""
        for k, sched in schedules.items():
            for d in self.directions():
                self.handles[(k, d)] = self.testbed.start_replay(tb_worker(k), d, sched, run_dir / log_name(k, d),
                                                                 origin_monotonic_s=origin_monotonic_s)
        for (k, d), h in self.handles.items():
            if not h.wait_first(FIRST_RATE_TIMEOUT_S):
                raise RuntimeError(f"trace replay of w{k} {d}link applied no rate within {FIRST_RATE_TIMEOUT_S:g} s")
        self.check()

    def check(self) -> None:
        """Raise if a replay thread failed (a ``tc`` command that did not work)."""
        for (k, d), h in self.handles.items():
            if h.error is not None:
                raise RuntimeError(f"trace replay of w{k} {d}link failed: {h.error}")

    def replay_stats(self) -> dict:
        """Per replay: changes applied and skipped, worst lateness."""
        out = {}
        for (k, d), h in self.handles.items():
            st = h.replayer.stats
            out[f"w{k}-{d}"] = {"applied": st.applied, "skipped": st.skipped, "max_late_s": round(st.max_late_s, 4)}
        return out

    def close(self) -> list[str]:
        """Stop the replays, destroy the testbed, drop the lock; returns what is still left (should be [])."""
        try:
            self.testbed.destroy()
        finally:
            self.lock_path.unlink(missing_ok=True)
        return leftovers(self.prefix)


class EmulatedHosts:
    """The emulated testbed as SSH hosts for Fabric: ``net`` (an :class:`EmulatedNetwork`, opened here)
    plus one sshd per namespace and a per-run work folder under :data:`WORK_BASE_DIR` that every
    namespace host shares (the code is unpacked once; run folders are per host).

    ``python``: the interpreter the hosts run (this machine's).  :meth:`open` returns the hosts file;
    :meth:`close` (always) tears everything down and returns what is still left (should be []).
    """

    def __init__(self, net: EmulatedNetwork, python: str, work_base: Path = WORK_BASE_DIR) -> None:
        self.net = net
        self.python = python
        self.work_base = Path(work_base)
        self.sshd = None
        self.work_dir: Path | None = None
        self._key_dir: str | None = None

    def open(self, ps_profile: str, worker_profile: str, direction: str = "both", replay: bool = True):
        """Create the testbed, start sshd everywhere; returns the :class:`rog.deploy.HostsFile`."""
        from rog.testbed.sshd import NamespaceSshd

        self.net.open()
        self.sshd = NamespaceSshd(self.net.testbed, python=self.python)
        self.sshd.start()
        self._key_dir = str(self.sshd.dir)
        self.work_base.mkdir(parents=True, exist_ok=True)
        for old in self.work_base.glob(f"{self.net.prefix}-*"):  # a crashed run of this prefix (cannot be live)
            import shutil

            shutil.rmtree(old, ignore_errors=True)
        import tempfile

        self.work_dir = Path(tempfile.mkdtemp(prefix=f"{self.net.prefix}-", dir=self.work_base))
        return self.sshd.hosts_file(python=self.python, work_dir=str(self.work_dir), device_profile=ps_profile,
                                    worker_profile=worker_profile, direction=direction, replay=replay,
                                    shared_work_dir=True)

    def ssh_info(self) -> dict:
        """Per event rank: how Fabric reached it (for the manifest; no key material)."""
        if self.sshd is None:
            return {}
        out = {"ps": {"ssh": f"{self.sshd.user}@{self.sshd.address_of('ps')}:{self.sshd.port}"}}
        for k in range(self.net.n_workers):
            out[f"w{k}"] = {"ssh": f"{self.sshd.user}@{self.sshd.address_of(tb_worker(k))}:{self.sshd.port}"}
        return out

    def close(self) -> list[str]:
        """Stop every sshd, delete keys and the work folder, destroy the testbed; returns leftovers."""
        import shutil

        from rog.testbed.sshd import _sshd_pids

        left: list[str] = []
        try:
            if self.sshd is not None:
                self.sshd.stop()
        finally:
            if self.work_dir is not None:
                shutil.rmtree(self.work_dir, ignore_errors=True)
            left += self.net.close()
        if self._key_dir is not None:
            left += [f"sshd process {pid}" for pid in _sshd_pids(self._key_dir)]
            if Path(self._key_dir).exists():
                left.append(f"key folder {self._key_dir}")
        if self.work_dir is not None and self.work_dir.exists():
            left.append(f"work folder {self.work_dir}")
        return left


def enter_netns(name: str) -> None:
    """Move the calling (still single-threaded) process into network namespace ``name``."""
    path = Path("/run/netns") / name
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns({path}) failed: {os.strerror(e)}")
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- loopback fallback
def schedule_for(trace, options) -> Schedule:
    """The wall-clock schedule of one worker's replay (same as the namespace testbed would run)."""
    return build_schedule(trace, options)


class ScheduleRate:
    """``rate_mbit_at`` for the transport's token bucket: ``schedule``'s rate at ``time.monotonic() -
    start_monotonic_s`` (the argument is ignored, so every bucket of the run shares one clock);
    rates below ``MIN_RATE_MBIT`` count at it, as ``tc`` applies them."""

    def __init__(self, schedule: Schedule, start_monotonic_s: float, floor_mbit: float = MIN_RATE_MBIT) -> None:
        self.times = [t for t, _ in schedule.changes]
        self.rates = [max(float(r), floor_mbit) for _, r in schedule.changes]
        self.period_s = schedule.period_s
        self.start = float(start_monotonic_s)

    def at(self, t_s: float) -> float:
        """Rate at schedule time ``t_s`` (the first rate before 0)."""
        if self.period_s is not None and t_s >= 0:
            t_s = math.fmod(t_s, self.period_s)
        i = bisect.bisect_right(self.times, t_s) - 1
        return self.rates[max(i, 0)]

    def __call__(self, _t_s: float) -> float:
        return self.at(time.monotonic() - self.start)


class PerWorkerShaping:
    """Wraps a :class:`rog.transport.Listener`: each accepted connection's writes (the PS's pulls to
    that worker) get a token bucket following ``rates[worker_id]`` (the downlink in the fallback).
    ``rates`` may be a function returning that mapping, called at the first accept (when the
    replay's start is known)."""

    def __init__(self, listener, rates: dict[int, Callable[[float], float]] | Callable[[], dict],
                 burst_bytes: int) -> None:
        self.listener = listener
        self._rates = rates
        self.burst_bytes = int(burst_bytes)

    @property
    def rates(self) -> dict:
        """Worker id -> rate function (resolved on first use)."""
        if callable(self._rates):
            self._rates = self._rates()
        return self._rates

    @property
    def refused(self):
        return self.listener.refused

    @property
    def address(self):
        return self.listener.address

    def accept(self, timeout_s: float | None = None):
        from rog.transport.ratelimit import TokenBucket

        conn = self.listener.accept(timeout_s)
        rate = self.rates.get(conn.worker_id)
        if rate is not None:
            conn.limiter = TokenBucket(rate, burst_bytes=self.burst_bytes, clock=conn.clock)
        return conn


def write_planned_log(path: Path, schedule: Schedule, start_t_s: float, end_t_s: float, origin_unix_s: float) -> int:
    """Replay log (``t_s,wall_time,rate_mbit``) of the rates a schedule started at event time
    ``start_t_s`` planned until ``end_t_s``; returns the number of rows."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(LOG_HEADER + "\n")
        for t, r in schedule.iter_changes():
            ts = start_t_s + t
            if ts > end_t_s:
                break
            f.write(f"{ts:.6f},{origin_unix_s + ts:.6f},{r:.6f}\n")
            n += 1
    return n
