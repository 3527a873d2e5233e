"""NumPy kernels of the popxl random ops, registered by op class (see `xl.runtime.kernels`).

The generator is counter-based: NumPy's `Philox` bit generator keyed by the seed's value,
its counter starting at 0 for every op. A result depends only on the seed's value, the
op's properties and the result's shape: not on the plan, the order replicas run in,
earlier steps, or how many times the program was compiled.

- key: `[seed[0] << 32 | seed[1], stream]` (`seed[0]` the most significant word, as
  `popxl.create_seeds` splits a uint64), `stream` 0 for uniform samples and dropout
  masks, 1 for normal samples, 2 for derived seeds;
- uniform `u` in [0, 1): the top 53 bits of each 64-bit word times 2**-53;
  `random_uniform` is `low + (high - low) u` rounded to the result dtype (kept below
  `high`); dropout drops element `i` when `u[i] < ratio` and scales the others by
  `1 / (1 - ratio)`: `x * m` with `m` the scale (in x's dtype) or 0;
- normal: Box-Muller on pairs of uniforms, `(r cos t, r sin t)` with
  `r = sqrt(-2 log(1 - u0))`, `t = 2 pi u1`, interleaved;
- `modify_random_seed(seed, m)`: the word at counter `m` of stream 2, split into two
  uint32 (most significant first).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from xl.dialects.popxl import (
    DropoutOp,
    ModifyRandomSeedOp,
    RandomNormalOp,
    RandomUniformOp,
    ShapedDropoutOp,
)
from xl.runtime.kernels.registry import Kernel, kernel

UNIFORM_STREAM = 0
NORMAL_STREAM = 1
SEED_STREAM = 2
_U53 = 2.0**-53


def seed_value(seed: np.ndarray) -> int:
    """The uint64 a `uint32[2]` seed stands for (`seed[0]` the most significant word)."""
    hi, lo = (int(v) for v in np.asarray(seed, np.uint32).reshape(2))
    return (hi << 32) | lo


def random_bits(seed: np.ndarray, n: int, stream: int, counter: int = 0) -> np.ndarray:
    """`n` 64-bit words of the Philox stream `stream` of `seed`, from `counter`."""
    bg = np.random.Philox(key=[seed_value(seed), stream], counter=counter)
    return bg.random_raw(n)


def uniform(seed: np.ndarray, n: int, stream: int = UNIFORM_STREAM) -> np.ndarray:
    """`n` float64 samples of U[0, 1): the top 53 bits of each word times 2**-53.

    `Generator(Philox).random` computes exactly that from the same words (NumPy's
    `next_double`), about 5x faster than converting `random_raw` words here;
    tests/runtime/test_ops_random.py checks both agree bit for bit.
    """
    bg = np.random.Philox(key=[seed_value(seed), stream], counter=0)
    return np.random.Generator(bg).random(n)


def uniform_from_bits(seed: np.ndarray, n: int, stream: int = UNIFORM_STREAM) -> np.ndarray:
    """`uniform` written out from the raw 64-bit words (the definition)."""
    bits = random_bits(seed, n, stream)
    bits >>= np.uint64(11)
    return bits.astype(np.float64) * _U53


def normal(seed: np.ndarray, n: int) -> np.ndarray:
    """`n` float64 samples of N(0, 1) (Box-Muller)."""
    pairs = (n + 1) // 2
    u = uniform(seed, 2 * pairs, NORMAL_STREAM).reshape(pairs, 2)
    r = np.sqrt(-2.0 * np.log1p(-u[:, 0]))  # 1 - u0 is in (0, 1]
    t = 2.0 * math.pi * u[:, 1]
    z = np.empty((pairs, 2), np.float64)
    np.multiply(r, np.cos(t), out=z[:, 0])
    np.multiply(r, np.sin(t), out=z[:, 1])
    return z.reshape(-1)[:n]


def keep_threshold(ratio: float) -> np.uint64:
    """The smallest 64-bit word whose uniform `u` is `>= ratio`: `keep_mask` compares words.

    `u = (w >> 11) * 2**-53` and `ratio * 2**53` are exact, so `u >= ratio` holds exactly
    when the integer `w >> 11` is at least `t = ceil(ratio * 2**53)`, that is when
    `w >= t << 11` (the 11 low bits cannot lift `w >> 11` past `t`). `t < 2**53` for a
    ratio below 1, so the threshold fits in 64 bits.
    """
    if not 0.0 <= ratio < 1.0:  # the ops verify this; a mask of another ratio is not defined
        raise ValueError(f"dropout: ratio {ratio} must be in [0, 1)")
    return np.uint64(math.ceil(math.ldexp(ratio, 53)) << 11)


def keep_mask(seed: np.ndarray, shape: tuple[int, ...], ratio: float) -> np.ndarray:
    """The dropout mask of `shape` (True: kept): `uniform(seed, n) >= ratio`, computed on
    the raw words (`keep_threshold`) without converting them to floats."""
    return _keep(seed, shape, keep_threshold(ratio))


def _keep(seed: np.ndarray, shape: tuple[int, ...], threshold: np.uint64) -> np.ndarray:
    bits = random_bits(seed, math.prod(shape), UNIFORM_STREAM)
    return np.greater_equal(bits, threshold).reshape(shape)


class MaskCache:
    """Dropout masks drawn by one kernel, kept for the next kernel that asks for the same
    mask: a dropout's gradient is the same dropout of `dy` (same seed, shape and ratio), so
    the backward pass would draw every forward mask again (the Philox draw is nearly all of
    a dropout's cost). A mask is a pure function of (seed value, shape, threshold), so
    reusing one changes no value. An entry is dropped when it is used (the gradient is
    usually its only reuse; a recomputed forward draws again) and the oldest entries when
    the masks kept exceed `limit` bytes (one byte per element; a dropout run only forward,
    as in inference, never finds its mask again). The masks are read-only; the cache is
    shared by all kernels and threads (a lock guards its updates).
    """

    def __init__(self, limit: int = 32 << 20) -> None:
        self.limit = limit
        self.size = 0
        self._masks: OrderedDict[tuple[bytes, tuple[int, ...], int], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, seed: np.ndarray, shape: tuple[int, ...], threshold: np.uint64) -> np.ndarray:
        """`_keep(seed, shape, threshold)`, taken from the cache when an earlier call left it."""
        key = (np.asarray(seed, np.uint32).tobytes(), shape, int(threshold))
        with self._lock:
            m = self._masks.pop(key, None)
            if m is not None:
                self.size -= m.nbytes
                return m
        m = _keep(seed, shape, threshold)
        m.flags.writeable = False
        if m.nbytes <= self.limit:
            with self._lock:
                if key not in self._masks:
                    self._masks[key] = m
                    self.size += m.nbytes
                while self.size > self.limit:
                    _, old = self._masks.popitem(last=False)
                    self.size -= old.nbytes
        return m

    def clear(self) -> None:
        with self._lock:
            self._masks.clear()
            self.size = 0


MASKS = MaskCache()


@kernel(ModifyRandomSeedOp)
def _modify_random_seed(p: dict[str, Any]) -> Kernel:
    def k(seed: np.ndarray, modifier: np.ndarray, out: np.ndarray) -> None:
        (w,) = (int(v) for v in random_bits(seed, 1, SEED_STREAM, counter=int(modifier)))
        out[0] = w >> 32
        out[1] = w & 0xFFFFFFFF

    return k


@kernel(RandomUniformOp)
def _random_uniform(p: dict[str, Any]) -> Kernel:
    low, high = float(p.get("low", 0.0)), float(p.get("high", 1.0))

    def k(seed: np.ndarray, out: np.ndarray) -> None:
        u = uniform(seed, out.size).reshape(out.shape)
        u *= high - low
        u += low
        np.copyto(out, u, casting="unsafe")
        if low < high:  # rounding to the result dtype may reach `high`
            below = np.nextafter(out.dtype.type(high), out.dtype.type(low))
            np.minimum(out, below, out=out)

    return k


@kernel(RandomNormalOp)
def _random_normal(p: dict[str, Any]) -> Kernel:
    mean, std = float(p.get("mean", 0.0)), float(p.get("std", 1.0))

    def k(seed: np.ndarray, out: np.ndarray) -> None:
        z = normal(seed, out.size).reshape(out.shape)
        z *= std
        z += mean
        np.copyto(out, z, casting="unsafe")

    return k


def _dropout(ratio: float, mask_shape: tuple[int, ...] | None) -> Kernel:
    """`x * m`, `m = where(keep, scale, 0)` in x's dtype, computed as `(x * keep) * scale`:
    the same values bit for bit (`x * 1` is `x`, and `x * 0` is a zero of x's sign or NaN,
    which the positive finite scale leaves as they are), without building `m`. The mask
    costs the Philox draw and one comparison of its words (`keep_mask`), and the gradient
    finds the forward's mask in `MASKS` instead of drawing it again."""
    scale = 1.0 / (1.0 - ratio)
    threshold = keep_threshold(ratio)  # a ratio outside [0, 1) fails when the plan is built

    def k(x: np.ndarray, seed: np.ndarray, out: np.ndarray) -> None:
        keep = MASKS.keep(seed, x.shape if mask_shape is None else mask_shape, threshold)
        np.multiply(x, keep, out=out)
        if scale != 1.0:
            np.multiply(out, x.dtype.type(scale), out=out)

    return k


@kernel(DropoutOp)
def _dropout_kernel(p: dict[str, Any]) -> Kernel:
    return _dropout(float(p["ratio"]), None)


@kernel(ShapedDropoutOp)
def _shaped_dropout(p: dict[str, Any]) -> Kernel:
    return _dropout(float(p["ratio"]), tuple(int(d) for d in p["shape"]))
