"""Adapt the quick model to noisy digits with ROGOptimizer, a drop-in replacement for a torch optimizer.

    python examples/adapt_quick.py          # a parameter server in this process, 2 worker threads
    python examples/adapt_quick.py --local-update AdamW   # AdamW's step as the update ROG pushes
    ROG_SECRET=<shared> python scripts/run.py --serve-only --workers 1 --port 5555 &   # or one from run.py
    ROG_SECRET=<shared> python examples/adapt_quick.py --server 127.0.0.1:5555 --workers 1
"""
import argparse, os, secrets, sys, threading
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from rog import policies, rows, runtime, transport
from rog.codecs.codec_registry import make_codec
from rog.optim import ROGOptimizer
from rog.workloads import QuickWorkload

p = argparse.ArgumentParser()
p.add_argument("--server", help="host:port of a running parameter server (default: start one here)")
p.add_argument("--workers", type=int, default=2)
p.add_argument("--iterations", type=int, default=100)
p.add_argument("--local-update", choices=["DEFSGDM", "AdamW"], default="DEFSGDM", help="the worker's local rule")
a = p.parse_args()
torch.set_num_threads(1)
wl = QuickWorkload(seed=0, n_workers=a.workers)


def train(k, server):
    model = wl.pretrained_model()
    start = wl.evaluate(model)
    rule = dict(local_update=torch.optim.AdamW, lr=1e-4, weight_decay=1e-2) if a.local_update == "AdamW" else dict(lr=5e-4)
    opt = ROGOptimizer(model.parameters(), server=server, worker_id=k, policy="ROG", threshold=4, **rule)
    for _, (x, y) in zip(range(a.iterations), wl.worker_batches(k, 32)):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    opt.close()  # flush and leave
    print(f"worker {k}: test accuracy {start:.3f} -> {wl.evaluate(model):.3f} after {opt.iteration} iterations")


if a.server:
    address = (a.server.rsplit(":", 1)[0], int(a.server.rsplit(":", 1)[1]))
else:
    os.environ.setdefault("ROG_SECRET", secrets.token_hex(32))
    listener = transport.Listener(config=transport.TransportConfig(secret=transport.load_secret()))
    partition = rows.RowPartition.from_module(wl.make_model())
    runtime.ParameterServer(partition, a.workers, policies.make_policy("ROG", 4), make_codec("sign")).start(listener)
    address = listener.address
threads = [threading.Thread(target=train, args=(k, address)) for k in range(a.workers)]
for t in threads:
    t.start()
