"""On a CUDA device: the device codec's frames equal the numpy codec's, the CUDA optimizer equals the CPU one,
and a run trains its workers on the GPU.  Every test carries the ``gpu`` marker and is skipped without CUDA."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch sees none")]

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("packer", ["torch", "cupy", "kernels"])
def test_convmlp_m_frames_bit_identical_on_5_iterations(packer, capsys):
    if packer in ("cupy", "kernels"):
        pytest.importorskip("cupy", reason="the gpu extra (cupy) is not installed")
    from benchmarks import gpu as bench_gpu

    assert bench_gpu.main(["--repeats", "1", "--check-iterations", "5", "--packer", packer]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["packer"] == packer
    assert result["bit_identical_iterations"] == 5
    assert result["d2h_bytes"] <= 1.05 * result["wire_payload_bytes"]
    assert result["d2h_bytes"] < result["float32_model_bytes"] / 25  # bits and scales, not the gradient


def test_cuda_optimizer_trains_like_the_cpu_optimizer():
    """Parameters stay on the GPU; with float32 pushes (no sign flips from kernel-level gradient
    differences) the CUDA worker ends where the CPU worker ends, to float32 kernel noise."""
    from test_device_codec import _train_on

    cpu = _train_on("cpu", compression="none")
    gpu = _train_on("cuda", compression="none")
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-5)
    assert torch.isfinite(_train_on("cuda", compression="sign")).all()


@pytest.mark.slow
def test_loopback_run_trains_on_the_gpu(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "run.py"), "--testbed", "loopback", "--library", "ROG",
                          "--iterations", "5", "--workers", "2", "--device", "cuda", "--result-dir", str(tmp_path),
                          "--no-progress"], capture_output=True, text=True, timeout=900, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    import yaml

    cfg = yaml.safe_load((Path(summary["run_dir"]) / "config.yaml").read_text())
    assert summary["status"] == "done" and cfg["device"].startswith("cuda:")
    assert "worker 0: device cuda" in (Path(summary["run_dir"]) / "w0.log").read_text()
    assert np.isfinite(summary["final_accuracy"])
