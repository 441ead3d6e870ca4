#!/usr/bin/env python
"""Run the engine once on this interpreter and torch: the Docker images call it at build time.

A base image's Python and PyTorch are facts about the base (the Jetson image keeps NVIDIA's torch
2.0 on Python 3.8); this makes the build fail if the toolkit does not work on them, instead of the
first training run on a robot.  It checks torch >= 2.0 (pyproject's floor), builds ConvMLP-M with
its 100-class head (the paper's 16,948,804 parameters, 33,307 rows), runs one forward/backward on
two 64 px images, and frames one full 1-bit push of the model (DEFSGDM codec, chunks, wire format);
the push carries one sign bit per element, so it cannot be smaller than ``elements / 8`` bytes.

    python utils/engine_selfcheck.py      # prints a JSON line; exit status 1 on any failure
"""

from __future__ import annotations

import json
import re
import sys
import time

CONVMLP_M_PARAMETERS = 16_948_804  # ConvMLP-M with a 100-class head (README, the paper: 16.95 M)
CONVMLP_M_ROWS = 33_307  # the paper's row count for ConvMLP-M
TORCH_FLOOR = (2, 0)  # pyproject.toml: torch>=2.0


def check() -> dict:
    """Run the checks; returns what was measured (AssertionError on the first failure)."""
    t0 = time.perf_counter()
    import torch

    from rog.codecs.codec_registry import make_codec
    from rog.experiment.traceplan import full_push_bytes
    from rog.models import make_model
    from rog.rows import RowPartition

    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    assert m and (int(m.group(1)), int(m.group(2))) >= TORCH_FLOOR, f"torch {torch.__version__} < {TORCH_FLOOR}"
    torch.manual_seed(0)
    model = make_model("convmlp_m", 100)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == CONVMLP_M_PARAMETERS, f"ConvMLP-M has {n_params} parameters, expected {CONVMLP_M_PARAMETERS}"
    part = RowPartition.from_module(model)
    assert part.n_rows == CONVMLP_M_ROWS, f"ConvMLP-M has {part.n_rows} rows, expected {CONVMLP_M_ROWS}"
    x = torch.randn(2, 3, 64, 64)
    loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1]))
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads), "non-finite or missing gradients"
    push = full_push_bytes(part, make_codec("sign"))
    assert push >= part.n_elements // 8, f"a full 1-bit push of {part.n_elements} elements framed in {push} bytes"
    return dict(ok=True, python="%d.%d.%d" % sys.version_info[:3], torch=torch.__version__,
                cuda=bool(torch.cuda.is_available()), parameters=n_params, rows=part.n_rows, push_bytes=push,
                loss=round(float(loss.detach()), 4), seconds=round(time.perf_counter() - t0, 2))


def main() -> int:
    try:
        out = check()
    except Exception as e:  # noqa: BLE001 - reported, non-zero exit fails the image build
        print(json.dumps(dict(ok=False, error=f"{type(e).__name__}: {e}")))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
