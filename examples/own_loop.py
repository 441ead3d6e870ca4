"""Use ROG in your own training loop: a small MLP (not one of the toolkit's workloads) on 2-D points, one
process per robot, one parameter server.

    export ROG_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')   # the same on every robot
    rog-server --model examples/own_loop.py:make_model --workers 2 --port 5555 &
    python examples/own_loop.py --server 127.0.0.1:5555 --worker 0 &
    python examples/own_loop.py --server 127.0.0.1:5555 --worker 1

Each robot builds its model from its own seed: the parameter server hands every robot the team's initial
parameters at join (the first robot's), and after ``opt.close()`` (the flush) every robot holds the same model.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from rog.optim import ROGOptimizer  # noqa: E402

CENTERS = torch.tensor([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])  # three classes of noisy 2-D points


def make_model() -> nn.Module:
    """The model every robot trains (``rog-server --model examples/own_loop.py:make_model`` serves its layout)."""
    return nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 3))


def batches(seed: int, n: int, size: int = 32):
    """``n`` batches of this robot's own data."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        y = torch.randint(0, 3, (size,), generator=g)
        yield CENTERS[y] + 0.8 * torch.randn(size, 2, generator=g), y


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", required=True, help="host:port of the parameter server")
    p.add_argument("--worker", type=int, required=True, help="this robot's worker id (0..N-1)")
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--policy", default="ROG", help="the server's policy (ROG, BSP, SSP, FLOWN)")
    p.add_argument("--compression", default="sign", help="the server's codec (sign or none)")
    p.add_argument("--save", type=Path, help="write the final parameters here (.npy)")
    a = p.parse_args(argv)
    host, port = a.server.rsplit(":", 1)
    torch.manual_seed(a.worker)  # every robot starts from its own weights; the PS hands out the team's
    model = make_model()
    opt = ROGOptimizer(model.parameters(), server=(host, int(port)), worker_id=a.worker, lr=0.05,
                       policy=a.policy, compression=a.compression)  # secret: ROG_SECRET
    for x, y in batches(100 + a.worker, a.iterations):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()  # local update -> push rows -> pull -> model updated in place
    opt.close()  # flush: every robot now holds every update
    x, y = next(batches(7, 1, 1000))
    print(f"worker {a.worker}: {opt.iteration} iterations, accuracy {(model(x).argmax(1) == y).float().mean():.3f}")
    if a.save:
        np.save(a.save, torch.cat([q.detach().reshape(-1) for q in model.parameters()]).numpy())
    return 0


if __name__ == "__main__":
    sys.exit(main())
