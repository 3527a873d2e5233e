"""float16 arithmetic for generated code, bit-identical to NumPy's half loops but faster:
exact widening through a table of every float16 value, and rounding float32 -> float16 in
integer passes over preallocated buffers (`half_rounder`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from xl.runtime.codegen import Gen, as_view

# every float16 value as float32, by its bits: widening through this table is exact and
# several times faster than NumPy's cast on subnormals (small Adam moments are subnormal)
_HALF_TO_FLOAT = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
_HALF_TO_FLOAT.flags.writeable = False


def widen(g: Gen, t: np.ndarray, wide: str) -> str:
    """A line writing float16 array `t` (bound) widened to float32 into `wide`."""
    bits = as_view(t, t.shape)
    assert bits is not None
    return f"{g.fn(np.take)}({g.bind(_HALF_TO_FLOAT, 'h2f')}, {g.view(bits.view(np.uint16))}, None, {wide}, 'clip')"


def half_rounder(size: int) -> Callable[[np.ndarray, np.ndarray], None]:
    """A function `r(w, t)` doing `t[...] = w` (float32 -> float16, C-contiguous, `size`
    elements) with the bits of NumPy's cast (round to nearest even, subnormals, signed
    zeros), in integer passes over preallocated buffers: NumPy's cast is an element loop,
    slow on values that become float16 subnormals. Overflow, infinities and NaN (rare) go
    through NumPy's cast. Checked against NumPy over every float32 whose float16 is finite."""
    a, sg, r, q = (np.empty(size, np.uint32) for _ in range(4))
    m = np.empty(size, np.bool_)
    af, qf = a.view(np.float32), q.view(np.float32)
    u32 = np.uint32
    half = np.float32(0.5)
    band, shr, add, copyto = np.bitwise_and, np.right_shift, np.add, np.copyto

    def r16(w: np.ndarray, t: np.ndarray) -> None:
        u = w.reshape(-1).view(np.uint32)
        band(u, u32(0x80000000), out=sg)
        band(u, u32(0x7FFFFFFF), out=a)
        # normal float16: drop 13 bits rounding to nearest even, rebias the exponent
        shr(a, u32(13), out=r)
        band(r, u32(1), out=r)
        add(r, a, out=r)
        add(r, u32(0xC8000FFF), out=r)  # (-112 << 23) + 0xfff, modulo 2**32
        shr(r, u32(13), out=r)
        # subnormal float16 and zero: the float adder rounds |w| + 0.5 to a multiple of 2**-24
        with np.errstate(invalid="ignore"):
            add(af, half, out=qf)
        np.subtract(q, u32(0x3F000000), out=q)
        np.less(a, u32(113 << 23), out=m)
        copyto(r, q, where=m)
        shr(sg, u32(16), out=sg)
        np.bitwise_or(r, sg, out=r)
        copyto(t.reshape(-1).view(np.uint16), r, casting="unsafe")
        np.greater_equal(a, u32(0x47800000), out=m)  # overflow, infinities, NaN
        if m.any():
            copyto(t.reshape(-1), w.reshape(-1), casting="unsafe", where=m)

    return r16


class HalfInPlace:
    """NumPy's `np.multiply(t, f, t)` (f a Python float) and `np.add(t, y, t, casting="unsafe")`
    (y float32) on a float16 array `t` of `size` elements, bit for bit: `t` widened exactly to
    float32 (`f` rounded to float16 first), one float32 operation (a product of two 11-bit
    significands is exact), rounded once to float16 (`half_rounder`), through float32 scratch
    `wide` instead of NumPy's element-by-element half loop."""

    def __init__(self, size: int, wide: np.ndarray) -> None:
        self.wide = wide.reshape(-1)
        self.round = half_rounder(size)

    def _widen(self, t: np.ndarray) -> np.ndarray:
        np.take(_HALF_TO_FLOAT, t.reshape(-1).view(np.uint16), None, self.wide, "clip")
        return self.wide

    def multiply(self, t: np.ndarray, f: float, out: np.ndarray) -> None:
        w = self._widen(t)
        np.multiply(w, np.float32(np.float16(f)), w)
        self.round(w, out)

    def add(self, t: np.ndarray, y: np.ndarray, out: np.ndarray, casting: str = "unsafe") -> None:
        w = self._widen(t)
        np.add(w, y.reshape(-1), w)
        self.round(w, out)
