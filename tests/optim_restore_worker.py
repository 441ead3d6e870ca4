"""One ROGOptimizer worker process for tests/test_optim_restore.py (and its emulated repeat,
tests/test_optim_restore_emulated.py): trains ``--iterations`` steps of a small model over TCP to the PS at
``--host`` (loopback by default), saving ``opt.state_dict()`` (and the float64 sum of every update ``u`` it
computed) after every step; ``--hang-after K`` stops after step K and sleeps until it is killed; ``--restore``
starts again from the saved state (a fresh rejoin: the initial model, then everything the PS committed) and
finishes the run.

    ROG_SECRET=... python tests/optim_restore_worker.py [--host H] --port P --worker 1 --out DIR \
        [--hang-after K | --restore]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rog.optim import ROGOptimizer, WorkerOptions

LR, MOMENTUM = 0.05, 0.9


def model_and_data(k: int, n: int):
    """The initial model (the same on every worker and incarnation) and worker ``k``'s batches."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 16), nn.Tanh(), nn.Linear(16, 4))
    g = torch.Generator().manual_seed(100 + k)
    return model, [(torch.randn(8, 20, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(n)]


def main() -> int:
    a = argparse.ArgumentParser()
    a.add_argument("--host", default="127.0.0.1")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--worker", type=int, required=True)
    a.add_argument("--iterations", type=int, default=6)
    a.add_argument("--hang-after", type=int, default=None)
    a.add_argument("--restore", action="store_true")
    a.add_argument("--out", type=Path, required=True)
    a = a.parse_args()
    torch.set_num_threads(1)
    return train(a.worker, a.port, a.iterations, a.out, hang_after=a.hang_after, restore=a.restore, host=a.host)


def train(k: int, port: int, iterations: int, out: Path, *, hang_after: int | None = None, restore: bool = False,
          secret: str | None = None, host: str = "127.0.0.1") -> int:
    """Worker ``k``'s run (see the module docstring) with the PS at ``host:port``; ``secret`` defaults to
    ``ROG_SECRET``."""
    model, batches = model_and_data(k, iterations)
    state_file = out / f"state-w{k}.pt"
    opt = ROGOptimizer(model.parameters(), server=(host, port), worker_id=k, lr=LR, momentum=MOMENTUM,
                       policy="BSP", compression="sign", secret=secret,
                       options=WorkerOptions(rejoin=restore, timeout_s=60.0))
    total = np.zeros(opt.partition.n_elements, dtype=np.float64)
    total_abs = np.zeros_like(total)  # sum |u|: the scale of the float32 rounding
    report: dict = {}
    if restore:
        saved = torch.load(state_file)
        opt.load_state_dict(saved["opt"])
        total, total_abs = (saved[key].numpy().astype(np.float64) for key in ("sum_u", "sum_abs_u"))
        st = opt.state_dict()
        report["resumed_at"] = opt.iteration
        report["momentum_restored"] = all(torch.equal(st["state"][i]["momentum_buffer"],
                                                      saved["opt"]["state"][i]["momentum_buffer"])
                                          for i in saved["opt"]["state"])
        report["error_feedback_restored"] = all(torch.equal(st["state"][i]["error_feedback"],
                                                            saved["opt"]["state"][i]["error_feedback"])
                                                for i in saved["opt"]["state"])
        report["saved_error_feedback_abs_sum"] = float(sum(s["error_feedback"].abs().sum()
                                                           for s in saved["opt"]["state"].values()))
    step_u = opt.engine.local.step

    def recorded(grad, params, iteration, out=None):  # every update u this worker computes, summed in float64
        u = step_u(grad, params, iteration, out)
        total[:] += u
        total_abs[:] += np.abs(u)
        return u

    opt.engine.local.step = recorded
    loss_fn = nn.CrossEntropyLoss()
    for n in range(opt.iteration + 1, iterations + 1):
        x, y = batches[n - 1]
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        torch.save({"opt": opt.state_dict(), "sum_u": torch.from_numpy(total.copy()),
                    "sum_abs_u": torch.from_numpy(total_abs.copy())}, state_file)
        if hang_after is not None and n == hang_after:
            (out / f"hung-w{k}").write_text(str(n))
            while True:  # mid-run: the others wait at the gate until this process is killed
                time.sleep(1.0)
    opt.close()
    np.save(out / f"sum_u-w{k}.npy", total)
    np.save(out / f"sum_abs_u-w{k}.npy", total_abs)
    np.save(out / f"acc-w{k}.npy", np.asarray(opt.engine.acc, dtype=np.float64))
    np.save(out / f"final-w{k}.npy", np.asarray(opt.flat, dtype=np.float64))
    report["iteration"] = opt.iteration
    (out / f"report-w{k}.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
