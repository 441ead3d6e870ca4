"""DeepTest-style image corruptions (Tian et al., ICSE 2018) on batches in [0, 1].

CRUDA adapts a classifier to images degraded the way a robot's camera sees them (fog, lighting).
These are small, pure functions on ``(N, C, H, W)`` float batches (numpy arrays or torch tensors; the
result has the input's type).  Every strength is a scalar or one value per image (shape ``(N,)``),
and strength 0 (1 for contrast) is the identity, so :func:`apply_noise` can draw a random strength
per image from a seed and compose several corruptions in the order given.
"""

from __future__ import annotations

import zlib
from typing import Callable, Mapping

import numpy as np

try:  # torch is optional here: the corruptions are numpy; tensors are converted at the edge
    import torch
except ImportError:  # pragma: no cover
    torch = None

__all__ = [
    "brightness",
    "contrast",
    "blur",
    "haze_field",
    "fog",
    "NOISES",
    "DEFAULT_RANGES",
    "parse_noise",
    "sample_strengths",
    "apply_noise",
]


# ---------------------------------------------------------------------------------------- helpers
def _to_numpy(x) -> tuple[np.ndarray, Callable]:
    """``(array, back)``: ``x`` as a float32 numpy batch and a function that restores its type."""
    if torch is not None and isinstance(x, torch.Tensor):
        device, dtype = x.device, x.dtype
        arr = x.detach().cpu().numpy().astype(np.float32, copy=False)
        return arr, lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)
    arr = np.asarray(x)
    if arr.dtype != np.float32 and arr.dtype != np.float64:
        arr = arr.astype(np.float32)
    return arr, lambda a: a


def _check_batch(x: np.ndarray, name: str = "x") -> None:
    if x.ndim != 4:
        raise ValueError(f"{name} must be an image batch of shape (N, C, H, W); got shape {x.shape}")


def _per_image(value, n: int, name: str) -> np.ndarray:
    """A scalar or ``(N,)`` strength as an ``(N, 1, 1, 1)`` array ready to broadcast."""
    v = np.asarray(value, dtype=np.float64)
    if v.ndim == 0:
        v = np.full(n, float(v))
    if v.shape != (n,):
        raise ValueError(f"{name} must be a scalar or one value per image (shape ({n},)); got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite; got {v}")
    return v.reshape(n, 1, 1, 1)


# ------------------------------------------------------------------------------- corruptions
def brightness(x, delta):
    """Lighting change: add ``delta`` to every pixel and clip to [0, 1] (DeepTest's brightness)."""
    a, back = _to_numpy(x)
    _check_batch(a)
    d = _per_image(delta, a.shape[0], "delta").astype(a.dtype)
    return back(np.clip(a + d, 0.0, 1.0))


def contrast(x, factor):
    """Contrast change: scale each image around its own mean (over all channels and pixels).

    ``factor`` < 1 flattens the image (it stays a convex mix of pixel and mean, so the mean is kept
    exactly), > 1 sharpens it; the result is clipped to [0, 1].
    """
    a, back = _to_numpy(x)
    _check_batch(a)
    f = _per_image(factor, a.shape[0], "factor")
    if np.any(f < 0):
        raise ValueError(f"factor must be >= 0 (0 gives a flat grey image, 1 the identity); got {f.ravel()}")
    mean = a.mean(axis=(1, 2, 3), keepdims=True, dtype=np.float64)
    out = mean + f * (a - mean)
    return back(np.clip(out, 0.0, 1.0).astype(a.dtype))


def _gaussian_kernels(sigma: np.ndarray) -> np.ndarray:
    """``(N, K)`` normalised 1-D Gaussian kernels, one per sigma; sigma 0 gives a unit impulse."""
    radius = int(np.ceil(3.0 * float(sigma.max()))) if sigma.size else 0
    taps = np.arange(-radius, radius + 1, dtype=np.float64)
    s = np.maximum(sigma, 1e-12)[:, None]
    k = np.exp(-0.5 * (taps[None, :] / s) ** 2)
    k[sigma == 0] = (taps == 0).astype(np.float64)
    return k / k.sum(axis=1, keepdims=True)


def blur(x, sigma):
    """Defocus: separable Gaussian blur with standard deviation ``sigma`` pixels (per image).

    Borders repeat the edge pixel, so a constant image stays exactly that constant; sigma 0 is the
    identity.  Kernels are cut at 3 sigma.
    """
    a, back = _to_numpy(x)
    _check_batch(a)
    n = a.shape[0]
    s = _per_image(sigma, n, "sigma").ravel()
    if np.any(s < 0):
        raise ValueError(f"sigma must be >= 0 pixels; got {s}")
    k = _gaussian_kernels(s)  # (N, K)
    r = (k.shape[1] - 1) // 2
    if r == 0:
        return back(a.copy())
    out = a.astype(np.float64)
    for axis in (3, 2):  # width, then height
        pad = [(0, 0)] * 4
        pad[axis] = (r, r)
        windows = np.lib.stride_tricks.sliding_window_view(np.pad(out, pad, mode="edge"), k.shape[1], axis=axis)
        out = np.einsum("nchwk,nk->nchw", windows, k)
    return back(out.astype(a.dtype))


