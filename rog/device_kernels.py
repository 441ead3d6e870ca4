"""The device codec's CUDA kernels (cupy ``RawKernel``): a push or a pull in a handful of launches.

The torch path of :mod:`rog.device_fused` needs a fixed number of operations per push, but that number
is large (a fold of ``log2(65,536)`` steps per tier, index tables built by cumulative sums, packing,
the DEFSGDM update as five passes), and on a GPU the host's cost of issuing each operation, not memory
traffic, decides the time.  These kernels do the same arithmetic in one launch per step:

- ``rog_block_sums``: per-block ``sum |x|`` by :mod:`rog.scales`' tree.  A thread ``t`` of ``T`` folds the
  values at ``t, t + T, t + 2T, ...`` of its block: the tree's first levels pair ``k`` with ``k + K/2``
  (``K = w / T`` values per thread), which is an adjacent-pair tree over the values taken in bit-reversed
  order, so a stack of partial sums (a binary counter) folds them as they stream in.  The ``T`` partials
  then fold in shared memory by the same rule.  Blocks narrower than ``T`` fold zero-padded to ``T``
  (:mod:`rog.scales`: padding to any power of two gives the same sum).
- ``rog_sign_pack``: one thread per payload byte; each of its 8 bits finds its segment by binary search
  over the batch's segment table (element start, payload bit, length) and takes the sign bit of its
  element (``numpy.packbits`` order, zero bits where a chunk pads to a byte).
- ``rog_sign_apply``: one thread per payload bit; ``out[e] += (bit ? -s : s)`` with ``s`` the segment's
  ``float32(scale * weight)`` (rows of one batch are disjoint, so no two threads write one element).
- ``rog_defsgdm_acc``: :func:`rog.local_update.defsgdm_update` in one pass, ``u`` written and optionally
  added into the accumulator.

Every float operation is an explicit ``__fadd_rn`` / ``__fmul_rn`` (never a fused multiply-add), so the
results are the numpy codec's bit for bit.  Tensors stay torch tensors: kernels receive their device
pointers and run on torch's current stream.
"""

from __future__ import annotations

import numpy as np

THREADS_SUM = 1024  # threads per block of the block-sum kernel (its partials fold in shared memory)
THREADS = 256  # threads per block of the element-wise kernels

