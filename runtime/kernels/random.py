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
  `1 / (1 - ratio)`;
- normal: Box-Muller on pairs of uniforms, `(r cos t, r sin t)` with
  `r = sqrt(-2 log(1 - u0))`, `t = 2 pi u1`, interleaved;
- `modify_random_seed(seed, m)`: the word at counter `m` of stream 2, split into two
  uint32 (most significant first).
"""

from __future__ import annotations

import math
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


def keep_mask(seed: np.ndarray, shape: tuple[int, ...], ratio: float) -> np.ndarray:
    """The dropout mask of `shape` (True: kept)."""
    return uniform(seed, math.prod(shape)).reshape(shape) >= ratio


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
    scale = 1.0 / (1.0 - ratio)

    def k(x: np.ndarray, seed: np.ndarray, out: np.ndarray) -> None:
        keep = keep_mask(seed, x.shape if mask_shape is None else mask_shape, ratio)
        m = np.where(keep, x.dtype.type(scale), x.dtype.type(0))
        np.multiply(x, m, out=out)

    return k


@kernel(DropoutOp)
def _dropout_kernel(p: dict[str, Any]) -> Kernel:
    return _dropout(float(p["ratio"]), None)


@kernel(ShapedDropoutOp)
def _shaped_dropout(p: dict[str, Any]) -> Kernel:
    return _dropout(float(p["ratio"]), tuple(int(d) for d in p["shape"]))
