"""The deployment plan of the example hosts file (dry run), and what the runner sends over SSH.

The runner tests use a recording stand-in for fabric.Connection: they check the order of what is
sent, that the secret only ever travels on the stdin of PS and worker start commands, and that
every process is stopped after success, failure and Ctrl-C.
"""

from __future__ import annotations

import io
import re
import shlex
import tarfile
import threading
import time
from pathlib import Path

import pytest

import fabric  # noqa: F401  (a declared dependency: a broken install fails, it does not skip)

from rog.deploy.hosts import load_hosts
from rog.deploy.plan import PHASES, CodeBundle, RunSpec, build_plan

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "configs" / "hosts.example.yaml"
TRACE = ROOT / "configs" / "traces" / "outdoors-synth.csv"
TRACE_DURATION_S = 1200.05  # configs/traces/README.md: outdoors-synth.csv lasts 1200.05 s (rounded to 0.01 s)
RUN = "ROG4-b1-w4-seed0"
SECRET = "s3cr3t-" + "ab" * 24

PS_ARGV = ("{python}", "-m", "rog.experiment", "--child", "ps", "--run-dir", "{run_dir}", "--port", "{ps_port}")
WORKER_ARGV = ("{python}", "-m", "rog.experiment", "--child", "worker", "--worker-id", "{worker_id}", "--ps",
               "{ps_address}:{ps_port}", "--run-dir", "{run_dir}", "--batch-size", "{batch_size}")


@pytest.fixture(scope="module")
def code():
    return CodeBundle.scan(ROOT)


def make_plan(code, tmp_path, **spec_kw):
    cfg = tmp_path / "config.yaml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg.write_text("library: ROG\n")
    spec = RunSpec(run_id=RUN, ps_argv=PS_ARGV, worker_argv=WORKER_ARGV, files=((str(cfg), "config.yaml"),),
                   trace=str(TRACE), **spec_kw)
    return build_plan(load_hosts(EXAMPLE), spec, code, tmp_path / "result" / RUN)


def launched_argv(command: str) -> list[str]:
    """The program a start command launches (after the setsid wrapper's pid, log and rc arguments)."""
    line = next(x for x in command.splitlines() if x.startswith("setsid "))
    words = shlex.split(line.rsplit(" </dev/null", 1)[0])
    return words[8:]  # setsid sh -c WRAPPER NAME PID LOG RC argv...


# ------------------------------------------------------------------------------------------ the plan

def test_phases_in_order_ps_before_workers(code, tmp_path):
    plan = make_plan(code, tmp_path)
    ranks = [PHASES.index(s.phase) for s in plan.steps]
    assert ranks == sorted(ranks)
    starts = [(s.host, s.proc) for s in plan.steps if s.kind == "start"]
    hosts = ["ps", "robot1", "robot2", "robot3", "robot4"]
    workers = hosts[1:]
    assert starts == ([(h, "power") for h in hosts] + [("ps", "ps")] + [(h, "replay") for h in hosts]
                      + [(h, "worker") for h in workers])
    i_ps = plan.steps.index(next(s for s in plan.steps if s.proc == "ps" and s.kind == "start"))
    i_ready = plan.steps.index(next(s for s in plan.steps if s.kind == "wait_file"))
    i_w = min(plan.steps.index(s) for s in plan.steps if s.kind == "start" and s.proc == "worker")
    assert i_ps < i_ready < i_w
    assert plan.phase("ps")[1].remote == f"/home/rog/rog-work/runs/{RUN}/ps/ps.port"


