"""A deployment plan: per host, the ordered shell commands and file transfers of one run.

The plan is pure data, built without connecting anywhere, so ``--dry-run`` prints exactly what
:class:`rog.deploy.fabric_runner.FabricRunner` would execute.  Phases, in order (each phase runs on
all its hosts in parallel; the next phase starts when the previous one finished everywhere)::

    prepare  create the remote run folder, check the Python (and the Docker image)
    sync     ship the code and the run's files (config, trace)
    monitor  start the power sampler on every host (it begins sampling once its rank's event file exists)
    ps       start the parameter server, then wait until it is ready (its ready file appears)
    replay   start the trace replay (python -m rog.testbed.replay_command) on every host's interface
    workers  start every worker
    ready    (gated runs) wait until every worker wrote its ready file (imports done, data loaded)
    go       (gated runs) write the go file on every host: the held replays and workers start together
    wait     poll every started process until all workers and the PS exited 0 (any failure stops the run)
    stop     stop everything in waves: all workers, the PS, all replays (they restore tc), all power samplers
    collect  tar each host's run folder, `get` it into result/<run-id>/hosts/<host>/

Code sync: a tarball of the working tree's files (``git ls-files --cached --others
--exclude-standard``: committed and new files, with uncommitted edits, never ignored ones such as
``result/`` or ``.venv/``) sent with Fabric ``put`` over SFTP and unpacked into
``<work_dir>/code/<code id>/``, where the code id is a hash of the files' paths, modes and contents.
Why not rsync: it must then exist on every device and in every namespace host (it is not even
installed on this project's machine), while SFTP comes with sshd; a content-addressed folder makes the
sync idempotent (a host that already has that code id is skipped), concurrent runs never overwrite
each other's code, and the manifest can name the exact code that ran.

Remote layout per host: ``<work_dir>/code/<code id>/`` (the code; the working directory of every
process) and ``<work_dir>/runs/<run id>/<host>/`` (the run folder: ``<proc>.log``, ``<proc>.pid``,
``<proc>.rc``, event files, power and replay CSVs, checkpoints).

Gated start (``RunSpec.worker_ready_file`` and ``go_file``): a worker costs seconds of start-up
(imports, data), so replays that started with the processes would meet training at a random point of
the trace.  With a gate, each replay process starts, prepares (interpreter, trace, saved qdisc state)
and waits (``tc_replay.py --start-after``) until ``go_file`` exists in its run folder, so its first
rate is in place within milliseconds of the go, before a worker can connect; each worker writes
``worker_ready_file`` when it is ready to connect and then waits for ``go_file`` too; the runner
writes ``go_file`` on every host once every worker is ready, so every link's replay and training
begin together, from the configured trace offsets.
Replay and power logs are named by event rank (``replay-<rank>.csv``, ``power-<rank>.csv``).

Long-running processes start detached in their own session (``setsid``): the pid file holds the
session leader's pid, which is also the process-group id, so stopping kills the whole group
(``kill -- -PGID``, TERM then KILL after a grace period) and the exit code lands in ``<proc>.rc``.
Docker hosts run each process as ``docker run --rm --init --name rog-<run>-<host>-<proc>
--network=host --cap-add=NET_ADMIN ...`` (the paper's style) under the same wrapper, and stopping
also does ``docker rm -f`` on the container.

The shared secret never appears in a plan, a command line, a file or a log.  A process that needs
it (PS, workers) is started by a command that first reads one line from its standard input
(``IFS= read -r ROG_SECRET``) and exports it to the process's environment; the runner writes the
secret to that SSH channel's stdin.  Why not SSH environment variables: sshd drops them unless its
``AcceptEnv`` lists the name (Debian's and Ubuntu's, so L4T's, default is ``AcceptEnv LANG LC_*``),
and Fabric's fallback (``inline_ssh_env``) writes ``export ROG_SECRET=...`` into the remote command
line, which any user on the device can read in ``ps``.  Stdin works with any sshd configuration.  The
process's environment is readable only by its user and root (``/proc/<pid>/environ``).  Docker
receives it as ``-e ROG_SECRET`` (name only, value from the client's environment; ``docker inspect``
shows it to members of the docker group, who are root-equivalent anyway).
"""

from __future__ import annotations

import hashlib
import math
import os
import posixpath
import re
import shlex
import stat
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from rog.deploy.hosts import Host, HostsFile

