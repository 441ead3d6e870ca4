"""The YAML hosts file: which devices take part in a run, how to reach them and what each one does.

A hosts file (example with every field commented: ``configs/hosts.example.yaml``)::

    defaults:                 # optional: fields every host takes unless it sets them itself
      user: rog
      work_dir: /home/rog/rog-work
    hosts:
      - name: ps              # unique label (log folders, container names)
        address: 192.168.50.10
        role: ps
        interface: wlan0
        device_profile: laptop
      - name: robot1
        address: 192.168.50.11
        role: worker
        worker_id: 0
        interface: wlan0
        device_profile: jetson-xavier-nx
        batch_size: 24        # optional: default the profile's batch size

Rules: exactly one ``ps`` host, at least one worker, worker ids ``0..N-1`` each once (the
transport's worker ids, so worker ``k`` writes ``events-w<k>.jsonl``), host names unique.  SSH is
key-based only (``key_file``, else the SSH agent and ``~/.ssh/id_*``); there is no password field.
Host keys are checked against ``known_hosts`` (default ``~/.ssh/known_hosts``) and an unknown host
is refused unless ``accept_new_host_keys: true``.

Every problem is reported at once in one :class:`HostsFileError` (a ValueError); each line names
the file, the host entry (index, name and YAML line) and the field, and says how to fix it.
Unknown fields and fields given twice are errors (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from ..strict_yaml import DuplicateKeyError, load_strict, yaml_problem

__all__ = ["ROLES", "RUNTIMES", "REPLAY_DIRECTIONS", "INGRESS_VIA", "HostsFileError", "ReplaySettings", "Host",
           "HostsFile", "load_hosts", "hosts_from_dict"]

ROLES = ("ps", "worker")
RUNTIMES = ("native", "docker")  # docker: `docker run --network=host --cap-add=NET_ADMIN ...` (the paper's style)
REPLAY_DIRECTIONS = ("both", "egress", "none")  # what tc_replay shapes on the host's interface
INGRESS_VIA = ("ifb", "peer")  # how tc_replay shapes ingress (see scripts/tc_replay.py)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_IFACE_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
_HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./:@-]*$")
_WORD_RE = re.compile(r"^[^\s'\"`$;&|<>\\]+$")  # a command or path without shell metacharacters

_TOP_FIELDS = ("version", "defaults", "hosts", "known_hosts", "accept_new_host_keys")
_HOST_FIELDS = ("name", "address", "port", "user", "role", "worker_id", "ps_address", "interface", "batch_size",
                "device_profile", "runtime", "image", "python", "work_dir", "key_file", "proxy_command", "replay")
_PER_HOST_ONLY = ("name", "address", "role", "worker_id")  # not allowed in defaults
_REQUIRED = ("name", "address", "user", "role", "interface", "device_profile", "work_dir")
_REPLAY_FIELDS = ("direction", "ingress_via", "peer_interface", "peer_netns", "offset_s")

_HINTS = {
    "name": "a unique label of letters, digits, '.', '_' or '-', e.g. name: robot1",
    "address": "an IP address or DNS name Fabric connects to, e.g. address: 192.168.50.11",
    "port": "the SSH port, an integer in 1..65535 (default 22)",
    "user": "the SSH login name on that device, e.g. user: rog",
    "role": "ps (exactly one host) or worker",
    "worker_id": "the worker's transport id, an integer 0..N-1 (each once); leave it out for the ps",
    "ps_address": "the address this worker reaches the PS at (default: the ps host's address)",
    "interface": "the wireless interface tc replay shapes, e.g. interface: wlan0 (ip link shows it)",
    "batch_size": "samples per iteration on this device, an integer >= 1 (default: the device profile's)",
    "device_profile": "a profile name from configs/devices, e.g. device_profile: jetson-xavier-nx",
    "runtime": "native (the host's python) or docker (the image's python, docker run --network=host "
               "--cap-add=NET_ADMIN)",
    "image": "the Docker image to run with runtime: docker, e.g. image: rog:arm64",
    "python": "the Python interpreter on the device (or in the image), e.g. python: python3 or /opt/venv/bin/python",
    "work_dir": "an absolute directory on the device for code and run folders, e.g. work_dir: /home/rog/rog-work "
                "(~ is not expanded)",
    "key_file": "a private key file on this machine, e.g. key_file: ~/.ssh/id_ed25519 (no passwords)",
    "proxy_command": "an ssh ProxyCommand reaching the host, e.g. proxy_command: ssh -W %h:%p jumphost",
    "replay": "a mapping, e.g. replay: {direction: both, ingress_via: ifb}",
    "replay.direction": "both (uplink and downlink), egress (uplink only) or none (no tc replay on this host)",
    "replay.ingress_via": "ifb (redirect ingress to an ifb device) or peer (shape the other end's egress)",
    "replay.peer_interface": "with ingress_via: peer, the interface at the other end of the link",
    "replay.peer_netns": "with ingress_via: peer, the network namespace of the other end (optional)",
    "replay.offset_s": "trace second this host's replay starts at, a number >= 0 (default: spread the hosts "
                       "evenly over the trace)",
}


class HostsFileError(ValueError):
    """A hosts file is unreadable or invalid; ``problems`` lists every problem found."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [message])


