"""benchmarks/gpu.py (scripts/bench_gpu.py) on CPU tensors, a tiny model: its JSON keys, ratios of its times over copies."""

from __future__ import annotations

import json
import re

import pytest


def test_bench_gpu_on_cpu_reports_times_copies_and_their_ratios(capsys):
    from benchmarks import gpu as bench_gpu

    assert bench_gpu.main(["--device", "cpu", "--model", "convmlp_quick", "--classes", "10", "--image-size", "16",
                           "--batch", "2", "--repeats", "2", "--check-iterations", "2"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    r = json.loads(out[-1])
    assert r["device_kind"] == "cpu" and "host copies" in out[0]
    assert r["bit_identical_iterations"] == 2  # fused device codec vs numpy codec, real gradients
    for k in ("gpu_push_prepare_s", "gpu_pull_apply_s", "earlier_push_prepare_s", "earlier_pull_apply_s",
              "d2d_copy_s", "d2h_payload_copy_s"):
        assert r[k] > 0, k
    assert r["d2d_copy_bytes"] == 4 * r["params"] and r["d2h_payload_copy_bytes"] == r["wire_payload_bytes"]
    push, pull = r["gpu_push_prepare_s"], r["gpu_pull_apply_s"]
    for stem, t in (("push_prepare", push), ("pull_apply", pull), ("push_plus_pull", r["gpu_push_plus_pull_s"])):
        assert r[f"{stem}_over_d2d_copy"] == pytest.approx(t / r["d2d_copy_s"], rel=1e-9)
        assert r[f"{stem}_over_d2h_payload_copy"] == pytest.approx(t / r["d2h_payload_copy_s"], rel=1e-9)
    assert r["gpu_push_plus_pull_s"] == pytest.approx(push + pull, abs=2e-9)
    # the printed lines carry the same numbers (ms to 4 decimals, ratios to 2)
    printed = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+(\w+_s)\s+([\d.]+) ms$", "\n".join(out), re.M)}
    assert printed["d2d_copy_s"] == pytest.approx(r["d2d_copy_s"] * 1e3, abs=6e-5)
    assert printed["gpu_push_prepare_s"] == pytest.approx(push * 1e3, abs=6e-5)
    line = next(x for x in out if x.strip().startswith("push_plus_pull "))
    assert float(line.split()[1]) == pytest.approx(r["push_plus_pull_over_d2d_copy"], abs=0.006)
    assert r["goals"]["applies_to"].startswith("not this run")
