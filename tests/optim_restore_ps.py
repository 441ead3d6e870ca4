"""The parameter server of the kill-and-restore tests (tests/test_optim_restore.py runs it in a thread;
tests/test_optim_restore_emulated.py runs this file as a process inside the emulated testbed's PS namespace).

As a process it listens on ``--host`` (every address by default) and ``--port`` (0: any free one), writes
``ps.ready`` (the port, once it accepts), serves the two workers of tests/optim_restore_worker.py until both
finished, then writes what the conservation check reads, as plain files (no pickle):

* ``pending.npy``: the PS's pending buffers (float32, one row per worker);
* ``errors.json``: ``[[worker, error type, message], ...]``, the failed links it recorded;
* ``faults.json``: its fault records (``worker_lost``, ``worker_rejoined``, ...), as logged;
* ``serve.json``: ``{"ok": true}``, or ``{"ok": false, "error": ...}`` when serving failed (exit status 1).

    ROG_SECRET=... python tests/optim_restore_ps.py --out DIR [--host H] [--port P]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from rog.codecs.compression import SignCodec
from rog.optim import row_layout
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import ParameterServer
from rog.transport import Listener, TransportConfig, load_secret
from tests.optim_restore_worker import model_and_data

N_WORKERS = 2


def parameter_server(part: RowPartition) -> ParameterServer:
    """The run's PS: BSP, 1-bit, and a killed worker keeps its slot (the other waits at the gate)."""
    return ParameterServer(part, N_WORKERS, make_policy("BSP"), SignCodec(), join_timeout_s=60.0,
                           wait_timeout_s=60.0, evict_after_s=60.0)


def main() -> int:
    a = argparse.ArgumentParser()
    a.add_argument("--host", default="0.0.0.0")
    a.add_argument("--port", type=int, default=0)
    a.add_argument("--out", type=Path, required=True)
    a = a.parse_args()
    part = row_layout(model_and_data(0, 0)[0])
    ps = parameter_server(part)
    config = TransportConfig(secret=load_secret())
    with Listener(a.host, a.port, config=config, worker_ids=set(range(N_WORKERS))) as listener:
        ready = a.out / "ps.ready.tmp"
        ready.write_text(str(listener.address[1]))
        ready.replace(a.out / "ps.ready")  # whole, never half-written
        try:
            ps.serve(listener)
            outcome = {"ok": True}
        except Exception as e:  # noqa: BLE001 - written down for the test, and the exit status says it
            outcome = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        finally:
            np.save(a.out / "pending.npy", np.stack(ps.state.pending))
            (a.out / "errors.json").write_text(json.dumps([[r, type(e).__name__, str(e)] for r, e in ps.errors]))
            (a.out / "faults.json").write_text(json.dumps(ps.faults))
    (a.out / "serve.json").write_text(json.dumps(outcome))
    return 0 if outcome["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
