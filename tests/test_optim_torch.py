"""ROGOptimizer as a torch.optim citizen, mirroring torch's own optimizer tests: with one worker and an identity
exchange (BSP, compression off: the pull returns exactly the update) it must follow ``torch.optim.SGD``
(Nesterov, coupled weight decay: the semantics DEFSGDM shares) or ``torch.optim.AdamW`` (as the local update)
step for step: param groups, schedulers, state_dict round trips, frozen parameters, ``zero_grad(set_to_none)``.
The references are torch's own optimizers; the artifact's step halving is checked against the old rule."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from rog.experiment.worker_loop import paper_lr_schedule, step_schedule
from rog.local_update import PAPER_MILESTONES, StepHalving
from rog.codecs.compression import RawCodec
from rog.optim import ROGOptimizer, WorkerOptions, row_layout
from rog.policies import make_policy
from rog.runtime import ParameterServer
from rog.transport import inproc_pair
from tests.test_optim import data, small_model, start_ps

TOL = dict(rtol=1e-5, atol=1e-6)


class Identity:
    """One worker on an in-process BSP parameter server without compression: the pull is the update."""

    def __init__(self, model, params=None, backend="numpy", **kw):
        w_end, ps_end = inproc_pair(0)
        self.ps = ParameterServer(row_layout(params if params is not None else model), 1, make_policy("BSP"), RawCodec(),
                                  join_timeout_s=120.0, wait_timeout_s=120.0)  # a loaded machine
        self.thread = self.ps.start([ps_end])  # serves the optimizer's rows: its trainable parameters, groups in order
        kw.setdefault("lr", 0.05)
        self.opt = ROGOptimizer(params if params is not None else model.parameters(), server=w_end, worker_id=0,
                                policy="BSP", compression="none", options=WorkerOptions(flat_backend=backend), **kw)

    def close(self):
        self.opt.close()
        self.thread.join(20)
        assert not self.ps.errors


def two_groups(model, wd_bias=0.0):
    """The usual setup: weights decayed at one rate, biases at another (here: none), different lrs."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": weights, "lr": 0.05, "weight_decay": 5e-3},
            {"params": biases, "lr": 0.2, "weight_decay": wd_bias}]


def train_both(model, ref, opt, sgd, steps, after_step=None):
    loss_fn = nn.CrossEntropyLoss()
    for x, y in data(steps):
        for m, o in ((model, opt), (ref, sgd)):
            o.zero_grad()
            loss_fn(m(x), y).backward()
            o.step()
        if after_step is not None:
            after_step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, **TOL)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_two_groups_with_different_lr_and_weight_decay_step_like_sgd(backend):
    model = small_model()
    ref = copy.deepcopy(model)
    run = Identity(model, two_groups(model), backend, momentum=0.9, nesterov=True)
    sgd = torch.optim.SGD(two_groups(ref), lr=0.05, momentum=0.9, nesterov=True)
    assert len(run.opt.param_groups) == 2 and run.opt.param_groups[1]["lr"] == 0.2
    train_both(model, ref, run.opt, sgd, 6)
    run.close()


@pytest.mark.parametrize("make", [
    lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3),
    lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5], gamma=0.5),
    lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=[0.1, 0.4], total_steps=8),  # cycles momentum too
], ids=["StepLR", "MultiStepLR", "OneCycleLR"])
def test_schedulers_give_the_same_trajectory_as_on_sgd(make):
    model = small_model()
    ref = copy.deepcopy(model)
    run = Identity(model, two_groups(model), momentum=0.9, nesterov=True)
    sgd = torch.optim.SGD(two_groups(ref), lr=0.05, momentum=0.9, nesterov=True)
    s_rog, s_sgd = make(run.opt), make(sgd)
    lrs = []

    def after():
        lrs.append(run.opt.engine.local.lr_at(run.opt.iteration, 1))  # the rate the local update just used
        assert lrs[-1] == sgd.param_groups[1]["lr"]
        s_rog.step()
        s_sgd.step()

    train_both(model, ref, run.opt, sgd, 7, after)
    assert len(set(lrs)) > 1  # the schedule really moved the rate
    run.close()


def test_paper_schedule_is_the_old_step_halving_iteration_by_iteration():
    """The experiment's MultiStepLR(milestones=[800, 1600, 2400, 3200], gamma=0.5) against the rule the library
    applied before (StepHalving: iteration n at lr0 / 2**k, k = milestones <= n), iterations 1..4000."""
    assert PAPER_MILESTONES == (800, 1600, 2400, 3200)
    lr0 = 0.01
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr0)
    sched = paper_lr_schedule(opt)
    old = StepHalving(lr0, (800, 1600, 2400, 3200))
    for n in range(1, 4001):
        assert opt.param_groups[0]["lr"] == old(n), n  # exactly: halving is exact in binary floating point
        opt.step()
        step_schedule(sched)


