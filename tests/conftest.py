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

import signal
from pathlib import Path

import pytest

from ci_policy import pytest_collection_modifyitems, pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401


def pytest_configure(config) -> None:
    """Undo an inherited ``SIG_IGN`` for SIGINT (pytest itself becomes interruptible again, too)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)



@pytest.fixture(scope="session")
def quick_cache() -> Path:
    """The quick workload's weight cache, pre-trained once (a no-op when warm), so runs do not race to fill it."""
    from rog.workloads import QuickWorkload

    cache = Path(__file__).resolve().parents[1] / "result" / ".cache"
    QuickWorkload(seed=0, n_workers=2, cache_dir=cache).pretrained_state()
    return cache