def haze_field(n: int, height: int, width: int, rng: np.random.Generator, cells: int = 3) -> np.ndarray:
    """``(N, 1, H, W)`` smooth random haze density in [0, 1]: a coarse random grid, bilinearly upsampled.

    Each image's field is stretched to span [0, 1] so fog is always patchy (thick here, thin there),
    like real fog rather than a uniform grey veil.
    """
    if cells < 2:
        raise ValueError(f"cells must be >= 2 (a grid of at least 2x2 random knots); got {cells}")
    grid = rng.random((n, cells, cells))
    ys = np.linspace(0.0, cells - 1.0, height)
    xs = np.linspace(0.0, cells - 1.0, width)
    y0 = np.minimum(ys.astype(int), cells - 2)
    x0 = np.minimum(xs.astype(int), cells - 2)
    wy = (ys - y0)[None, :, None]
    wx = (xs - x0)[None, None, :]
    g00 = grid[:, y0][:, :, x0]
    g01 = grid[:, y0][:, :, x0 + 1]
    g10 = grid[:, y0 + 1][:, :, x0]
    g11 = grid[:, y0 + 1][:, :, x0 + 1]
    field = (g00 * (1 - wx) + g01 * wx) * (1 - wy) + (g10 * (1 - wx) + g11 * wx) * wy
    lo = field.min(axis=(1, 2), keepdims=True)
    hi = field.max(axis=(1, 2), keepdims=True)
    field = (field - lo) / np.maximum(hi - lo, 1e-12)
    return field[:, None, :, :]


def fog(x, strength, seed: int | np.random.Generator = 0, colour: float = 0.85, min_density: float = 0.4):
    """Fog: blend each pixel toward a light-grey ``colour`` by ``strength * density``.

    ``density`` is a smooth random haze field (:func:`haze_field`) in ``[min_density, 1]``, drawn from
    ``seed`` (an int or a ``numpy.random.Generator``).  Strength 0 is the identity, strength 1 with
    density 1 replaces the pixel by the fog colour.
    """
    a, back = _to_numpy(x)
    _check_batch(a)
    n, _, h, w = a.shape
    s = _per_image(strength, n, "strength")
    if np.any((s < 0) | (s > 1)):
        raise ValueError(f"strength must lie in [0, 1]; got {s.ravel()}")
    if not 0.0 <= colour <= 1.0:
        raise ValueError(f"colour must lie in [0, 1] (a grey level); got {colour}")
    if not 0.0 <= min_density <= 1.0:
        raise ValueError(f"min_density must lie in [0, 1]; got {min_density}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    density = min_density + (1.0 - min_density) * haze_field(n, h, w, rng)
    t = s * density  # (N, 1, H, W): how much fog each pixel gets
    return back((a + t * (colour - a)).astype(a.dtype))


# ------------------------------------------------------------------------------- composition
NOISES: dict[str, Callable] = {"fog": fog, "brightness": brightness, "contrast": contrast, "blur": blur}

# Per-image strength ranges (uniform) used by apply_noise.  Brightness draws a magnitude in the range
# and a random sign (darker or lighter); contrast values are factors (< 1 flattens).
DEFAULT_RANGES: dict[str, tuple[float, float]] = {
    "fog": (0.2, 0.5),
    "brightness": (0.05, 0.25),
    "contrast": (0.5, 0.85),
    "blur": (0.3, 0.8),
}


def parse_noise(spec: str) -> list[str]:
    """``"fog+brightness"`` -> ``["fog", "brightness"]``; ``""`` or ``"none"`` -> ``[]``."""
    if not isinstance(spec, str):
        raise ValueError(f"noise must be a string like 'fog+brightness'; got {spec!r}")
    if spec.strip().lower() in ("", "none", "clean"):
        return []
    names = [p.strip().lower() for p in spec.split("+")]
    bad = [p for p in names if p not in NOISES]
    if bad:
        raise ValueError(f"noise: unknown corruption(s) {bad} in {spec!r}; choose from {sorted(NOISES)} joined by '+'")
    if len(set(names)) != len(names):
        raise ValueError(f"noise: each corruption may appear once; got {spec!r}")
    return names


def _rng_for(seed: int, name: str) -> np.random.Generator:
    """An independent stream per (seed, corruption), so adding a corruption leaves the others' draws alone."""
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def sample_strengths(
    names: list[str], n: int, seed: int, ranges: Mapping[str, tuple[float, float]] | None = None
) -> dict[str, np.ndarray]:
    """Per-image strengths ``{name: (N,) array}`` drawn uniformly from ``ranges`` (default DEFAULT_RANGES)."""
    rs = dict(DEFAULT_RANGES)
    rs.update(ranges or {})
    out: dict[str, np.ndarray] = {}
    for name in names:
        lo, hi = (float(v) for v in rs[name])
        if not lo <= hi:
            raise ValueError(f"ranges[{name!r}] must be (low, high) with low <= high; got {rs[name]}")
        rng = _rng_for(seed, name)
        v = rng.uniform(lo, hi, n)
        if name == "brightness":
            v = v * rng.choice(np.array([-1.0, 1.0]), n)
        out[name] = v
    return out


def apply_noise(x, spec: str = "fog+brightness+contrast+blur", seed: int = 0, ranges=None):
    """Corrupt a batch with the corruptions in ``spec``, in that order, each with a random per-image
    strength (:func:`sample_strengths`); deterministic given ``seed``.  Returns the input's type."""
    a, back = _to_numpy(x)
    _check_batch(a)
    names = parse_noise(spec)
    strengths = sample_strengths(names, a.shape[0], seed, ranges)
    out = a
    for name in names:
        if name == "fog":
            out = fog(out, strengths[name], seed=_rng_for(seed, "fog-field"))
        else:
            out = NOISES[name](out, strengths[name])
    return back(np.ascontiguousarray(out, dtype=a.dtype))
