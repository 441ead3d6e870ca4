"""Loaded by every interpreter started with this folder on PYTHONPATH: refuse os.fork() in a process
that has imported torch (a forked child of such a process dies on its first backward with a CUDA build
of torch), and note the refusal in ``$ROG_FORK_GUARD_LOG`` so a test sees it even if the error is caught."""

import os
import sys

_fork = os.fork


def _guarded_fork():
    if "torch" in sys.modules:
        log = os.environ.get("ROG_FORK_GUARD_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {' '.join(sys.argv)[:200]}\n")
        raise RuntimeError("os.fork() in a process that imported torch: start a fresh interpreter instead")
    return _fork()


os.fork = _guarded_fork