@dataclass(frozen=True)
class ReplaySettings:
    """How ``scripts/tc_replay.py`` shapes one host's interface during a run."""

    direction: str = "both"
    ingress_via: str = "ifb"
    peer_interface: str | None = None
    peer_netns: str | None = None
    offset_s: float | None = None  # None: the plan spreads hosts evenly over the trace


@dataclass(frozen=True)
class Host:
    """One device of a run (see the module docstring for the meaning of every field)."""

    name: str
    address: str
    user: str
    role: str
    interface: str
    device_profile: str
    work_dir: str
    port: int = 22
    worker_id: int | None = None
    ps_address: str | None = None
    batch_size: int | None = None
    runtime: str = "native"
    image: str | None = None
    python: str = "python3"
    key_file: str | None = None
    proxy_command: str | None = None
    replay: ReplaySettings = field(default_factory=ReplaySettings)
    line: int | None = field(default=None, compare=False)  # YAML line of the entry (messages)

    @property
    def rank(self) -> str:
        """Event-log rank: ``ps`` or ``w<worker_id>``."""
        return "ps" if self.role == "ps" else f"w{self.worker_id}"

    @property
    def target(self) -> str:
        """``user@address:port`` as shown in plans."""
        return f"{self.user}@{self.address}:{self.port}"


@dataclass(frozen=True)
class HostsFile:
    """A validated set of hosts: one PS and N workers."""

    hosts: tuple[Host, ...]
    source: str | None = None
    known_hosts: str | None = None
    accept_new_host_keys: bool = False

    @property
    def ps(self) -> Host:
        """The parameter-server host."""
        return next(h for h in self.hosts if h.role == "ps")

    @property
    def workers(self) -> tuple[Host, ...]:
        """Worker hosts ordered by worker id."""
        return tuple(sorted((h for h in self.hosts if h.role == "worker"), key=lambda h: h.worker_id))

    @property
    def n_workers(self) -> int:
        return len(self.workers)

    def first_workers(self, n: int) -> "HostsFile":
        """The PS and the first ``n`` workers by worker id (a run of ``n`` workers on a larger team);
        ValueError when the file has fewer than ``n`` workers."""
        if not 1 <= n <= self.n_workers:
            raise ValueError(f"{n} worker(s) asked for; the hosts file {self.source or '(in memory)'} names "
                             f"{self.n_workers}: use 1..{self.n_workers}")
        keep = [h for h in self.hosts if h.role == "ps" or h.worker_id < n]
        return HostsFile(tuple(keep), source=self.source, known_hosts=self.known_hosts,
                         accept_new_host_keys=self.accept_new_host_keys)

    def host(self, name: str) -> Host:
        """The host called ``name``."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise ValueError(f"no host named {name!r}; hosts: {', '.join(h.name for h in self.hosts)}")


# ------------------------------------------------------------------------------------------ loading

def load_hosts(path: str | os.PathLike) -> HostsFile:
    """Read and validate a hosts file; raises :class:`HostsFileError` naming file, host and field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise HostsFileError(f"{p}: cannot read the hosts file: {e.strerror}; pass --hosts PATH "
                             f"(see configs/hosts.example.yaml)") from None
    try:
        data = load_strict(text)
    except DuplicateKeyError as e:
        raise HostsFileError(f"{p}: {e}") from None
    except yaml.YAMLError as e:
        raise HostsFileError(f"{p}: not valid YAML ({yaml_problem(e)}); check indentation and quoting") from None
    return hosts_from_dict(data, source=str(p))