def test_paper_schedule_reaches_the_local_update_of_a_running_worker():
    model = small_model()
    run = Identity(model, lr=0.08)
    sched = paper_lr_schedule(run.opt)
    sched.last_epoch = 799  # as after 799 iterations
    step_schedule(sched)
    x, y = data(1)[0]
    run.opt.zero_grad()
    nn.CrossEntropyLoss()(model(x), y).backward()
    run.opt.step()
    assert run.opt.engine.local.lr_at(800) == StepHalving(0.08, PAPER_MILESTONES)(800) == 0.04
    run.close()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_state_dict_round_trip_continues_exactly(backend):
    """N steps, state_dict, a new optimizer (new server) loads it: the next M steps equal the uninterrupted run's."""
    torch.manual_seed(3)
    model = small_model()
    a = Identity(model, two_groups(model), backend, momentum=0.9)
    sched = a.opt.attach(torch.optim.lr_scheduler.StepLR(a.opt, step_size=3, gamma=0.5))
    loss_fn = nn.CrossEntropyLoss()
    batches = data(9)
    for x, y in batches[:5]:
        a.opt.zero_grad()
        loss_fn(model(x), y).backward()
        a.opt.step()
        sched.step()
    sd = a.opt.state_dict()
    assert set(sd) == {"state", "param_groups", "rog"} and sd["rog"]["iteration"] == 5
    assert set(sd["state"][0]) == {"momentum_buffer", "error_feedback", "step"}
    assert sd["state"][0]["momentum_buffer"].shape == model[0].weight.shape and sd["state"][0]["momentum_buffer"].abs().sum() > 0
    assert sd["param_groups"][1]["params"] == list(range(2, 4)) and sd["param_groups"][1]["lr"] == 0.2 * 0.5
    twin = copy.deepcopy(model)
    b = Identity(twin, two_groups(twin), backend, momentum=0.9)
    b_sched = b.opt.attach(torch.optim.lr_scheduler.StepLR(b.opt, step_size=3, gamma=0.5))
    b.opt.load_state_dict(sd)
    assert b.opt.iteration == 5 and b_sched.last_epoch == sched.last_epoch
    assert b.opt.param_groups[1]["lr"] == a.opt.param_groups[1]["lr"]
    for x, y in batches[5:]:
        for m, r, s in ((model, a, sched), (twin, b, b_sched)):
            r.opt.zero_grad()
            loss_fn(m(x), y).backward()
            r.opt.step()
            s.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            assert torch.equal(p, q)
    sd_a, sd_b = a.opt.state_dict(), b.opt.state_dict()
    for i in sd_a["state"]:
        assert torch.equal(sd_a["state"][i]["momentum_buffer"], sd_b["state"][i]["momentum_buffer"])
    assert sd_b["rog"]["iteration"] == 9
    a.close()
    b.close()


def test_load_state_dict_refuses_a_state_older_than_the_servers_count():
    """After a rejoin the PS's count is the truth: a state saved before pushes the PS has since committed would
    apply its error feedback twice, so it is refused with the fix named."""
    model = small_model()
    run = Identity(model)
    loss_fn = nn.CrossEntropyLoss()
    for n, (x, y) in enumerate(data(3)):
        run.opt.zero_grad()
        loss_fn(model(x), y).backward()
        run.opt.step()
        if n == 1:
            old = run.opt.state_dict()
    with pytest.raises(ValueError, match="iteration 2 after 2 pushes.*iteration 3 after 3.*apply them twice"):
        run.opt.load_state_dict(old)
    run.opt.load_state_dict(run.opt.state_dict())  # the current one loads
    run.close()


def test_load_state_dict_refuses_a_different_shape():
    model = small_model()
    a = Identity(model)
    sd = a.opt.state_dict()
    a.close()
    twin = copy.deepcopy(model)
    b = Identity(twin, two_groups(twin))
    with pytest.raises(ValueError, match="1 parameter group"):
        b.opt.load_state_dict(sd)
    b.close()


def test_frozen_parameters_are_not_rows_and_stay_untouched():
    model = small_model()
    model[0].requires_grad_(False)  # a frozen feature extractor
    frozen = [p.detach().clone() for p in model[0].parameters()]
    ref = copy.deepcopy(model)
    run = Identity(model, weight_decay=5e-4)
    sgd = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    assert run.opt.frozen == [0, 1] and run.opt.partition.n_elements == sum(p.numel() for p in model[2].parameters())
    train_both(model, ref, run.opt, sgd, 4)
    for p, f in zip(model[0].parameters(), frozen):
        assert torch.equal(p, f) and p.grad is None
    assert set(run.opt.state_dict()["state"]) == {2, 3}
    run.close()


