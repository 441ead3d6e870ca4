"""The GPU worker's warm-up leaves no trace: parameters, BatchNorm statistics, gradients, the training
flag and the random number generator are as before (checked on CPU tensors against copies taken first)."""

from __future__ import annotations

import torch

from rog.device.warmup import warm_up


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                               torch.nn.Dropout(0.5), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))


def test_warm_up_changes_nothing_the_run_would_see():
    model = _model().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = (torch.randn(6, 3, 8, 8), torch.randint(0, 5, (6,)))
    torch.manual_seed(123)
    expected_next = torch.rand(3)  # what the generator gives next, without the warm-up
    torch.manual_seed(123)
    took_s = warm_up(model, batch, "cpu")
    assert torch.equal(torch.rand(3), expected_next)  # dropout's draws inside were undone
    assert took_s > 0
    assert not model.training  # the flag is restored
    after = model.state_dict()
    assert before.keys() == after.keys()
    for k in before:  # BatchNorm's running statistics and num_batches_tracked too
        assert torch.equal(before[k], after[k]), k
    assert all(p.grad is None for p in model.parameters())


def test_warm_up_keeps_gradients_already_there():
    model = _model()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    warm_up(model, (torch.randn(2, 3, 8, 8), torch.randint(0, 5, (2,))), "cpu")
    assert model.training
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in model.parameters())


def test_the_warm_up_really_runs_backward():
    # the same forward + backward outside warm_up would change BatchNorm's statistics: the restore is what hides it
    model = _model()
    stats = model[1].running_mean.clone()
    torch.nn.functional.cross_entropy(model(torch.randn(4, 3, 8, 8)), torch.randint(0, 5, (4,))).backward()
    assert not torch.equal(stats, model[1].running_mean)