def test_every_host_gets_replay_and_power_sampler(code, tmp_path):
    plan = make_plan(code, tmp_path)
    for h in plan.hosts.hosts:
        procs = [s.proc for s in plan.steps if s.kind == "start" and s.host == h.name]
        assert procs.count("power") == 1 and procs.count("replay") == 1
    replay = {s.host: launched_argv(s.command) for s in plan.phase("replay")}
    ps = replay["ps"]
    assert ps[:3] == ["/home/rog/rog/.venv/bin/python", "-m", "rog.testbed.replay_command"]
    assert ps[ps.index("--dev") + 1] == "wlp2s0"
    assert ps[ps.index("--trace") + 1] == f"/home/rog/rog-work/runs/{RUN}/ps/outdoors-synth.csv"
    assert ps[ps.index("--log") + 1] == f"/home/rog/rog-work/runs/{RUN}/ps/replay-ps.csv"
    # worker k replays from k * d / N (as rog.traces.worker_traces), the PS half a slot in
    slot = TRACE_DURATION_S / 4
    assert float(ps[ps.index("--start-offset-s") + 1]) == pytest.approx(0.5 * slot, abs=0.01)
    for k in range(4):
        argv = replay[f"robot{k + 1}"]
        docker_end = argv.index("rog:arm64")
        assert argv[:3] == ["docker", "run", "--rm"] and "--network=host" in argv and "--cap-add=NET_ADMIN" in argv
        assert argv[docker_end + 1:docker_end + 4] == ["python3", "-m", "rog.testbed.replay_command"]
        assert argv[argv.index("--dev") + 1] == "wlan0"
        assert argv[argv.index("--direction") + 1] == "both" and argv[argv.index("--ingress-via") + 1] == "ifb"
        assert float(argv[argv.index("--start-offset-s") + 1]) == pytest.approx(k * slot, abs=0.01)
        assert "--loop" in argv
    power = {s.host: launched_argv(s.command) for s in plan.phase("monitor")}
    p1 = power["robot1"]
    assert p1[p1.index("--events") + 1] == f"/home/rog/rog-work/runs/{RUN}/robot1/events-w0.jsonl"
    assert p1[p1.index("--profile") + 1] == "jetson-xavier-nx"
    assert p1[p1.index("-m"):p1.index("-m") + 2] == ["-m", "rog.testbed.power_command"]
    assert "/run/jtop.sock:/run/jtop.sock" in p1  # the Jetson profile prefers jtop: its socket goes into the container
    assert power["ps"][power["ps"].index("--profile") + 1] == "laptop"


def test_worker_and_ps_commands_are_filled_per_host(code, tmp_path):
    plan = make_plan(code, tmp_path)
    ps = launched_argv(plan.phase("ps")[0].command)
    assert ps == ["/home/rog/rog/.venv/bin/python", "-m", "rog.experiment", "--child", "ps", "--run-dir",
                  f"/home/rog/rog-work/runs/{RUN}/ps", "--port", "29500"]
    w = launched_argv(next(s for s in plan.phase("workers") if s.host == "robot2").command)
    assert w == ["docker", "run", "--rm", "--init", "--name", f"rog-{RUN}-robot2-worker", "--network=host",
                 "--cap-add=NET_ADMIN", "-v", "/home/rog/rog-work:/home/rog/rog-work", "-w",
                 f"/home/rog/rog-work/code/{code.code_id}", "-e", "PYTHONUNBUFFERED", "-e", "ROG_SECRET", "rog:arm64",
                 "python3", "-m", "rog.experiment", "--child", "worker", "--worker-id", "1", "--ps", "192.168.50.10:29500",
                 "--run-dir", f"/home/rog/rog-work/runs/{RUN}/robot2", "--batch-size", "24"]


def test_secret_only_through_stdin_of_ps_and_workers(code, tmp_path):
    plan = make_plan(code, tmp_path)
    for s in plan.steps:
        text = s.command or ""
        assert "ROG_SECRET=" not in text  # never assigned on a command line
        if s.kind == "start" and s.proc in ("ps", "worker"):
            assert s.secret and "IFS= read -r ROG_SECRET || exit 1\nexport ROG_SECRET" in text
        else:
            assert not s.secret and "ROG_SECRET" not in text
    rendered = plan.render()
    assert "ROG_SECRET=" not in rendered and "written to the stdin" in rendered


def test_stop_waves_and_collect(code, tmp_path):
    plan = make_plan(code, tmp_path)
    stops = [(s.proc, s.host) for s in plan.phase("stop")]
    workers = ["robot1", "robot2", "robot3", "robot4"]
    assert stops == ([("worker", h) for h in workers] + [("ps", "ps")] + [("replay", h) for h in workers + ["ps"]]
                     + [("power", h) for h in workers + ["ps"]])
    stop = next(s for s in plan.phase("stop") if s.host == "robot1" and s.proc == "worker").command
    assert 'kill -s TERM -- -"$PG"' in stop and 'kill -s KILL -- -"$PG"' in stop  # the whole process group
    assert f"docker rm -f rog-{RUN}-robot1-worker" in stop
    gets = [(s.host, s.remote, s.local) for s in plan.phase("collect") if s.kind == "get"]
    assert gets[1] == ("robot1", f"/home/rog/rog-work/runs/{RUN}/robot1.tar",
                       str(tmp_path / "result" / RUN / "hosts" / ".robot1.tar"))


