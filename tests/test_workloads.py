"""Tests for rog.workloads: DeepTest-style noise, non-IID splits, the quick (download-free) workload."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.ndimage import gaussian_filter

import rog.workloads.quick as quick
from rog.workloads.noise import (
    apply_noise,
    blur,
    brightness,
    contrast,
    fog,
    haze_field,
    parse_noise,
    sample_strengths,
)
from rog.workloads.split import dirichlet_split, iid_split, label_sorted_split, partition
from rog.workloads.quick import QuickWorkload, digits_arrays, load_digit_images, stratified_parts

ADAPT_LR = 1e-3  # the recommended single-process adaptation learning rate (SGD, momentum 0.9)


def _row(values) -> np.ndarray:
    """A (1, 1, 1, W) batch holding one row of pixels."""
    return np.asarray(values, dtype=np.float32).reshape(1, 1, 1, -1)


# ----------------------------------------------------------------------------------------- noise
def test_brightness_adds_and_clips():
    out = brightness(_row([0.2, 0.9, 0.0]), 0.3)
    np.testing.assert_allclose(out.ravel(), [0.5, 1.0, 0.3], atol=1e-7)
    out = brightness(_row([0.2, 0.9, 0.0]), -0.3)
    np.testing.assert_allclose(out.ravel(), [0.0, 0.6, 0.0], atol=1e-7)


def test_brightness_per_image_delta():
    x = np.full((2, 1, 1, 2), 0.5, dtype=np.float32)
    out = brightness(x, np.array([0.1, -0.2]))
    np.testing.assert_allclose(out[:, 0, 0, 0], [0.6, 0.3], atol=1e-7)
    with pytest.raises(ValueError, match="delta"):
        brightness(x, np.array([0.1, 0.2, 0.3]))


def test_contrast_scales_around_mean_by_hand():
    x = _row([0.0, 0.2, 0.4, 1.0])  # mean 0.4
    np.testing.assert_allclose(contrast(x, 0.5).ravel(), [0.2, 0.3, 0.4, 0.7], atol=1e-6)
    np.testing.assert_allclose(contrast(x, 2.0).ravel(), [0.0, 0.0, 0.4, 1.0], atol=1e-6)  # clipped
    np.testing.assert_allclose(contrast(x, 1.0), x, atol=1e-7)


def test_contrast_keeps_each_image_mean():
    x = np.random.default_rng(0).random((5, 3, 4, 4)).astype(np.float32)
    out = contrast(x, np.linspace(0.0, 1.0, 5))
    np.testing.assert_allclose(out.mean(axis=(1, 2, 3)), x.mean(axis=(1, 2, 3)), atol=1e-6)
    assert np.ptp(out[0]) == pytest.approx(0.0, abs=1e-6)  # factor 0: flat image
    with pytest.raises(ValueError, match="factor"):
        contrast(x, -1.0)


def test_blur_of_constant_is_constant_and_sigma0_identity():
    x = np.full((2, 3, 6, 5), 0.37, dtype=np.float32)
    np.testing.assert_allclose(blur(x, 1.5), x, atol=1e-6)
    y = np.random.default_rng(1).random((2, 3, 6, 5)).astype(np.float32)
    np.testing.assert_array_equal(blur(y, 0.0), y)


def test_blur_impulse_gives_gaussian_kernel_by_hand():
    x = np.zeros((1, 1, 1, 9), dtype=np.float32)
    x[0, 0, 0, 4] = 1.0
    taps = [math.exp(-0.5 * t * t) for t in range(-3, 4)]
    expected = [0.0] + [t / sum(taps) for t in taps] + [0.0]
    np.testing.assert_allclose(blur(x, 1.0).ravel(), expected, atol=1e-6)


def test_blur_matches_scipy_reference():
    x = np.random.default_rng(2).random((3, 2, 7, 8))
    out = blur(x, np.array([1.0, 0.0, 1.0]))
    for i, s in enumerate([1.0, 0.0, 1.0]):
        ref = gaussian_filter(x[i], sigma=(0, s, s), mode="nearest", truncate=3.0) if s else x[i]
        np.testing.assert_allclose(out[i], ref, atol=1e-10)


def test_fog_identity_full_and_determinism():
    x = np.random.default_rng(3).random((4, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(fog(x, 0.0, seed=1), x)
    np.testing.assert_allclose(fog(x, 1.0, seed=1, colour=0.8, min_density=1.0), 0.8, atol=1e-6)
    a, b, c = fog(x, 0.5, seed=7), fog(x, 0.5, seed=7), fog(x, 0.5, seed=8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # fog pulls every pixel toward the fog colour, never past it
    assert np.all(np.abs(a - 0.85) <= np.abs(x - 0.85) + 1e-6)


def test_haze_field_spans_unit_range_and_is_smooth():
    f = haze_field(3, 16, 16, np.random.default_rng(0))
    assert f.shape == (3, 1, 16, 16)
    np.testing.assert_allclose(f.min(axis=(1, 2, 3)), 0.0, atol=1e-12)
    np.testing.assert_allclose(f.max(axis=(1, 2, 3)), 1.0, atol=1e-12)
    assert np.abs(np.diff(f, axis=3)).max() < 0.25  # bilinear from a 3x3 grid over 16 pixels


def test_apply_noise_deterministic_and_in_range():
    x = np.random.default_rng(4).random((6, 3, 16, 16)).astype(np.float32)
    a = apply_noise(x, "fog+brightness+contrast+blur", seed=5)
    np.testing.assert_array_equal(a, apply_noise(x, "fog+brightness+contrast+blur", seed=5))
    assert not np.array_equal(a, apply_noise(x, "fog+brightness+contrast+blur", seed=6))
    assert a.shape == x.shape and a.dtype == np.float32
    assert a.min() >= 0.0 and a.max() <= 1.0
    np.testing.assert_array_equal(apply_noise(x, "none", seed=5), x)


def test_apply_noise_equals_composition_of_parts():
    x = np.random.default_rng(5).random((4, 3, 8, 8)).astype(np.float32)
    st = sample_strengths(["brightness", "contrast"], 4, seed=9)
    expected = contrast(brightness(x, st["brightness"]), st["contrast"])
    np.testing.assert_allclose(apply_noise(x, "brightness+contrast", seed=9), expected, atol=1e-7)
    # each corruption's draws do not depend on which others are present
    np.testing.assert_array_equal(sample_strengths(["contrast"], 4, seed=9)["contrast"], st["contrast"])
    assert np.all(np.abs(st["brightness"]) >= 0.05) and np.all(np.abs(st["brightness"]) <= 0.25)


def test_apply_noise_torch_roundtrip():
    x = torch.rand(2, 3, 8, 8)
    out = apply_noise(x, "fog+blur", seed=1)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_array_equal(out.numpy(), apply_noise(x.numpy(), "fog+blur", seed=1))


def test_noise_bad_input():
    with pytest.raises(ValueError, match="unknown corruption"):
        parse_noise("fog+rain")
    with pytest.raises(ValueError, match="once"):
        parse_noise("fog+fog")
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        brightness(np.zeros((3, 3)), 0.1)
    with pytest.raises(ValueError, match="strength"):
        fog(np.zeros((1, 1, 2, 2)), 1.5)


# ----------------------------------------------------------------------------------------- split
def _check_partition(parts, n):
    allidx = np.concatenate(parts)
    assert allidx.size == n and np.array_equal(np.sort(allidx), np.arange(n))  # disjoint and covering


def test_label_sorted_by_hand():
    y = np.array([2, 0, 1, 2, 3, 0, 1, 3])
    parts = label_sorted_split(y, 2)
    assert [p.tolist() for p in parts] == [[1, 2, 5, 6], [0, 3, 4, 7]]
    parts = label_sorted_split(np.repeat(np.arange(10), 3), 4)
    assert [sorted(set((p // 3).tolist())) for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    _check_partition(parts, 30)


def test_label_sorted_artifact_100_classes():
    y = np.random.default_rng(0).integers(0, 100, 5000)
    y[:100] = np.arange(100)  # every class present
    parts = label_sorted_split(y, 4)
    _check_partition(parts, y.size)
    for w, p in enumerate(parts):
        assert set(np.unique(y[p]).tolist()) == set(range(25 * w, 25 * w + 25))


def test_dirichlet_disjoint_covering_deterministic():
    y = np.repeat(np.arange(10), 50)
    a = dirichlet_split(y, 4, alpha=0.5, seed=3)
    _check_partition(a, y.size)
    assert all(np.array_equal(p, q) for p, q in zip(a, dirichlet_split(y, 4, alpha=0.5, seed=3)))


def test_dirichlet_alpha_controls_skew():
    y = np.repeat(np.arange(10), 200)
    def top_share(parts):
        counts = np.array([[np.sum(y[p] == c) for c in range(10)] for p in parts])  # workers x classes
        return (counts.max(axis=0) / counts.sum(axis=0)).mean()
    assert top_share(dirichlet_split(y, 4, alpha=1000.0, seed=0)) < 0.35  # near IID: about 1/4 each
    assert top_share(dirichlet_split(y, 4, alpha=0.05, seed=0)) > 0.8  # most of a class on one worker


def test_iid_and_partition_dispatch():
    y = np.arange(11) % 3
    parts = iid_split(y, 3, seed=0)
    _check_partition(parts, 11)
    assert sorted(p.size for p in parts) == [3, 4, 4]
    assert all(np.array_equal(p, q) for p, q in zip(partition(y, 3, "label_sorted"), label_sorted_split(y, 3)))


def test_split_bad_input():
    y = np.repeat(np.arange(3), 4)
    with pytest.raises(ValueError, match="n_workers"):
        label_sorted_split(y, 4)
    with pytest.raises(ValueError, match="n_workers"):
        label_sorted_split(y, 0)
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_split(y, 2, alpha=0.0)
    with pytest.raises(ValueError, match="split"):
        partition(y, 2, "pachinko")
    with pytest.raises(ValueError, match="labels"):
        label_sorted_split(np.array([0.5, 1.0]), 1)


# ----------------------------------------------------------------------------------------- quick
def test_digit_images_shape_range_determinism():
    x, y = load_digit_images(0)
    assert x.shape == (1797, 3, 16, 16) and x.dtype == np.float32 and y.shape == (1797,)
    assert x.min() >= 0.0 and x.max() <= 1.0
    assert sorted(np.unique(y).tolist()) == list(range(10))
    assert np.abs(x[:, 0] - x[:, 1]).mean() > 0.05  # channels differ (per-image colours)
    x2, _ = load_digit_images(0)
    np.testing.assert_array_equal(x, x2)
    assert not np.array_equal(x, load_digit_images(1)[0])


def test_digits_read_from_the_package_file_equal_scikit_learns_loader_without_importing_it():
    code = ("import sys; from rog.workloads.quick import digits_arrays; images, target = digits_arrays(); "
            "print(images.shape, int(target.sum()), 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-1] == "False"  # the reader located the file without importing scikit-learn
    from sklearn.datasets import load_digits

    ref = load_digits()
    images, target = digits_arrays()
    np.testing.assert_array_equal(images, ref.images)
    np.testing.assert_array_equal(target, ref.target)


def test_stratified_parts_disjoint_and_proportional():
    y = np.repeat(np.arange(10), 100)
    parts = stratified_parts(y, (0.35, 0.45, 0.20), seed=0)
    _check_partition(parts, y.size)
    for p, f in zip(parts, (0.35, 0.45, 0.20)):
        assert np.all(np.bincount(y[p], minlength=10) == round(100 * f))
    with pytest.raises(ValueError, match="fractions"):
        stratified_parts(y, (0.5, 0.6))


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Train with one torch thread: on a shared 2-core machine two threads can be 5x slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def workload(quick_cache):
    """Seed-0 workload on the suite's shared weight cache (conftest ``quick_cache``: the same cache key, so the
    same file every real run of the suite loads).  Pre-training it again into a cache of its own cost 1.5-3.5 min
    per tier on a loaded machine and tested nothing more: training into an empty cache and its determinism are
    ``test_pretraining_deterministic_and_leaves_global_rng``'s, the cache's reuse ``test_pretrained_state_is_cached``'s."""
    wl = QuickWorkload(seed=0, cache_dir=quick_cache)
    wl.pretrained_state()
    return wl


