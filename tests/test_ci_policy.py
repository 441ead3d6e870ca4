"""The CI skip policy (tests/ci_policy.py), run on a throwaway suite in a fresh pytest: under CI a skip
that is not a gpu test fails with its reason; outside CI it stays a skip; gpu tests skip with one reason."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

PROBE = '''
import pytest

def test_needs_sshd():
    pytest.skip("sshd is not installed")

@pytest.mark.gpu
def test_on_cuda():
    pass

def test_plain():
    pass
'''

MODULE_SKIP = '''
import pytest
pytest.importorskip("a_module_nobody_ships_zz")

def test_never_collected():
    pass
'''


def _pytest(tmp_path: Path, ci: str | None, *files: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(TESTS) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the probe needs only ci_policy (-p): no xdist, hypothesis, timeout
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_policy", "-p", "no:cacheprovider", "-rfs",
                        "--rootdir", str(tmp_path), "-o", "addopts=", "-o", "markers=gpu: CUDA", *files],
                       capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    return p.returncode, p.stdout + p.stderr


def _counts(out: str) -> dict:
    last = [ln for ln in out.splitlines() if re.search(r"\d+ (passed|failed|skipped|errors?)", ln)][-1]
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last)}


def test_a_skip_fails_under_ci_and_names_its_reason(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    code, out = _pytest(tmp_path, "true", "test_probe.py")
    assert code == 1 and _counts(out) == {"failed": 1, "passed": 1, "skipped": 1}, out
    assert "this test skipped" in out and "sshd is not installed" in out
    assert "needs a CUDA device" in out  # the gpu test's skip reason (this machine has no CUDA)


def test_outside_ci_a_skip_stays_a_skip(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    code, out = _pytest(tmp_path, None, "test_probe.py")  # one fresh pytest (about 6 s); the values below in-process
    assert code == 0 and _counts(out) == {"passed": 1, "skipped": 2}, out


def test_which_values_of_ci_mean_ci(monkeypatch):
    from ci_policy import in_ci

    for value, want in ((None, False), ("", False), ("0", False), ("false", False), (" No ", False),
                        ("FALSE", False), ("true", True), ("1", True), ("yes", True), ("anything", True)):
        if value is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", value)
        assert in_ci() is want, value


def test_a_module_level_skip_fails_under_ci(tmp_path):
    (tmp_path / "test_mod.py").write_text(MODULE_SKIP)
    code, out = _pytest(tmp_path, "1", "test_mod.py")
    assert code != 0 and "this module skipped" in out and "a_module_nobody_ships_zz" in out, out
    code, out = _pytest(tmp_path, None, "test_mod.py")
    assert code == 5 and _counts(out) == {"skipped": 1}, out  # 5: pytest ran no test
