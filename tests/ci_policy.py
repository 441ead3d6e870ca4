"""The CI skip policy, a pytest plugin (loaded by ``tests/conftest.py``; ``-p ci_policy`` elsewhere).

Under CI (``CI`` set) every tier that can run on a CPU machine runs, so a skip there hides a missing
piece: a skipped test or module that is not a ``gpu`` test is reported as failed, with its reason.
Every ``gpu`` test skips with one reason where torch sees no CUDA device.
"""

from __future__ import annotations

import os

import pytest

GPU_SKIP_REASON = "needs a CUDA device (torch sees none)"


def in_ci() -> bool:
    """True under CI (the ``CI`` environment variable set to anything but empty, 0, false or no)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a declared dependency
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config, items) -> None:
    """Every ``gpu`` test skips with one reason where torch sees no CUDA device."""
    gpu_items = [it for it in items if it.get_closest_marker("gpu") is not None]
    if gpu_items and not _cuda_available():
        for it in gpu_items:
            it.add_marker(pytest.mark.skipif(True, reason=GPU_SKIP_REASON), append=False)  # before any own skipif


def _ci_failure(what: str, reason: str) -> str:
    return (f"CI runs every test but the gpu tier, and this {what} skipped: {reason}\n"
            "Provide the missing piece on the CI machine (root, ip netns, tc, sshd, a declared dependency) "
            "instead of skipping; only tests marked gpu may skip.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI a skipped test that is not a ``gpu`` test is reported as failed, with its skip reason."""
    outcome = yield
    rep = outcome.get_result()
    if not (in_ci() and rep.skipped) or hasattr(rep, "wasxfail") or item.get_closest_marker("gpu") is not None:
        return
    reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
    rep.outcome = "failed"
    rep.longrepr = _ci_failure("test", reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Under CI a module that skips at collection (``importorskip``, a module-level skip) fails instead."""
    outcome = yield
    rep = outcome.get_result()
    if in_ci() and rep.skipped:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = _ci_failure("module", reason)
