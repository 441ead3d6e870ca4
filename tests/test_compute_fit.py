"""Compute that scales with the batch: the profile's measured ``a + c x b`` (rog.testbed.compute_fit), its
validation, the pacer's targets, and a worker whose pass over 4 b samples takes the fitted time.

Expected times are computed here from the fit's numbers by hand (``k (a + c b)`` with
``k = compute_s / (a + c b0)``), never by calling the pacing code under test."""

from __future__ import annotations

import pytest

from rog.experiment.run_config import RunConfig
from rog.testbed.compute_fit import BatchPacer, ComputeFit, fit_line, parse_compute_fit, write_fit
from rog.testbed.profiles import ProfileError, load_profile
from benchmarks.timing import compute as TC
from conftest import run_ps_team

A_S, C_S = 0.005, 8e-5  # a fit's numbers, used by hand below
FIT = dict(a_s=A_S, c_s_per_sample=C_S, model="convmlp_quick", batch_sizes=[8, 32, 128],
           measured_s=[A_S + C_S * 8, A_S + C_S * 32, A_S + C_S * 128],  # on the line: fit error 0
           repeats=5, threads=1, machine="test", fit_error=0.0, measured_at="2026-11-26T22:00Z", basis="measured: test")


def test_fit_line_recovers_an_exact_line_and_reports_the_worst_relative_residual():
    a, c, err = fit_line([8, 16, 64, 256], [0.002 + 1e-4 * b for b in (8, 16, 64, 256)])
    assert a == pytest.approx(0.002, rel=1e-9) and c == pytest.approx(1e-4, rel=1e-9) and err < 1e-9
    # two points through the line, one 10 % above it: the residual is at most 10 % of that point's time
    a, c, err = fit_line([10, 20, 30], [1.0, 2.0, 3.3])
    assert 0 < err <= 0.1 + 1e-9


def test_fit_line_recovers_a_and_c_from_noisy_timings():
    """Synthetic passes of a + c b (a = 4 ms, c = 0.12 ms/sample) with +-2 % alternating noise: the fit lands
    within 10 % of a and 3 % of c, and reports a residual no larger than the noise put in (plus the misfit)."""
    sizes = [8, 16, 32, 64, 128, 256]
    secs = [(0.004 + 1.2e-4 * b) * (1.02 if i % 2 else 0.98) for i, b in enumerate(sizes)]
    a, c, err = fit_line(sizes, secs)
    assert a == pytest.approx(0.004, rel=0.10) and c == pytest.approx(1.2e-4, rel=0.03)
    assert 0.005 < err < 0.04


def test_quick_cpu_carries_a_measured_fit_and_the_others_fall_back_to_the_constant():
    q = load_profile("quick-cpu")
    assert q.compute_fit is not None and q.compute_fit.basis.startswith("measured:")
    assert q.compute_fit.c_s_per_sample > 0 and len(q.compute_fit.batch_sizes) >= 3
    assert q.compute_fit.fit_error < 0.25  # the written fit describes its own points
    for name in ("jetson-xavier-nx", "laptop"):
        p = load_profile(name)
        assert p.compute_fit is None
        assert p.pacer(1.0, 24).target_s(240) == 1.0  # no fit: the constant at every batch
        assert p.pacer(1.0, 24).describe()["kind"] == "constant"
    assert load_profile(q.source_path).to_dict()["compute_fit"] == q.compute_fit.to_dict()


@pytest.mark.parametrize("change,needle", [
    ({"basis": "assumption: guessed"}, "basis must start with 'measured:'"),
    ({"c_s_per_sample": 0}, "c_s_per_sample"),
    ({"batch_sizes": [32]}, "batch_sizes"),
    ({"colour": 1}, "unknown fields ['colour']"),
    ({"a_s": 0.006}, "a_s 0.006 is not the fit of measured_s (0.005)"),  # a hand-edited line
    ({"c_s_per_sample": 9e-5}, "c_s_per_sample 9e-05 is not the fit of measured_s"),
    ({"fit_error": 0.2}, "fit_error 0.2 is not the fit of measured_s"),
    ({"measured_s": [0.01, 0.02]}, "measured_s must list one time > 0 per batch size (3)"),
    ({"measured_s": "fast"}, "measured_s must be a list of seconds"),
])
def test_a_bad_fit_names_the_field(tmp_path, change, needle):
    text = load_profile("quick-cpu").source_path
    raw = open(text).read().split("# Measured compute per pass")[0]
    import yaml

    fit = dict(FIT, **change)
    p = tmp_path / "quick-cpu.yaml"
    p.write_text(raw + yaml.safe_dump({"compute_fit": fit}, sort_keys=False))
    with pytest.raises(ProfileError) as e:
        load_profile(p)
    assert "compute_fit" in str(e.value) and needle in str(e.value) and str(p) in str(e.value)
    assert "\n" not in str(e.value)  # one line naming the file and the field