def test_dry_run_render_lists_hosts_commands_and_files(code, tmp_path):
    text = make_plan(code, tmp_path).render()
    for target in ("rog@192.168.50.10:22", "rog@192.168.50.14:22"):
        assert target in text
    assert text.index("phase ps:") < text.index("phase replay:") < text.index("phase workers:") < text.index("phase stop:")
    assert f"code id {code.code_id}" in text and "config.yaml" in text
    assert text.count("-m rog.testbed.replay_command") == 5 and text.count("-m rog.testbed.power_command") == 5


def test_run_spec_rejects_unknown_placeholders_and_secret_in_env():
    with pytest.raises(ValueError, match=r"unknown placeholder \{worker\}"):
        RunSpec(run_id="r", ps_argv=("x",), worker_argv=("{worker}",))
    with pytest.raises(ValueError, match="the secret goes through stdin only"):
        RunSpec(run_id="r", ps_argv=("x",), worker_argv=("y",), env={"ROG_SECRET": "x"})
    with pytest.raises(ValueError, match="run_id must be"):
        RunSpec(run_id="a b", ps_argv=("x",), worker_argv=("y",))


def test_code_bundle_hash_follows_content(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    (src / "result").mkdir()
    (src / "result" / "big.bin").write_text("not shipped")
    b1 = CodeBundle.scan(src)
    assert b1.files == ("pkg/a.py",)
    assert CodeBundle.scan(src).code_id == b1.code_id
    (src / "pkg" / "a.py").write_text("A = 2\n")
    assert CodeBundle.scan(src).code_id != b1.code_id
    with tarfile.open(CodeBundle.scan(src).write(tmp_path / "c.tgz")) as tar:
        assert tar.getnames() == ["pkg/a.py"]
        assert tar.extractfile("pkg/a.py").read() == b"A = 2\n"


def test_repository_bundle_excludes_ignored_folders(code):
    assert "rog/deploy/plan.py" in code.files
    assert not any(f.startswith((".venv/", ".git/")) or "__pycache__" in f for f in code.files)
    assert {f for f in code.files if f.startswith("result/")} <= {"result/.gitkeep", "result/README.md"}


# ------------------------------------------------------------------------------------------ the runner

class FakeResult:
    def __init__(self, stdout: str = "", exited: int = 0) -> None:
        self.stdout, self.stderr, self.exited = stdout, "", exited


class World:
    """Shared record of what every fake connection was asked to do; decides worker exit codes."""

    def __init__(self, worker_rc: dict[str, int] | None = None) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, dict, str | None]] = []  # (host, command, kwargs, stdin text)
        self.worker_rc = worker_rc or {}
        self.next_pid = 1000


class FakeConnection:
    def __init__(self, host, world: World) -> None:
        self.name, self.world = host.name, world

    def run(self, command, **kw):
        stdin = kw.get("in_stream")
        text = stdin.getvalue() if isinstance(stdin, io.StringIO) else None
        with self.world.lock:
            self.world.calls.append((self.name, command, dict(kw), text))
            pid = self.world.next_pid = self.world.next_pid + 1
        if command.startswith("test -f") and ".rog-code" in command:
            return FakeResult(exited=1)  # the code is not there yet
        if "setsid sh -c" in command:
            return FakeResult(f"{pid}\n")
        if command.startswith("cd ") and "for n in" in command:  # status
            procs = command.split("for n in ", 1)[1].split(";", 1)[0].split()
            lines = []
            for p in procs:
                if p == "worker":
                    lines.append(f"worker exited {self.world.worker_rc.get(self.name, 0)}")
                elif p == "ps":  # the PS ends by itself once every worker left
                    lines.append("ps exited 0")
                else:
                    lines.append(f"{p} running")
            return FakeResult("\n".join(lines) + "\n")
        return FakeResult()

    def put(self, local, remote):
        with self.world.lock:
            self.world.calls.append((self.name, f"PUT {local} {remote}", {}, None))
        assert Path(local).is_file()

    def get(self, remote, local):
        with self.world.lock:
            self.world.calls.append((self.name, f"GET {remote} {local}", {}, None))
        buf = io.BytesIO(b'{"kind": "header"}\n')
        with tarfile.open(local, "w:gz") as tar:
            info = tarfile.TarInfo(f"{self.name}/events-x{self.name}.jsonl")
            info.size = len(buf.getvalue())
            tar.addfile(info, buf)

    def close(self):
        pass


