"""Building and applying ``tc`` commands: shapers (tbf, htb, netem), ingress via ifb, save and restore.

Every command is an argv list (no shell), so ``--dry-run`` can print exactly what would run.
Rates are Mbit/s (10^6 bit/s) and are written to ``tc`` as whole bits per second
(``rate 52300000bit``); sizes (burst, limit) are bytes (a bare number is bytes to ``tc``).

Queue sizing (:func:`shape_params`): the token bucket holds ``burst_ms`` of traffic at the rate
(at least ``MIN_BURST_BYTES``, so one full frame always fits) and the queue holds ``latency_ms``
of traffic at the rate (at least ``MIN_LIMIT_FRAMES`` frames, so TCP keeps going at tiny rates).
So the standing queue stays ~tens of ms, as on a real radio link, and a rate change takes effect
on the next dequeued packet.

A rate of 0 cannot be expressed: ``tbf`` and ``htb`` refuse ``rate 0``.  Rates below
``MIN_RATE_MBIT`` (10 kbit/s: one 1514-byte frame every 1.2 s) are raised to it, which is an
outage for any practical purpose but keeps the qdisc valid and changeable in place.

tbf never sends a packet longer than its bucket: keep wire-sized packets (``gso_max_segs 1``,
as the emulated testbed does), or a large GSO packet queued before a rate drop waits until the
rate rises again.

Kernel facts of this project's machines (docs/design.md#emulated-testbed): tbf, htb, ifb and ingress exist; netem
does not, so :func:`netem_available` probes instead of assuming.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zlib
from dataclasses import dataclass, field
from typing import Iterable, List, Sequence

MIN_RATE_MBIT = 0.01
FRAME_BYTES = 1514  # Ethernet frame of a 1500-byte MTU packet, as tbf/htb count it on a veth
MIN_BURST_BYTES = 2 * FRAME_BYTES
MIN_LIMIT_FRAMES = 8
DEFAULT_LATENCY_MS = 20.0
DEFAULT_BURST_MS = 2.0
SHAPER_KINDS = ("tbf", "htb", "netem")

Argv = List[str]  # typing.List: evaluated at import, Python 3.8


class TcError(RuntimeError):
    """A ``tc``/``ip`` command failed; the message carries the command line and its stderr."""


@dataclass(frozen=True)
class ShapeParams:
    """Kernel parameters for one rate: bits/s, bucket bytes, queue bytes."""

    rate_bit: int
    burst_bytes: int
    limit_bytes: int

    @property
    def limit_packets(self) -> int:
        """Queue length in full frames (netem counts packets, not bytes)."""
        return max(MIN_LIMIT_FRAMES, self.limit_bytes // FRAME_BYTES)


def clamp_rate_mbit(rate_mbit: float) -> float:
    """Raise rates below ``MIN_RATE_MBIT`` (including 0: an outage) to it; reject negatives/NaN."""
    r = float(rate_mbit)
    if not r >= 0 or r == float("inf"):
        raise ValueError(f"rate_mbit must be a finite rate >= 0 (Mbit/s), got {rate_mbit!r}")
    return max(r, MIN_RATE_MBIT)


def shape_params(rate_mbit: float, latency_ms: float = DEFAULT_LATENCY_MS,
                 burst_ms: float = DEFAULT_BURST_MS) -> ShapeParams:
    """Bucket and queue sizes for ``rate_mbit`` so the queue holds about ``latency_ms`` of traffic."""
    if not latency_ms > 0:
        raise ValueError(f"latency_ms must be > 0, got {latency_ms!r}")
    if not burst_ms > 0:
        raise ValueError(f"burst_ms must be > 0, got {burst_ms!r}")
    r = clamp_rate_mbit(rate_mbit)
    bytes_per_s = r * 1e6 / 8
    burst = max(MIN_BURST_BYTES, int(bytes_per_s * burst_ms / 1e3))
    limit = max(MIN_LIMIT_FRAMES * FRAME_BYTES, int(bytes_per_s * latency_ms / 1e3))
    return ShapeParams(rate_bit=int(round(r * 1e6)), burst_bytes=burst, limit_bytes=limit)


@dataclass(frozen=True)
class Target:
    """A network device, optionally inside a named network namespace."""

    dev: str
    netns: str | None = None

    def __post_init__(self) -> None:
        if not self.dev or len(self.dev) > 15 or "/" in self.dev or " " in self.dev:
            raise ValueError(f"dev must be an interface name of 1-15 characters, got {self.dev!r}")

    def tc(self, *args: str) -> Argv:
        """``tc [-n NS] args...``."""
        return ["tc", *(["-n", self.netns] if self.netns else []), *args]

    def ip(self, *args: str) -> Argv:
        """``ip [-n NS] args...``."""
        return ["ip", *(["-n", self.netns] if self.netns else []), *args]

    def __str__(self) -> str:
        return f"{self.dev}" + (f" (netns {self.netns})" if self.netns else "")


# ----------------------------------------------------------------------------------- running

def run_argv(argv: Sequence[str], check: bool = True, timeout_s: float = 10.0) -> subprocess.CompletedProcess:
    """Run one command without a shell; raise :class:`TcError` with its stderr on failure."""
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as e:
        raise TcError(f"{argv[0]!r} not found on PATH (install iproute2): {' '.join(argv)}") from e
    except subprocess.TimeoutExpired as e:
        raise TcError(f"timed out after {timeout_s} s: {' '.join(argv)}") from e
    if check and p.returncode != 0:
        raise TcError(f"command failed (exit {p.returncode}): {' '.join(argv)}: {p.stderr.strip()}")
    return p


def format_argv(argv: Sequence[str]) -> str:
    """One command as it would be typed (arguments here never need quoting)."""
    return " ".join(argv)


# ----------------------------------------------------------------------------------- shapers

@dataclass(frozen=True)
class Shaper:
    """A rate shaper on one device's egress: commands to install it and to change its rate in place.

    ``kind`` is ``tbf`` (token bucket, the default), ``htb`` (one class, a short ``bfifo`` leaf) or
    ``netem`` (``netem rate``; only where the kernel has it, see :func:`netem_available`).
    """

    target: Target
    kind: str = "tbf"
    latency_ms: float = DEFAULT_LATENCY_MS
    burst_ms: float = DEFAULT_BURST_MS

    def __post_init__(self) -> None:
        if self.kind not in SHAPER_KINDS:
            raise ValueError(f"kind must be one of {SHAPER_KINDS}, got {self.kind!r}")
        shape_params(1.0, self.latency_ms, self.burst_ms)  # validates latency_ms / burst_ms

    def params(self, rate_mbit: float) -> ShapeParams:
        """Kernel parameters for ``rate_mbit`` (clamped to ``MIN_RATE_MBIT``)."""
        return shape_params(rate_mbit, self.latency_ms, self.burst_ms)

    def setup_argvs(self, rate_mbit: float) -> list[Argv]:
        """Install the shaper as the root qdisc (``replace``: the saved default is put back on restore)."""
        p, t = self.params(rate_mbit), self.target
        if self.kind == "tbf":
            return [t.tc("qdisc", "replace", "dev", t.dev, "root", "handle", "1:", *self._tbf(p))]
        if self.kind == "htb":
            return [
                t.tc("qdisc", "replace", "dev", t.dev, "root", "handle", "1:", "htb", "default", "1"),
                t.tc("class", "add", "dev", t.dev, "parent", "1:", "classid", "1:1", *self._htb(p)),
                t.tc("qdisc", "add", "dev", t.dev, "parent", "1:1", "handle", "10:", "bfifo",
                     "limit", str(p.limit_bytes)),
            ]
        return [t.tc("qdisc", "replace", "dev", t.dev, "root", "handle", "1:", *self._netem(p))]

    def change_argvs(self, rate_mbit: float) -> list[Argv]:
        """Change the rate in place (``tc qdisc change`` / ``tc class change``): never delete and re-add."""
        p, t = self.params(rate_mbit), self.target
        if self.kind == "tbf":
            return [t.tc("qdisc", "change", "dev", t.dev, "root", "handle", "1:", *self._tbf(p))]
        if self.kind == "htb":
            return [
                t.tc("class", "change", "dev", t.dev, "parent", "1:", "classid", "1:1", *self._htb(p)),
                t.tc("qdisc", "change", "dev", t.dev, "parent", "1:1", "handle", "10:", "bfifo",
                     "limit", str(p.limit_bytes)),
            ]
        return [t.tc("qdisc", "change", "dev", t.dev, "root", "handle", "1:", *self._netem(p))]

    @staticmethod
    def _tbf(p: ShapeParams) -> list[str]:
        return ["tbf", "rate", f"{p.rate_bit}bit", "burst", str(p.burst_bytes), "limit", str(p.limit_bytes)]

    @staticmethod
    def _htb(p: ShapeParams) -> list[str]:
        b = str(p.burst_bytes)
        return ["htb", "rate", f"{p.rate_bit}bit", "ceil", f"{p.rate_bit}bit", "burst", b, "cburst", b,
                "quantum", str(FRAME_BYTES)]

    @staticmethod
    def _netem(p: ShapeParams) -> list[str]:
        return ["netem", "rate", f"{p.rate_bit}bit", "limit", str(p.limit_packets)]


def ifb_name_for(target: Target) -> str:
    """Deterministic ifb name for ``target``'s ingress (``rogi`` + 8 hex digits; found again by cleanup)."""
    key = f"{target.netns or ''}/{target.dev}".encode()
    return f"rogi{zlib.crc32(key):08x}"


