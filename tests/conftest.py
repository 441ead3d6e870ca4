"""Suite-wide setup.

A shell that starts a command in the background (``nohup bash scripts/test.sh &``, a CI job runner)
may start it with SIGINT ignored, and an ignored signal stays ignored across ``exec``: every
``scripts/run.py`` a test starts would then ignore the Ctrl-C the interrupt tests send it, and those
tests would wait out their timeouts.  A handled signal is reset to its default in an exec'd child,
so restoring Python's handler here gives every child the ordinary Ctrl-C behaviour again.

Under CI (``CI`` set) every tier that can run on a CPU machine runs, so a skip there hides a missing
piece: a skipped test or module that is not a ``gpu`` test is reported as failed, with its reason.
"""

from __future__ import annotations

import ast
import io
import os
import signal
import subprocess
import sys
import threading
import tokenize
from pathlib import Path
from typing import Callable, Sequence

import pytest

from ci_policy import pytest_collection_modifyitems as _ci_collection_modifyitems
from ci_policy import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401

# A test module whose code (docstrings and comments aside: _code_text) names any of these touches the host's network
# state (namespaces, tc qdiscs, the emulated testbed, sshd in namespaces): several of them use fixed names, prefixes
# or subnets, so under pytest-xdist they all run on one worker, one at a time (xdist_group; scripts/test.sh passes
# --dist loadgroup).  A file that only mentions run_all.sh or tc_replay in its prose is not one of them.
HOST_NETWORK_WORDS = ("Testbed(", "NamespaceSshd", "have_root_netns", "needs_root", "ip netns", "emulated_hosts",
                      "tc_replay", "qdisc", "ScenarioContext", 'testbed="emulated"', '"--testbed", "emulated"', "geteuid",
                      "run_all.sh", "gpu_emulated", "smoke_full")


# The slow tier's longest files (seconds on this 2-core machine, docs/testing.md), handed out first: xdist's loadfile
# gives each worker one file, then more while it has at most two tests queued, so a one-test file of six minutes
# collected last (xdist orders files by their number of tests unless --no-loadscope-reorder, which test.sh passes)
# ran alone at the end of the tier.
LONG_FILES_FIRST = ("test_smoke_full.py", "test_run_all_emulated_hosts.py", "test_signals.py", "test_run_items_e2e.py",
                    "test_run_emulated.py", "test_run_loopback.py", "test_core_install.py", "test_tensorboard_feed.py",
                    "test_run_fabric_emulated.py", "test_baseline_ddp.py")


def _code_text(path: Path) -> str:
    """``path``'s source with its comments and docstrings blanked out (every other character where it was)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    docs = {(n.body[0].lineno, n.body[0].col_offset) for n in ast.walk(ast.parse(text))
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
            and isinstance(n.body[0].value.value, str)}
    rows = [list(line) for line in text.splitlines(keepends=True)]
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start in docs):
            (r0, c0), (r1, c1) = tok.start, tok.end
            for r in range(r0, r1 + 1):
                row = rows[r - 1]
                end = c1 if r == r1 else len(row) - (row[-1:] == ["\n"])
                row[(c0 if r == r0 else 0):end] = " " * (end - (c0 if r == r0 else 0))
    return "".join("".join(row) for row in rows)


def _long_first(items) -> None:
    rank = {name: k for k, name in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda it: rank.get(it.path.name, len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups into the node ids (--dist loadgroup)
def pytest_collection_modifyitems(config, items) -> None:
    """The CI policy's gpu skips, the longest files first, then the host-network tests into one xdist group and the
    users of the shared loopback runs into another."""
    _ci_collection_modifyitems(config, items)
    if not config.pluginmanager.hasplugin("xdist"):
        return
    _long_first(items)
    touches: dict[str, bool] = {}
    for it in items:
        path = str(it.path)
        if path not in touches:
            text = _code_text(Path(path))
            touches[path] = any(w in text for w in HOST_NETWORK_WORDS)
        if touches[path]:
            it.add_marker(pytest.mark.xdist_group("host-network"))
        elif "loopback_runs" in getattr(it, "fixturenames", ()):  # the shared runs start once: one worker
            it.add_marker(pytest.mark.xdist_group("loopback-runs"))


# The suite's many short runs skip the TensorBoard feed (a process importing torch's writer for each run: about
# 2.5 s of CPU); tests/test_tensorboard_feed.py turns it back on for the runs that check it.
os.environ.setdefault("ROG_NO_TENSORBOARD", "1")


def pytest_configure(config) -> None:
    """Undo an inherited ``SIG_IGN`` for SIGINT (pytest itself becomes interruptible again, too)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)