_SOURCE = r"""
extern "C" {

__device__ __forceinline__ int find_segment(const long long* pos, int n_seg, long long p) {
    // the last segment whose first payload bit is <= p (segments are in payload order)
    int lo = 0, hi = n_seg - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (pos[mid] <= p) lo = mid; else hi = mid - 1;
    }
    return lo;
}

__global__ void rog_block_sums(const float* __restrict__ x, const long long* __restrict__ start,
                               const int* __restrict__ length, float* __restrict__ out) {
    __shared__ float part[1024];
    const int b = blockIdx.x, t = threadIdx.x, T = blockDim.x;
    const long long s = start[b];
    const int n = length[b];
    int w = 1;
    while (w < n) w <<= 1;            // the block's fold width (a power of two)
    float v;
    if (w <= T) {
        v = t < n ? fabsf(x[s + t]) : 0.0f;
    } else {
        const int K = w / T;            // values per thread, a power of two
        int bits = 0;
        while ((1 << bits) < K) bits++;
        float stack[20];
        int top = 0;
        for (int i = 0; i < K; i++) {
            const int k = bits ? (int)(__brev((unsigned)i) >> (32 - bits)) : 0;
            const int idx = t + k * T;
            float val = idx < n ? fabsf(x[s + idx]) : 0.0f;
            for (int c = i; c & 1; c >>= 1) val = __fadd_rn(stack[--top], val);
            stack[top++] = val;
        }
        v = stack[0];
    }
    part[t] = v;
    for (int h = T >> 1; h >= 1; h >>= 1) {
        __syncthreads();
        if (t < h) part[t] = __fadd_rn(part[t], part[t + h]);
    }
    if (t == 0) out[b] = part[0];
}

__global__ void rog_sign_pack(const float* __restrict__ acc, const long long* __restrict__ start,
                              const long long* __restrict__ pos, const long long* __restrict__ len,
                              int n_seg, unsigned char* __restrict__ out, long long n_bytes) {
    const long long byte = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (byte >= n_bytes) return;
    const long long p0 = byte * 8;
    int i = find_segment(pos, n_seg, p0);
    unsigned int v = 0;
    for (int k = 0; k < 8; k++) {
        const long long p = p0 + k;
        while (i + 1 < n_seg && pos[i + 1] <= p) i++;
        const long long off = p - pos[i];
        if (off >= 0 && off < len[i] && (__float_as_uint(acc[start[i] + off]) >> 31)) v |= 0x80u >> k;
    }
    out[byte] = (unsigned char)v;
}

__global__ void rog_sign_apply(const unsigned char* __restrict__ data, const long long* __restrict__ start,
                               const long long* __restrict__ pos, const long long* __restrict__ len,
                               const float* __restrict__ scale, int n_seg, float* __restrict__ out,
                               long long n_bits) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_bits) return;
    const int i = find_segment(pos, n_seg, p);
    const long long off = p - pos[i];
    if (off < 0 || off >= len[i]) return;  // a chunk's padding bits
    const float s = scale[i];
    const float v = (data[p >> 3] >> (7 - (int)(p & 7))) & 1 ? -s : s;
    const long long e = start[i] + off;
    out[e] = __fadd_rn(out[e], v);
}

__global__ void rog_defsgdm_acc(const float* __restrict__ grad, const float* __restrict__ params,
                                float* __restrict__ mbuf, float* __restrict__ u, float* __restrict__ acc,
                                float lr, float momentum, float weight_decay, int use_wd, int use_momentum,
                                int nesterov, long long n) {
    const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float d = grad[j];
    if (use_wd) d = __fadd_rn(d, __fmul_rn(weight_decay, params[j]));
    if (use_momentum) {
        const float m = __fadd_rn(__fmul_rn(mbuf[j], momentum), d);
        mbuf[j] = m;
        d = nesterov ? __fadd_rn(d, __fmul_rn(momentum, m)) : m;
    }
    const float r = __fmul_rn(d, lr);
    if (u) u[j] = r;
    if (acc) acc[j] = __fadd_rn(acc[j], r);
}

}
"""

_NAMES = ("rog_block_sums", "rog_sign_pack", "rog_sign_apply", "rog_defsgdm_acc")


def _ptr(t) -> np.uint64:
    """A tensor's device address as a kernel pointer argument (0: a null pointer)."""
    return np.uint64(0 if t is None else t.data_ptr())


