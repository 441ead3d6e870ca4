"""The drop-in optimizer: with one worker, BSP and compression off it must step exactly like
torch.optim.SGD(momentum=0.9, nesterov=True, weight_decay) (the independent reference); the model's
parameters become views of the engine's flat buffer; validation; compute starts at zero_grad()."""

from __future__ import annotations

import copy
import secrets
import threading
import types

import numpy as np
import pytest
import torch
from torch import nn

from rog.chunks import ARTIFACT_CHUNK_SHARE
from rog.codecs.compression import RawCodec, SignCodec
from rog.optim import ROGOptimizer, WorkerOptions
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import EventLog, ParameterServer, read_events
from rog.transport import HandshakeError, Listener, TransportConfig, inproc_pair


def small_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(40, 30), nn.ReLU(), nn.Linear(30, 5))


def start_ps(model, n_workers=1, policy="BSP", codec=None, source=None):
    part = RowPartition.from_module(model)
    ps = ParameterServer(part, n_workers, make_policy(policy), codec or RawCodec(), join_timeout_s=20.0,
                         wait_timeout_s=20.0)
    return ps, ps.start(source)


def data(n_steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 40, generator=g), torch.randint(0, 5, (16,), generator=g)) for _ in range(n_steps)]


def test_one_worker_bsp_raw_equals_torch_sgd_nesterov():
    model = small_model()
    ref = copy.deepcopy(model)
    w_end, ps_end = inproc_pair(0)
    ps, t = start_ps(model, source=[ps_end])
    opt = ROGOptimizer(model.parameters(), server=w_end, worker_id=0, lr=0.05, policy="BSP", compression="none",
                       momentum=0.9, weight_decay=5e-4)
    sgd = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in data(6):
        for m, o in ((model, opt), (ref, sgd)):
            o.zero_grad()
            loss_fn(m(x), y).backward()
            o.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert opt.iteration == 6
    opt.close()
    t.join(20)
    assert not ps.errors
    for p, q in zip(model.parameters(), ref.parameters()):  # W=1, BSP: the flush had nothing left to move
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_parameters_are_views_of_the_flat_buffer():
    model = small_model()
    before = [p.detach().clone() for p in model.parameters()]
    w_end, ps_end = inproc_pair(0)
    ps, t = start_ps(model, source=[ps_end])
    with ROGOptimizer(model.parameters(), server=w_end, worker_id=0, lr=0.1, policy="BSP", compression="none") as opt:
        for p, b in zip(model.parameters(), before):
            torch.testing.assert_close(p.detach(), b)  # values kept
        opt.flat[:] = 0.0  # writing the buffer writes the model
        assert all(not p.detach().any() for p in model.parameters())
        assert opt.partition.n_elements == sum(p.numel() for p in model.parameters())
    t.join(20)
    assert not ps.errors


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_gradients_accumulate_in_the_flat_buffer_and_replaced_ones_are_copied_in(backend):
    # each .grad is a view of the flat gradient buffer, so backward writes there; the steps must equal torch's
    # SGD whether the application zeroes through the optimizer, through model.zero_grad() (grads set to None,
    # then new tensors from backward) or replaces one gradient by hand
    model = small_model()
    ref = copy.deepcopy(model)
    w_end, ps_end = inproc_pair(0)
    ps, t = start_ps(model, source=[ps_end])
    opt = ROGOptimizer(model.parameters(), server=w_end, worker_id=0, lr=0.05, policy="BSP", compression="none",
                       momentum=0.9, weight_decay=5e-4, options=WorkerOptions(flat_backend=backend))
    sgd = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    flat = opt._grad if backend == "torch" else torch.from_numpy(opt._grad)
    lo, hi = flat.data_ptr(), flat.data_ptr() + flat.numel() * 4
    loss_fn = nn.CrossEntropyLoss()
    for n, (x, y) in enumerate(data(6)):
        zero = ("optimizer", "model", "by hand")[n % 3]
        for m, o in ((model, opt), (ref, sgd)):
            if zero == "model":
                m.zero_grad(set_to_none=True)
            elif o is opt:
                o.zero_grad(set_to_none=False)  # keep the views: backward writes into the flat buffer
            else:
                o.zero_grad()
            loss_fn(m(x), y).backward()
            if zero == "by hand":  # a replaced gradient (e.g. clipped out of place)
                first = next(m.parameters())
                first.grad = first.grad * 0.5
        if zero == "optimizer":  # autograd wrote into the flat buffer itself
            assert all(lo <= p.grad.data_ptr() < hi for p in model.parameters())
        opt.step()
        sgd.step()
        assert all(lo <= p.grad.data_ptr() < hi for p in model.parameters())  # re-pointed by the step
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(p.grad, q.grad)
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())  # zeroed in place
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())  # torch's default: set to None
    opt.close()
    t.join(20)
    assert not ps.errors