__all__ = ["PHASES", "STOP_ORDER", "CodeBundle", "RunSpec", "Step", "Plan", "build_plan", "PLACEHOLDERS"]

PHASES = ("prepare", "sync", "monitor", "ps", "replay", "workers", "ready", "go", "wait", "stop", "collect")
STOP_ORDER = ("worker", "ps", "replay", "power")  # the stop phase's waves, each on all hosts in parallel
PLACEHOLDERS = ("python", "code_dir", "run_dir", "work_dir", "host", "rank", "role", "worker_id", "n_workers",
                "batch_size", "device_profile", "interface", "ps_address", "ps_port", "run_id", "trace")
REPLAY_MODULE = "rog.testbed.replay_command"  # every host runs ``python -m`` these from its code folder
POWER_MODULE = "rog.testbed.power_command"
_POLL_S = 0.05  # remote shell loops' sleep
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SECRET_ENV_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_EXCLUDED_DIRS = {".git", ".venv", "__pycache__", "result", "figure", "build", ".pytest_cache", ".hypothesis"}
_PS_OFFSET_SLOTS = 0.5  # the PS's replay starts half a worker slot into the trace (distinct from every worker)

# The power sampler takes the run's clock origin from its rank's event file, which appears only when the
# PS or worker opens its log: it waits (in its own process group, so stopping still ends it) for the header line.
_AFTER_HEADER = 'until head -n 1 "$1" 2>/dev/null | grep -q "}$"; do sleep 0.1; done; shift; exec "$@"'
# `alive PGID`: does the process group have a member that is not a zombie?  (`kill -0 -- -PGID` also counts
# zombies, and a detached process's zombie waits for PID 1 to reap it, which some container inits do late.)
_ALIVE = ('alive() { for f in /proc/[0-9]*/stat; do { read -r s < "$f"; } 2>/dev/null || continue; s=${s##*) }; '
          'set -- $s; [ "$3" = "$PG" ] && [ "$1" != Z ] && return 0; done; return 1; }')
# The wrapper every detached process runs under (in a new session):  $1 pid file, $2 log, $3 exit-code file.
_WRAPPER = 'p=$1; l=$2; r=$3; shift 3; echo $$ >"$p"; "$@" >"$l" 2>&1 </dev/null; echo $? >"$r"'


# ------------------------------------------------------------------------------------------ code