def _blocks(n: int, threads: int) -> tuple:
    return (max(1, (int(n) + threads - 1) // threads),)


class CudaKernels:
    """The compiled kernels for one CUDA device, launched on torch's current stream of that device."""

    def __init__(self, cp, device) -> None:
        import torch

        self._torch = torch
        self._cp = cp
        self.device = torch.device(device)
        with cp.cuda.Device(self.device.index):
            module = cp.RawModule(code=_SOURCE, options=("--std=c++14",))
            self._k = {name: module.get_function(name) for name in _NAMES}

    def _launch(self, name: str, grid: tuple, block: tuple, args: tuple) -> None:
        with self._cp.cuda.Device(self.device.index), cupy_stream(self._cp, self.device):
            self._k[name](grid, block, args)

    def block_sums(self, flat, start, length, n_blocks: int):
        """float32 ``sum |x|`` of each block (``start`` int64, ``length`` int32 device tensors), block order."""
        out = self._torch.empty(n_blocks, dtype=self._torch.float32, device=self.device)
        if n_blocks:
            self._launch("rog_block_sums", (n_blocks,), (THREADS_SUM,),
                         (_ptr(flat), _ptr(start), _ptr(length), _ptr(out)))
        return out

    def sign_pack(self, acc, table, n_seg: int, n_bytes: int):
        """Packed sign bits (uint8, ``n_bytes``) of the segments ``table`` (int64 ``(3, n_seg)``: element
        start, payload bit, length) of ``acc``."""
        out = self._torch.empty(n_bytes, dtype=self._torch.uint8, device=self.device)
        if n_bytes:
            self._launch("rog_sign_pack", _blocks(n_bytes, THREADS), (THREADS,),
                         (_ptr(acc), _ptr(table[0]), _ptr(table[1]), _ptr(table[2]), np.int32(n_seg), _ptr(out),
                          np.int64(n_bytes)))
        return out

    def sign_apply(self, data, table, scale, n_seg: int, n_bits: int, out) -> None:
        """``out[e] += -s if bit else s`` for every payload bit of ``data`` (``table`` as for :meth:`sign_pack`,
        ``scale`` float32 per segment)."""
        if n_bits and n_seg:
            self._launch("rog_sign_apply", _blocks(n_bits, THREADS), (THREADS,),
                         (_ptr(data), _ptr(table[0]), _ptr(table[1]), _ptr(table[2]), _ptr(scale), np.int32(n_seg),
                          _ptr(out), np.int64(n_bits)))

    def defsgdm(self, grad, params, mbuf, *, lr: float, momentum: float, weight_decay: float, nesterov: bool,
                acc=None, want_u: bool = True):
        """One DEFSGDM step (momentum buffer updated in place): returns ``u`` (or None when ``want_u`` is
        false), and adds it into ``acc`` when given, in the same pass."""
        n = mbuf.numel()
        for name, t in (("grad", grad), ("params", params), ("acc", acc)):
            if t is not None and (t.dtype != self._torch.float32 or t.device != mbuf.device or t.numel() != n
                                  or not t.is_contiguous()):
                raise ValueError(f"{name} must be a contiguous float32 tensor of {n} elements on {mbuf.device}, "
                                 f"got {t.dtype} {tuple(t.shape)} on {t.device}")
        u = self._torch.empty_like(mbuf) if want_u else None
        if n:
            self._launch("rog_defsgdm_acc", _blocks(n, THREADS), (THREADS,),
                         (_ptr(grad), _ptr(params), _ptr(mbuf), _ptr(u), _ptr(acc), np.float32(lr),
                          np.float32(momentum), np.float32(weight_decay), np.int32(bool(weight_decay)),
                          np.int32(bool(momentum)), np.int32(bool(nesterov)), np.int64(n)))
        return u


def segment_table(start: np.ndarray, pos: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The ``(3, k)`` int64 host table the pack and apply kernels read: element start, payload bit, length
    per segment, zero-length segments dropped (they own no bit)."""
    keep = np.asarray(lens) > 0
    return np.stack([np.asarray(start, dtype=np.int64)[keep], np.asarray(pos, dtype=np.int64)[keep],
                     np.asarray(lens, dtype=np.int64)[keep]])


def cupy_or_none():
    """cupy, or None when it is not installed or cannot reach a GPU."""
    try:
        import cupy  # noqa: PLC0415

        cupy.cuda.runtime.getDeviceCount()
        return cupy
    except Exception:  # noqa: BLE001 - any failure means: use the torch fallback
        return None


_STREAMS: dict = {}  # torch stream pointer -> cupy's view of it


def cupy_stream(cp, device):
    """cupy's view of torch's current stream on ``device`` (made once per stream), to enter with ``with``:
    cupy work then runs in order with torch's."""
    import torch

    ts = torch.cuda.current_stream(device)
    got = _STREAMS.get(ts.cuda_stream)
    if got is None:
        from_external = getattr(cp.cuda.Stream, "from_external", None)  # cupy >= 14: the CUDA stream protocol
        try:
            got = from_external(ts) if from_external is not None else None
        except Exception:  # noqa: BLE001 - a torch without the protocol: fall back to the raw pointer
            got = None
        if got is None:
            got = cp.cuda.ExternalStream(ts.cuda_stream, ts.device.index)
        _STREAMS[ts.cuda_stream] = got
    return got


_COMPILED: dict = {}  # device index -> CudaKernels (compiled once per process and device)


def kernels_for(device, cp) -> CudaKernels | None:
    """The kernels for CUDA ``device`` (compiled on first use), or None when ``cp`` (cupy) is None or the
    device is not CUDA."""
    import torch

    device = torch.device(device)
    if cp is None or device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    got = _COMPILED.get(index)
    if got is None:
        got = _COMPILED[index] = CudaKernels(cp, torch.device("cuda", index))
    return got