def test_workload_sizes_and_label_sorted_shards(workload):
    sizes = workload.sizes()
    assert sum(sizes.values()) == 1797
    assert abs(sizes["pretrain"] - 0.35 * 1797) < 10 and abs(sizes["test"] - 0.20 * 1797) < 10
    _check_partition(workload.shards, sizes["adaptation"])
    s = workload.summary()
    assert s["worker_classes"] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert sum(s["worker_sizes"]) == sizes["adaptation"]


def test_pretrained_noisy_accuracy_well_below_clean(workload):
    s = workload.summary()
    assert s["clean_accuracy"] >= 0.75
    assert s["noisy_accuracy"] <= s["clean_accuracy"] - 0.15
    assert s["pretrain_time_s"] is not None  # recorded in the cache's metadata


def test_pretrained_state_is_cached(workload):
    again = QuickWorkload(seed=0, cache_dir=workload.cache_dir)
    state = again.pretrained_state()
    assert again.pretrain_time_s is None  # loaded, not trained
    ref = workload.pretrained_state()
    assert state.keys() == ref.keys() and all(torch.equal(state[k], ref[k]) for k in ref)
    assert workload.cache_path().exists()
    assert QuickWorkload(seed=1, cache_dir=workload.cache_dir).cache_path() != workload.cache_path()


