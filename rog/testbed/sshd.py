"""One private sshd per network namespace of an emulated :class:`~rog.testbed.netns.Testbed`.

With an sshd inside every namespace, Fabric drives the emulated testbed exactly as it drives real
devices (docs/design.md#emulated-testbed): same hosts model, same plan, same runner.

    with Testbed(n_workers=2) as tb, NamespaceSshd(tb) as sshd:
        hosts = sshd.hosts_file(python=sys.executable, work_dir="/tmp/rog-emulated", device_profile="quick-cpu")

Per run, in a fresh root-only folder under ``/run/rog-sshd/`` (never world-writable, so sshd's
StrictModes holds): one ed25519 host key and one ed25519 client key pair made with ``ssh-keygen``,
an ``authorized_keys`` holding only that client key (with ``restrict``: no forwarding, no pty),
a ``known_hosts`` with the host key at every namespace address (so the runner checks host keys
strictly), and per namespace a config and a pid file.  sshd listens only on the namespace's own
address (the PS namespace: its end of worker 1's link) at ``port`` (default 2222); password and
keyboard-interactive login are off, root may log in with the key only, no environment is accepted.

Reaching a namespace from the root namespace: nothing is routed there (by design of the testbed),
so each host's ``proxy_command`` is ``setsid ip netns exec <ns> python -m rog.testbed.sshd relay ADDR
PORT``: a tiny stdin/stdout <-> TCP relay started inside the namespace (an ssh ``ProxyCommand``; no
``nc``/``socat`` needed), in its own session so a Ctrl-C at the terminal reaches the launcher only and
the connections survive to stop and collect the run.  Only the SSH control traffic takes this path;
the PS and workers talk over the shaped veth links as before.

Cleanup: :meth:`NamespaceSshd.stop` (context exit, interpreter exit, also after errors) terminates
every sshd it started and any sshd session process left in its namespaces, then deletes the key
folder.  :meth:`start` first removes key folders left by a crashed run with the same prefix
(their sshd processes died with the namespaces, which :meth:`Testbed.create` recreates).

Install: ``bash scripts/setup_sshd.sh`` (openssh-server via apt-get when sshd is missing).
"""

from __future__ import annotations

import atexit
import os
import pwd
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

__all__ = ["NamespaceSshd", "SshdError", "find_sshd", "SSHD_BASE_DIR", "DEFAULT_SSHD_PORT"]

SSHD_BASE_DIR = Path("/run/rog-sshd")
DEFAULT_SSHD_PORT = 2222
_SEARCH = ("/usr/sbin/sshd", "/usr/local/sbin/sshd", "/sbin/sshd")


class SshdError(RuntimeError):
    """sshd is missing, or could not start in a namespace (the message carries its log)."""


def find_sshd() -> str | None:
    """Absolute path of the sshd binary, or None (install with ``bash scripts/setup_sshd.sh``)."""
    found = shutil.which("sshd")
    for p in ([found] if found else []) + list(_SEARCH):
        if p and os.access(p, os.X_OK):
            return os.path.abspath(p)
    return None


