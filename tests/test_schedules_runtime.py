"""Layer-segment schedules in real training: layer grouping, forward gating / backward streaming over
the unchanged PS, and weights equal to the sequential engine's (scheduling changes time, not arithmetic)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch import nn

from rog.codecs.compression import RawCodec
from rog.optim import ROGOptimizer, WorkerOptions
from rog.policies import make_policy
from rog.rows import RowPartition
from rog.runtime import EventLog, ParameterServer, read_events
from rog.schedules.grouping import group_layers
from rog.schedules.trainer import ScheduledTrainer
from conftest import run_ps_team


def conv_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 5))


def batches(k, n, seed=3):
    g = torch.Generator().manual_seed(seed + 17 * k)
    return [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(n)]


def test_grouping_fuses_bn_and_folds_parameter_free_modules():
    layers = group_layers(conv_model(), torch.zeros(1, 3, 8, 8))
    assert [lay.modules for lay in layers] == [["0", "1"], ["2", "3", "4"], ["5", "6", "7", "8"]]
    assert [lay.params for lay in layers] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [lay.gate for lay in layers] == ["0", "3", "8"]


def run(schedule, n_iter=4, n_workers=2, policy="BSP", tmp_path=None, trainers=None, make_trainer=None,
        model=conv_model):
    """Train ``n_workers`` in threads over in-process links; returns (weights after n_iter, after the flush)."""
    models = [model() for _ in range(n_workers)]
    part = RowPartition.from_module(models[0])
    ps = ParameterServer(part, n_workers, make_policy(policy, 1 if policy == "SSP" else None), RawCodec(),
                         join_timeout_s=20.0, wait_timeout_s=20.0, chunk_bytes=256)
    out = {}
    # The PS encodes a pull from its pending rows as it sends, so a worker that pushes iteration n+1 while
    # another's pull n is still in flight leaks fresher rows into it (timing, for any schedule).  The
    # barrier removes that race: nobody pushes n+1 before every pull n is applied.
    barrier = threading.Barrier(n_workers)

    def worker(k, link):
        events = EventLog(tmp_path / f"{schedule}-w{k}.jsonl", f"w{k}", "t", 0.0) if tmp_path else None
        opt = ROGOptimizer(models[k].parameters(), server=link, worker_id=k, lr=0.05, policy=policy,
                           threshold=1 if policy == "SSP" else None, compression="none",
                           options=WorkerOptions(chunk_bytes=256, events=events))
        tr = None
        if schedule != "sequential":
            tr = (make_trainer or ScheduledTrainer)(models[k], opt, schedule, torch.zeros(1, 3, 8, 8),
                                                    epoch_iterations=2)
            if trainers is not None:
                trainers[k] = tr
            start_push = tr.exchange.start_push

            def synced_push(*args):  # the forward pass above overlapped this worker's pull
                barrier.wait(20)
                start_push(*args)

            tr.exchange.start_push = synced_push
        for x, y in batches(k, n_iter):
            if tr is None:
                opt.zero_grad()
                nn.functional.cross_entropy(models[k](x), y).backward()
                barrier.wait(20)
                opt.step()
            else:
                tr.iteration(x, y, nn.functional.cross_entropy)
        if tr is not None:
            tr.close()
        mid = opt.flat.copy()
        opt.close()
        if events:
            events.close()
        out[k] = (mid, opt.flat.copy())

    run_ps_team(ps, worker, n_workers, ps_join_s=20.0)
    return out


# SSP with one worker: with several, what an SSP pull holds depends on who pushed first (timing)
@pytest.mark.parametrize("policy,n_workers", [("BSP", 2), ("SSP", 1)])
def test_weights_equal_sequential(policy, n_workers, tmp_path):
    ref = run("sequential", policy=policy, n_workers=n_workers)
    for schedule in ("lbl", "ibatch", "dynacomm", "dynacomm-iter"):
        got = run(schedule, policy=policy, n_workers=n_workers, tmp_path=tmp_path)
        for k in ref:
            if policy == "BSP":  # under BSP every worker's model after n pulls is fixed
                np.testing.assert_allclose(got[k][0], ref[k][0], rtol=1e-6, atol=1e-7, err_msg=f"{schedule} w{k}")
            np.testing.assert_allclose(got[k][1], ref[k][1], rtol=1e-6, atol=1e-7, err_msg=f"{schedule} w{k} flushed")
        assert not np.allclose(got[0][1], conv_model_flat())  # it trained


def conv_model_flat():
    return np.concatenate([p.detach().numpy().ravel() for p in conv_model().parameters()])


def test_overlap_records(tmp_path):
    run("dynacomm", n_iter=3, tmp_path=tmp_path)
    recs = [r for r in read_events(tmp_path / "dynacomm-w0.jsonl")[1] if r["kind"] == "overlap"]
    assert [r["iteration"] for r in recs] == [1, 2, 3]
    for r in recs:
        total = r["compute_only_s"] + r["overlap_s"] + r["comm_only_s"] + r["stall_s"]
        assert total <= r["duration_s"] * 1.0001 + 1e-6  # the parts never exceed the window
        assert r["n_layers"] == 3 and 1 <= r["bwd_segments"] <= 3
    assert recs[0]["predicted_fwd_s"] is None and recs[1]["predicted_fwd_s"] is not None


def test_grouping_of_a_resnet_covers_every_parameter_once():
    from rog.models.convnets import resnet_mini

    model = resnet_mini()
    layers = group_layers(model, torch.zeros(1, 3, 32, 32))
    # stem + 6 bottlenecks x 3 convolutions + 3 projection shortcuts + the classifier
    assert len(layers) == 1 + 6 * 3 + 3 + 1
    owned = sorted(i for lay in layers for i in lay.params)
    assert owned == list(range(len(list(model.parameters()))))
    names = [n for n, _ in model.named_parameters()]
    for lay in layers:  # a convolution and its BatchNorm: weight + BN weight and bias
        kinds = [names[i].rsplit(".", 1)[0] for i in lay.params]
        assert len(set(kinds)) <= 2, kinds


def test_cold_iteration_unprofiled_then_per_layer_profiling_then_plans(tmp_path):
    trainers = {}
    run("dynacomm", n_iter=5, tmp_path=tmp_path, trainers=trainers)
    recs = [r for r in read_events(tmp_path / "dynacomm-w0.jsonl")[1] if r["kind"] == "overlap"]
    # iteration 1 cold: one push segment; 2 and 3 profile with one segment per layer (3 layers), and the
    # pull after the cold iteration is per layer too; first plan after 3, then epochs of 2 (n = 4)
    assert [r["bwd_segments"] for r in recs[:3]] == [1, 3, 3]
    assert [r["fwd_segments"] for r in recs[:3]] == [0, 3, 3]
    assert [r["replanned"] for r in recs] == [False, False, True, True, False]
    tr = trainers[0]
    # a per-epoch plan's link estimate comes from its own epoch: the points are cleared at each plan (3 and
    # 4), so after iteration 5 they hold its push and the pull received during it
    assert len(tr.link.points["push"]) == recs[4]["bwd_segments"]
    # a pull's points span the previous segment completion (or the first frame) to the next: one per
    # segment, as every layer (2.6, 2.4 and 1.0 kB) spans several 256 B frames, so the first frame
    # completes none and no frame completes two
    pulls = [(n, pts) for n, d, pts in tr.segment_log if d == "pull"]
    assert [n for n, _ in pulls] == [2, 3, 4, 5]
    assert [len(pts) for _, pts in pulls] == [r["fwd_segments"] for r in recs[1:]]
    assert list(tr.link.points["pull"]) == [p for n, pts in pulls if n == 5 for p in pts]
    assert len(tr.link.pull_starts) == 1 and tr.link.pull_starts[0] >= 0
    # the plan at 4 was made from iteration 4's transfers alone (the same regression, recomputed)
    from rog.schedules.estimate import LinkEstimate

    ref = LinkEstimate()
    for n, d, pts in tr.segment_log:
        if n == 4:
            for nbytes, sec in pts:
                ref.add(d, nbytes, sec)
    prof = tr.plan_log[-1][1]
    b = tr.exchange.layer_bytes
    np.testing.assert_allclose(prof.gt, b / ref.rate("push", False), rtol=1e-9)
    np.testing.assert_allclose(prof.pt, b / ref.rate("pull", False), rtol=1e-9)
    assert prof.dt_s == pytest.approx(ref.overhead_s())