def test_pretraining_deterministic_and_leaves_global_rng(tmp_path, monkeypatch):
    monkeypatch.setitem(quick.PRETRAIN, "epochs", 1)
    states = []
    for d in ("a", "b"):
        torch.manual_seed(123)
        states.append(QuickWorkload(seed=0, cache_dir=tmp_path / d).pretrained_state())
        after = torch.rand(1)
        torch.manual_seed(123)
        assert torch.equal(after, torch.rand(1))  # pre-training did not consume the caller's RNG
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])


def test_worker_batches_deterministic_epoch_coverage(workload):
    shard = workload.shards[2]
    n = shard.size
    it = workload.worker_batches(2, 7, seed=4)
    xs, ys = zip(*[next(it) for _ in range(math.ceil(2 * n / 7))])
    x, y = torch.cat(xs), torch.cat(ys)
    assert all(b.shape == (7, 3, 16, 16) for b in xs)
    assert set(y.unique().tolist()) <= {6, 7}
    shard_rows = sorted(r.tobytes() for r in workload._x_ada[shard])
    for e in range(2):  # each epoch holds every shard sample exactly once
        assert sorted(r.tobytes() for r in x[e * n : (e + 1) * n].numpy()) == shard_rows
    x2, _ = next(workload.worker_batches(2, 7, seed=4))
    assert torch.equal(x2, xs[0])
    assert not torch.equal(next(workload.worker_batches(2, 7, seed=5))[0], xs[0])
    with pytest.raises(ValueError, match="worker"):
        workload.worker_batches(4, 7)
    with pytest.raises(ValueError, match="batch_size"):
        workload.worker_batches(0, 0)