def test_write_fit_replaces_the_block_and_keeps_the_comments(tmp_path):
    src = load_profile("quick-cpu").source_path
    p = tmp_path / "quick-cpu.yaml"
    p.write_text(open(src).read())
    fit = parse_compute_fit(FIT)
    write_fit(p, fit)
    write_fit(p, fit)  # twice: one block
    text = p.read_text()
    assert text.count("compute_fit:") == 1 and "# Seconds of compute per iteration" in text
    assert load_profile(p).compute_fit == fit


def test_write_fit_replaces_an_old_block_without_its_points_and_refuses_a_broken_profile(tmp_path):
    """A block of the older format (no measured_s) does not load, and --write replaces it; a profile broken
    elsewhere is not written (the file stays as it was)."""
    src = open(load_profile("quick-cpu").source_path).read().split("# Measured compute per pass")[0]
    old = {k: v for k, v in FIT.items() if k not in ("measured_s", "measured_at")}
    import yaml

    p = tmp_path / "quick-cpu.yaml"
    p.write_text(src + yaml.safe_dump({"compute_fit": old}, sort_keys=False))
    with pytest.raises(ProfileError, match="missing fields \\['measured_s', 'measured_at'\\]"):
        load_profile(p)
    write_fit(p, parse_compute_fit(FIT))
    assert load_profile(p).compute_fit.measured_s == tuple(FIT["measured_s"])
    broken = src.replace("batch_size: 24", "batch_size: 0")
    p.write_text(broken)
    with pytest.raises(ProfileError, match="batch_size"):
        write_fit(p, parse_compute_fit(FIT))
    assert p.read_text() == broken


def test_pacer_targets_follow_the_fit_through_the_constant():
    pacer = BatchPacer(0.28, 32, parse_compute_fit(FIT))
    k = 0.28 / (A_S + C_S * 32)
    assert pacer.target_s(32) == pytest.approx(0.28)
    assert pacer.target_s(128) == pytest.approx(k * (A_S + C_S * 128))
    assert pacer.target_s(8) == pytest.approx(k * (A_S + C_S * 8))
    d = pacer.describe()
    assert d["kind"] == "fit" and d["a_s"] == pytest.approx(k * A_S) and d["c_s_per_sample"] == pytest.approx(k * C_S)
    assert BatchPacer.from_config(d).target_s(100) == pytest.approx(pacer.target_s(100))


def test_streamed_run_records_the_fit_and_fixed_runs_keep_their_time(tmp_path):
    from rog.experiment.cli import parse_args
    from rog.experiment.config import resolve_config
    from rog.experiment.stream_feed import pass_pacer

    argv = ["--testbed", "loopback", "-c", "none", "--library", "BSP", "--profile", "quick-cpu", "--workers", "4",
            "--result-dir", str(tmp_path), "--compute-ratios", "1,1,1,2"]
    cfg = resolve_config(parse_args(argv + ["--stream-set", "S1", "--batch-policy", "rate_proportional"]))
    fit = load_profile("quick-cpu").compute_fit
    assert cfg["compute_s"] == pytest.approx(0.28) and cfg["compute_model"]["kind"] == "fit"
    k = 0.28 / (fit.a_s + fit.c_s_per_sample * cfg["base_batch"])
    pacer, ratio = pass_pacer(RunConfig.from_dict(cfg), 3)
    assert ratio == pytest.approx(2.0)
    assert ratio * pacer.target_s(247) == pytest.approx(2 * k * (fit.a_s + fit.c_s_per_sample * 247))
    assert pass_pacer(RunConfig.from_dict(cfg), 0)[0].target_s(cfg["base_batch"]) == pytest.approx(0.28)  # the fixed batch: unchanged


def test_compute_s_zero_means_unpaced_with_no_model(tmp_path):
    """``--compute-s 0`` (the dynacomm item's outdoors runs: no pacing on a replayed trace) resolves to an
    unpaced run; it once failed in the pacer (compute_s must be > 0)."""
    from rog.experiment.cli import parse_args
    from rog.experiment.config import resolve_config
    from rog.experiment.stream_feed import pass_pacer

    cfg = resolve_config(parse_args(["--testbed", "loopback", "-c", "outdoors", "--compute-s", "0", "--library", "BSP",
                                     "--workers", "2", "--result-dir", str(tmp_path)]))
    assert cfg["compute_s"] == 0 and cfg["compute_model"] is None
    assert pass_pacer(RunConfig.from_dict(cfg), 0) == (None, 1.0)