def run_fake(plan, world, on_poll=None):
    from rog.deploy.fabric_runner import FabricRunner

    logs: list[str] = []
    with FabricRunner(plan, secret=SECRET, log=logs.append, poll_s=0.01,
                      connection_factory=lambda h, hf: FakeConnection(h, world)) as runner:
        out = runner.run(on_poll=on_poll)
    return out, logs


def test_runner_sends_secret_only_on_stdin_and_stops_everything(code, tmp_path):
    plan = make_plan(code, tmp_path)
    world = World()
    out, logs = run_fake(plan, world)
    assert out.status == "done", out.reason
    with_secret = [(h, c) for h, c, kw, stdin in world.calls if stdin is not None and SECRET in stdin]
    assert sorted(h for h, _ in with_secret) == ["ps", "robot1", "robot2", "robot3", "robot4"]
    assert all("IFS= read -r ROG_SECRET" in c for _, c in with_secret)
    for h, c, kw, stdin in world.calls:
        assert SECRET not in c and "env" not in kw
        assert stdin is None or stdin == SECRET + "\n"
    assert not any(SECRET in line for line in logs)
    commands = [c for _, c, _, _ in world.calls]
    assert commands[0] == "true"  # the ThreadingGroup reachability check comes first
    first_worker = min(i for i, c in enumerate(commands) if "rog-worker" in c)
    assert max(i for i, c in enumerate(commands) if "rog-ps " in c) < first_worker
    stops = [(h, c) for h, c, _, _ in world.calls if "kill -s TERM" in c]
    assert len(stops) == sum(len(p) for p in plan.procs.values())  # every started process is stopped
    order = [re.search(r"/(\w+)\.pid", c).group(1) for _, c in stops]
    assert order == sorted(order, key=["worker", "ps", "replay", "power"].index)  # waves
    assert set(out.collected) == {"ps", "robot1", "robot2", "robot3", "robot4"}
    assert (plan.result_dir / "events-xrobot3.jsonl").is_file()  # hoisted out of hosts/robot3/
    assert len(out.pids) == 15 and out.pids[("ps", "ps")] > 1000


def test_runner_failure_and_ctrl_c_still_stop_and_collect(code, tmp_path):
    plan = make_plan(code, tmp_path)
    world = World(worker_rc={"robot2": 3})
    out, _ = run_fake(plan, world)
    assert out.status == "failed" and out.reason.startswith("robot2: worker exited with code 3")
    assert sum("kill -s TERM" in c for _, c, _, _ in world.calls) == 15
    assert set(out.collected) == {"ps", "robot1", "robot2", "robot3", "robot4"}

    def interrupt(states):
        raise KeyboardInterrupt

    world = World()
    out, _ = run_fake(make_plan(code, tmp_path / "again"), world, on_poll=interrupt)
    assert out.status == "interrupted" and out.reason == "interrupted (Ctrl-C)"
    assert sum("kill -s TERM" in c for _, c, _, _ in world.calls) == 15


def test_a_signal_during_the_status_poll_is_not_blamed_on_a_host(code, tmp_path):
    """SIGTERM raises in the main thread wherever it waits; while the poll waits on a host's status, it must
    end the run as the signal's own exception, not as "<host>: status poll failed" (the host did nothing wrong)."""
    import signal

    class Stop(Exception):
        pass

    release = threading.Event()
    main_ident = threading.main_thread().ident

    class Slow(FakeConnection):
        def run(self, command, **kw):
            if command.startswith("cd ") and "for n in" in command and not release.is_set():
                time.sleep(0.3)  # every other host answered: the main thread waits on this host's future
                signal.pthread_kill(main_ident, signal.SIGUSR1)
                release.wait(30)
            return super().run(command, **kw)

    def on_signal(signum, frame):
        release.set()
        raise Stop("by signal")

    from rog.deploy.fabric_runner import FabricRunner

    world = World()
    factory = lambda h, hf: (Slow if h.name == "robot4" else FakeConnection)(h, world)  # noqa: E731
    old = signal.signal(signal.SIGUSR1, on_signal)
    try:
        with FabricRunner(make_plan(code, tmp_path), secret=SECRET, poll_s=0.01, connection_factory=factory) as runner:
            out = runner.run()
    finally:
        signal.signal(signal.SIGUSR1, old)
        release.set()
    assert out.status == "failed" and out.reason == "Stop: by signal", out.reason
    assert sum("kill -s TERM" in c for _, c, _, _ in world.calls) == 15  # and everything was still stopped


def test_runner_needs_a_secret_when_the_plan_passes_one(code, tmp_path):
    from rog.deploy.fabric_runner import FabricRunner

    with pytest.raises(ValueError, match="secret is required"):
        FabricRunner(make_plan(code, tmp_path))


