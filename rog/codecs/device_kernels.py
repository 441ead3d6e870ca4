"""The device codec's CUDA kernels (cupy ``RawKernel``): a push or a pull in a handful of launches.

The torch path of :mod:`rog.codecs.device_fused` needs a fixed number of operations per push, but that number
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
- ``rog_sign_apply``: one thread per payload byte, its 8 bits in order; ``out[e] += (bit ? -s : s)`` with ``s``
  the segment's ``float32(scale * weight)`` (rows of one batch are disjoint, so no two threads write one element).
- ``rog_any_nonfinite``: the gradient's finiteness check in one scan (a flag set where an exponent is all ones).
- ``rog_defsgdm_acc``: :func:`rog.local_update.defsgdm_update` in one pass, ``u`` written and optionally
  added into the accumulator.
- ``rog_frame_crc``: each chunk's frame crc32 (zlib's) continued over its payload bytes from the crc of the
  frame's header and segment table, one CUDA block per chunk.  The raw CRC register is linear over GF(2):
  thread ``t`` takes the crc of its own run of bytes from a zero register, moves it past the bytes that follow
  (a run of ``m`` zero bytes is a 32 x 32 bit matrix, applied as products of the matrices of ``2^k`` zero bytes),
  and the block xors the parts with the seed moved past all ``n`` bytes.  So the frames' crc costs no host
  pass over the payload.

Every float operation is an explicit ``__fadd_rn`` / ``__fmul_rn`` (never a fused multiply-add), so the
results are the numpy codec's bit for bit.  Tensors stay torch tensors: kernels receive their device
pointers and run on torch's current stream.
"""

from __future__ import annotations

import numpy as np

THREADS_SUM = 1024  # threads per block of the block-sum kernel (its partials fold in shared memory)
THREADS = 256  # threads per block of the element-wise kernels
THREADS_CRC = 1024  # threads per block (one block per chunk) of the crc kernel; a power of two, <= 1024
CRC_POLY = 0xEDB88320  # zlib's crc32, reflected

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
    // one thread per payload byte: one search for its first bit, then its 8 bits in order
    const long long byte = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long p0 = byte * 8;
    if (p0 >= n_bits) return;
    const unsigned bits = data[byte];
    int i = find_segment(pos, n_seg, p0);
    for (int k = 0; k < 8 && p0 + k < n_bits; k++) {
        const long long p = p0 + k;
        while (i + 1 < n_seg && pos[i + 1] <= p) i++;
        const long long off = p - pos[i];
        if (off < 0 || off >= len[i]) continue;  // a chunk's padding bits
        const float s = scale[i];
        const float v = (bits >> (7 - k)) & 1u ? -s : s;
        const long long e = start[i] + off;
        out[e] = __fadd_rn(out[e], v);
    }
}

__global__ void rog_any_nonfinite(const float* __restrict__ x, long long n, unsigned* __restrict__ flag) {
    // flag[0] = 1 when some x is an infinity or a NaN (all exponent bits set); flag[0] must start at 0
    const long long stride = (long long)gridDim.x * blockDim.x;
    unsigned bad = 0;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride)
        bad |= (__float_as_uint(x[j]) & 0x7F800000u) == 0x7F800000u;
    if (bad) flag[0] = 1u;
}

__device__ __forceinline__ unsigned gf2_times(const unsigned* __restrict__ m, unsigned v) {
    // the 32 x 32 bit matrix m (m[i]: the image of bit i) times v
    unsigned r = 0;
    for (int i = 0; v; i++, v >>= 1)
        if (v & 1u) r ^= m[i];
    return r;
}

__device__ __forceinline__ unsigned crc_past_zeros(const unsigned* __restrict__ pow2, unsigned v, long long n) {
    // the raw crc register v after n zero bytes; pow2 + 32 * k: the matrix of 2^k zero bytes
    for (int k = 0; n; k++, n >>= 1)
        if (n & 1) v = gf2_times(pow2 + 32 * k, v);
    return v;
}

