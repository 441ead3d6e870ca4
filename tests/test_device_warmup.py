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


def test_the_warm_up_really_runs_forward_and_backward_in_training_mode():
    """warm_up computes the training loss's gradients (seen by hooks on every parameter as autograd produces
    them) equal to those of a training-mode forward + backward of a copy on the same batch and random state
    (the same dropout mask), and BatchNorm ran in training mode; then it restores everything."""
    import copy

    model = _model().eval()
    ref = copy.deepcopy(model).train()
    batch = (torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,)))
    seen_grads, bn_training = {}, []
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name: seen_grads.__setitem__(name, g.detach().clone()))
    model[1].register_forward_hook(lambda mod, inp, out: bn_training.append(mod.training))
    torch.manual_seed(7)
    warm_up(model, batch, "cpu")
    torch.manual_seed(7)
    torch.nn.functional.cross_entropy(ref(batch[0]), batch[1]).backward()
    assert bn_training == [True]  # one forward, in training mode
    assert sorted(seen_grads) == sorted(n for n, _ in ref.named_parameters())
    for name, p in ref.named_parameters():
        assert torch.allclose(seen_grads[name], p.grad, atol=1e-6), name
    assert any(float(g.abs().sum()) > 0 for g in seen_grads.values())
    assert not torch.equal(ref[1].running_mean, model[1].running_mean)  # the copy's statistics moved, the model's not
    assert all(p.grad is None for p in model.parameters()) and not model.training
