"""Malformed inputs, table-driven: traces (both formats), hosts files, device profiles, command lines.

Each :class:`BadInput` is a file (or argument list) and what its error message must contain:
the file's name, where (``:LINE:`` or ``line N`` or the field), and a fix hint.  :func:`check`
feeds it to the real loader and returns the problems (empty = the message is good); the loader
must raise its documented error type (``TraceError``, ``HostsFileError``, ``ProfileError``, a
usage error with exit status 2), never crash with anything else.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

from .registry import ScenarioContext, result

ROOT = Path(__file__).resolve().parents[2]
HOSTS_EXAMPLE = ROOT / "configs" / "hosts.example.yaml"
PROFILE_EXAMPLE = ROOT / "configs" / "devices" / "quick-cpu.yaml"


@dataclass(frozen=True)
class BadInput:
    """One malformed input and the fragments its error message must contain (file name implied for files)."""

    case: str
    kind: str  # trace | hosts | profile | run_cli | run_config | run_main | items_cli | tc_replay_cli | testbed_cli
    content: str | list[str]  # file text, or argv for *_cli
    must: tuple[str, ...]  # fragments of the message: where (line/field) and how to fix
    file_name: str = ""  # default: <case>.<ext>
    file_text: str = ""  # for an argv case with a file: its text (default: a trace whose times go backwards)
    env: tuple[tuple[str, str | None], ...] = ()  # environment for the case (None: unset)


def _hosts(old: str, new: str) -> str:
    text = HOSTS_EXAMPLE.read_text()
    if old not in text:
        raise ValueError(f"hosts example has no {old!r}: update this case")
    return text.replace(old, new, 1)


def _profile(old: str, new: str) -> str:
    text = PROFILE_EXAMPLE.read_text()
    if old not in text:
        raise ValueError(f"profile example has no {old!r}: update this case")
    return text.replace(old, new, 1)


CSV_OK = "t_s,mbps\n0,50\n1,40\n2,30\n"
REC_OK = "0 50\n1 40\n2 30\n"

CASES: tuple[BadInput, ...] = (
    # ---- traces, CSV format
    BadInput("csv_bad_header", "trace", "time,rate\n0,50\n1,40\n", (":1:", "t_s,mbps")),
    BadInput("csv_no_header", "trace", "0,50\n1,40\n", (":1:", "add it as the first line")),
    BadInput("csv_three_columns", "trace", "t_s,mbps\n0,50,1\n1,40\n", (":2:", "2 columns")),
    BadInput("csv_text_rate", "trace", "t_s,mbps\n0,50\n1,fast\n", (":3:", "two numbers")),
    BadInput("csv_negative_rate", "trace", "t_s,mbps\n0,50\n1,-4\n", (":3:", ">= 0")),
    BadInput("csv_nan_rate", "trace", "t_s,mbps\n0,50\n1,nan\n", (":3:", "Mbit/s >= 0")),
    BadInput("csv_inf_time", "trace", "t_s,mbps\n0,50\ninf,40\n", (":3:", "finite")),
    BadInput("csv_backwards", "trace", "t_s,mbps\n0,50\n2,40\n1,30\n", (":4:", "strictly increasing")),
    BadInput("csv_duplicate_time", "trace", "t_s,mbps\n0,50\n1,40\n1,30\n", (":4:", "drop repeats")),
    BadInput("csv_header_only", "trace", "t_s,mbps\n", (":2:", "add 't_s,mbps' rows")),
    BadInput("csv_one_sample", "trace", "t_s,mbps\n0,50\n", (":2:", "at least 2")),
    BadInput("csv_all_zero_rates", "trace", "t_s,mbps\n0,0\n1,0\n2,0\n", (":2:", "at least one positive rate")),
    BadInput("rec_all_zero_rates", "trace", "0 0\n1 0\n", (":1:", "at least one positive rate")),
    BadInput("csv_empty", "trace", "", (":1:", "expected")),
    BadInput("csv_binary", "trace", "t_s,mbps\n0,50\n\udcff\udcfe,1\n", (":3:", "plain text")),
    BadInput("csv_bad_hold", "trace", "# hold_after_s: -3\nt_s,mbps\n0,50\n1,40\n", (":1:", "seconds > 0")),
    # ---- traces, record format ('seconds Mbps')
    BadInput("rec_one_column", "trace", "0 50\n1\n", (":2:", "2 columns")),
    BadInput("rec_text", "trace", "0 50\n1 lots\n", (":2:", "two numbers")),
    BadInput("rec_backwards", "trace", "0 50\n3 40\n2 30\n", (":3:", "strictly increasing")),
    BadInput("rec_negative", "trace", "0 50\n1 -1\n", (":2:", ">= 0")),
    BadInput("rec_header_without_comma", "trace", "t_s mbps\n0 50\n1 40\n", (":1:", "with a comma")),
    BadInput("rec_one_sample", "trace", "0 50\n", (":1:", "at least 2")),
    # ---- hosts files
    BadInput("hosts_not_yaml", "hosts", "version: 1\nhosts: [\n  - name: x\n", ("line", "indentation")),
    BadInput("hosts_duplicate_key", "hosts", _hosts("  - name: robot1\n", "  - name: robot1\n    name: robot9\n"),
             ("line", "given twice")),
    BadInput("hosts_unknown_field", "hosts", _hosts("    batch_size: 24\n", "    batch_sise: 24\n"), ("batch_sise", "batch_size")),
    BadInput("hosts_password", "hosts", _hosts("  user: rog\n", "  user: rog\n  password: hunter2\n"), ("password", "key")),
    BadInput("hosts_bad_address", "hosts", _hosts("192.168.50.11", "192.168.50.300"), ("robot1", "address")),
    BadInput("hosts_duplicate_worker_id", "hosts", _hosts("    worker_id: 1\n", "    worker_id: 0\n"), ("worker_id", "0")),
    BadInput("hosts_negative_worker_id", "hosts", _hosts("    worker_id: 3\n", "    worker_id: -3\n"), ("robot4", "worker_id")),
    BadInput("hosts_two_ps", "hosts", _hosts("    role: worker\n    worker_id: 0\n", "    role: ps\n").replace(
                 "    batch_size: 24\n", "", 1),
             ("robot1", "role")),
    BadInput("hosts_bad_role", "hosts", _hosts("    role: worker\n", "    role: robot\n"), ("robot1", "role", "worker")),
    BadInput("hosts_relative_work_dir", "hosts", _hosts("  work_dir: /home/rog/rog-work\n", "  work_dir: rog-work\n"),
             ("work_dir", "absolute")),
    BadInput("hosts_bad_port", "hosts", _hosts("  port: 22\n", "  port: 99999\n"), ("port",)),
    BadInput("hosts_unknown_profile", "hosts", _hosts("  device_profile: jetson-xavier-nx\n", "  device_profile: jetson-xavier\n"),
             ("device_profile", "jetson-xavier-nx")),
    BadInput("hosts_bad_version", "hosts", _hosts("version: 1\n", "version: 7\n"), ("version",)),
    BadInput("hosts_empty", "hosts", "", ("hosts",)),
    # ---- device profiles (file name quick-cpu.yaml: the name field must match it)
    BadInput("profile_not_yaml", "profile", "name: quick-cpu\npower_w: {compute: 1\n", ("line", "indentation"), "quick-cpu.yaml"),
    BadInput("profile_duplicate_key", "profile", _profile("batch_size: 24\n", "batch_size: 24\nbatch_size: 16\n"),
             ("line", "given twice"), "quick-cpu.yaml"),
    BadInput("profile_name_mismatch", "profile", _profile("name: quick-cpu\n", "name: fast-cpu\n"), ("name", "quick-cpu"),
             "quick-cpu.yaml"),
    BadInput("profile_negative_compute", "profile", _profile("compute_s_per_iteration: 0.28\n", "compute_s_per_iteration: -1\n"),
             ("compute_s_per_iteration",), "quick-cpu.yaml"),
    BadInput("profile_text_watts", "profile", _profile("  compute: 13.35\n", "  compute: lots\n"), ("compute",), "quick-cpu.yaml"),
    BadInput("profile_missing_power", "profile", _profile("  stall: 4.04\n", ""), ("stall",), "quick-cpu.yaml"),
    BadInput("profile_unknown_field", "profile", _profile("batch_size: 24\n", "batch_size: 24\nbatchsize: 24\n"),
             ("batchsize",), "quick-cpu.yaml"),
    BadInput("profile_bad_class", "profile", _profile("device_class: robot\n", "device_class: drone\n"),
             ("device_class", "robot"), "quick-cpu.yaml"),
    BadInput("profile_bad_sensor", "profile", _profile("power_sensor: [model]\n", "power_sensor: [thermometer]\n"),
             ("power_sensor",), "quick-cpu.yaml"),
    BadInput("profile_zero_batch", "profile", _profile("batch_size: 24\n", "batch_size: 0\n"), ("batch_size",), "quick-cpu.yaml"),
    # ---- command lines
    BadInput("run_negative_workers", "run_cli", ["--workers", "0"], ("--workers", ">= 1")),
    BadInput("run_rate_and_trace", "run_cli", ["--rate-mbit", "10", "-c", "outdoors"], ("--rate-mbit", "choose one")),
    BadInput("run_nan_lr", "run_cli", ["--lr", "nan"], ("--lr", "positive")),
    BadInput("run_bad_library", "run_cli", ["--library", "ASP"], ("--library", "ROG")),
    BadInput("run_bad_port", "run_cli", ["--port", "70000"], ("--port", "65535")),
    BadInput("run_chunk_share_above_one", "run_cli", ["--chunk-share", "3"], ("--chunk-share", "(0, 1]")),
    BadInput("run_hosts_without_file", "run_cli", ["--testbed", "hosts"], ("--hosts", "hosts.example.yaml")),
    BadInput("run_slow_start_on_loopback", "run_cli", ["--testbed", "loopback", "--tcp-slow-start-after-idle", "off"],
             ("--tcp-slow-start-after-idle", "host's own setting", "--testbed emulated")),
    BadInput("run_checkpoint_workers", "run_cli", ["--workers", "2", "--checkpoint-workers", "5"],
             ("--checkpoint-workers", "5")),
    BadInput("run_inf_time_scale", "run_cli", ["--time-scale", "inf"], ("--time-scale", "positive")),
    BadInput("run_compute_ratio_zero", "run_cli", ["--workers", "2", "--compute-ratios", "1,0"],
             ("--compute-ratios", "positive number", "e.g. 1")),
    BadInput("run_compute_ratios_count", "run_cli", ["--workers", "3", "--compute-ratios", "1,3"],
             ("--compute-ratios", "2 ratio(s) for 3 workers", "one per worker")),
    BadInput("run_adsp_negative_gamma", "run_cli", ["--library", "ADSP", "--adsp-gamma-s", "-5"],
             ("--adsp-gamma-s", "positive number of seconds", "paper 60")),
    BadInput("run_zero_iterations", "run_cli", ["--iterations", "0"], ("--iterations", ">= 1")),
    BadInput("run_negative_threshold", "run_cli", ["--threshold", "-1"], ("--threshold", ">= 0")),
    BadInput("run_trace_all_zero", "run_config", ["--testbed", "loopback", "--trace", "{file}"],
             (":2:", "at least one positive rate"), "run_zero.csv", "t_s,mbps\n0,0\n1,0\n2,0\n"),
    BadInput("run_trace_one_row", "run_config", ["--testbed", "loopback", "--trace", "{file}"],
             (":2:", "at least 2"), "run_one.csv", "t_s,mbps\n0,5\n"),
    BadInput("run_trace_missing", "run_config", ["--testbed", "loopback", "--trace", "/nonexistent/t.csv"],
             ("--trace", "/nonexistent/t.csv", "existing trace file")),
    BadInput("run_trace_bad", "run_config", ["--testbed", "loopback", "--trace", "{file}"], (":4:", "strictly increasing"),
             "run_bad.csv"),
    BadInput("run_offsets_without_trace", "run_config", ["--testbed", "loopback", "-c", "none", "--worker-offsets", "1,2"],
             ("--worker-offsets", "--trace FILE")),
    BadInput("run_offsets_count", "run_config", ["--testbed", "loopback", "--workers", "2", "-c", "outdoors",
                                                 "--worker-offsets", "0,10,20"], ("--worker-offsets", "one per worker")),
    BadInput("run_unknown_profile", "run_config", ["--testbed", "loopback", "--profile", "jetson-xavier"],
             ("--profile", "jetson-xavier-nx")),
    # ---- command lines as a person mistypes them: one line naming the fix, exit 2, nothing created ({out}: must
    # not exist afterwards)
    BadInput("run_unknown_flag", "run_cli", ["--iteratons", "5"], ("--iteratons", "did you mean --iterations")),
    BadInput("run_not_a_number", "run_cli", ["--iterations", "ten"], ("--iterations", "invalid int value")),
    BadInput("run_renamed_flag_bad_value", "run_cli", ["--time-budget-s", "-3"], ("--budget-s", "positive")),
    BadInput("run_result_dir_is_a_file", "run_main", ["--testbed", "loopback", "--result-dir", "{file}"],
             ("--result-dir", "not a folder"), "a_file.txt", "x\n"),
    BadInput("run_result_dir_below_a_file", "run_main", ["--testbed", "loopback", "--result-dir", "{file}/runs"],
             ("--result-dir", "not a folder"), "b_file.txt", "x\n"),
    BadInput("run_serve_only_no_secret", "run_main", ["--serve-only", "--testbed", "loopback", "--result-dir", "{out}"],
             ("--serve-only", "ROG_SECRET", "export"), env=(("ROG_SECRET", None),)),
    BadInput("run_serve_only_short_secret", "run_main", ["--serve-only", "--testbed", "loopback", "--result-dir", "{out}"],
             ("--serve-only", "at least 16"), env=(("ROG_SECRET", "short"),)),
    BadInput("items_unknown_item", "items_cli", ["outdoor", "--dry-run"], ("outdoor", "did you mean outdoors")),
    BadInput("items_unknown_flag", "items_cli", ["--budgets", "20"], ("--budgets", "did you mean --budget-s")),
    BadInput("items_budget_not_a_number", "items_cli", ["--budget-s", "abc", "--dry-run"], ("--budget-s", "invalid float")),
    BadInput("items_duplicate_seeds", "items_cli", ["--seeds", "0,1,0", "--dry-run"], ("--seeds", "distinct", "e.g. 0,1,2")),
    BadInput("tc_replay_missing_trace", "tc_replay_cli", ["--dev", "lo", "--trace", "/nonexistent/trace.csv", "--dry-run"],
             ("/nonexistent/trace.csv",)),
    BadInput("tc_replay_bad_trace", "tc_replay_cli", ["--dev", "lo", "--trace", "{file}", "--dry-run"],
             (":4:", "strictly increasing"), "tc_bad.csv"),
    BadInput("tc_replay_zero_time_scale", "tc_replay_cli", ["--dev", "lo", "--trace", str(ROOT / "configs/traces/outdoors-synth.csv"),
                                                            "--time-scale", "0", "--dry-run"], ("time",)),
    BadInput("testbed_zero_workers", "testbed_cli", ["create", "--workers", "0", "--prefix", "{prefix}b"], ("workers",)),
)
_TC_BAD_CONTENT = "t_s,mbps\n0,50\n2,40\n1,30\n"


def _call_cli(fn, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = fn(argv)
        except SystemExit as e:
            if isinstance(e.code, str):  # SystemExit("run.py: error: ..."): Python prints it and exits 1
                print(e.code, file=err)
                code = 1
            else:
                code = e.code
    return int(code or 0), err.getvalue()


@contextlib.contextmanager
def _environment(pairs) -> object:
    """``os.environ`` with ``pairs`` set (None: unset) for the block, restored after."""
    import os

    saved = {k: os.environ.get(k) for k, _ in pairs}
    try:
        for k, v in pairs:
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def check(case: BadInput, work_dir: Path, prefix: str = "rgz") -> tuple[str, list[str]]:
    """Feed one bad input to its loader; returns (the message, problems with it)."""
    with _environment(case.env):
        return _check(case, work_dir, prefix)


def _check(case: BadInput, work_dir: Path, prefix: str) -> tuple[str, list[str]]:
    from rog.deploy.hosts import HostsFileError, load_hosts
    from rog.testbed.profiles import ProfileError, load_profile
    from rog.traces import TraceError, load_trace

    problems: list[str] = []
    ext = {"trace": ".csv", "hosts": ".yaml", "profile": ".yaml"}.get(case.kind, ".csv")
    path = work_dir / case.case / (case.file_name or f"{case.case}{ext}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(case.content, str):
        path.write_bytes(case.content.encode("utf-8", "surrogateescape"))
    elif case.file_name:
        path.write_text(case.file_text or _TC_BAD_CONTENT)
    names_file = isinstance(case.content, str) or bool(case.file_name)
    expected = {"trace": TraceError, "hosts": HostsFileError, "profile": ProfileError}.get(case.kind)
    msg = ""
    if expected is not None:
        loader = {"trace": load_trace, "hosts": load_hosts, "profile": load_profile}[case.kind]
        try:
            loader(path)
        except expected as e:
            msg = str(e)
        except Exception as e:  # noqa: BLE001 - any other type is a defect
            return f"{type(e).__name__}: {e}", [f"raised {type(e).__name__} instead of {expected.__name__}: {e}"]
        else:
            return "", ["accepted"]
    else:
        out = work_dir / case.case / "out"  # {out}: a folder the command must not create
        argv = [a.replace("{file}", str(path)).replace("{prefix}", prefix).replace("{out}", str(out)) for a in case.content]
        if case.kind == "run_cli":
            from rog.experiment.cli import parse_args

            code, msg = _call_cli(lambda v: parse_args(v) and 0, argv)
        elif case.kind == "run_config":  # checks made while resolving the run's configuration
            from rog.experiment.cli import parse_args, run_command
            from rog.experiment.config import resolve_config

            code, msg = _call_cli(lambda v: run_command(lambda: resolve_config(parse_args(v)) and 0), argv)
        elif case.kind == "run_main":  # the whole command: checks made before anything starts
            from rog.experiment.cli import main as run_main

            code, msg = _call_cli(run_main, argv)
        elif case.kind == "items_cli":  # run_all.sh / run_items.py
            from rog.experiment.driver import parse_args as items_parse_args

            code, msg = _call_cli(lambda v: items_parse_args(v) and 0, argv)
        elif case.kind == "tc_replay_cli":
            from rog.testbed.replay_command import main as tc_replay_main

            code, msg = _call_cli(tc_replay_main, argv)
        else:
            from rog.testbed.testbed_command import main as testbed_main

            code, msg = _call_cli(testbed_main, argv)
        if code != 2:
            problems.append(f"exit status {code}, expected 2 (bad input)")
        lines = [ln for ln in msg.strip().splitlines() if ": note: " not in ln]  # a renamed flag's note may precede it
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr, expected one")
        if out.exists():
            problems.append(f"{out} was created before the command refused")
    if names_file and str(path.name) not in msg:
        problems.append("the message does not name the file")
    for frag in case.must:
        if frag not in msg:
            problems.append(f"the message lacks {frag!r}")
    return msg, problems


def bad_inputs(ctx: ScenarioContext) -> dict:
    """Scenario: every case of :data:`CASES`; passes when every message names where and how to fix."""
    failures, messages = {}, {}
    for case in CASES:
        msg, problems = check(case, ctx.work_dir, ctx.prefix)
        messages[case.case] = msg.strip().splitlines()[-1][:300] if msg.strip() else ""
        if problems:
            failures[case.case] = problems
    details = {"cases": len(CASES), "failed": failures, "messages": messages}
    if failures:
        return result("bad_inputs", False, details,
                      error=f"{len(failures)} of {len(CASES)} bad inputs got an unclear or wrong error: {sorted(failures)}")
    return result("bad_inputs", True, details)


SCENARIOS = {"bad_inputs": bad_inputs}