__global__ void rog_frame_crc(const unsigned char* __restrict__ data, const long long* __restrict__ first,
                              const long long* __restrict__ count, const unsigned* __restrict__ seed,
                              const unsigned* __restrict__ pow2_global, unsigned* __restrict__ out) {
    __shared__ unsigned table[256];
    __shared__ unsigned pow2[1024];
    __shared__ unsigned part[1024];
    const int c = blockIdx.x, t = threadIdx.x, T = blockDim.x;
    for (int i = t; i < 256; i += T) {
        unsigned r = (unsigned)i;
        for (int k = 0; k < 8; k++) r = (r >> 1) ^ (0xEDB88320u & (0u - (r & 1u)));
        table[i] = r;
    }
    for (int i = t; i < 1024; i += T) pow2[i] = pow2_global[i];
    __syncthreads();
    const long long n = count[c], per = (n + T - 1) / T;
    const long long a = (long long)t * per < n ? (long long)t * per : n;
    const long long b = a + per < n ? a + per : n;
    const unsigned char* d = data + first[c];
    unsigned r = 0;
    for (long long i = a; i < b; i++) r = table[(r ^ d[i]) & 0xFFu] ^ (r >> 8);
    r = crc_past_zeros(pow2, r, n - b);
    if (t == 0) r ^= crc_past_zeros(pow2, ~seed[c], n);
    part[t] = r;
    for (int h = T >> 1; h >= 1; h >>= 1) {
        __syncthreads();
        if (t < h) part[t] ^= part[t + h];
    }
    if (t == 0) out[c] = ~part[0];
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

_NAMES = ("rog_block_sums", "rog_sign_pack", "rog_sign_apply", "rog_defsgdm_acc", "rog_frame_crc", "rog_any_nonfinite")
FINITE_BLOCKS = 264  # blocks of the finiteness scan (a grid-stride loop): two per SM of an H100 (132 SMs)


def crc_zero_matrices() -> np.ndarray:
    """uint32 ``(32, 32)``: row ``k`` is the bit matrix (column ``i`` = image of bit ``i``) that moves a raw crc32
    register past ``2^k`` zero bytes."""
    def one_zero_byte(v: int) -> int:
        for _ in range(8):
            v = (v >> 1) ^ (CRC_POLY if v & 1 else 0)
        return v

    def times(m: list, v: int) -> int:
        r, i = 0, 0
        while v:
            if v & 1:
                r ^= m[i]
            v >>= 1
            i += 1
        return r

    rows = [[one_zero_byte(1 << i) for i in range(32)]]
    for _ in range(31):
        m = rows[-1]
        rows.append([times(m, m[i]) for i in range(32)])
    return np.array(rows, dtype=np.uint32)


def _ptr(t) -> np.uint64:
    """A tensor's device address as a kernel pointer argument (0: a null pointer)."""
    return np.uint64(0 if t is None else t.data_ptr())


def mark_written(torch, *tensors) -> None:
    """Bump the version counter of tensors a kernel wrote through their pointers: torch's in-place operations
    bump it, raw writes do not, and caches keyed on ``_version`` (the codec's scales) must see the write."""
    bump = getattr(getattr(torch.autograd, "graph", None), "increment_version", None)
    for t in tensors:
        if t is None:
            continue
        if bump is not None:
            bump(t)
        else:  # torch without increment_version: an in-place no-op (x * 1 is x, bit for bit) bumps it
            t.mul_(1)


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

    def sign_pack(self, acc, table, n_seg: int, n_bytes: int, out=None):
        """Packed sign bits (uint8, ``n_bytes``) of the segments ``table`` (int64 ``(3, n_seg)``: element
        start, payload bit, length) of ``acc``, written into ``out`` (uint8, at least ``n_bytes``) when given."""
        if out is None:
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
            self._launch("rog_sign_apply", _blocks((n_bits + 7) // 8, THREADS), (THREADS,),
                         (_ptr(data), _ptr(table[0]), _ptr(table[1]), _ptr(table[2]), _ptr(scale), np.int32(n_seg),
                          _ptr(out), np.int64(n_bits)))
            mark_written(self._torch, out)

    def all_finite(self, x) -> bool:
        """Whether every value of the float32 device tensor ``x`` is finite (one scan, one 4-byte copy back)."""
        flag = self._torch.zeros(1, dtype=self._torch.int32, device=self.device)
        n = x.numel()
        if n:
            self._launch("rog_any_nonfinite", (min(FINITE_BLOCKS, _blocks(n, THREADS)[0]),), (THREADS,),
                         (_ptr(x), np.int64(n), _ptr(flag)))
        return not bool(flag.item())

    def frame_crc(self, data, first, count, seed, n_chunks: int, out) -> None:
        """``out[c] = zlib.crc32(data[first[c] : first[c] + count[c]], seed[c])`` for every chunk ``c``
        (``first`` / ``count`` int64, ``seed`` and ``out`` 32-bit device tensors)."""
        pow2 = getattr(self, "_crc_pow2", None)
        if pow2 is None:
            pow2 = self._crc_pow2 = self._torch.as_tensor(crc_zero_matrices().view(np.int32).reshape(-1),
                                                          device=self.device)
        if n_chunks:
            self._launch("rog_frame_crc", (int(n_chunks),), (THREADS_CRC,),
                         (_ptr(data), _ptr(first), _ptr(count), _ptr(seed), _ptr(pow2), _ptr(out)))

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
            mark_written(self._torch, mbuf, u, acc)
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