@dataclass(frozen=True)
class IngressRedirect:
    """Redirect ``target``'s ingress to an ifb device, whose egress a :class:`Shaper` then shapes."""

    target: Target

    @property
    def ifb(self) -> Target:
        """The ifb device (same namespace as ``target``)."""
        return Target(ifb_name_for(self.target), self.target.netns)

    def setup_argvs(self) -> list[Argv]:
        """Create the ifb, add an ``ingress`` qdisc and a catch-all u32 filter with mirred redirect."""
        t, ifb = self.target, self.ifb
        return [
            t.ip("link", "add", ifb.dev, "type", "ifb"),
            t.ip("link", "set", "dev", ifb.dev, "up"),
            t.tc("qdisc", "add", "dev", t.dev, "handle", "ffff:", "ingress"),
            t.tc("filter", "add", "dev", t.dev, "parent", "ffff:", "protocol", "all", "prio", "1", "u32",
                 "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb.dev),
        ]

    def teardown_argvs(self) -> list[Argv]:
        """Remove the ingress qdisc (and its filter) and the ifb device."""
        t = self.target
        return [t.tc("qdisc", "del", "dev", t.dev, "ingress"), t.ip("link", "del", "dev", self.ifb.dev)]


# ----------------------------------------------------------------------------------- state

@dataclass(frozen=True)
class QdiscState:
    """The qdiscs on one device as ``tc -j qdisc show`` reported them before we changed anything."""

    target: Target
    qdiscs: tuple[dict, ...] = field(default_factory=tuple)

    @property
    def root(self) -> dict | None:
        """The root qdisc entry, if any."""
        return next((q for q in self.qdiscs if q.get("root")), None)

    @property
    def ingress(self) -> dict | None:
        """The ``ingress`` or ``clsact`` qdisc entry, if any."""
        return next((q for q in self.qdiscs if q.get("kind") in ("ingress", "clsact")), None)

    @property
    def root_is_default(self) -> bool:
        """True when the root is the kernel's own (handle ``0:``, e.g. noqueue, mq, pfifo_fast)."""
        r = self.root
        return r is None or r.get("handle") in ("0:", None)


def parse_qdisc_json(text: str) -> tuple[dict, ...]:
    """Parse ``tc -j qdisc show`` output (empty output means no qdisc at all)."""
    text = text.strip()
    return tuple(json.loads(text)) if text else ()


def save_state(target: Target) -> QdiscState:
    """Read the device's qdiscs (``tc -j qdisc show dev DEV``); a missing device is a clear TcError."""
    p = run_argv(target.tc("-j", "qdisc", "show", "dev", target.dev), check=False)
    if p.returncode != 0:
        raise TcError(f"cannot read qdiscs of {target}: {p.stderr.strip() or 'tc failed'} "
                      f"(does the interface exist?)")
    return QdiscState(target, parse_qdisc_json(p.stdout))


def _restore_root_argv(state: QdiscState) -> Argv | None:
    """Rebuild a non-default root qdisc we know how to express; None if we do not."""
    r, t = state.root, state.target
    o = r.get("options", {}) if r else {}
    head = ["qdisc", "replace", "dev", t.dev, "root", "handle", r["handle"]] if r else []
    kind = r.get("kind") if r else None
    if kind == "tbf" and "rate" in o and "burst" in o:
        extra = ["limit", str(o["limit"])] if "limit" in o else ["latency", f"{o.get('lat', 50000)}us"]
        return t.tc(*head, "tbf", "rate", f"{int(o['rate']) * 8}bit", "burst", str(o["burst"]), *extra)
    if kind in ("pfifo", "bfifo") and "limit" in o:
        return t.tc(*head, kind, "limit", str(o["limit"]))
    if kind in ("pfifo_fast", "noqueue"):
        return t.tc(*head, kind)
    return None


def check_restorable(state: QdiscState, need_ingress: bool) -> None:
    """Refuse, before touching anything, a device whose state we could not put back."""
    if not state.root_is_default and _restore_root_argv(state) is None:
        r = state.root or {}
        raise TcError(f"{state.target} has a custom root qdisc {r.get('kind')} {r.get('handle')} that cannot "
                      f"be restored automatically; remove it first (tc qdisc del dev {state.target.dev} root)")
    if need_ingress and state.ingress is not None:
        raise TcError(f"{state.target} already has an {state.ingress.get('kind')} qdisc; ingress shaping "
                      f"would replace it: remove it first or shape the peer's egress instead")


def restore_argvs(state: QdiscState, ingress: IngressRedirect | None = None) -> list[Argv]:
    """Commands that put the saved root qdisc back (default root: delete ours) and undo the ingress setup."""
    t = state.target
    cmds: list[Argv] = []
    if ingress is not None:
        cmds += ingress.teardown_argvs()
    if state.root_is_default:
        cmds.append(t.tc("qdisc", "del", "dev", t.dev, "root"))
    else:
        argv = _restore_root_argv(state)
        if argv is not None:
            cmds.append(argv)
    return cmds


def restore_state(state: QdiscState, ingress: IngressRedirect | None = None) -> list[str]:
    """Run :func:`restore_argvs`; keep going on errors and return their messages (empty = clean)."""
    errors = []
    for argv in restore_argvs(state, ingress):
        p = run_argv(argv, check=False)
        if p.returncode != 0 and "No such file" not in p.stderr and "Cannot find" not in p.stderr \
                and "Cannot delete qdisc with handle of zero" not in p.stderr:
            errors.append(f"{format_argv(argv)}: {p.stderr.strip()}")
    return errors


def qdisc_rate_mbit(q: dict) -> float | None:
    """Rate of a tbf/netem qdisc JSON entry in Mbit/s (tc -j reports bytes/s), else None."""
    o = q.get("options", {})
    if q.get("kind") == "tbf" and "rate" in o:
        return int(o["rate"]) * 8 / 1e6
    if q.get("kind") == "netem" and "rate" in o:
        rate = o["rate"]
        return int(rate.get("rate", 0)) * 8 / 1e6 if isinstance(rate, dict) else None
    return None


# ----------------------------------------------------------------------------------- environment

def is_root() -> bool:
    """True when running with euid 0 (tc changes need CAP_NET_ADMIN; we ask for root)."""
    return os.geteuid() == 0


def have_tc() -> bool:
    """True when both ``tc`` and ``ip`` (iproute2) are on PATH."""
    return shutil.which("tc") is not None and shutil.which("ip") is not None


_NETEM: bool | None = None


def netem_available() -> bool:
    """Probe (once) whether the kernel has ``netem``: add it to a scratch ifb in a scratch namespace."""
    global _NETEM
    if _NETEM is None:
        _NETEM = _probe_qdisc("netem", ["delay", "1ms"])
    return _NETEM


def _probe_qdisc(kind: str, args: Iterable[str]) -> bool:
    if not (is_root() and have_tc()):
        return False
    ns = f"rogprobe{os.getpid()}"
    if run_argv(["ip", "netns", "add", ns], check=False).returncode != 0:
        return False
    try:
        t = Target("probe0", ns)
        if run_argv(t.ip("link", "add", t.dev, "type", "ifb"), check=False).returncode != 0:
            return False
        return run_argv(t.tc("qdisc", "add", "dev", t.dev, "root", kind, *args), check=False).returncode == 0
    finally:
        run_argv(["ip", "netns", "del", ns], check=False)


def run_all(argvs: Iterable[Argv]) -> None:
    """Run commands in order, stopping at the first failure (raises :class:`TcError`)."""
    for argv in argvs:
        run_argv(argv)
