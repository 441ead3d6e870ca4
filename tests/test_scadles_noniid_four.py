"""ScaDLES's four (alpha, beta) settings (rog.papers.scadles.noniid_four): the variants, the two readings, the
verdicts and the bytes on runs whose accuracies are set by hand, and one short real replica run (slow tier)."""

from __future__ import annotations

import pytest

from rog.papers.scadles import noniid_four as N

# tested plateaus per seed: IID 0.95, skewed 0.10; (0.5,0.5) 0.90, (0.25,0.25) 0.80, (0.1,0.1) 0.25, (0.05,0.05) 0.12
PLATEAU = {"iid": 0.95, "skewed": 0.10, "inject 0.5,0.5": 0.90, "inject 0.25,0.25": 0.80, "inject 0.1,0.1": 0.25,
           "inject 0.05,0.05": 0.12}


def _runs(seeds=(5, 6, 7), plateau=PLATEAU, recal=0.7):
    out = []
    for s in seeds:
        for name, acc in plateau.items():
            n = {"inject 0.5,0.5": 80, "inject 0.25,0.25": 24, "inject 0.1,0.1": 3, "inject 0.05,0.05": 1}.get(name, 0)
            out.append(dict(seed=s, variant=name, plateau=acc + 0.01 * (s - 6), recalibrated=recal, iterations=300,
                            workers=10, parameters=1000, inject_samples=300 * n, inject_bytes=300 * (28 + n * 3080)))
    return out


def test_variants_are_the_papers_four_settings():
    v = N.variants()
    assert [n for n, _, _ in v] == ["iid", "skewed", "inject 0.5,0.5", "inject 0.25,0.25", "inject 0.1,0.1",
                                    "inject 0.05,0.05"]
    assert v[0][1] == "iid" and all(p == "labels:1" for _, p, _ in v[1:])
    assert [i for _, _, i in v[2:]] == [(a, b, "network") for a, b in ((0.5, 0.5), (0.25, 0.25), (0.1, 0.1), (0.05, 0.05))]


def test_rows_and_verdicts_by_hand():
    t = N.rows(_runs(), "plateau")
    assert t["seeds"] == [5, 6, 7] and t["median_iid"] == pytest.approx(0.95) and t["median_skewed"] == pytest.approx(0.10)
    by = {r["setting"]: r for r in t["settings"]}
    # seed 6 (offset 0): recovery (0.90 - 0.10) / (0.95 - 0.10) = 0.941; every run of a seed moves by the same offset,
    # so the gains and recoveries are the same in every seed
    assert by[(0.5, 0.5)]["median_recovery"] == pytest.approx(0.8 / 0.85)
    assert by[(0.25, 0.25)]["median_recovery"] == pytest.approx(0.7 / 0.85)  # 0.824 >= 0.8
    assert by[(0.1, 0.1)]["median_gain"] == pytest.approx(0.15) and by[(0.05, 0.05)]["median_gain"] == pytest.approx(0.02)
    v = N.verdicts(t)
    # collapse: 0.95 - 0.10 = 0.85 >= 0.5 x (0.95 - 0.10) = 0.425
    assert v["collapse"] == "agrees"
    assert v["better 0.5,0.5"] == v["better 0.25,0.25"] == v["better 0.1,0.1"] == "agrees"  # gains 0.8, 0.7, 0.15
    assert v["better 0.05,0.05"] == "does not agree"  # 0.02 < 0.10
    assert v["recovers 0.5,0.5"] == v["recovers 0.25,0.25"] == "agrees"
    # (0.25, 0.25) at 0.76: recovery 0.66 / 0.85 = 0.776 < 0.8
    v = N.verdicts(N.rows(_runs(plateau={**PLATEAU, "inject 0.25,0.25": 0.76}), "plateau"))
    assert v["recovers 0.25,0.25"] == "does not agree" and v["better 0.25,0.25"] == "agrees"
    # skewed at 0.60: 0.35 < 0.425: no collapse
    assert N.verdicts(N.rows(_runs(plateau={**PLATEAU, "skewed": 0.60}), "plateau"))["collapse"] == "does not agree"
    # the recalibrated reading: every run at 0.7, so no gap: no recovery to read, no gain
    r = N.rows(_runs(), "recalibrated")
    assert all(x["median_recovery"] is None and x["median_gain"] == pytest.approx(0.0) for x in r["settings"])
    assert N.verdicts(r)["recovers 0.5,0.5"] == "not decidable" and N.verdicts(r)["collapse"] == "does not agree"
    assert N.verdicts(N.rows(_runs(seeds=(5, 6)), "plateau"))["collapse"] == "not decidable (2 of 3 seeds)"


def test_bytes_by_hand():
    b = {r["setting"]: r for r in N.bytes_rows(_runs())}
    # (0.5, 0.5): 28 + 80 x 3080 B per iteration; gradients 2 x 10 x 4 B x 1000 parameters
    assert b[(0.5, 0.5)]["bytes_per_iteration"] == pytest.approx(28 + 80 * 3080)
    assert b[(0.5, 0.5)]["share"] == pytest.approx((28 + 80 * 3080) / 80000)
    assert b[(0.05, 0.05)]["samples_per_iteration"] == pytest.approx(1.0)
    md = "\n".join(N.markdown(_runs()))
    assert "| (0.05, 0.05) | 12.0 % | +2.0 points | 2.4 %, 2.4 %, 2.4 % | 2.4 % | does not agree | - |" in md


@pytest.mark.slow
def test_a_short_real_replica_run_counts_the_plans_samples():
    """10 iterations of seed 0 for real (10 workers): the injected sample counts are the plan's, ceil(alpha 10)
    senders x floor(beta 32) samples an iteration, and the bytes the relay's message format (a 28-byte header,
    float32 images, int64 labels)."""
    from rog.workloads.quick import QuickWorkload

    x, _ = next(QuickWorkload(seed=0, n_workers=10, split="iid").worker_batches(0, 2, seed=0))
    per_sample = 4 * x[0].numel() + 8
    got = {r["variant"]: r for r in N.run([0], iterations=10, log=lambda m: None)}
    for (a, b), senders, samples in (((0.5, 0.5), 5, 16), ((0.25, 0.25), 3, 8), ((0.1, 0.1), 1, 3), ((0.05, 0.05), 1, 1)):
        r = got[f"inject {a:g},{b:g}"]
        assert r["inject_samples"] == 10 * senders * samples
        assert r["inject_bytes"] == 10 * senders * (28 + samples * per_sample)
    assert got["iid"]["inject_samples"] == 0 == got["skewed"]["inject_bytes"]
    assert 0.0 <= got["iid"]["plateau"] <= 1.0 and 0.0 <= got["iid"]["recalibrated"] <= 1.0


def test_bad_flags_name_the_flag(capsys):
    for argv, needle in ((["--seeds", "a"], "--seeds must be comma-separated integers"),
                         (["--iterations", "10"], "--iterations must be >= 30")):
        with pytest.raises(SystemExit) as e:
            N.main(argv)
        assert e.value.code == 2 and needle in capsys.readouterr().err