def test_evaluate_constant_model(workload):
    class Always(torch.nn.Module):
        def forward(self, x):
            out = torch.zeros(x.shape[0], 10)
            out[:, 3] = 1.0
            return out

    _, y = workload.test_set()
    assert workload.evaluate(Always(), batch_size=50) == pytest.approx(float((y == 3).float().mean()))
    assert workload.clean_test_accuracy(Always()) == pytest.approx(float((y == 3).float().mean()))


def _adapt(workload, iterations: int) -> tuple[float, float]:
    """Plain SGD (lr ADAPT_LR, momentum 0.9, batch 16) on the union of the noisy shards."""
    model = workload.pretrained_model()
    before = workload.evaluate(model)
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=ADAPT_LR, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = workload.union_batches(16, seed=0)
    model.train()
    for _ in range(iterations):
        x, y = next(batches)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return before, workload.evaluate(model)


@pytest.mark.slow
def test_sgd_adaptation_recovers_accuracy_300_iterations(workload):
    before, after = _adapt(workload, 300)
    assert after >= before + 0.20


def test_workload_bad_input(tmp_path):
    with pytest.raises(ValueError, match="split"):
        QuickWorkload(split="pachinko", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="noise"):
        QuickWorkload(noise="fog+snow", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="n_workers"):
        QuickWorkload(n_workers=11, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="seed"):
        QuickWorkload(seed=-1, cache_dir=tmp_path)