@dataclass(frozen=True)
class CodeBundle:
    """The files shipped to every host (see the module docstring) and their content hash."""

    root: Path
    files: tuple[str, ...]  # paths relative to root, sorted
    code_id: str  # first 16 hex digits of the sha256 over (path, exec bit, content)
    describe: str  # `git describe --always --dirty`, or "unknown" outside git

    @classmethod
    def scan(cls, root: str | os.PathLike) -> "CodeBundle":
        """List and hash the working tree's files under ``root`` (no file is written)."""
        root = Path(root).resolve()
        files = _git_files(root)
        if files is None:  # not a git checkout: walk the tree, skipping build and result folders
            files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                           if (p.is_file() or p.is_symlink()) and not (_EXCLUDED_DIRS & set(p.relative_to(root).parts))
                           and p.suffix != ".pyc")
        h = hashlib.sha256()
        kept = []
        for rel in files:
            p = root / rel
            if p.is_symlink():
                data, mode = os.readlink(p).encode(), "l"
            elif p.is_file():
                data, mode = p.read_bytes(), "x" if os.stat(p).st_mode & stat.S_IXUSR else "f"
            else:  # tracked but deleted in the working tree
                continue
            kept.append(rel)
            h.update(f"{rel}\0{mode}\0{len(data)}\0".encode())
            h.update(data)
        if not kept:
            raise ValueError(f"code root {root} holds no files to ship")
        return cls(root=root, files=tuple(kept), code_id=h.hexdigest()[:16], describe=_git_describe(root))

    def write(self, path: str | os.PathLike) -> Path:
        """Write the gzipped tarball to ``path`` (entries relative to the code root)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w:gz") as tar:
            for rel in self.files:
                tar.add(self.root / rel, arcname=rel, recursive=False)
        return path


def _git_files(root: Path) -> list[str] | None:
    try:
        p = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return sorted({f for f in p.stdout.decode().split("\0") if f})


def _git_describe(root: Path) -> str:
    try:
        p = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True,
                           text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "unknown"


# ------------------------------------------------------------------------------------------ spec

@dataclass(frozen=True)
class RunSpec:
    """What one run executes on the hosts (built by ``scripts/run.py``).

    ``ps_argv`` / ``worker_argv``: the programs, run from the code folder; every argument may use
    the ``{placeholders}`` of :data:`PLACEHOLDERS` (``{{`` for a literal brace), filled per host.
    ``files``: ``(local path, name)`` pairs copied into every host's run folder (e.g. the resolved
    config).  ``trace``: a local trace file replayed on every host (None: no replay).  ``env``:
    non-secret environment of every process.  ``secret_env``: the variable PS and workers receive
    the run secret in (through stdin, see the module docstring; None: no secret).
    """

    run_id: str
    ps_argv: tuple[str, ...]
    worker_argv: tuple[str, ...]
    files: tuple[tuple[str, str], ...] = ()
    trace: str | None = None
    replay_time_scale: float = 1.0
    replay_rate_scale: float = 1.0
    replay_mode: str = "recorded"
    replay_seed: int = 0
    power: bool = True
    ps_port: int = 29500
    ps_ready_file: str | None = "ps.port"  # relative to the PS's run folder; None: do not wait
    ps_ready_timeout_s: float = 900.0
    timeout_s: float | None = None  # the wait phase's limit (None: no limit)
    stop_grace_s: float = 10.0
    env: Mapping[str, str] = field(default_factory=lambda: {"PYTHONUNBUFFERED": "1"})
    secret_env: str | None = "ROG_SECRET"
    hoist: tuple[str, ...] = ("events-*.jsonl", "power-*.csv", "replay-*.csv", "clock_offsets.json")  # copied up into result/<run-id>/
    replay_offsets_s: tuple[float, ...] | None = None  # per worker id: trace second its replay starts at (None: spread)
    replay_seed_per_host: bool = True  # False: every replay uses replay_seed (as the emulated launcher's schedules)
    replay_origin_monotonic_s: float | None = None  # replay logs' t_s origin, for hosts sharing one clock (emulated)
    power_source: str = "auto"  # the power sampler's --source (rog.testbed.power_command)
    worker_ready_file: str | None = None  # gate (module docstring): written by each worker when ready to connect
    go_file: str | None = None  # gate: written on every host by the runner once every worker is ready

    def __post_init__(self) -> None:
        object.__setattr__(self, "ps_argv", tuple(self.ps_argv))
        object.__setattr__(self, "worker_argv", tuple(self.worker_argv))
        object.__setattr__(self, "files", tuple((str(a), str(b)) for a, b in self.files))
        object.__setattr__(self, "hoist", tuple(self.hoist))
        if self.replay_offsets_s is not None:
            offs = tuple(float(x) for x in self.replay_offsets_s)
            if not all(math.isfinite(x) and x >= 0 for x in offs):
                raise ValueError(f"replay_offsets_s must be trace seconds >= 0, one per worker id, got {offs!r}")
            object.__setattr__(self, "replay_offsets_s", offs)
        if (self.worker_ready_file is None) != (self.go_file is None):
            raise ValueError("worker_ready_file and go_file gate together: set both or neither")
        for name in ("worker_ready_file", "go_file"):
            v = getattr(self, name)
            if v is not None and ("/" in v or v in ("", ".", "..")):
                raise ValueError(f"{name} must be a plain file name (it lives in each run folder), got {v!r}")
        object.__setattr__(self, "env", dict(self.env))
        if not (isinstance(self.run_id, str) and _RUN_ID_RE.match(self.run_id)):
            raise ValueError(f"run_id must be 1-128 letters, digits, '.', '_' or '-' (it names folders and "
                             f"containers), got {self.run_id!r}")
        for name in ("ps_argv", "worker_argv"):
            argv = getattr(self, name)
            if not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError(f"{name} must be a non-empty sequence of strings, e.g. "
                                 f"('{{python}}', '-m', 'rog.experiment', '--child', 'ps'), got {argv!r}")
            for a in argv:
                _check_template(name, a)
        for local, name in self.files:
            if "/" in name or name in ("", ".", ".."):
                raise ValueError(f"files: remote name {name!r} must be a plain file name (it goes into the run folder)")
        for k, v in self.env.items():
            if not _SECRET_ENV_RE.match(str(k)) or not isinstance(v, str):
                raise ValueError(f"env: {k!r}={v!r}: names are upper-case identifiers, values strings")
            if self.secret_env and k == self.secret_env:
                raise ValueError(f"env must not hold {self.secret_env}: the secret goes through stdin only")
        if self.secret_env is not None and not _SECRET_ENV_RE.match(self.secret_env):
            raise ValueError(f"secret_env must be an upper-case variable name or None, got {self.secret_env!r}")
        for name in ("replay_time_scale", "replay_rate_scale", "stop_grace_s", "ps_ready_timeout_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a number > 0, got {v!r}")
        if self.timeout_s is not None and not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be > 0 seconds or None (no limit), got {self.timeout_s!r}")
        if not (isinstance(self.ps_port, int) and 1 <= self.ps_port <= 65535):
            raise ValueError(f"ps_port must be an integer in 1..65535 (workers connect to it), got {self.ps_port!r}")
        from rog.testbed.replay import REPLAY_MODES

        if self.replay_mode not in REPLAY_MODES:
            raise ValueError(f"replay_mode must be one of {REPLAY_MODES}, got {self.replay_mode!r}")
        if self.ps_ready_file is not None and ("/" in self.ps_ready_file or not self.ps_ready_file):
            raise ValueError(f"ps_ready_file must be a file name in the PS's run folder, got {self.ps_ready_file!r}")


def _check_template(name: str, arg: str) -> None:
    import string

    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
    except ValueError as e:
        raise ValueError(f"{name}: argument {arg!r} is not a valid template ({e}); write {{{{ for a literal brace") from None
    for f in fields:
        if f not in PLACEHOLDERS:
            raise ValueError(f"{name}: argument {arg!r} uses unknown placeholder {{{f}}}; known: "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")


# ------------------------------------------------------------------------------------------ plan

@dataclass(frozen=True)
class Step:
    """One action on one host.

    ``kind``: ``run`` (a remote shell command, must exit 0), ``start`` (a remote command that
    starts ``proc`` detached and prints its pid), ``put`` / ``get`` (a file transfer),
    ``wait_file`` (poll until ``remote`` exists, or fail when ``proc`` died / timeout),
    ``wait_exit`` (the wait phase's watch over ``proc``), ``local`` (work on this machine).
    ``secret``: the runner writes the run secret to this command's stdin (start steps of PS and
    workers only).  ``skip_if``: a remote command; exit 0 means the step is already done.
    """

    phase: str
    host: str
    kind: str
    what: str
    command: str = ""
    local: str | None = None
    remote: str | None = None
    proc: str | None = None
    secret: bool = False
    skip_if: str | None = None
    timeout_s: float | None = None
    best_effort: bool = False  # a failure is reported, not raised (stop steps)


@dataclass(frozen=True)
class Plan:
    """The ordered steps of one run over a hosts file (see the module docstring)."""

    run_id: str
    hosts: HostsFile
    spec: RunSpec
    code: CodeBundle
    result_dir: Path  # local result/<run-id>/
    steps: tuple[Step, ...]
    procs: Mapping[str, tuple[str, ...]]  # host -> processes started there, in start order

    def phase(self, name: str) -> list[Step]:
        """The steps of one phase, in order."""
        if name not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {name!r}")
        return [s for s in self.steps if s.phase == name]

    def run_dir(self, host: Host | str) -> str:
        """The host's remote run folder."""
        h = self.hosts.host(host) if isinstance(host, str) else host
        return _run_dir(h, self.run_id)

    def status_command(self, host: str) -> str:
        """A remote command printing ``<proc> running|exited <rc>|gone|absent`` per process of ``host``."""
        procs = " ".join(self.procs.get(host, ()))
        rd = shlex.quote(self.run_dir(host))
        return (f"cd {rd} 2>/dev/null || exit 0\n{_ALIVE}\n"
                f"for n in {procs}; do\n"
                f"  if [ -s \"$n.rc\" ]; then echo \"$n exited $(cat \"$n.rc\")\"\n"
                f"  elif [ -s \"$n.pid\" ] && PG=$(cat \"$n.pid\") && alive; then echo \"$n running\"\n"
                f"  elif [ -s \"$n.rc\" ]; then echo \"$n exited $(cat \"$n.rc\")\"\n"
                f"  elif [ -s \"$n.pid\" ]; then echo \"$n gone\"\n"
                f"  else echo \"$n absent\"; fi\n"
                f"done")

    def log_tail_command(self, host: str, proc: str, lines: int = 15) -> str:
        """A remote command printing the last lines of a process's log."""
        return f"tail -n {int(lines)} {shlex.quote(self.run_dir(host) + '/' + proc + '.log')} 2>/dev/null || true"

    def render(self) -> str:
        """The plan as text (``--dry-run``): hosts, code, secret handling, every step by phase."""
        spec, ps = self.spec, self.hosts.ps
        out = [f"deployment plan for run {self.run_id}" + (f" (hosts file {self.hosts.source})" if self.hosts.source else ""),
               f"code: {len(self.code.files)} files from {self.code.root} (git ls-files: committed + new, not "
               f"ignored), version {self.code.describe}, code id {self.code.code_id}; shipped as a tarball with "
               f"Fabric put (SFTP) into <work_dir>/code/{self.code.code_id}/",
               (f"secret: {spec.secret_env} is generated per run by the runner and written to the stdin of each PS "
                f"and worker start command; it is never on a command line, in a file or in a log"
                if spec.secret_env else "secret: none"),
               f"parameter server: {ps.name} at {ps.address}, port {spec.ps_port}",
               "hosts:"]
        for h in self.hosts.hosts:
            wid = "" if h.worker_id is None else f" {h.worker_id}"
            batch = "" if h.batch_size is None else f" batch {h.batch_size}"
            runtime = h.runtime + (f" ({h.image})" if h.image else "")
            out.append(f"  {h.name:<10} {h.target:<28} {h.role}{wid}{batch}  iface {h.interface}  profile "
                       f"{h.device_profile}  runtime {runtime}  run folder {self.run_dir(h)}")
        for phase in PHASES:
            steps = self.phase(phase)
            if not steps:
                continue
            out.append(f"phase {phase}:")
            for s in steps:
                out.append(f"  [{s.host}] {s.kind}: {s.what}")
                if s.kind in ("put", "get"):
                    src, dst = (s.local, s.remote) if s.kind == "put" else (s.remote, s.local)
                    out.append(f"      {src} -> {dst}")
                if s.skip_if:
                    out.append(f"      skipped when: {s.skip_if}")
                if s.command:
                    out.extend("      $ " + line if i == 0 else "        " + line
                               for i, line in enumerate(s.command.splitlines()))
        out.append(f"results: result folders of every host land in {self.result_dir}/hosts/<host>/; "
                   f"{', '.join(spec.hoist)} are also copied up into {self.result_dir}/")
        return "\n".join(out)


def build_plan(hosts: HostsFile, spec: RunSpec, code: CodeBundle, result_dir: str | os.PathLike) -> Plan:
    """Build the plan of ``spec`` on ``hosts`` (no connection, no file written)."""
    if spec.run_id != Path(result_dir).name:
        raise ValueError(f"result_dir must be the run's folder result/<run-id>/ (name {spec.run_id!r}), got {result_dir}")
    values = {h.name: _values(h, hosts, spec, code) for h in hosts.hosts}
    if spec.replay_offsets_s is not None and len(spec.replay_offsets_s) != hosts.n_workers:
        raise ValueError(f"replay_offsets_s has {len(spec.replay_offsets_s)} offsets for {hosts.n_workers} workers; "
                         f"give one per worker id")
    offsets = _replay_offsets(hosts, spec)
    steps: list[Step] = []
    procs: dict[str, list[str]] = {h.name: [] for h in hosts.hosts}
    tarball = f"<local>/code-{code.code_id}.tgz"
    order = [hosts.ps, *hosts.workers]
    for h in order:
        rd, cd = _run_dir(h, spec.run_id), _code_dir(h, code.code_id)
        check = [f"rm -rf {shlex.quote(rd)} && mkdir -p {shlex.quote(rd)} {shlex.quote(h.work_dir + '/code')}", f"command -v {shlex.quote('docker' if h.runtime == 'docker' else h.python)} >/dev/null"
                 f" || {{ echo {shlex.quote(_missing(h))} >&2; exit 1; }}"]
        if h.runtime == "docker":
            check.append(f"docker image inspect {shlex.quote(h.image)} >/dev/null 2>&1 || {{ echo "
                         f"{shlex.quote(f'docker image {h.image} is missing on {h.name}; build it from Dockerfile_arm64 or Dockerfile_x86-64')} >&2; exit 1; }}")
        steps.append(Step("prepare", h.name, "run", "create an empty run folder and check the runtime", "\n".join(check)))
    for h in order:
        rd, cd = _run_dir(h, spec.run_id), _code_dir(h, code.code_id)
        incoming = f"{h.work_dir}/code/.incoming-{code.code_id}-{h.name}"
        done = f"test -f {shlex.quote(cd + '/.rog-code')}"
        steps.append(Step("sync", h.name, "put", f"upload the code ({len(code.files)} files)", local=tarball,
                          remote=incoming + ".tgz", skip_if=done))
        unpack = (f"if [ ! -f {shlex.quote(cd + '/.rog-code')} ]; then\n"
                  f"  rm -rf {shlex.quote(incoming)} && mkdir -p {shlex.quote(incoming)}\n"
                  f"  tar -xzf {shlex.quote(incoming + '.tgz')} -C {shlex.quote(incoming)} && "
                  f"echo {shlex.quote(code.describe)} > {shlex.quote(incoming + '/.rog-code')}\n"
                  f"  mv -T {shlex.quote(incoming)} {shlex.quote(cd)} 2>/dev/null || rm -rf {shlex.quote(incoming)}\n"
                  f"fi\n"
                  f"rm -f {shlex.quote(incoming + '.tgz')}\n"
                  f"test -f {shlex.quote(cd + '/.rog-code')}")
        steps.append(Step("sync", h.name, "run", f"unpack the code into {cd}", unpack, skip_if=done))
        for local, name in spec.files:
            steps.append(Step("sync", h.name, "put", f"copy {name} into the run folder", local=str(local),
                              remote=f"{rd}/{name}"))
        if spec.trace is not None and h.replay.direction != "none":
            steps.append(Step("sync", h.name, "put", "copy the trace into the run folder", local=str(spec.trace),
                              remote=f"{rd}/{Path(spec.trace).name}"))
    if spec.power:
        for h in order:
            events = f"{_run_dir(h, spec.run_id)}/events-{h.rank}.jsonl"
            argv = ["sh", "-c", _AFTER_HEADER, "rog-power-wait", events,
                    h.python, "-m", POWER_MODULE, "--out", f"{_run_dir(h, spec.run_id)}/power-{h.rank}.csv",
                    "--profile", h.device_profile, "--events", events, "--device", h.rank]
            if spec.power_source != "auto":
                argv += ["--source", spec.power_source]
            steps.append(_start(h, spec, code, "monitor", "power", argv, "start the power sampler"))
            procs[h.name].append("power")
    ps = hosts.ps
    steps.append(_start(ps, spec, code, "ps", "ps", _fill(spec.ps_argv, values[ps.name]), "start the parameter server",
                        secret=spec.secret_env is not None))
    procs[ps.name].append("ps")
    if spec.ps_ready_file:
        steps.append(Step("ps", ps.name, "wait_file", f"wait until the parameter server is ready ({spec.ps_ready_file})",
                          remote=f"{_run_dir(ps, spec.run_id)}/{spec.ps_ready_file}", proc="ps",
                          timeout_s=spec.ps_ready_timeout_s))
    if spec.trace is not None:
        for h in order:
            if h.replay.direction == "none":
                continue
            argv = _replay_argv(h, spec, offsets[h.name])
            if spec.go_file is not None:  # started (interpreter, trace) before the go, so the first rate is in place at once
                argv += ["--start-after", f"{_run_dir(h, spec.run_id)}/{spec.go_file}"]
            steps.append(_start(h, spec, code, "replay", "replay", argv,
                                f"start the trace replay on {h.interface} ({h.replay.direction})"))
            procs[h.name].append("replay")
    for h in hosts.workers:
        steps.append(_start(h, spec, code, "workers", "worker", _fill(spec.worker_argv, values[h.name]),
                            f"start worker {h.worker_id}", secret=spec.secret_env is not None))
        procs[h.name].append("worker")
    if spec.go_file is not None:
        for h in hosts.workers:
            steps.append(Step("ready", h.name, "wait_file", f"wait until worker {h.worker_id} is ready ({spec.worker_ready_file})",
                              remote=f"{_run_dir(h, spec.run_id)}/{spec.worker_ready_file}", proc="worker",
                              timeout_s=spec.ps_ready_timeout_s))
        for h in order:
            if {"worker", "replay"} & set(procs[h.name]):
                rd = _run_dir(h, spec.run_id)
                tmp, go = shlex.quote(f"{rd}/.{spec.go_file}.tmp"), shlex.quote(f"{rd}/{spec.go_file}")
                steps.append(Step("go", h.name, "run", f"start the links and training ({spec.go_file})",
                                  f"echo '{{\"go\": true}}' > {tmp} && mv -f {tmp} {go}"))
    for h in hosts.workers:
        steps.append(Step("wait", h.name, "wait_exit", f"until worker {h.worker_id} exits (0 = done)", proc="worker",
                          timeout_s=spec.timeout_s))
    steps.append(Step("wait", ps.name, "wait_exit", "until the parameter server exits (0 = done)", proc="ps",
                      timeout_s=spec.timeout_s))
    for proc in STOP_ORDER:  # waves: every worker, then the PS, then every replay, then every power sampler
        for h in [*hosts.workers, ps]:
            if proc in procs[h.name]:
                steps.append(Step("stop", h.name, "run", f"stop {proc}", _stop_cmd(h, spec, proc), proc=proc,
                                  best_effort=True))
    for h in order:
        base = f"{h.work_dir}/runs/{spec.run_id}"
        # not compressed: the folder is mostly checkpoints (float weights), which gzip shrinks by ~10 %
        # for ~1.7 s of CPU per host and run (measured: 24 MB, quick profile, 140 s)
        packed = f"{base}/{h.name}.tar"
        steps.append(Step("collect", h.name, "run", "pack the run folder",
                          f"tar -cf {shlex.quote(packed)} -C {shlex.quote(base)} {shlex.quote(h.name)}", best_effort=True))
        steps.append(Step("collect", h.name, "get", "copy the run folder back", remote=packed,
                          local=str(Path(result_dir) / "hosts" / f".{h.name}.tar"), best_effort=True))
        steps.append(Step("collect", h.name, "local", f"unpack into {Path(result_dir) / 'hosts' / h.name}/",
                          local=str(Path(result_dir) / "hosts"), best_effort=True))
        steps.append(Step("collect", h.name, "run", "remove the remote tarball", f"rm -f {shlex.quote(packed)}",
                          best_effort=True))
    return Plan(run_id=spec.run_id, hosts=hosts, spec=spec, code=code, result_dir=Path(result_dir), steps=tuple(steps),
                procs={k: tuple(v) for k, v in procs.items()})


def _missing(h: Host) -> str:
    if h.runtime == "docker":
        return f"docker is not installed on {h.name}; install it or use runtime: native"
    return f"{h.python} not found on {h.name}; set python: in the hosts file to the interpreter's path"


def _run_dir(h: Host, run_id: str) -> str:
    return posixpath.join(h.work_dir, "runs", run_id, h.name)


def _code_dir(h: Host, code_id: str) -> str:
    return posixpath.join(h.work_dir, "code", code_id)


def _values(h: Host, hosts: HostsFile, spec: RunSpec, code: CodeBundle) -> dict[str, str]:
    ps = hosts.ps
    rd = _run_dir(h, spec.run_id)
    return {
        "python": h.python, "code_dir": _code_dir(h, code.code_id), "run_dir": rd, "work_dir": h.work_dir,
        "host": h.name, "rank": h.rank, "role": h.role, "worker_id": "" if h.worker_id is None else str(h.worker_id),
        "n_workers": str(hosts.n_workers), "batch_size": "" if h.batch_size is None else str(h.batch_size),
        "device_profile": h.device_profile, "interface": h.interface,
        "ps_address": h.ps_address or ps.address, "ps_port": str(spec.ps_port), "run_id": spec.run_id,
        "trace": "" if spec.trace is None else f"{rd}/{Path(spec.trace).name}",
    }


def _fill(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    return [a.format_map(values) for a in argv]


def _replay_offsets(hosts: HostsFile, spec: RunSpec) -> dict[str, float]:
    """Trace second each host's replay starts at: worker k at k*d/N (as rog.traces.worker_traces),
    the PS half a slot in (d = trace duration, N = workers), unless the host sets replay.offset_s."""
    if spec.trace is None:
        return {}
    from rog.traces import load_trace

    d = load_trace(spec.trace).duration_s
    n = hosts.n_workers
    out = {}
    for h in hosts.hosts:
        if h.replay.offset_s is not None:
            out[h.name] = h.replay.offset_s
        elif h.role == "worker" and spec.replay_offsets_s is not None:
            out[h.name] = spec.replay_offsets_s[h.worker_id]
        elif h.role == "ps":
            out[h.name] = _PS_OFFSET_SLOTS * d / n
        else:
            out[h.name] = h.worker_id * d / n
    return out


def _replay_argv(h: Host, spec: RunSpec, offset_s: float) -> list[str]:
    rd = _run_dir(h, spec.run_id)
    r = h.replay
    argv = [h.python, "-m", REPLAY_MODULE, "--dev", h.interface, "--trace", f"{rd}/{Path(spec.trace).name}",
            "--direction", r.direction]
    if r.direction == "both":
        argv += ["--ingress-via", r.ingress_via]
        if r.ingress_via == "peer":
            argv += ["--peer-dev", r.peer_interface] + (["--peer-netns", r.peer_netns] if r.peer_netns else [])
    seed = spec.replay_seed + (0 if h.worker_id is None or not spec.replay_seed_per_host else h.worker_id + 1)
    argv += ["--start-offset-s", repr(float(offset_s)), "--loop", "--time-scale", f"{spec.replay_time_scale!r}",
             "--rate-scale", f"{spec.replay_rate_scale!r}", "--replay-mode", spec.replay_mode, "--seed", str(seed),
             "--log", f"{rd}/replay-{h.rank}.csv"]
    if spec.replay_origin_monotonic_s is not None:
        argv += ["--origin-monotonic-s", repr(spec.replay_origin_monotonic_s)]
    return argv


def _container(h: Host, spec: RunSpec, proc: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"rog-{spec.run_id}-{h.name}-{proc}")


def _start(h: Host, spec: RunSpec, code: CodeBundle, phase: str, proc: str, argv: list[str], what: str,
           secret: bool = False) -> Step:
    rd, cd = _run_dir(h, spec.run_id), _code_dir(h, code.code_id)
    q = shlex.quote
    pid, log, rc = f"{rd}/{proc}.pid", f"{rd}/{proc}.log", f"{rd}/{proc}.rc"
    env = dict(spec.env)
    if h.runtime == "docker":
        names = sorted(env) + ([spec.secret_env] if secret else [])
        docker = ["docker", "run", "--rm", "--init", "--name", _container(h, spec, proc), "--network=host",
                  "--cap-add=NET_ADMIN", "-v", f"{h.work_dir}:{h.work_dir}", "-w", cd]
        if proc == "power":
            from rog.testbed.profiles import load_profile

            if "jtop" in load_profile(h.device_profile).power_sensor:
                docker += ["-v", "/run/jtop.sock:/run/jtop.sock"]
        for n in names:
            docker += ["-e", n]  # name only: the value comes from this shell's environment
        argv = docker + [h.image] + argv
    lines = [f"cd {q(cd)} || exit 1", f"rm -f {q(pid)} {q(rc)}"]
    if secret:
        lines += [f"IFS= read -r {spec.secret_env} || exit 1", f"export {spec.secret_env}"]
    lines += [f"export {k}={q(v)}" for k, v in sorted(env.items())]
    lines.append(f"setsid sh -c {q(_WRAPPER)} rog-{proc} {q(pid)} {q(log)} {q(rc)} {shlex.join(argv)} "
                 f"</dev/null >/dev/null 2>&1 &")
    lines.append(f"i=0; while [ ! -s {q(pid)} ] && [ $i -lt 200 ]; do sleep {_POLL_S}; i=$((i+1)); done")
    lines.append(f"cat {q(pid)}")
    return Step(phase, h.name, "start", what, "\n".join(lines), proc=proc, secret=secret)


def _stop_cmd(h: Host, spec: RunSpec, proc: str) -> str:
    rd = _run_dir(h, spec.run_id)
    q = shlex.quote
    pid, rc = q(f"{rd}/{proc}.pid"), q(f"{rd}/{proc}.rc")
    loops = max(1, int(round(spec.stop_grace_s / 0.1)))
    lines = [_ALIVE,
             f"PG=$(cat {pid} 2>/dev/null)",
             f"if [ -n \"$PG\" ] && [ ! -e {rc} ]; then",
             "  kill -s TERM -- -\"$PG\" 2>/dev/null",
             f"  i=0; while alive && [ $i -lt {loops} ]; do sleep 0.1; i=$((i+1)); done",
             "  alive && kill -s KILL -- -\"$PG\" 2>/dev/null",
             "fi"]
    if h.runtime == "docker":
        lines.append(f"docker rm -f {q(_container(h, spec, proc))} >/dev/null 2>&1")
    lines.append("true")
    return "\n".join(lines)