def test_two_workers_over_sockets_with_closure_and_secret_string():
    secret = secrets.token_hex(32)
    model0, model1 = small_model(), small_model()
    listener = Listener("127.0.0.1", 0, config=TransportConfig(secret=secret.encode()), worker_ids={0, 1})
    ps, t = start_ps(model0, n_workers=2, policy="ROG", codec=RawCodec(), source=listener)
    losses = {}

    def worker(k, model):
        opt = ROGOptimizer(model.parameters(), server=listener.address, worker_id=k, lr=0.02, policy="ROG",
                           threshold=4, compression="none", secret=secret)
        batches = data(5, seed=10 + k)
        out = []
        for x, y in batches:

            def closure():
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                return loss

            out.append(float(opt.step(closure).detach()))
        opt.close()
        losses[k] = out

    threads = [threading.Thread(target=worker, args=(k, m)) for k, m in ((0, model0), (1, model1))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    t.join(20)
    listener.close()
    assert not ps.errors and set(losses) == {0, 1} and all(len(v) == 5 for v in losses.values())
    # after the flush both workers hold the same model: w0 - (every update of both) / 2
    start = small_model()
    for p, q, p0 in zip(model0.parameters(), model1.parameters(), start.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)
        assert not torch.equal(p.detach(), p0.detach())  # and it trained


def test_wrong_secret_is_refused():
    listener = Listener("127.0.0.1", 0, config=TransportConfig(secret=secrets.token_bytes(32)))
    try:
        with pytest.raises(HandshakeError):
            ROGOptimizer(small_model().parameters(), server=listener.address, worker_id=0, lr=0.1,
                         secret=secrets.token_bytes(32), options=WorkerOptions(timeout_s=5.0))
    finally:
        listener.close()


def test_compute_starts_at_zero_grad(tmp_path, monkeypatch):
    """The compute record runs from zero_grad() to the push: time spent before zero_grad is not compute."""
    clock = {"t": 1000.0}
    fake_time = types.SimpleNamespace(monotonic=lambda: clock["t"])
    model = small_model()
    w_end, ps_end = inproc_pair(0)
    ps, t = start_ps(model, source=[ps_end])
    log = EventLog(tmp_path / "events-w0.jsonl", "w0", "t", origin_monotonic_s=0.0)
    opt = ROGOptimizer(model.parameters(), server=w_end, worker_id=0, lr=0.1, policy="BSP", compression="none",
                       options=WorkerOptions(events=log))
    monkeypatch.setattr("rog.optim.time", fake_time)
    x, y = data(1)[0]
    clock["t"] = 2000.0  # e.g. an evaluation happened here, after the previous step
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.record_eval(0.5, 1.5, duration_s=0.1)
    monkeypatch.undo()
    opt.close()
    log.close()
    t.join(20)
    _, recs = read_events(tmp_path / "events-w0.jsonl")
    compute = [r for r in recs if r["kind"] == "compute"]
    assert len(compute) == 1 and compute[0]["t_s"] == 2000.0
    ev = [r for r in recs if r["kind"] == "eval"]
    assert ev[0]["iteration"] == 1 and ev[0]["accuracy"] == 0.5 and ev[0]["loss"] == 1.5


@pytest.mark.parametrize("kwargs, chunk_bytes", [
    (dict(chunk_share=0.1), 18),  # ceil(0.1 * 173.125)
    (dict(), 6),  # the default, the original's 1000 of 33,307 rows: ceil(0.0300237 * 173.125) = ceil(5.198)
    (dict(chunk_share=0.1, chunk_bytes=40), 40),  # a byte size wins
    (dict(chunk_share=None), 32 * 1024),  # no share: the fixed 32 KB, the whole model in one chunk
])
def test_chunk_share_sets_the_chunk_size_from_this_models_payload(tmp_path, kwargs, chunk_bytes):
    """small_model()'s 33 rows in sign bits: 30 rows of 40 elements (5 B), a bias row of 30 (3.75 B), the
    (5, 30) weight as one row of 150 (18.75 B) and a bias row of 5 (0.625 B): 173.125 B.  A full push is
    cut greedily (in row order, a chunk closes before it would pass the size; a bigger row goes alone)
    into as many frames as the loop below counts."""
    sizes = [5.0] * 30 + [3.75, 18.75, 0.625]
    assert sum(sizes) == 173.125
    n_chunks, fill = 0, None
    for b in sizes:  # the greedy cut, written out
        if fill is None or fill + b > chunk_bytes:
            n_chunks, fill = n_chunks + 1, 0.0
        fill += b
    assert n_chunks == {18: 13, 6: 33, 40: 5, 32 * 1024: 1}[chunk_bytes]  # e.g. 18: 10 x three 5 B rows, 3 more
    model = small_model()
    w_end, ps_end = inproc_pair(0)
    ps, t = start_ps(model, codec=SignCodec(), source=[ps_end])
    log = EventLog(tmp_path / "events-w0.jsonl", "w0", "t")
    opt = ROGOptimizer(model.parameters(), server=w_end, worker_id=0, lr=0.1, policy="BSP", compression="sign",
                       options=WorkerOptions(events=log, **kwargs))
    assert opt.chunk_bytes == chunk_bytes
    x, y = data(1)[0]
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.close()
    log.close()
    t.join(20)
    assert not ps.errors
    _, recs = read_events(tmp_path / "events-w0.jsonl")
    pushes = [r for r in recs if r["kind"] == "push"]
    assert pushes and pushes[0]["frames_planned"] == n_chunks and pushes[0]["rows_delivered"] == len(sizes)


def test_validation():
    w_end, _ = inproc_pair(0)
    with pytest.raises(ValueError, match="needs float32 parameters"):
        ROGOptimizer(nn.Linear(3, 2).double().parameters(), server=w_end, worker_id=0, lr=0.1)
    m = small_model()
    with pytest.raises(ValueError, match=r"param_groups\[1\]: weight_decay must be"):
        ROGOptimizer([{"params": m[0].parameters()}, {"params": m[2].parameters(), "weight_decay": -1.0}],
                     server=w_end, worker_id=0, lr=0.1)
    with pytest.raises(TypeError, match="MultiStepLR"):
        ROGOptimizer(m.parameters(), server=w_end, worker_id=0, lr=0.1, milestones=(800,))
    with pytest.raises(ValueError, match=r"server must be \(host, port\)"):
        ROGOptimizer(m.parameters(), server=42, worker_id=0, lr=0.1, secret=secrets.token_bytes(32))
    with pytest.raises(ValueError, match="belongs to worker 0"):
        ROGOptimizer(m.parameters(), server=w_end, worker_id=3, lr=0.1)
    with pytest.raises(ValueError, match="lr must be"):
        ROGOptimizer(m.parameters(), server=w_end, worker_id=0, lr=-1.0)
    with pytest.raises(ValueError, match="unknown policy"):
        ROGOptimizer(m.parameters(), server=w_end, worker_id=0, lr=0.1, policy="DDP")
    assert np.all(np.isfinite([p.detach().numpy().sum() for p in m.parameters()]))


def test_experiment_settings_come_as_one_worker_options_object():
    """What only an experiment sets is one typed object: a setting passed as a keyword is refused with the fix
    named, and bad values are refused when the object is built, before any connection."""
    model = small_model()
    with pytest.raises(TypeError, match=r"rate_mbit belong\(s\) to WorkerOptions: pass options=WorkerOptions"):
        ROGOptimizer(model.parameters(), server=inproc_pair(0)[0], worker_id=0, lr=0.1, rate_mbit=5.0)
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['lr_decay'\\]"):
        ROGOptimizer(model.parameters(), server=inproc_pair(0)[0], worker_id=0, lr=0.1, lr_decay=0.5)
    with pytest.raises(TypeError, match="options must be a rog.optim.WorkerOptions"):
        ROGOptimizer(model.parameters(), server=inproc_pair(0)[0], worker_id=0, lr=0.1, options={"rate_mbit": 5.0})
    for bad, field in (({"flat_backend": "cupy"}, "flat_backend"), ({"timeout_s": 0}, "timeout_s"),
                       ({"compute_target_s": -1.0}, "compute_target_s"), ({"chunk_bytes": 0}, "chunk_bytes")):
        with pytest.raises(ValueError, match=f"WorkerOptions.{field}"):
            WorkerOptions(**bad)
    assert WorkerOptions().chunk_share == ARTIFACT_CHUNK_SHARE and WorkerOptions().reconnect_timeout_s == 600.0
