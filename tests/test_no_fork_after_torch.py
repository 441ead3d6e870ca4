"""Workers and every child start as fresh interpreters, never as forks of a process that used torch.

With a CUDA build of torch a forked child of a process that ran autograd dies on its first backward
("Unable to handle autograd's threading in combination with fork-based multiprocessing"); this CPU
machine does not show that error, so the guard in ``tests/fork_guard/sitecustomize.py`` makes any
``os.fork()`` after ``import torch`` fail and logs it.  Checked: the guard catches a fork after autograd;
no module of the engine or script calls ``os.fork``; (slow) a whole loopback run under the guard ends DONE.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUARD = ROOT / "tests" / "fork_guard"


def _guarded_env(log: Path) -> dict:
    env = dict(os.environ, ROG_FORK_GUARD_LOG=str(log), OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(GUARD), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_the_guard_catches_a_fork_after_autograd(tmp_path):
    log = tmp_path / "forks.log"
    code = ("import os, torch\n"
            "x = torch.ones(3, requires_grad=True); (x * 2).sum().backward()\n"
            "try:\n    os.fork()\nexcept RuntimeError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=_guarded_env(log), capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "refused: os.fork() in a process that imported torch" in out.stdout
    assert len(log.read_text().splitlines()) == 1
    # and a process without torch forks normally (the guard is not a blanket ban)
    ok = subprocess.run([sys.executable, "-c", "import os\npid = os.fork()\nos._exit(0) if pid == 0 else "
                         "print(os.waitpid(pid, 0)[1])"], env=_guarded_env(log), capture_output=True, text=True,
                        timeout=60)
    assert ok.stdout.strip() == "0", ok.stderr


def _fork_calls(path: Path) -> list[str]:
    """``os.fork``/``os.forkpty`` calls and multiprocessing 'fork' contexts in a source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("fork", "forkpty") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} os.{node.attr}")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("get_context", "set_start_method") \
                and any(isinstance(a, ast.Constant) and a.value == "fork" for a in node.args):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} multiprocessing 'fork'")
    return found


def test_no_engine_module_or_script_forks():
    files = sorted((ROOT / "rog").rglob("*.py")) + sorted((ROOT / "scripts").glob("*.py"))
    assert len(files) > 50
    calls = [c for f in files for c in _fork_calls(f)]
    assert calls == []
    # the check itself finds a fork
    probe = ROOT / "tests" / "fork_guard" / "sitecustomize.py"
    assert [c.split()[-1] for c in _fork_calls(probe)] == ["os.fork", "os.fork"]


@pytest.mark.slow
def test_a_loopback_run_under_the_guard_ends_done(tmp_path):
    log = tmp_path / "forks.log"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), "--testbed", "loopback", "--library",
                          "ROG", "--iterations", "3", "--workers", "2", "--result-dir", str(tmp_path / "r"),
                          "--no-progress", "--device", "cpu"], env=_guarded_env(log), capture_output=True, text=True,
                         timeout=900, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["status"] == "done"
    assert not log.exists() or log.read_text() == ""