def test_noisy_test_set_is_every_test_image_under_independent_draws(workload):
    x, y = workload.test_set()
    xc, yc = workload.clean_test_set()
    n = workload.sizes()["test"]
    assert quick.TEST_NOISE_DRAWS == 4 and x.shape[0] == y.shape[0] == 4 * n and xc.shape[0] == yc.shape[0] == n
    assert torch.equal(y, yc.repeat(4))  # the same labels, draw after draw
    # the first draw is the single draw the workload always used (seed 2 x seed + 2)
    first = apply_noise(xc.numpy(), workload.noise, seed=workload.seed * 2 + 2)
    assert np.array_equal(x[:n].numpy(), first)
    # the draws differ from each other (independent noise), image by image
    for k in range(1, 4):
        assert not np.allclose(x[k * n:(k + 1) * n].numpy(), first)


def test_processes_started_at_once_pretrain_once(tmp_path, monkeypatch):
    """Two callers on an empty cache (the first runs of a fresh clone's suite, runs started side by side): the one
    that holds the cache's lock pre-trains, the other waits on the lock and loads its file (held threads)."""
    import threading
    import time

    calls, entered, release, locking = [], threading.Event(), threading.Event(), []
    weights = {"w": torch.arange(3.0)}
    real_flock = quick.fcntl.flock

    def flock(f, op):
        locking.append(threading.current_thread().name)
        return real_flock(f, op)

    def fake_pretrain(self, model_name, path):
        calls.append(model_name)
        entered.set()
        assert release.wait(30)
        torch.save(weights, path)
        return weights

    monkeypatch.setattr(quick.fcntl, "flock", flock)
    monkeypatch.setattr(QuickWorkload, "_pretrain_into", fake_pretrain)
    got = {}

    def caller(name):
        got[name] = QuickWorkload(seed=0, cache_dir=tmp_path).pretrained_state()

    first = threading.Thread(target=caller, args=("a",), name="a")
    first.start()
    assert entered.wait(30)
    second = threading.Thread(target=caller, args=("b",), name="b")
    second.start()
    end = time.monotonic() + 30
    while "b" not in locking and time.monotonic() < end:  # the second reached the lock the first holds
        time.sleep(0.01)
    assert locking == ["a", "b"]
    release.set()
    first.join(30)
    second.join(30)
    assert calls == ["convmlp_quick"]  # pre-trained once
    assert torch.equal(got["a"]["w"], weights["w"]) and torch.equal(got["b"]["w"], weights["w"])