class NamespaceSshd:
    """sshd in every namespace of ``testbed`` (see the module docstring); a context manager.

    ``port``: listening port in every namespace.  ``user``: the login user (default: the current
    one, root for the namespace testbed).  ``sshd_path``: the binary (default :func:`find_sshd`).
    ``python``: the interpreter of the relay ProxyCommand (default this one).
    """

    def __init__(self, testbed, port: int = DEFAULT_SSHD_PORT, user: str | None = None, sshd_path: str | None = None,
                 python: str | None = None, start_timeout_s: float = 10.0) -> None:
        if not (isinstance(port, int) and 1 <= port <= 65535):
            raise ValueError(f"port must be an integer in 1..65535, got {port!r}")
        self.testbed = testbed
        self.port = port
        self.user = user or pwd.getpwuid(os.geteuid()).pw_name
        self.sshd_path = sshd_path
        self.python = python or sys.executable
        self.start_timeout_s = start_timeout_s
        self.dir: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}

    # ---- names
    @property
    def who(self) -> list:
        """``"ps"`` then worker numbers 1..N (the testbed's naming)."""
        return ["ps"] + list(range(1, self.testbed.n_workers + 1))

    def address_of(self, who) -> str:
        """The address sshd of ``who`` listens on."""
        return self.testbed.ps_address(1) if who == "ps" else self.testbed.worker_address(who)

    def proxy_command(self, who) -> str:
        """The ProxyCommand that reaches ``who``'s sshd from the root namespace."""
        return shlex.join([shutil.which("setsid") or "setsid", shutil.which("ip") or "ip", "netns", "exec",
                           self.testbed.netns_of(who), self.python, "-m", "rog.testbed.sshd", "relay",
                           self.address_of(who), str(self.port)])

    @property
    def client_key(self) -> Path:
        """The per-run private key Fabric logs in with."""
        return self._path("client_key")

    @property
    def known_hosts(self) -> Path:
        """known_hosts with the per-run host key at every namespace address."""
        return self._path("known_hosts")

    def _path(self, name: str) -> Path:
        if self.dir is None:  # before start (a dry run): where the per-run file will be
            return SSHD_BASE_DIR / f"{self.testbed.prefix}-<per-run>" / name
        return self.dir / name

    # ---- lifecycle
    def __enter__(self) -> "NamespaceSshd":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "NamespaceSshd":
        """Make the keys and start one sshd per namespace; returns once every sshd listens."""
        if os.geteuid() != 0:
            raise SshdError("sshd in the testbed's namespaces needs root")
        sshd = self.sshd_path or find_sshd()
        if sshd is None:
            raise SshdError("sshd is not installed; run: bash scripts/setup_sshd.sh (installs openssh-server)")
        self.sshd_path = sshd
        if not self.testbed.exists():
            raise SshdError(f"the testbed's namespaces do not exist ({', '.join(self.testbed.namespaces)}); "
                            f"create the Testbed first")
        keygen = shutil.which("ssh-keygen")
        if keygen is None:
            raise SshdError("ssh-keygen is not installed (package openssh-client)")
        _remove_stale(self.testbed.prefix)
        SSHD_BASE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(SSHD_BASE_DIR, 0o700)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.testbed.prefix}-", dir=SSHD_BASE_DIR))
        atexit.register(self.stop)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation folder (Debian)
        for name, comment in (("host_key", "rog-testbed-host"), ("client_key", "rog-testbed-client")):
            _run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(self.dir / name)])
        client_pub = (self.dir / "client_key.pub").read_text().strip()
        (self.dir / "authorized_keys").write_text(f"restrict {client_pub}\n")
        host_pub = " ".join((self.dir / "host_key.pub").read_text().split()[:2])
        (self.dir / "known_hosts").write_text(
            "".join(f"[{self.address_of(w)}]:{self.port} {host_pub}\n" for w in self.who))
        for p in self.dir.iterdir():
            os.chmod(p, 0o600 if not p.name.endswith(".pub") else 0o644)
        use_pam = _account_locked(self.user)
        for w in self.who:
            ns = self.testbed.netns_of(w)
            cfg = self.dir / f"sshd-{ns}.conf"
            cfg.write_text(self._config(w, use_pam))
            cfg.chmod(0o600)
            test = subprocess.run(self.testbed.exec_argv(ns, [sshd, "-t", "-f", str(cfg)]), capture_output=True, text=True)
            if test.returncode != 0:
                raise SshdError(f"sshd rejects its config for {ns}: {test.stderr.strip()}")
            log = self.dir / f"sshd-{ns}.log"
            self.procs[ns] = subprocess.Popen(self.testbed.exec_argv(ns, [sshd, "-D", "-f", str(cfg), "-E", str(log)]),
                                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL, start_new_session=True)
        for w in self.who:
            self._wait_listening(w)
        return self

    def _config(self, who, use_pam: bool) -> str:
        ns = self.testbed.netns_of(who)
        d = self.dir
        return "\n".join([
            "# written by rog.testbed.sshd for one emulated-testbed run; deleted when the run ends",
            f"ListenAddress {self.address_of(who)}",
            f"Port {self.port}",
            f"HostKey {d / 'host_key'}",
            f"PidFile {d / f'sshd-{ns}.pid'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitEmptyPasswords no",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {self.user}",
            f"UsePAM {'yes' if use_pam else 'no'}",
            "StrictModes yes",
            "PermitUserEnvironment no",
            "AllowTcpForwarding no",
            "AllowAgentForwarding no",
            "X11Forwarding no",
            "PermitTunnel no",
            "PrintMotd no",
            "LogLevel INFO",
            "MaxSessions 32",
            "MaxStartups 32:50:64",
            "Subsystem sftp internal-sftp",
            "",
        ])

    def _wait_listening(self, who) -> None:
        ns = self.testbed.netns_of(who)
        pid_file = self.dir / f"sshd-{ns}.pid"
        end = time.monotonic() + self.start_timeout_s
        while time.monotonic() < end:
            if self.procs[ns].poll() is not None:
                break
            if pid_file.exists() and pid_file.read_text().strip():
                return
            time.sleep(0.02)
        log = self.dir / f"sshd-{ns}.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
        raise SshdError(f"sshd did not start in {ns} (listening on {self.address_of(who)}:{self.port}): "
                        + (" | ".join(tail) or "no log"))

    def stop(self) -> None:
        """Stop every sshd and session process of this object, delete keys and configs (idempotent)."""
        for ns, p in list(self.procs.items()):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(2.0)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self.dir is not None and self.sshd_path:
            for ns in self.procs:
                _kill_sshd_in(ns, self.sshd_path, self.dir)
        self.procs.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        atexit.unregister(self.stop)

    def running(self) -> list[int]:
        """Pids of sshd processes (daemons and sessions) of this object still alive."""
        if self.dir is None:
            return []
        return _sshd_pids(str(self.dir))

    # ---- hosts for Fabric
    def hosts_file(self, python: str, work_dir: str, device_profile: str = "quick-cpu",
                   worker_profile: str | None = None, batch_size: int | None = None, replay: bool = True,
                   direction: str = "both", shared_work_dir: bool = False):
        """A :class:`rog.deploy.HostsFile` for the namespaces: ``ps`` and workers named by event rank
        ``w0..w{N-1}`` (transport worker ids 0..N-1; worker ``k`` lives in testbed namespace
        ``<prefix>w<k+1>``), reached through the relay, with this run's keys.  Each host gets its own
        folder ``<work_dir>/<host>`` (``shared_work_dir``: all use ``work_dir``, so the code is
        unpacked once; run folders stay per host).  Worker ``k`` reaches the PS at its end of its
        link; its replay shapes ``direction`` of that link (``both``: own egress, and the PS end as
        the peer; ``egress``: the uplink only); the PS itself has no replay (its links are the
        workers').  Works before :meth:`start` too (for ``--dry-run``: the key paths are then
        placeholders)."""
        from rog.deploy.hosts import Host, HostsFile, ReplaySettings

        if not work_dir.startswith("/"):
            raise ValueError(f"work_dir must be an absolute path, got {work_dir!r}")
        if direction not in ("both", "egress"):
            raise ValueError(f"direction must be 'both' or 'egress', got {direction!r}")
        base = work_dir.rstrip("/")
        wd = (lambda name: base) if shared_work_dir else (lambda name: f"{base}/{name}")  # noqa: E731
        hosts = [Host(name="ps", address=self.address_of("ps"), user=self.user, role="ps",
                      interface=self.testbed.veth_names(1)[1], device_profile=device_profile,
                      work_dir=wd("ps"), port=self.port, python=python,
                      key_file=str(self.client_key), proxy_command=self.proxy_command("ps"),
                      replay=ReplaySettings(direction="none"))]
        from rog.testbed.profiles import load_profile

        wprof = worker_profile or device_profile
        bs = batch_size if batch_size is not None else load_profile(wprof).batch_size
        for w in range(1, self.testbed.n_workers + 1):
            vw, vp = self.testbed.veth_names(w)
            if not replay:
                rep = ReplaySettings(direction="none")
            elif direction == "egress":
                rep = ReplaySettings(direction="egress")
            else:
                rep = ReplaySettings(direction="both", ingress_via="peer", peer_interface=vp,
                                     peer_netns=self.testbed.netns_of("ps"))
            hosts.append(Host(name=f"w{w - 1}", address=self.address_of(w), user=self.user, role="worker",
                              interface=vw, device_profile=wprof, work_dir=wd(f"w{w - 1}"),
                              port=self.port, worker_id=w - 1, ps_address=self.testbed.ps_address(w), batch_size=bs,
                              python=python, key_file=str(self.client_key), proxy_command=self.proxy_command(w),
                              replay=rep))
        return HostsFile(tuple(hosts), source=f"emulated testbed {self.testbed.prefix}",
                         known_hosts=str(self.known_hosts), accept_new_host_keys=False)


