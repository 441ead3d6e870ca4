"""Execute a :class:`rog.deploy.plan.Plan` over SSH with Fabric; stop everything however it ends.

    with FabricRunner(plan, secret=secrets.token_hex(32)) as runner:
        outcome = runner.run(on_poll=show_progress)   # RunOutcome(status="done"|"failed"|"interrupted")

One :class:`fabric.Connection` per host (key-based only: ``key_file``, else the SSH agent and
``~/.ssh/id_*``; no password is ever passed), grouped in a :class:`fabric.ThreadingGroup` for the
reachability check; each phase then runs every host's steps in parallel threads (one thread per
host, that host's steps in order), and the next phase starts when every host finished.

Host keys: checked against the hosts file's ``known_hosts`` (default ``~/.ssh/known_hosts``); an
unknown host is refused (paramiko ``RejectPolicy``) unless ``accept_new_host_keys`` is set.  The
emulated testbed writes a known_hosts file with its per-run host key, so its connections are
strictly checked too.

The secret: written to the stdin of the PS's and workers' start commands only (see
:mod:`rog.deploy.plan`), never passed as ``env=`` (Fabric's ``inline_ssh_env`` would put it on the
remote command line) and never logged.

Cleanup: :meth:`run` always stops every process of the plan (workers, PS, replay, power sampler;
kill of the remote process group, TERM then KILL) on completion, failure, Ctrl-C or SIGTERM (as
raised by the caller's handler), then copies each host's run folder back with ``get``.  The
context manager stops (if :meth:`run` did not) and closes every connection.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import signal
import socket
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rog.deploy.hosts import Host, HostsFile
from rog.deploy.plan import STOP_ORDER, Plan, Step

__all__ = ["DeployError", "ProcState", "RunOutcome", "FabricRunner", "make_connection", "preflight"]

LOCAL_PREFIX = "<local>/"  # plan paths the runner places in its own temp folder


class DeployError(RuntimeError):
    """A deployment step failed; the message names the host, the step and the remote output."""


@dataclass(frozen=True)
class ProcState:
    """One remote process as the status command saw it."""

    state: str  # running | exited | gone (killed, no exit code) | absent (never started)
    rc: int | None = None


@dataclass
class RunOutcome:
    """How a run ended, with the pids of every started process and where the logs went."""

    status: str  # done | failed | interrupted
    reason: str = ""
    pids: dict[tuple[str, str], int] = field(default_factory=dict)
    collected: dict[str, Path] = field(default_factory=dict)
    states: dict[str, dict[str, ProcState]] = field(default_factory=dict)
    wall_s: float = 0.0


def preflight(hosts: HostsFile) -> list[str]:
    """What would stop every connection before one is tried (no network): missing key files.
    One message per problem, naming the host and what to do."""
    problems = []
    for h in hosts.hosts:
        if h.key_file is not None and not Path(os.path.expanduser(h.key_file)).is_file():
            problems.append(f"{h.name}: key_file {h.key_file} does not exist; create a key (ssh-keygen -t ed25519) and "
                            f"install it on the device (ssh-copy-id {h.user}@{h.address}), or fix key_file")
    return problems


def make_connection(host: Host, hosts: HostsFile, connect_timeout_s: float = 15.0):
    """A Fabric Connection to ``host``: key-based auth only, host keys checked (see module docstring)."""
    from fabric import Config, Connection
    from paramiko import AutoAddPolicy, RejectPolicy

    kwargs: dict = {"banner_timeout": connect_timeout_s, "auth_timeout": connect_timeout_s}
    if host.key_file is not None:
        key = Path(os.path.expanduser(host.key_file))
        if not key.is_file():
            raise DeployError(f"{host.name}: key_file {key} does not exist; create a key (ssh-keygen -t ed25519) and "
                              f"install it on the device (ssh-copy-id {host.user}@{host.address}), or fix key_file")
        kwargs.update(key_filename=[str(key)], look_for_keys=False, allow_agent=False)
    else:
        kwargs.update(look_for_keys=True, allow_agent=True)
    config = Config(overrides={"load_ssh_configs": False, "run": {"hide": True, "warn": True, "in_stream": False}})
    conn = Connection(host.address, user=host.user, port=host.port, config=config, connect_timeout=max(1, int(connect_timeout_s)),
                      connect_kwargs=kwargs, gateway=host.proxy_command or False, inline_ssh_env=False)
    known = Path(os.path.expanduser(hosts.known_hosts or "~/.ssh/known_hosts"))
    if hosts.accept_new_host_keys:
        conn.client.set_missing_host_key_policy(AutoAddPolicy())
        if known.is_file():
            conn.client.load_host_keys(str(known))  # new keys are appended to it
    else:
        conn.client.set_missing_host_key_policy(RejectPolicy())
        if known.is_file():
            conn.client.get_host_keys().load(str(known))  # read only
    return conn


class FabricRunner:
    """Runs a plan's phases on its hosts (see the module docstring).

    ``secret``: the run secret (required when the plan's spec has a ``secret_env``).
    ``log``: where progress messages go (default: nowhere); never receives the secret.
    ``connection_factory(host, hosts_file)``: builds a connection (default :func:`make_connection`;
    tests pass a recorder).  ``poll_s``: seconds between status polls in the wait phase.
    ``command_timeout_s``: limit of one remote command (not of the detached processes).
    """

    def __init__(self, plan: Plan, secret: str | None = None, *, log: Callable[[str], None] | None = None,
                 connection_factory: Callable | None = None, connect_timeout_s: float = 15.0, poll_s: float = 1.0,
                 command_timeout_s: float = 600.0) -> None:
        if plan.spec.secret_env and not secret:
            raise ValueError(f"secret is required: the plan passes {plan.spec.secret_env} to the PS and workers "
                             f"(generate one per run, e.g. secrets.token_hex(32))")
        if secret is not None and ("\n" in secret or "\r" in secret):
            raise ValueError("secret must be one line (it is read with `read -r` on the remote side)")
        if not poll_s > 0:
            raise ValueError(f"poll_s must be > 0 seconds, got {poll_s!r}")
        self.plan = plan
        self._secret = secret
        self._log = log or (lambda msg: None)
        self._factory = connection_factory or (lambda h, hf: make_connection(h, hf, connect_timeout_s))
        self.poll_s = poll_s
        self.command_timeout_s = command_timeout_s
        self.pids: dict[tuple[str, str], int] = {}
        self._conns: dict[str, object] = {}
        self._cancel = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(plan.hosts.hosts)), thread_name_prefix="rog-deploy")
        self._tmp = Path(tempfile.mkdtemp(prefix=f"rog-deploy-{plan.run_id}-"))
        self._tarball: Path | None = None
        self._stopped = False
        self._closed = False
        self._inflight: list = []
        self.unreachable: set[str] = set()  # hosts whose connection failed: later phases skip them

    # ---- lifecycle
    def __enter__(self) -> "FabricRunner":
        return self

    def __exit__(self, *exc) -> None:
        try:
            if not self._stopped and self._conns:
                self.stop()
        finally:
            self.close()

    def close(self) -> None:
        """Close every connection and remove the local temp folder (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        for conn in self._conns.values():
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        shutil.rmtree(self._tmp, ignore_errors=True)

    def connection(self, host: str):
        """The (lazily built) connection to ``host``."""
        if host not in self._conns:
            self._conns[host] = self._factory(self.plan.hosts.host(host), self.plan.hosts)
        return self._conns[host]

    # ---- the whole run
    def run(self, on_poll: Callable[[dict], None] | None = None,
            on_phase: Callable[[str], None] | None = None) -> RunOutcome:
        """Every phase in order; stop and collect always.  Returns how it ended (never raises a
        DeployError or KeyboardInterrupt; re-raises SystemExit after cleaning up).  ``on_poll(states)``
        after every status poll of the wait phase; ``on_phase(name)`` right before each phase starts
        (e.g. to note when ``go`` released the links)."""
        t0 = time.monotonic()
        out = RunOutcome(status="failed")
        reraise: BaseException | None = None
        connected = False
        try:
            self.connect()
            connected = True
            for phase in ("prepare", "sync", "monitor", "ps", "replay", "workers", "ready", "go"):
                self._log(f"deploy: {phase}")
                if on_phase is not None:
                    on_phase(phase)
                self.run_phase(phase)
            out.states = self.wait(on_poll)
            out.status = "done"
        except KeyboardInterrupt:
            out.status, out.reason = "interrupted", "interrupted (Ctrl-C)"
        except DeployError as e:
            out.reason = str(e)
        except SystemExit as e:
            out.reason, reraise = f"terminated (exit {e.code})", e
        except Exception as e:  # noqa: BLE001 - reported in the outcome
            out.reason = f"{type(e).__name__}: {e}"
        finally:
            self._cancel.set()  # no further step starts; the steps in flight finish first
            futures_wait(self._inflight)
            self._cancel.clear()
            if connected:  # else nothing ran anywhere: nothing to stop or collect
                self._stop_shielded()
                try:
                    out.collected = self.collect()
                except KeyboardInterrupt:
                    out.reason += " (collecting logs was interrupted)"
            else:
                self._stopped = True
        out.pids = dict(self.pids)
        out.wall_s = time.monotonic() - t0
        if reraise is not None:
            raise reraise
        return out

    def connect(self) -> None:
        """Open every connection and run ``true`` on all hosts at once (fabric.ThreadingGroup)."""
        from fabric import ThreadingGroup
        from fabric.exceptions import GroupException

        hosts = self.plan.hosts.hosts
        conns = []
        for h in hosts:
            try:
                conns.append(self.connection(h.name))
            except DeployError:
                self.unreachable.add(h.name)
                raise
        group = ThreadingGroup.from_connections(conns)
        try:
            group.run("true", hide=True, in_stream=False, timeout=self.command_timeout_s)
        except GroupException as e:
            problems = []
            for conn, res in e.result.items():
                if isinstance(res, BaseException):
                    h = next(h for h in hosts if self._conns[h.name] is conn)
                    self.unreachable.add(h.name)
                    problems.append(_explain(h, res))
            raise DeployError("cannot reach every host:\n  " + "\n  ".join(problems)) from None

    def run_phase(self, phase: str) -> None:
        """Run one phase: each host's steps in order, hosts in parallel; raise the first failure.
        The stop phase runs in waves (:data:`rog.deploy.plan.STOP_ORDER`): all workers first, then
        the PS, then every replay, then every power sampler."""
        steps = self.plan.phase(phase)
        if phase == "sync" and any(s.kind == "put" and (s.local or "").startswith(LOCAL_PREFIX) for s in steps):
            self._ensure_tarball()
        if phase == "stop":
            for proc in STOP_ORDER:
                self._run_steps([s for s in steps if s.proc == proc])
            return
        self._run_steps(steps)

    def _run_steps(self, steps: list[Step]) -> None:
        by_host: dict[str, list[Step]] = {}
        for s in steps:
            by_host.setdefault(s.host, []).append(s)
        futures = [self._pool.submit(self._host_steps, host, ss) for host, ss in by_host.items()]
        self._inflight = futures
        errors = []
        for f in futures:
            try:
                f.result()
            except DeployError as e:
                errors.append(str(e))
        if errors:
            raise DeployError(errors[0] if len(errors) == 1 else "several hosts failed:\n  " + "\n  ".join(errors))

    def _host_steps(self, host: str, steps: list[Step]) -> None:
        for s in steps:
            if self._cancel.is_set() or host in self.unreachable:
                return
            try:
                self.execute(s)
            except DeployError as e:
                if not s.best_effort:
                    raise
                self._log(f"deploy: warning: {e}")
            except Exception as e:  # noqa: BLE001 - connection errors of any kind
                err = DeployError(f"{host}: {s.what}: {_explain(self.plan.hosts.host(host), e)}")
                if _is_connection_error(e):
                    self.unreachable.add(host)
                if not s.best_effort:
                    raise err from None
                self._log(f"deploy: warning: {err}; skipping the rest of this phase on {host}")
                return

    # ---- single steps
    def execute(self, s: Step) -> str:
        """Execute one step; returns its output (stdout of run/start, '' otherwise)."""
        conn = self.connection(s.host)
        if s.skip_if and self._remote_ok(conn, s.skip_if):
            self._log(f"deploy: [{s.host}] {s.what}: already done")
            return ""
        self._log(f"deploy: [{s.host}] {s.what}")
        if s.kind == "run":
            return self._run(conn, s, s.command)
        if s.kind == "start":
            stdin = io.StringIO(self._secret + "\n") if s.secret else False
            out = self._run(conn, s, s.command, in_stream=stdin).strip().splitlines()
            try:
                pid = int(out[-1])
            except (IndexError, ValueError):
                raise DeployError(f"{s.host}: {s.what}: the process did not report a pid (output {out!r}); "
                                  f"see {self.plan.run_dir(s.host)}/{s.proc}.log") from None
            self.pids[(s.host, s.proc)] = pid
            return str(pid)
        if s.kind == "put":
            conn.put(self._local(s.local), s.remote)
            return ""
        if s.kind == "get":
            local = Path(self._local(s.local))
            local.parent.mkdir(parents=True, exist_ok=True)
            conn.get(s.remote, str(local))
            return ""
        if s.kind == "wait_file":
            return self._wait_file(conn, s)
        if s.kind == "local":
            return self._unpack(s)
        raise DeployError(f"{s.host}: step kind {s.kind!r} cannot be executed directly")

    def _run(self, conn, s: Step, command: str, in_stream=False) -> str:
        r = conn.run(command, hide=True, warn=True, in_stream=in_stream, echo_stdin=False, pty=False,
                     timeout=self.command_timeout_s)
        if r.exited != 0:
            detail = (r.stderr or r.stdout or "").strip().splitlines()[-6:]
            raise DeployError(f"{s.host}: {s.what} failed (exit {r.exited})" + (": " + " | ".join(detail) if detail else ""))
        return r.stdout

    def _remote_ok(self, conn, command: str) -> bool:
        return conn.run(command, hide=True, warn=True, in_stream=False, timeout=self.command_timeout_s).exited == 0

    def _wait_file(self, conn, s: Step) -> str:
        end = None if s.timeout_s is None else time.monotonic() + s.timeout_s
        check = f"test -e {_q(s.remote)}"
        while not self._cancel.is_set():
            if self._remote_ok(conn, check):
                return ""
            st = self.status(s.host).get(s.proc)
            if st is not None and st.state in ("exited", "gone", "absent"):
                raise DeployError(f"{s.host}: {s.proc} {_describe(st)} before it was ready: {self._tail(s.host, s.proc)}")
            if end is not None and time.monotonic() > end:
                raise DeployError(f"{s.host}: {s.what}: not ready after {s.timeout_s:g} s: {self._tail(s.host, s.proc)}")
            time.sleep(min(self.poll_s, 0.5))
        return ""

    def _local(self, path: str | None) -> str:
        if path is None:
            raise DeployError("a transfer step has no local path")
        if path.startswith(LOCAL_PREFIX):
            return str(self._tmp / path[len(LOCAL_PREFIX):])
        return path

    def _ensure_tarball(self) -> None:
        if self._tarball is None:
            self._tarball = self.plan.code.write(self._tmp / f"code-{self.plan.code.code_id}.tgz")

    def _unpack(self, s: Step) -> str:
        hosts_dir = Path(s.local)
        packed = hosts_dir / f".{s.host}.tar"
        if not packed.is_file():
            raise DeployError(f"{s.host}: nothing was copied back ({packed} missing)")
        dest = hosts_dir / s.host
        if dest.exists():
            shutil.rmtree(dest)
        with tarfile.open(packed, "r:*") as tar:
            bad = [m.name for m in tar.getmembers() if m.name != s.host and not m.name.startswith(s.host + "/")]
            if bad:
                raise DeployError(f"{s.host}: the collected tarball holds paths outside {s.host}/: {bad[:3]}")
            tar.extractall(hosts_dir, filter="data")
        packed.unlink()
        for pattern in self.plan.spec.hoist:
            for f in sorted(dest.glob(pattern)):
                if f.is_file():
                    shutil.copy2(f, self.plan.result_dir / f.name)
        return str(dest)

    # ---- monitoring
    def status(self, host: str) -> dict[str, ProcState]:
        """The state of every process of ``host`` (one remote command)."""
        conn = self.connection(host)
        r = conn.run(self.plan.status_command(host), hide=True, warn=True, in_stream=False, timeout=self.command_timeout_s)
        states = {}
        for line in r.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in self.plan.procs.get(host, ()):
                rc = int(parts[2]) if parts[1] == "exited" and len(parts) > 2 and parts[2].lstrip("-").isdigit() else None
                states[parts[0]] = ProcState(parts[1], rc)
        return states

    def poll(self) -> dict[str, dict[str, ProcState]]:
        """The state of every process on every host (hosts polled in parallel)."""
        hosts = [h for h in self.plan.procs if self.plan.procs[h]]
        futures = {h: self._pool.submit(self.status, h) for h in hosts}
        out = {}
        for h, f in futures.items():
            try:
                out[h] = f.result()
            except Exception as e:  # noqa: BLE001 - an unreachable host is a failure of the run
                if not (f.done() and f.exception() is e):
                    raise  # raised while waiting, not by the poll: a signal handler's (SIGTERM), not the host's
                raise DeployError(f"{h}: status poll failed: {_explain(self.plan.hosts.host(h), e)}") from None
        return out

    def wait(self, on_poll: Callable[[dict], None] | None = None) -> dict[str, dict[str, ProcState]]:
        """Poll until every worker and the PS exited 0; raise DeployError when any process fails or vanishes,
        or when the spec's ``timeout_s`` passes.  ``on_poll(states)`` is called after every poll."""
        workers = [(s.host, s.proc) for s in self.plan.phase("wait")]
        end = None if self.plan.spec.timeout_s is None else time.monotonic() + self.plan.spec.timeout_s
        while True:
            states = self.poll()
            for host, procs in states.items():
                for proc in self.plan.procs[host]:
                    st = procs.get(proc, ProcState("absent"))
                    if (st.state == "exited" and st.rc != 0) or st.state in ("gone", "absent"):
                        raise DeployError(f"{host}: {proc} {_describe(st)}: {self._tail(host, proc)}")
            if on_poll is not None:
                on_poll(states)
            if all(states[h].get(p) == ProcState("exited", 0) for h, p in workers):
                return states
            if end is not None and time.monotonic() > end:
                raise DeployError(f"the run did not finish within {self.plan.spec.timeout_s:g} s")
            time.sleep(self.poll_s)

    def read_remote(self, host: str, relpath: str, offset: int = 0, max_bytes: int = 1 << 20) -> bytes:
        """Bytes of a file in ``host``'s run folder from ``offset`` (b'' if missing): for live progress."""
        sftp = self.connection(host).sftp()
        try:
            with sftp.open(f"{self.plan.run_dir(host)}/{relpath}", "rb") as f:
                f.seek(offset)
                return f.read(max_bytes)
        except OSError:
            return b""

    def _tail(self, host: str, proc: str) -> str:
        try:
            r = self.connection(host).run(self.plan.log_tail_command(host, proc), hide=True, warn=True, in_stream=False,
                                          timeout=60)
            lines = r.stdout.strip().splitlines()
        except Exception:  # noqa: BLE001 - only for the message
            lines = []
        where = f"{self.plan.run_dir(host)}/{proc}.log"
        return (" | ".join(lines[-6:]) + f" (log {where})") if lines else f"(empty log {where})"

    # ---- the end
    def stop(self) -> None:
        """Stop every process of the plan on every host (best effort; idempotent)."""
        self._stopped = True
        if not self._conns:
            return
        self._log("deploy: stop")
        self.run_phase("stop")

    def _stop_shielded(self) -> None:
        """:meth:`stop` with Ctrl-C ignored meanwhile (stopping is bounded by the grace period), so a
        second Ctrl-C cannot leave processes running on the hosts."""
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            self.stop()
        finally:
            if main:
                signal.signal(signal.SIGINT, old)

    def collect(self) -> dict[str, Path]:
        """Copy every host's run folder into ``result/<run-id>/hosts/<host>/``; hoist event, power
        and replay files into ``result/<run-id>/``.  Returns the hosts collected."""
        if not self._conns:
            return {}
        self.plan.result_dir.mkdir(parents=True, exist_ok=True)
        self._log("deploy: collect")
        self.run_phase("collect")
        out = {}
        for h in self.plan.hosts.hosts:
            d = self.plan.result_dir / "hosts" / h.name
            if d.is_dir():
                out[h.name] = d
        return out


def _q(s: str) -> str:
    return shlex.quote(s)


def _is_connection_error(e: BaseException) -> bool:
    """The link to the host is broken (not: a remote file is missing)."""
    from paramiko.ssh_exception import NoValidConnectionsError, SSHException

    return isinstance(e, (SSHException, NoValidConnectionsError, ConnectionError, TimeoutError, EOFError))


def _describe(st: ProcState) -> str:
    if st.state == "exited":
        return f"exited with code {st.rc}"
    if st.state == "gone":
        return "died without an exit code (killed?)"
    return "was never started"


def _explain(h: Host, e: BaseException) -> str:
    """A readable reason for a connection failure, with what to do."""
    from paramiko.ssh_exception import AuthenticationException, BadHostKeyException, NoValidConnectionsError, SSHException

    where = f"{h.name} ({h.target})"
    if isinstance(e, BadHostKeyException):
        return (f"{where}: the host key differs from known_hosts (a reinstalled device, or someone in between); "
                f"check it, then remove the old key with ssh-keygen -R {h.address}")
    if isinstance(e, AuthenticationException):
        return (f"{where}: key authentication failed (passwords are never used); install the public key with "
                f"ssh-copy-id {h.user}@{h.address} or set key_file")
    if isinstance(e, SSHException) and "known_hosts" in str(e):
        return (f"{where}: unknown host key; connect once with ssh -p {h.port} {h.user}@{h.address} to check and "
                f"accept it, or set accept_new_host_keys: true in the hosts file")
    if isinstance(e, (NoValidConnectionsError, socket.timeout, TimeoutError, ConnectionError)):
        return f"{where}: cannot connect ({e}); is the device up, sshd running, address and port right?"
    if isinstance(e, DeployError):
        return str(e)
    return f"{where}: {type(e).__name__}: {e}"