def test_unreachable_host_fails_fast_and_starts_nothing(code, tmp_path):
    from paramiko.ssh_exception import NoValidConnectionsError

    class Down(FakeConnection):
        def run(self, command, **kw):
            with self.world.lock:
                self.world.calls.append((self.name, command, dict(kw), None))
            raise NoValidConnectionsError({("192.168.50.13", 22): ConnectionRefusedError("refused")})

    world = World()
    from rog.deploy.fabric_runner import FabricRunner

    factory = lambda h, hf: (Down if h.name == "robot3" else FakeConnection)(h, world)  # noqa: E731
    with FabricRunner(make_plan(code, tmp_path), secret=SECRET, poll_s=0.01, connection_factory=factory) as runner:
        out = runner.run()
    assert out.status == "failed"
    assert out.reason.startswith("cannot reach every host:\n  robot3 (rog@192.168.50.13:22): cannot connect")
    assert [c for h, c, _, _ in world.calls if h == "robot3"] == ["true"]  # no retries on a dead host
    assert [c for _, c, _, _ in world.calls] == ["true"] * 5 and out.pids == {} and out.collected == {}


def test_gated_plan_holds_replays_until_every_worker_is_ready(code, tmp_path):
    """worker_ready_file + go_file: replays wait for the go file, the runner waits for every worker's ready file,
    then writes the go file on every host; per-worker offsets, one seed and the clock origin reach tc_replay."""
    offsets = (0.0, 10.5, 21.0, 31.5)
    plan = make_plan(code, tmp_path, worker_ready_file="worker.ready", go_file="links.ready", replay_offsets_s=offsets,
                     replay_seed_per_host=False, replay_origin_monotonic_s=1234.5, power_source="model")
    ranks = [PHASES.index(s.phase) for s in plan.steps]
    assert ranks == sorted(ranks)
    assert PHASES.index("workers") < PHASES.index("ready") < PHASES.index("go") < PHASES.index("wait")
    ready = [(s.host, s.kind, s.remote, s.proc) for s in plan.phase("ready")]
    assert ready == [(f"robot{k + 1}", "wait_file", f"/home/rog/rog-work/runs/{RUN}/robot{k + 1}/worker.ready", "worker")
                     for k in range(4)]
    go = {s.host: s.command for s in plan.phase("go")}
    assert set(go) == {"ps", "robot1", "robot2", "robot3", "robot4"}  # every host with a replay or a worker
    assert go["robot2"].endswith(f"mv -f /home/rog/rog-work/runs/{RUN}/robot2/.links.ready.tmp "
                                 f"/home/rog/rog-work/runs/{RUN}/robot2/links.ready")
    for s in plan.phase("replay"):
        argv = launched_argv(s.command)
        if s.host != "ps":
            argv = argv[argv.index("rog:arm64") + 1:]  # inside the container
        rd = f"/home/rog/rog-work/runs/{RUN}/{s.host}"
        assert argv[1:3] == ["-m", "rog.testbed.replay_command"] and argv[-2:] == ["--start-after", f"{rd}/links.ready"]
        tc = argv
        assert tc[tc.index("--seed") + 1] == "0" and tc[tc.index("--origin-monotonic-s") + 1] == "1234.5"
        rank = "ps" if s.host == "ps" else f"w{int(s.host[-1]) - 1}"
        assert tc[tc.index("--log") + 1] == f"{rd}/replay-{rank}.csv"
        if s.host != "ps":
            assert float(tc[tc.index("--start-offset-s") + 1]) == offsets[int(s.host[-1]) - 1]
    for s in plan.phase("monitor"):
        argv = launched_argv(s.command)
        assert argv[argv.index("--source") + 1] == "model" and argv[argv.index("--out") + 1].endswith(
            "/power-" + ("ps" if s.host == "ps" else f"w{int(s.host[-1]) - 1}") + ".csv")
    assert [(s.host, s.proc) for s in plan.phase("wait")] == [(f"robot{k}", "worker") for k in range(1, 5)] + [("ps", "ps")]
    with pytest.raises(ValueError, match="set both or neither"):
        RunSpec(run_id=RUN, ps_argv=PS_ARGV, worker_argv=WORKER_ARGV, go_file="links.ready")
    with pytest.raises(ValueError, match="3 offsets for 4 workers"):
        make_plan(code, tmp_path / "x", replay_offsets_s=(0.0, 1.0, 2.0))