# ------------------------------------------------------------------------------------------ helpers

def _run(argv: Sequence[str]) -> None:
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if p.returncode != 0:
        raise SshdError(f"{' '.join(argv[:2])} failed: {p.stderr.strip()}")


def _account_locked(user: str) -> bool:
    """True when sshd without PAM would refuse ``user`` as locked (shadow password starting with '!')."""
    try:
        with open("/etc/shadow") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == user:
                    return rest.startswith("!")
    except OSError:
        pass
    return False


def _sshd_pids(marker: str) -> list[int]:
    """Pids of processes whose command line mentions sshd and ``marker`` (our config folder)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "sshd" in cmd and marker in cmd:
            out.append(int(d.name))
    return out


def _kill_sshd_in(ns: str, sshd_path: str, folder: Path) -> None:
    """Kill sshd processes left in ``ns`` (per-connection session processes outlive the daemon)."""
    from rog.testbed.tc import run_argv

    real = os.path.realpath(sshd_path)
    pids = [int(x) for x in run_argv(["ip", "netns", "pids", ns], check=False).stdout.split() if x.isdigit()]
    victims = []
    for pid in pids:
        try:
            exe = os.path.realpath(f"/proc/{pid}/exe")
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if exe == real or comm.startswith("sshd"):
            victims.append(pid)
    victims += [p for p in _sshd_pids(str(folder)) if p not in victims]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 1.0
        while time.monotonic() < end and any(_alive(p) for p in victims):
            time.sleep(0.02)
        victims = [p for p in victims if _alive(p)]
        if not victims:
            return


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _remove_stale(prefix: str) -> None:
    """Delete key folders of earlier runs with this testbed prefix (their sshd died with the namespaces)."""
    if not SSHD_BASE_DIR.is_dir():
        return
    for d in SSHD_BASE_DIR.glob(f"{prefix}-*"):
        for pid in _sshd_pids(str(d)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(d, ignore_errors=True)


def relay(host: str, port: int, timeout_s: float = 10.0) -> int:
    """Copy stdin to a TCP connection and the connection to stdout until both sides closed
    (an ssh ProxyCommand; run inside a namespace by :meth:`NamespaceSshd.proxy_command`)."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.settimeout(None)
    sel = selectors.DefaultSelector()
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    sel.register(stdin, selectors.EVENT_READ, "in")
    sel.register(sock, selectors.EVENT_READ, "sock")
    open_sock = True
    try:
        while open_sock:
            for key, _ in sel.select():
                if key.data == "in":
                    data = os.read(stdin, 65536)
                    if not data:
                        sel.unregister(stdin)
                        sock.shutdown(socket.SHUT_WR)
                    else:
                        sock.sendall(data)
                else:
                    data = sock.recv(65536)
                    if not data:
                        open_sock = False
                        break
                    view = memoryview(data)
                    while view:
                        n = os.write(stdout, view)
                        view = view[n:]
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    return 0


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rog.testbed.sshd", description="helpers of the namespace sshd")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("relay", help="stdin/stdout <-> TCP relay (an ssh ProxyCommand)")
    r.add_argument("host")
    r.add_argument("port", type=int)
    a = ap.parse_args(argv)
    if a.cmd == "relay":
        return relay(a.host, a.port)
    return 2


if __name__ == "__main__":
    sys.exit(_main())
