"""Benchmark the GPU path of one ConvMLP-M worker against the CPU path and the memory limit, and check frames agree.

On a CUDA device, as medians over ``--repeats`` after a warm-up (every timing ends with a device sync):

- ``fwd_bwd_s``: ConvMLP-M forward + backward at ``--batch`` (24) and ``--image-size`` (224) px;
- ``gpu_push_prepare_s``: the worker's push prepare on the device path (the device codec as ``--packer`` picks
  it: by default, with cupy, the CUDA kernels of ``rog.codecs.device_kernels``), every
  host/device copy included: the gradient's finiteness check, DEFSGDM update with ``acc += u`` (as the worker:
  ``TorchLocalUpdate.all_finite`` and ``step_accumulate``, one kernel each with the kernels), per-tensor scales, sign bits, packing, the
  copy of the packed payload to the host and the frame bytes of every chunk of a full push, through
  ``rog.wire.encode_frames`` as the worker sends them (with the kernels, the frames' crc32 is computed on the
  device; the gradients are in the flat buffer already: each ``.grad`` is a view of it, as in ``ROGOptimizer``);
- ``gpu_pull_apply_s``: a full pull applied on the device (payload and tables to the device, unpack,
  scaled add into the parameters);
- ``torch_ops_push_prepare_s`` / ``torch_ops_pull_apply_s``: the same with the fused torch operations in place
  of the kernels (``kernels=False``, codec and DEFSGDM update; null when the kernels did not run), and
  ``earlier_push_prepare_s`` / ``earlier_pull_apply_s`` with the earlier device codec (``fused=False``: per-block
  views, 2-D segment tables), in the same run;
- ``d2d_copy_s``: one device-to-device copy of the float32 gradient (``n_params * 4`` bytes), and
  ``d2h_payload_copy_s``: one device-to-host copy (into pinned memory) of the packed payload's bytes;
  ``*_over_d2d_copy`` / ``*_over_d2h_payload_copy``: the push, pull and their sum divided by them
  (what the hardware's memory allows: the codec reads the gradient and writes bits, about one copy);
- ``cpu_push_prepare_s`` / ``cpu_pull_apply_s``: the same on the CPU path (the gradients copied to the
  host first, numpy codec), for the same model;
- ``d2h_bytes`` / ``h2d_bytes``: bytes the device codec copied each way in one push prepare / one pull
  apply, against ``wire_payload_bytes`` (the frames of the full push);
- ``bit_identical_iterations``: consecutive iterations (``--check-iterations``, 5) of real gradients
  on which the device path's scales, frames, accumulator and pulled model equal the numpy path's
  byte for byte.

Goals (on an H100): push prepare + pull apply <= 2 ms, <= 10 x d2d_copy_s and <= 0.35 x fwd_bwd_s;
d2h_bytes <= 1.05 x wire_payload_bytes; bit identity on every checked iteration.
Without CUDA it prints one line saying so and exits 0.  ``--device cpu`` runs the same code on CPU
tensors (``device_kind`` ``cpu``: the "device" copies are host copies, and the goals, set for an H100,
do not apply); ``--model`` picks a smaller model to check the script.  Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

GOALS = {"push_plus_pull_s_max": 0.002, "over_d2d_copy_max": 10.0, "over_fwd_bwd_max": 0.35,
         "d2h_over_payload_max": 1.05}  # on an H100


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (checks the script only)")
    p.add_argument("--model", default="convmlp_m", help="a model of rog.models (default convmlp_m, the paper's)")
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--batch", type=int, default=24)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--check-iterations", type=int, default=5)
    p.add_argument("--profile", action="store_true",
                   help="also time the push's phases one by one and print torch.profiler's top operations "
                        "(kernel count, device time against wall time: launch-bound or memory-bound)")
    p.add_argument("--packer", choices=["auto", "torch", "cupy", "kernels"], default="auto",
                   help="the device codec's bit work: the CUDA kernels when cupy is installed (auto), or force one: "
                        "kernels (rog.codecs.device_kernels), cupy (torch operations, cupy packbits), torch (torch only)")
    a = p.parse_args(argv)
    if min(a.batch, a.image_size, a.repeats, a.check_iterations, a.classes) < 1:
        p.error("--batch, --image-size, --repeats, --check-iterations and --classes must be >= 1")
    return a


def _median(fn, repeats: int, sync) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    a = parse_args(argv)
    import numpy as np
    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(json.dumps({"skipped": f"no CUDA device here (torch {torch.__version__}, cuda {torch.version.cuda}); "
                                     "scripts/bench_gpu.py measures nothing without one"}))
        return 0
    from rog.chunks import ARTIFACT_CHUNK_SHARE, chunk_bytes_for_share, plan_chunks
    from rog.codecs.compression import SignCodec
    from rog.device.choice import resolve_device
    from rog.device.torch_update import TorchLocalUpdate
    from rog.codecs.device_codec import TorchSignCodec
    from rog.local_update import LocalUpdate, LocalUpdateConfig
    from rog.models import make_model
    from rog.policies.base import all_rows_plan
    from rog.rows import RowPartition
    from rog.wire import encode_frame, encode_frames

    dev = torch.device(resolve_device(a.device) if a.device != "cpu" else "cpu")
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = make_model(a.model, a.classes).to(dev)
    params = list(model.parameters())
    part = RowPartition.from_module(model)
    x = torch.randn(a.batch, 3, a.image_size, a.image_size, device=dev)
    y = torch.randint(0, a.classes, (a.batch,), device=dev)

    def fwd_bwd():
        model.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(model(x), y).backward()

    t_fb = _median(fwd_bwd, a.repeats, sync)
    kind = "cuda" if dev.type == "cuda" else "cpu"
    print(f"fwd+bwd {a.model} batch {a.batch} at {a.image_size} px on {dev}: {t_fb * 1e3:.2f} ms"
          + ("" if kind == "cuda" else " (CPU: device copies below are host copies)"), flush=True)

    use_cupy, kernels = {"auto": (None, None), "torch": (False, False), "cupy": (True, False),
                         "kernels": (True, True)}[a.packer]
    codec_d, codec_n = TorchSignCodec(dev, use_cupy=use_cupy, kernels=kernels), SignCodec()
    cfg = LocalUpdateConfig(lr=0.01)
    lu_d = TorchLocalUpdate(part.n_elements, cfg, dev, kernels=codec_d.packer == "kernels")
    lu_n = LocalUpdate(part.n_elements, cfg)
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    w_n = flat.cpu().numpy().copy()
    grad_d = torch.zeros_like(flat)
    off = part.tensor_offset.tolist()  # as ROGOptimizer: every .grad is its view of the flat gradient buffer,
    for i, p in enumerate(params):     # so backward accumulates there and no gradient is gathered
        p.grad = grad_d[off[i] : off[i + 1]].view(p.shape)
    acc_d = torch.zeros_like(flat)
    acc_n = np.zeros_like(w_n)
    chunk_bytes = chunk_bytes_for_share(codec_n.row_wire_bytes(part), ARTIFACT_CHUNK_SHARE)
    plan = all_rows_plan(part)
    cp = plan_chunks(part, plan.order, plan.mandatory_rows, codec_n.row_wire_bytes(part), chunk_bytes)

    # ---------------------------------------------------------------- bit identity on real gradients
    identical = 0
    for it in range(1, a.check_iterations + 1):
        x_i = torch.randn(a.batch, 3, a.image_size, a.image_size, device=dev, generator=None)
        model.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(model(x_i), y).backward()  # into grad_d (the views)
        g_n = grad_d.cpu().numpy()
        lu_d.step_accumulate(grad_d, flat, it, acc_d, want_u=False)  # as the worker (ROG: no local steps)
        acc_n += lu_n.step(g_n, w_n, it)
        s_d, s_n = codec_d.tensor_scales(part, acc_d), codec_n.tensor_scales(part, acc_n)
        e_d, frames_d = encode_frames(codec_d, part, acc_d, s_d, cp.chunks, it)  # as the worker
        e_n = [codec_n.encode(part, acc_n, s_n, c) for c in cp.chunks]
        frames_equal = frames_d == [encode_frame(c, codec_n, it, i) for i, c in enumerate(e_n)]
        k = len(e_n) - it  # a cut push: the delivered prefix is committed
        codec_d.decode_many(part, e_d[:k], (acc_d,), -1.0)
        for c in e_n[:k]:
            codec_n.commit(part, acc_n, c)
        codec_d.decode_many(part, e_n, (flat,), -0.25)
        for c in e_n:
            codec_n.decode_into(part, c, (w_n,), -0.25)
        same = (frames_equal and s_d.tobytes() == s_n.tobytes() and acc_d.cpu().numpy().tobytes() == acc_n.tobytes()
                and flat.cpu().numpy().tobytes() == w_n.tobytes())
        print(f"iteration {it}: frames {'equal' if frames_equal else 'DIFFER'}, state {'equal' if same else 'DIFFERS'}",
              flush=True)
        if not same:
            break
        identical += 1

    # ---------------------------------------------------------------- timings (the full push, every chunk)
    fwd_bwd()
    state = {}

    def gpu_push():  # the gradients are in grad_d already (views)
        if not lu_d.all_finite(grad_d):
            raise SystemExit("non-finite gradient")
        lu_d.step_accumulate(grad_d, flat, 10, acc_d, want_u=False)
        scales = codec_d.tensor_scales(part, acc_d)
        state["enc"], state["frames"] = encode_frames(codec_d, part, acc_d, scales, cp.chunks, 10)

    def gpu_pull():
        codec_d.decode_many(part, state["enc"], (flat,), -0.25)

    d2h0, h2d0 = codec_d.d2h_bytes, codec_d.h2d_bytes
    gpu_push()
    sync()
    d2h = codec_d.d2h_bytes - d2h0
    h2d_push = codec_d.h2d_bytes - h2d0
    h2d0 = codec_d.h2d_bytes
    gpu_pull()
    sync()
    h2d_pull = codec_d.h2d_bytes - h2d0
    payload = sum(len(f) for f in state["frames"])
    t_push = _median(gpu_push, a.repeats, sync)
    t_pull = _median(gpu_pull, a.repeats, sync)
    phases = _push_phases(torch, params, grad_d, acc_d, flat, lu_d, codec_d, part, cp, (encode_frame, encode_frames),
                          gpu_pull, a.repeats, sync) if a.profile else None
    profile = _profile(torch, gpu_push, gpu_pull, sync, dev) if a.profile else None
    host_profile = _host_profile(gpu_push, gpu_pull, sync) if a.profile else None
    packer = codec_d.packer
    t_push_ops = t_pull_ops = None
    if packer == "kernels":  # gpu_push / gpu_pull now time the torch operations in place of the kernels
        codec_d = TorchSignCodec(dev, use_cupy=use_cupy, kernels=False)
        lu_d = TorchLocalUpdate(part.n_elements, cfg, dev, kernels=False)
        t_push_ops = _median(gpu_push, a.repeats, sync)
        t_pull_ops = _median(gpu_pull, a.repeats, sync)
    codec_d = TorchSignCodec(dev, use_cupy=use_cupy, fused=False, kernels=False)  # now the earlier codec
    t_push_old = _median(gpu_push, a.repeats, sync)
    t_pull_old = _median(gpu_pull, a.repeats, sync)

    # the memory limit, in the same run: one copy of the float32 gradient, one of the payload to the host
    grad_copy = torch.empty_like(grad_d)
    t_d2d = _median(lambda: grad_copy.copy_(grad_d), a.repeats, sync)
    payload_dev = torch.zeros(payload, dtype=torch.uint8, device=dev)
    payload_host = torch.empty(payload, dtype=torch.uint8, pin_memory=dev.type == "cuda")
    t_d2h = _median(lambda: payload_host.copy_(payload_dev), a.repeats, sync)

    grad_n = np.zeros(part.n_elements, dtype=np.float32)

    def cpu_push():
        off = part.tensor_offset
        for i, p in enumerate(params):
            grad_n[off[i] : off[i + 1]] = p.grad.detach().reshape(-1).cpu().numpy()
        acc_n[:] += lu_n.step(grad_n, w_n, 10)
        scales = codec_n.tensor_scales(part, acc_n)
        enc = [codec_n.encode(part, acc_n, scales, c) for c in cp.chunks]
        state["frames_n"] = [encode_frame(c, codec_n, 10, i) for i, c in enumerate(enc)]
        state["enc_n"] = enc

    def cpu_pull():
        codec_n.decode_many(part, state["enc_n"], (w_n,), -0.25)

    t_cpu_push = _median(cpu_push, max(1, a.repeats // 2), sync)
    t_cpu_pull = _median(cpu_pull, max(1, a.repeats // 2), lambda: None)
    total = t_push + t_pull
    result = {
        "device": str(dev), "device_kind": kind,
        "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__, "packer": packer, "model": a.model, "batch": a.batch,
        "image_size": a.image_size, "params": part.n_elements, "tensors": part.n_tensors, "rows": part.n_rows,
        "chunks": len(cp.chunks), "repeats": a.repeats,
        "fwd_bwd_s": round(t_fb, 9),
        "gpu_push_prepare_s": round(t_push, 9), "gpu_pull_apply_s": round(t_pull, 9),
        "torch_ops_push_prepare_s": None if t_push_ops is None else round(t_push_ops, 9),
        "torch_ops_pull_apply_s": None if t_pull_ops is None else round(t_pull_ops, 9),
        "earlier_push_prepare_s": round(t_push_old, 9), "earlier_pull_apply_s": round(t_pull_old, 9),
        "cpu_push_prepare_s": round(t_cpu_push, 9), "cpu_pull_apply_s": round(t_cpu_pull, 9),
        "gpu_push_plus_pull_s": round(total, 9), "gpu_over_fwd_bwd": round(total / t_fb, 4),
        "d2d_copy_s": round(t_d2d, 9), "d2h_payload_copy_s": round(t_d2h, 9),
        "d2d_copy_bytes": part.n_elements * 4, "d2h_payload_copy_bytes": payload,
        "d2h_bytes": d2h, "h2d_bytes_push": h2d_push, "h2d_bytes_pull": h2d_pull,
        "wire_payload_bytes": payload, "d2h_over_payload": round(d2h / payload, 4),
        "float32_model_bytes": part.n_elements * 4,
        "bit_identical_iterations": identical, "checked_iterations": a.check_iterations,
    }
    if phases is not None:
        result["push_phases_s"] = phases
        result["profile"] = profile
        result["host_profile"] = host_profile
    for name in ("gpu_push_prepare_s", "gpu_pull_apply_s", "gpu_push_plus_pull_s"):
        stem = name[len("gpu_"):-len("_s")]
        result[f"{stem}_over_d2d_copy"] = result[name] / result["d2d_copy_s"] if t_d2d > 0 else None
        result[f"{stem}_over_d2h_payload_copy"] = result[name] / result["d2h_payload_copy_s"] if t_d2h > 0 else None
    over_d2d = result["push_plus_pull_over_d2d_copy"]
    result["goals"] = {
        "applies_to": "an H100 (device_kind cuda)" if kind == "cuda" else "not this run: the goals are for an H100",
        "push_plus_pull_s": {"value": result["gpu_push_plus_pull_s"], "max": GOALS["push_plus_pull_s_max"],
                             "met": total <= GOALS["push_plus_pull_s_max"]},
        "over_d2d_copy": {"value": over_d2d, "max": GOALS["over_d2d_copy_max"],
                          "met": over_d2d is not None and over_d2d <= GOALS["over_d2d_copy_max"]},
        "over_fwd_bwd": {"value": result["gpu_over_fwd_bwd"], "max": GOALS["over_fwd_bwd_max"],
                         "met": total / t_fb <= GOALS["over_fwd_bwd_max"]},
        "d2h_over_payload": {"value": result["d2h_over_payload"], "max": GOALS["d2h_over_payload_max"],
                             "met": d2h / payload <= GOALS["d2h_over_payload_max"]},
        "bit_identity": {"value": identical, "min": a.check_iterations, "met": identical == a.check_iterations},
    }
    for k in ("gpu_push_prepare_s", "gpu_pull_apply_s", "torch_ops_push_prepare_s", "torch_ops_pull_apply_s",
              "earlier_push_prepare_s", "earlier_pull_apply_s", "cpu_push_prepare_s", "cpu_pull_apply_s", "d2d_copy_s",
              "d2h_payload_copy_s"):
        if result[k] is not None:
            print(f"  {k:24s} {result[k] * 1e3:12.4f} ms")
    for k in ("push_prepare", "pull_apply", "push_plus_pull"):
        print(f"  {k:24s} {result[k + '_over_d2d_copy']:10.2f} x the d2d copy, "
              f"{result[k + '_over_d2h_payload_copy']:10.2f} x the d2h payload copy")
    print(f"  d2h {d2h} B per full push, wire payload {payload} B ({result['d2h_over_payload']} x)")
    print(json.dumps(result))
    return 0


def _push_phases(torch, params, grad_d, acc_d, flat, lu_d, codec_d, part, cp, framing, pull, repeats, sync):
    """Median seconds of each step of a full push (and the pull), each timed alone between device syncs:
    which step holds the time.  ``encode_frames`` is the push's encoding as the worker runs it (payload, crc32 and
    frame bytes); ``encode_many`` + ``frames_host_crc`` the same work with the crc32 on the host, to compare."""
    encode_frame, encode_frames = framing
    held = {}

    def scales():
        held["s"] = codec_d.tensor_scales(part, acc_d)

    def encode():
        held["e"] = codec_d.encode_many(part, acc_d, held["s"], cp.chunks)

    steps = {
        "finite_check": lambda: lu_d.all_finite(grad_d),
        "local_update": lambda: lu_d.step_accumulate(grad_d, flat, 10, acc_d, want_u=False),
        "tensor_scales": scales,
        "encode_many": encode,
        "frames_host_crc": lambda: [encode_frame(c, codec_d, 10, i) for i, c in enumerate(held["e"])],
        "encode_frames": lambda: encode_frames(codec_d, part, acc_d, held["s"], cp.chunks, 10),
        "pull_apply": pull,
    }
    scales()
    encode()
    out = {k: round(_median(f, repeats, sync), 9) for k, f in steps.items()}
    for k, v in out.items():
        print(f"  phase {k:16s} {v * 1e3:10.4f} ms", flush=True)
    return out


def _host_profile(push, pull, sync, pairs: int = 20, top: int = 16) -> dict:
    """cProfile over ``pairs`` push + pull pairs: the host functions that hold the time (own time per pair, ms),
    printed and returned (the device's side is :func:`_profile`'s)."""
    import cProfile
    import pstats

    push(), pull(), sync()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(pairs):
        push()
        pull()
    sync()
    prof.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (calls, primitive calls, own s, cumulative s, callers)
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    out = {"pairs": pairs, "wall_ms_per_pair_profiled": round(wall * 1e3 / pairs, 4),
           "own_ms_per_pair": {f"{Path(f).name}:{line}({name})": round(v[2] * 1e3 / pairs, 4)
                               for (f, line, name), v in rows}}
    print(f"  host profile (cProfile, {pairs} pairs, {out['wall_ms_per_pair_profiled']:.3f} ms per pair profiled):")
    for k, v in out["own_ms_per_pair"].items():
        print(f"    {v:9.4f} ms  {k}")
    return out


def _profile(torch, push, pull, sync, dev) -> dict:
    """torch.profiler over three push + pull pairs: kernels launched, device time summed, host-device copies
    and synchronisations per pair, and the top operations by host time (printed)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    pairs = 3
    push(), pull(), sync()
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(pairs):
            push()
            pull()
        sync()
        wall = time.perf_counter() - t0
    events = prof.events()
    kernels = [e for e in events if getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type)]
    device_us = sum(getattr(e, "device_time", 0) or getattr(e, "cuda_time", 0) or 0 for e in kernels)
    names = [e.name for e in events]
    out = {"pairs": pairs, "wall_s_per_pair": round(wall / pairs, 9),
           "device_kernels_per_pair": round(len(kernels) / pairs, 1),
           "device_busy_s_per_pair": round(device_us * 1e-6 / pairs, 9),
           "memcpy_calls_per_pair": round(sum("Memcpy" in n for n in names) / pairs, 1),
           "synchronize_calls_per_pair": round(sum("Synchronize" in n for n in names) / pairs, 1),
           "aten_ops_per_pair": round(sum(n.startswith("aten::") for n in names) / pairs, 1)}
    print(f"  profile: {out}", flush=True)
    try:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=40))
        if dev.type == "cuda":
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=40))
    except Exception as e:  # the table's column names move between torch versions; the numbers above stand
        print(f"  (profiler table not printed: {e})")
    return out