ROOT = Path(__file__).resolve().parents[1]
RUN_PY = ROOT / "scripts" / "run.py"


def run_py(args: Sequence[str], *, timeout_s: float = 900.0, env: dict | None = None,
           check: bool = False) -> subprocess.CompletedProcess:
    """``python scripts/run.py <args>`` from the repository root, stdout and stderr captured as text: the one
    way a test runs the command to completion (``check``: raise on a non-zero exit status)."""
    return subprocess.run([sys.executable, str(RUN_PY), *args], capture_output=True, text=True, cwd=str(ROOT),
                          timeout=timeout_s, env=env, check=check)


@pytest.fixture
def run_py_command() -> Callable:
    """:func:`run_py`, for a test that runs ``scripts/run.py`` as a user would."""
    return run_py


@pytest.fixture(scope="session")
def quick_cache() -> Path:
    """The quick workload's weight cache, pre-trained once (a no-op when warm), so runs do not race to fill it."""
    from rog.workloads import QuickWorkload

    cache = ROOT / "result" / ".cache"
    QuickWorkload(seed=0, n_workers=2, cache_dir=cache).pretrained_state()
    return cache


def run_ps_team(ps, body: Callable, n_workers: int, ends: Sequence | None = None, worker_join_s: float = 60.0,
                ps_join_s: float = 30.0) -> None:
    """The in-process team harness: start ``ps`` (a :class:`rog.runtime.ParameterServer` for ``n_workers``)
    on the server ends of ``ends`` (default: one :func:`rog.transport.inproc_pair` per worker), run
    ``body(k, worker_end)`` in one thread per worker, wait for the workers and then the server, and fail
    naming every worker error, server error and thread still running.  A worker that fails aborts its
    link and the server is stopped, so nothing waits for the failed worker."""
    from rog.transport import inproc_pair

    ends = list(ends) if ends is not None else [inproc_pair(k) for k in range(n_workers)]
    assert len(ends) == n_workers, f"{len(ends)} link(s) for {n_workers} workers"
    ps_thread = ps.start([server_end for _, server_end in ends])
    errors: list[tuple[int, BaseException]] = []

    def run(k: int) -> None:
        try:
            body(k, ends[k][0])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((k, e))
            ends[k][0].abort()

    threads = [threading.Thread(target=run, args=(k,), name=f"team-w{k}", daemon=True) for k in range(n_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(worker_join_s)
    hung = [k for k, t in enumerate(threads) if t.is_alive()]
    if errors or hung:  # the server would wait for them (a worker may still connect): stop it
        ps.stop()
    ps_thread.join(ps_join_s)
    if ps_thread.is_alive():
        ps.stop()
        hung.append("ps")
    assert not errors and not ps.errors and not hung, dict(worker_errors=errors, ps_errors=ps.errors, still_running=hung)


@pytest.fixture
def ps_team() -> Callable:
    """:func:`run_ps_team`, for a test that runs a parameter server and its workers in process."""
    return run_ps_team


@pytest.fixture(scope="session")
def run_config(tmp_path_factory) -> Callable:
    """``run_config(flags)``: the :class:`~rog.experiment.run_config.RunConfig` that ``run.py --testbed loopback
    -c none <flags>`` resolves (what a child reads from config.yaml), for tests of the code that reads it."""
    from rog.experiment import cli
    from rog.experiment.config import resolve

    result_dir = tmp_path_factory.mktemp("run-config")

    def make(flags: Sequence[str] = ()):
        return resolve(cli.parse_args(["--testbed", "loopback", "-c", "none", *flags, "--result-dir", str(result_dir)]))

    return make


@pytest.fixture(scope="session")
def loopback_runs(tmp_path_factory, quick_cache):
    """The default tier's shared real loopback runs (tests/loopback_runs.py), started once, all at once."""
    from loopback_runs import start_loopback_runs

    return start_loopback_runs(tmp_path_factory.mktemp("loopback-runs"), quick_cache)