def hosts_from_dict(data: Any, source: str | None = None, profiles_dir: str | os.PathLike | None = None) -> HostsFile:
    """Validate a parsed hosts mapping (see :func:`load_hosts`); every problem in one error."""
    where = f"{source}: " if source else ""
    errors: list[str] = []
    if not isinstance(data, Mapping):
        got = "an empty file" if data is None else type(data).__name__
        raise HostsFileError(f"{where}the hosts file must be a mapping with a 'hosts' list, got {got} "
                             f"(see configs/hosts.example.yaml)")
    _unknown(data, _TOP_FIELDS, "", "top level", errors)
    version = data.get("version", 1)
    if version != 1:
        errors.append(f"top level: field 'version': only version 1 exists, got {version!r}; write version: 1")
    known_hosts = data.get("known_hosts")
    if known_hosts is not None and not (isinstance(known_hosts, str) and known_hosts.strip()):
        errors.append(f"top level: field 'known_hosts': must be a file path, got {known_hosts!r}")
    accept_new = data.get("accept_new_host_keys", False)
    if not isinstance(accept_new, bool):
        errors.append(f"top level: field 'accept_new_host_keys': must be true or false, got {accept_new!r}")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        errors.append(f"top level: field 'defaults': must be a mapping of host fields, got {type(defaults).__name__}")
        defaults = {}
    else:
        for key in defaults:
            if key in _PER_HOST_ONLY:
                errors.append(f"defaults: field {key!r}: differs per host; set it in each host entry instead")
        _unknown(defaults, [f for f in _HOST_FIELDS if f not in _PER_HOST_ONLY], "", "defaults", errors)
    entries = data.get("hosts")
    if not isinstance(entries, list) or not entries:
        errors.append("top level: field 'hosts': must be a non-empty list of host entries "
                      "(one ps and at least one worker)")
        entries = []
    hosts: list[Host] = []
    for i, entry in enumerate(entries):
        host = _host(i, entry, defaults, errors, profiles_dir)
        if host is not None:
            hosts.append(host)
    if len(hosts) == len(entries) and entries:
        _check_set(hosts, errors)
    if errors:
        lines = [f"{where}{e}" for e in errors]
        raise HostsFileError("invalid hosts file:\n  " + "\n  ".join(lines) if len(lines) > 1 else lines[0], lines)
    return HostsFile(tuple(hosts), source=source, known_hosts=known_hosts, accept_new_host_keys=accept_new)


def _unknown(mapping: Mapping, known, prefix: str, where: str, errors: list[str]) -> None:
    known = tuple(known)
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            errors.append(f"{where}: field {prefix + str(key)!r}: unknown field ({hint}known fields: {', '.join(known)})")