def _one_worker_step_s(target_s: float) -> float:
    """Wall seconds of one paced BSP iteration of a lone worker whose target is ``target_s`` (the test harness)."""
    def team(ps, body, n):
        run_ps_team(ps, body, n, worker_join_s=2 * TC.STEP_TIMEOUT_S, ps_join_s=TC.STEP_TIMEOUT_S)

    return TC.one_worker_step_s(target_s, team=team)


def _paced_to(got: float, expected: float) -> bool:
    """A paced step lasts at least its target (the pacer sleeps up to it) and, even on a loaded machine, less
    than 5 x it; within 10 % of it: benchmarks/timing/compute.py (bench)."""
    return 0.999 * expected <= got < 5 * expected


def test_a_worker_at_four_times_the_batch_takes_the_fitted_time(run_config):
    cfg = run_config().replace(compute_s=0.2, compute_ratios=None,
                               compute_model=BatchPacer(0.2, 32, parse_compute_fit(FIT)).describe())
    from rog.experiment.stream_feed import pass_pacer

    pacer, ratio = pass_pacer(cfg, 0)
    b = 32
    expected = 0.2 * (A_S + C_S * 4 * b) / (A_S + C_S * b)  # by hand from the fit: 0.403 s
    got = _one_worker_step_s(ratio * pacer.target_s(4 * b))
    assert _paced_to(got, expected), (got, expected)  # a batch-free pacer's 0.2 s is under half of it
    # and the base batch still takes the profile's constant (and not the 4 b time)
    got_b = _one_worker_step_s(ratio * pacer.target_s(b))
    assert _paced_to(got_b, 0.2) and got_b < expected, got_b


def test_a_streamed_worker_at_four_times_the_batch_takes_quick_cpus_fitted_time(tmp_path):
    """The whole path with the profile as shipped: run.py's flags resolve the pacing model, the stream feed's
    target for a pass over 4 b0 samples, and a real engine step. Expected by hand from the YAML's numbers:
    compute_s x (a + c 4 b0) / (a + c b0)."""
    import yaml

    from rog.experiment.cli import parse_args
    from rog.experiment.config import resolve_config
    from rog.experiment.stream_feed import pass_pacer

    cfg = resolve_config(parse_args(["--testbed", "loopback", "-c", "none", "--library", "BSP", "--profile", "quick-cpu",
                                     "--workers", "2", "--result-dir", str(tmp_path), "--stream-set", "S2",
                                     "--batch-policy", "rate_proportional"]))
    raw = yaml.safe_load(open(load_profile("quick-cpu").source_path))
    a, c, b0 = raw["compute_fit"]["a_s"], raw["compute_fit"]["c_s_per_sample"], cfg["base_batch"]
    expected = raw["compute_s_per_iteration"] * (a + c * 4 * b0) / (a + c * b0)
    assert expected > 1.5 * raw["compute_s_per_iteration"]  # the test would see a batch-free pacer
    pacer, ratio = pass_pacer(RunConfig.from_dict(cfg), 0)
    got = _one_worker_step_s(ratio * pacer.target_s(4 * b0))
    assert _paced_to(got, expected), (got, expected)
    assert cfg["compute_model"]["run_model"] == raw["compute_fit"]["model"]  # the fit is this model's own


def test_a_profile_without_a_fit_paces_every_batch_as_before(run_config):
    """No ``compute_fit`` (laptop): the constant at any batch, also through a real engine step at 4 b0."""
    from rog.experiment.stream_feed import pass_pacer

    prof = load_profile("laptop")
    assert prof.compute_fit is None
    cfg = run_config().replace(compute_s=0.2, compute_ratios=None, compute_model=prof.pacer(0.2, 32).describe())
    pacer, ratio = pass_pacer(cfg, 0)
    assert ratio * pacer.target_s(4 * 32) == 0.2
    got = _one_worker_step_s(ratio * pacer.target_s(4 * 32))
    assert _paced_to(got, 0.2), got


@pytest.mark.bench
def test_bench_paced_steps_take_the_fitted_time_within_10_percent():
    """quick-cpu's measured fit at 4 b0 and b0, the laptop's constant at 4 b0: each step within 10 %."""
    for f in TC.step_figures():
        assert f["ok"], f
