"""The CUDA kernels of rog.codecs.device_kernels compiled for the CPU with g++, to test their source without a GPU.

A thin shim maps CUDA's built-ins onto C++: every thread of a block is a ``std::thread`` (``__syncthreads``
a ``std::barrier``), blocks run one after another, ``__shared__`` arrays are statics shared by the block's
threads, and ``__fadd_rn`` / ``__fmul_rn`` are plain float operations compiled with ``-ffp-contract=off``
(correctly rounded, never fused, as on the GPU).  :class:`CpuKernels` is a
:class:`rog.codecs.device_kernels.CudaKernels` whose launches call the compiled kernels on CPU tensors.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import torch

from rog.codecs import device_kernels

_HEAD = r"""
#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
struct Dim { unsigned x, y, z; };
thread_local Dim blockIdx, threadIdx, blockDim, gridDim;
static std::barrier<>* g_barrier = nullptr;
#define __global__
#define __device__ static
#define __forceinline__ inline
#define __shared__ static
static inline void __syncthreads() { g_barrier->arrive_and_wait(); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline unsigned __brev(unsigned x) { unsigned r = 0; for (int i = 0; i < 32; i++) { r = (r << 1) | (x & 1u); x >>= 1; } return r; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
"""

_TAIL = r"""
static void run(unsigned grid, unsigned block, bool barriers, std::function<void()> fn) {
    for (unsigned b = 0; b < grid; b++) {
        if (!barriers) {
            for (unsigned t = 0; t < block; t++) { blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0}; blockDim = {block, 1, 1}; gridDim = {grid, 1, 1}; fn(); }
            continue;
        }
        std::barrier<> bar(block);
        g_barrier = &bar;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; t++)
            threads.emplace_back([=] { blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0}; blockDim = {block, 1, 1}; gridDim = {grid, 1, 1}; fn(); });
        for (auto& th : threads) th.join();
    }
}
extern "C" {
void cpu_block_sums(unsigned g, unsigned b, const float* x, const long long* s, const int* l, float* o) {
    run(g, b, true, [=] { rog_block_sums(x, s, l, o); }); }
void cpu_sign_pack(unsigned g, unsigned b, const float* a, const long long* s, const long long* p, const long long* l,
                   int k, unsigned char* o, long long n) { run(g, b, false, [=] { rog_sign_pack(a, s, p, l, k, o, n); }); }
void cpu_sign_apply(unsigned g, unsigned b, const unsigned char* d, const long long* s, const long long* p,
                    const long long* l, const float* c, int k, float* o, long long n) {
    run(g, b, false, [=] { rog_sign_apply(d, s, p, l, c, k, o, n); }); }
void cpu_any_nonfinite(unsigned g, unsigned b, const float* x, long long n, unsigned* f) {
    run(g, b, false, [=] { rog_any_nonfinite(x, n, f); }); }
void cpu_frame_crc(unsigned g, unsigned b, const unsigned char* d, const long long* f, const long long* c,
                   const unsigned* s, const unsigned* p, unsigned* o) { run(g, b, true, [=] { rog_frame_crc(d, f, c, s, p, o); }); }
void cpu_defsgdm_acc(unsigned g, unsigned b, const float* gr, const float* pa, float* m, float* u, float* a, float lr,
                     float mo, float wd, int uw, int um, int ne, long long n) {
    run(g, b, false, [=] { rog_defsgdm_acc(gr, pa, m, u, a, lr, mo, wd, uw, um, ne, n); }); }
}
"""

_C_TYPES = {np.uint64: ctypes.c_void_p, np.int32: ctypes.c_int, np.int64: ctypes.c_longlong, np.float32: ctypes.c_float}


def compile_kernels(build_dir: Path) -> ctypes.CDLL:
    """Compile the kernels' CUDA source with the shim into a shared library in ``build_dir`` and load it."""
    gxx = shutil.which("g++")
    if gxx is None:
        raise RuntimeError("g++ is needed to compile the CUDA kernels for the CPU (apt-get install g++)")
    src = device_kernels._SOURCE.strip()
    opening = 'extern "C" {'
    assert src.startswith(opening) and src.endswith("}"), "the kernel source is one extern \"C\" block"
    cpp = build_dir / "kernels_cpu.cpp"
    cpp.write_text(_HEAD + src[len(opening) : -1] + _TAIL)
    lib = build_dir / "kernels_cpu.so"
    subprocess.run([gxx, "-std=c++20", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-o", str(lib), str(cpp),
                    "-lpthread"], check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


class CpuKernels(device_kernels.CudaKernels):
    """The kernels' launches on CPU tensors, through the library of :func:`compile_kernels`."""

    def __init__(self, lib: ctypes.CDLL) -> None:  # noqa: D107 - no cupy, no compile: the library is given
        self._torch = torch
        self.device = torch.device("cpu")
        self._lib = lib

    def _launch(self, name: str, grid: tuple, block: tuple, args: tuple) -> None:
        fn = getattr(self._lib, name.replace("rog_", "cpu_"))
        fn(ctypes.c_uint(grid[0]), ctypes.c_uint(block[0]), *[_C_TYPES[type(a)](a.item()) for a in args])