def _label(i: int, entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    line = getattr(entry, "line", None)
    return f"hosts[{i}]" + (f" {name!r}" if isinstance(name, str) else "") + (f" (line {line})" if line else "")


def _host(i: int, entry: Any, defaults: Mapping, errors: list[str], profiles_dir) -> Host | None:
    label = _label(i, entry)
    if not isinstance(entry, Mapping):
        errors.append(f"{label}: must be a mapping of host fields (name, address, role, ...), got {entry!r}")
        return None
    n_before = len(errors)
    _unknown(entry, _HOST_FIELDS, "", label, errors)
    merged = {k: v for k, v in defaults.items() if k not in _PER_HOST_ONLY}
    merged.update(entry)

    def bad(key: str, problem: str) -> None:
        errors.append(f"{label}: field {key!r}: {problem}; {_HINTS.get(key, '')}".rstrip("; "))

    for key in _REQUIRED:
        if merged.get(key) is None:
            bad(key, "missing")
    role = merged.get("role")
    if role is not None and role not in ROLES:
        bad("role", f"must be ps or worker, got {role!r}")
        role = None
    name = merged.get("name")
    if name is not None and not (isinstance(name, str) and _NAME_RE.match(name)):
        bad("name", f"must be 1-40 letters, digits, '.', '_' or '-', got {name!r}")
    address = merged.get("address")
    if address is not None and not _is_address(address):
        bad("address", f"not an IP address or host name: {address!r}")
    port = merged.get("port", 22)
    if not (_is_int(port) and 1 <= port <= 65535):
        bad("port", f"must be an integer in 1..65535, got {port!r}")
    user = merged.get("user")
    if user is not None and not (isinstance(user, str) and _USER_RE.match(user)):
        bad("user", f"not a login name: {user!r}")
    worker_id = merged.get("worker_id")
    if role == "worker":
        if worker_id is None:
            bad("worker_id", "missing (every worker needs one)")
        elif not (_is_int(worker_id) and worker_id >= 0):
            bad("worker_id", f"must be an integer >= 0, got {worker_id!r}")
    elif role == "ps" and worker_id is not None:
        bad("worker_id", "the ps host has no worker id; remove it")
    ps_address = merged.get("ps_address")
    if ps_address is not None:
        if role == "ps":
            bad("ps_address", "only workers reach the PS; remove it from the ps entry")
        elif not _is_address(ps_address):
            bad("ps_address", f"not an IP address or host name: {ps_address!r}")
    iface = merged.get("interface")
    if iface is not None and not (isinstance(iface, str) and _IFACE_RE.match(iface)):
        bad("interface", f"not an interface name (1-15 characters, no spaces): {iface!r}")
    batch_size = merged.get("batch_size")
    if role == "ps" and "batch_size" in entry:
        bad("batch_size", "the ps does not train; remove it from the ps entry")
    if role == "ps":
        batch_size = None
    elif batch_size is not None and not (_is_int(batch_size) and batch_size >= 1):
        bad("batch_size", f"must be an integer >= 1, got {batch_size!r}")
    profile_name = merged.get("device_profile")
    profile = None
    if profile_name is not None:
        profile, problem = _profile(profile_name, profiles_dir)
        if problem:
            bad("device_profile", problem)
    runtime = merged.get("runtime", "native")
    image = merged.get("image")
    if runtime not in RUNTIMES:
        bad("runtime", f"must be native or docker, got {runtime!r}")
    elif runtime == "docker" and image is None:
        bad("image", "missing (runtime: docker needs the image to run)")
    elif runtime == "native" and image is not None:
        bad("image", "only used with runtime: docker; remove it or set runtime: docker")
    if image is not None and not (isinstance(image, str) and _IMAGE_RE.match(image)):
        bad("image", f"not a Docker image reference: {image!r}")
    python = merged.get("python", "python3")
    if not (isinstance(python, str) and _WORD_RE.match(python)):
        bad("python", f"must be one command or path without spaces or shell characters, got {python!r}")
    work_dir = merged.get("work_dir")
    if work_dir is not None:
        problem = _posix_dir(work_dir)
        if problem:
            bad("work_dir", problem)
    key_file = merged.get("key_file")
    if key_file is not None and not (isinstance(key_file, str) and key_file.strip()):
        bad("key_file", f"must be a file path, got {key_file!r}")
    proxy = merged.get("proxy_command")
    if proxy is not None and not (isinstance(proxy, str) and proxy.strip()):
        bad("proxy_command", f"must be a command line, got {proxy!r}")
    replay = _replay(merged.get("replay"), label, errors)
    if len(errors) > n_before:
        return None
    if batch_size is None and role == "worker":
        batch_size = profile.batch_size
    return Host(name=name, address=str(address), user=user, role=role, interface=iface, device_profile=profile_name,
                work_dir=posixpath.normpath(work_dir), port=port, worker_id=worker_id,
                ps_address=None if ps_address is None else str(ps_address), batch_size=batch_size, runtime=runtime,
                image=image, python=python, key_file=key_file, proxy_command=proxy, replay=replay,
                line=getattr(entry, "line", None))


def _replay(v: Any, label: str, errors: list[str]) -> ReplaySettings:
    if v is None:
        return ReplaySettings()
    if not isinstance(v, Mapping):
        errors.append(f"{label}: field 'replay': must be a mapping, got {v!r}; {_HINTS['replay']}")
        return ReplaySettings()
    n = len(errors)
    _unknown(v, _REPLAY_FIELDS, "replay.", label, errors)

    def bad(key: str, problem: str) -> None:
        errors.append(f"{label}: field 'replay.{key}': {problem}; {_HINTS['replay.' + key]}")

    direction = v.get("direction", "both")
    if direction not in REPLAY_DIRECTIONS:
        bad("direction", f"got {direction!r}")
    via = v.get("ingress_via", "ifb")
    if via not in INGRESS_VIA:
        bad("ingress_via", f"got {via!r}")
    peer = v.get("peer_interface")
    if peer is not None and not (isinstance(peer, str) and _IFACE_RE.match(peer)):
        bad("peer_interface", f"not an interface name: {peer!r}")
    if via == "peer" and direction == "both" and peer is None:
        bad("peer_interface", "missing")
    peer_ns = v.get("peer_netns")
    if peer_ns is not None and not (isinstance(peer_ns, str) and _IFACE_RE.match(peer_ns)):
        bad("peer_netns", f"not a namespace name: {peer_ns!r}")
    offset = v.get("offset_s")
    if offset is not None and not (_is_number(offset) and offset >= 0):
        bad("offset_s", f"got {offset!r}")
    if len(errors) > n:
        return ReplaySettings()
    return ReplaySettings(direction=direction, ingress_via=via, peer_interface=peer, peer_netns=peer_ns,
                          offset_s=None if offset is None else float(offset))


def _check_set(hosts: list[Host], errors: list[str]) -> None:
    """Rules across hosts: names unique, one ps, workers 0..N-1 each once."""
    seen: dict[str, Host] = {}
    for h in hosts:
        if h.name in seen:
            first = f" on line {seen[h.name].line}" if seen[h.name].line else ""
            errors.append(f"{_where(h)}: field 'name': also used by the entry{first}; host names must be unique")
        seen.setdefault(h.name, h)
    ps = [h for h in hosts if h.role == "ps"]
    if len(ps) != 1:
        found = ", ".join(repr(h.name) for h in ps) or "none"
        errors.append(f"hosts: field 'role': exactly one host must have role: ps, found {len(ps)} ({found})")
    workers = [h for h in hosts if h.role == "worker"]
    if not workers:
        errors.append("hosts: field 'role': at least one host must have role: worker")
        return
    ids: dict[int, Host] = {}
    duplicated = False
    for h in workers:
        if h.worker_id in ids:
            duplicated = True
            errors.append(f"{_where(h)}: field 'worker_id': {h.worker_id} is also used by worker "
                          f"{ids[h.worker_id].name!r}; give each worker its own id")
        ids.setdefault(h.worker_id, h)
    n = len(workers)
    missing = sorted(set(range(n)) - set(ids))
    if missing and not duplicated:
        beyond = sorted(k for k in ids if k >= n)
        errors.append(f"hosts: field 'worker_id': {n} workers need the ids 0..{n - 1} each once; missing "
                      f"{missing}, out of range {beyond} (number the workers from 0 without gaps)")


def _where(h: Host) -> str:
    return f"host {h.name!r}" + (f" (line {h.line})" if h.line else "")


def _profile(name: Any, profiles_dir) -> tuple[Any, str | None]:
    from rog.testbed.profiles import ProfileError, available_profiles, load_profile

    if not isinstance(name, str) or "/" in name or not name.strip():
        return None, f"must be a profile name, got {name!r}"
    try:
        return load_profile(name, devices_dir=profiles_dir), None
    except ProfileError as e:
        known = ", ".join(available_profiles(profiles_dir)) or "none"
        if str(e).startswith("no device profile"):
            close = difflib.get_close_matches(name, available_profiles(profiles_dir), n=1)
            return None, (f"no profile {name!r} in configs/devices" + (f" (did you mean {close[0]!r}?)" if close else "")
                          + f"; available: {known}")
        return None, f"profile {name!r} is invalid: {e}"


def _posix_dir(v: Any) -> str | None:
    if not isinstance(v, str) or not v:
        return f"must be an absolute path, got {v!r}"
    if v.startswith("~"):
        return f"{v!r} starts with ~, which is not expanded"
    if not v.startswith("/"):
        return f"{v!r} is not absolute"
    if any(part == ".." for part in v.split("/")):
        return f"{v!r} contains '..'"
    if not _WORD_RE.match(v):
        return f"{v!r} contains spaces or shell characters"
    if posixpath.normpath(v) == "/":
        return "must not be / itself"
    return None


def _is_address(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        ipaddress.ip_address(v)
        return True
    except ValueError:
        return bool(_HOSTNAME_RE.match(v)) and not re.match(r"^[\d.]+$", v)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