def test_a_server_expecting_the_frozen_parameters_names_them():
    model = small_model()
    w_end, ps_end = inproc_pair(0)
    ps, t = start_ps(model, source=[ps_end])  # expects every parameter
    model[0].requires_grad_(False)
    with pytest.raises(RuntimeError, match=r"model layout differs.*2 frozen parameter\(s\) with requires_grad=False: "
                                           r"params\[0\] \(30, 40\), params\[1\] \(30,\)"):
        ROGOptimizer(model.parameters(), server=w_end, worker_id=0, lr=0.1, policy="BSP", compression="none")
    ps.stop()  # the refused worker is gone: no need to wait out the join time-out
    t.join(20)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_zero_grad_set_to_none_and_a_parameter_without_gradient_is_skipped_like_sgd(backend):
    model = small_model()
    ref = copy.deepcopy(model)
    run = Identity(model, backend=backend, weight_decay=1e-2)
    sgd = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    for n, (x, y) in enumerate(data(6)):
        for m, o in ((model, run.opt), (ref, sgd)):
            o.zero_grad(set_to_none=True)
            assert all(p.grad is None for p in m.parameters())
            h = m[1](m[0](x))
            # odd steps leave the last bias out of the graph: no gradient, so SGD skips it (no decay, no momentum)
            out = h @ m[2].weight.t() if n % 2 else m[2](h)
            loss_fn(out, y).backward()
            if n % 2:
                assert m[2].bias.grad is None
            o.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, **TOL)
    run.close()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_adamw_as_the_local_update_follows_torch_adamw(backend):
    """local_update=torch.optim.AdamW: its step is the update u; one worker, identity exchange: AdamW's trajectory,
    two groups and a scheduler included; its moments travel in the state_dict and a restored twin continues equal."""
    model = small_model()
    ref = copy.deepcopy(model)
    groups = two_groups(model, wd_bias=0.0)
    run = Identity(model, groups, backend, local_update=torch.optim.AdamW, local_options=dict(betas=(0.8, 0.99)))
    adamw = torch.optim.AdamW(two_groups(ref, wd_bias=0.0), lr=0.05, betas=(0.8, 0.99))
    s_rog = run.opt.attach(torch.optim.lr_scheduler.StepLR(run.opt, step_size=2, gamma=0.5))
    s_ref = torch.optim.lr_scheduler.StepLR(adamw, step_size=2, gamma=0.5)

    def after():
        s_rog.step()
        s_ref.step()

    train_both(model, ref, run.opt, adamw, 5, after)
    sd = run.opt.state_dict()
    assert sd["rog"]["local_update"] == "TorchOptimizerUpdate"
    torch.testing.assert_close(sd["state"][0]["inner_exp_avg"], adamw.state[ref[0].weight]["exp_avg"], **TOL)
    twin = copy.deepcopy(model)
    b = Identity(twin, two_groups(twin), backend, local_update=torch.optim.AdamW, local_options=dict(betas=(0.8, 0.99)))
    b_s = b.opt.attach(torch.optim.lr_scheduler.StepLR(b.opt, step_size=2, gamma=0.5))
    b.opt.load_state_dict(sd)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in data(3, seed=5):
        for m, r, s in ((model, run, s_rog), (twin, b, b_s)):
            r.opt.zero_grad()
            loss_fn(m(x), y).backward()
            r.opt.step()
            s.step()
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
    run.close()
    b.close()


def test_local_update_must_be_defsgdm_or_a_torch_optimizer_class():
    with pytest.raises(TypeError, match="local_update must be 'DEFSGDM' or a torch.optim.Optimizer class"):
        Identity(small_model(), local_update="Adam")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch sees none")
def test_two_groups_on_cuda_step_like_sgd():
    """The CUDA path (the device codec, the update on the kernels when cupy is there) applies each group's rule."""
    model = small_model().cuda()
    ref = copy.deepcopy(model)
    run = Identity(model, two_groups(model), "auto", momentum=0.9, nesterov=True)
    sgd = torch.optim.SGD(two_groups(ref), lr=0.05, momentum=0.9, nesterov=True)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in data(5):
        x, y = x.cuda(), y.cuda()
        for m, o in ((model, run.opt), (ref, sgd)):
            o.zero_grad()
            loss_fn(m(x), y).backward()
            o.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p, q, **TOL)
    run.close()


@pytest.mark.slow
def test_adamw_local_update_learns_on_the_quick_workload_with_two_workers():
    """examples/adapt_quick.py --local-update AdamW: two workers (ROG-4, 1-bit) adapting the quick model to noisy
    digits; both end above their starting test accuracy by at least 5 points (seen: 0.581 -> 0.719, 60 iterations)."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "examples/adapt_quick.py", "--local-update", "AdamW", "--iterations", "60"],
                         cwd=root, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    got = [tuple(map(float, m)) for m in re.findall(r"test accuracy ([\d.]+) -> ([\d.]+) after 60 iterations", out.stdout)]
    assert len(got) == 2 and all(after >= before + 0.05 for before, after in got), out.stdout
