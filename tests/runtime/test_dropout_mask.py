"""Dropout's mask from the raw Philox words: the same values as its documented definition.

The definition (`xl.runtime.kernels.random`, written out again here from the text, not
the code): the words are NumPy's `Philox` keyed `[seed[0] << 32 | seed[1], 0]`, counter 0;
`u = (w >> 11) * 2**-53` in float64; element `i` is kept when `u[i] >= ratio`; the result is
`x * m`, `m` the scale `1 / (1 - ratio)` in x's dtype where kept, else 0. The kernel compares
the words with an integer threshold and multiplies by the mask and then by the scale; these
tests compare it bit for bit with that definition (NaN, infinities, signed zeros, values
whose scaled product overflows, float16/32/64, ratios exactly at a drawn `u`), in both
plans, and check the mask's statistics.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import popxl
from popxl import ops
from xl.compiler import compile_module
from xl.dialects.popxl import DropoutOp, ShapedDropoutOp
from xl.runtime.kernels import KERNELS
from xl.runtime.kernels.random import MASKS, MaskCache, keep_threshold


def ref_uniform(seed: np.ndarray, n: int) -> np.ndarray:
    """The definition's `u`, from the raw words, in float64."""
    hi, lo = int(seed[0]), int(seed[1])
    words = np.random.Philox(key=[(hi << 32) | lo, 0], counter=0).random_raw(n)
    return np.array([(int(w) >> 11) * 2.0**-53 for w in words], np.float64)


def ref_dropout(x: np.ndarray, seed: np.ndarray, ratio: float, mask_shape: tuple[int, ...] | None = None) -> np.ndarray:
    shape = x.shape if mask_shape is None else mask_shape
    keep = ref_uniform(seed, math.prod(shape)).reshape(shape) >= ratio
    m = np.where(keep, x.dtype.type(1.0 / (1.0 - ratio)), x.dtype.type(0))
    return x * m


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    u = np.dtype(f"u{got.dtype.itemsize}")
    np.testing.assert_array_equal(got.view(u), want.view(u))


def adversarial(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Normal values with NaN, +-inf, +-0 and values whose product with the scale overflows."""
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    big = np.finfo(dtype).max
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, big, -big, big / 1.5], dtype)
    idx = rng.choice(flat.size, size=min(flat.size, 4 * specials.size), replace=False)
    flat[idx] = np.resize(specials, idx.size)
    return x


def run_kernel(x: np.ndarray, seed: np.ndarray, ratio: float, mask_shape: tuple[int, ...] | None = None) -> np.ndarray:
    if mask_shape is None:
        k = KERNELS[DropoutOp]({"ratio": ratio})
    else:
        k = KERNELS[ShapedDropoutOp]({"ratio": ratio, "shape": mask_shape})
    out = np.full_like(x, 7)
    with np.errstate(all="ignore"):
        k(x, seed, out)
    return out


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.5, 0.9])
def test_kernel_equals_the_definition(dtype: type, ratio: float) -> None:
    rng = np.random.default_rng(3)
    seed = np.array([0xDEADBEEF, 12345], np.uint32)
    x = adversarial(rng, (7, 33), dtype)
    with np.errstate(all="ignore"):
        want = ref_dropout(x, seed, ratio)
    assert_same_bits(run_kernel(x, seed, ratio), want)
    # in place (the plan may give the output the input's storage)
    y = x.copy()
    k = KERNELS[DropoutOp]({"ratio": ratio})
    with np.errstate(all="ignore"):
        k(y, seed, y)
    assert_same_bits(y, want)


def test_shaped_dropout_equals_the_definition() -> None:
    rng = np.random.default_rng(4)
    seed = np.array([1, 2], np.uint32)
    x = adversarial(rng, (6, 5, 8), np.float32)
    for mask_shape in [(6, 1, 8), (1, 5, 1), (5, 8), (6, 5, 8)]:
        with np.errstate(all="ignore"):
            want = ref_dropout(x, seed, 0.3, mask_shape)
        assert_same_bits(run_kernel(x, seed, 0.3, mask_shape), want)


@settings(max_examples=40, deadline=None)
@given(
    hi=st.integers(0, 2**32 - 1),
    lo=st.integers(0, 2**32 - 1),
    n=st.integers(1, 300),
    pick=st.integers(0, 299),
)
def test_ratio_exactly_at_a_drawn_uniform(hi: int, lo: int, n: int, pick: int) -> None:
    """A ratio equal to a drawn `u` keeps that element (`u >= ratio`); the next float up
    drops it: the integer threshold is exact at the boundary."""
    seed = np.array([hi, lo], np.uint32)
    u = ref_uniform(seed, n)
    x = np.ones(n, np.float64)
    i = pick % n
    for ratio in (float(u[i]), float(np.nextafter(u[i], 1.0)), float(np.nextafter(u[i], 0.0))):
        if not 0.0 <= ratio < 1.0:
            continue
        got = run_kernel(x, seed, ratio)
        assert_same_bits(got, ref_dropout(x, seed, ratio))
        assert (got[i] != 0) == (u[i] >= ratio)


def test_threshold_is_the_smallest_kept_word() -> None:
    for ratio in (0.0, 2.0**-53, 0.1, 0.5, 1.0 - 2.0**-53, 1e-300):
        t = int(keep_threshold(ratio))
        assert (t >> 11) * 2.0**-53 >= ratio
        if t > 0:
            assert ((t - 1) >> 11) * 2.0**-53 < ratio
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="ratio"):
            keep_threshold(bad)


@pytest.mark.parametrize("ratio", [0.1, 0.5])
def test_mask_statistics(ratio: float) -> None:
    """The drop fraction within 5 standard errors, and no correlation between neighbours
    (a mask that repeats or is shifted by one word would show)."""
    n = 200_000
    seed = np.array([77, 88], np.uint32)
    kept = run_kernel(np.ones(n, np.float32), seed, ratio) != 0
    se = math.sqrt(ratio * (1 - ratio) / n)
    assert abs((1 - kept.mean()) - ratio) < 5 * se
    a, b = kept[:-1].astype(np.float64), kept[1:].astype(np.float64)
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(n)
    # another seed gives another mask (agreement at chance level)
    other = run_kernel(np.ones(n, np.float32), seed + np.uint32(1), ratio) != 0
    agree = (kept == other).mean()
    p_agree = ratio**2 + (1 - ratio) ** 2
    assert abs(agree - p_agree) < 5 * math.sqrt(p_agree * (1 - p_agree) / n)


@pytest.mark.parametrize("optimize", [True, False])
def test_both_plans_equal_the_definition(optimize: bool) -> None:
    rng = np.random.default_rng(5)
    x = adversarial(rng, (16, 4, 9, 9), np.float32)
    seed = np.array([99, 1], np.uint32)
    ir = popxl.Ir()
    with ir.main_graph:
        xt = ops.host_load(popxl.h2d_stream(x.shape, popxl.float32, "x"))
        st_ = ops.host_load(popxl.h2d_stream((2,), popxl.uint32, "seed"))
        ops.host_store(popxl.d2h_stream(x.shape, popxl.float32, "y"), ops.dropout(xt, st_, 0.2))
        ops.host_store(popxl.d2h_stream(x.shape, popxl.float32, "z"), ops.shaped_dropout(xt, st_, (16, 4, 1, 9), 0.3))
    with np.errstate(all="ignore"):
        out = compile_module(ir._module, optimize=optimize).run({"x": x, "seed": seed})
        assert_same_bits(out["y"], ref_dropout(x, seed, 0.2))
        assert_same_bits(out["z"], ref_dropout(x, seed, 0.3, (16, 4, 1, 9)))


def test_mask_cache_gives_each_mask_once_more_and_stays_bounded() -> None:
    """The gradient's dropout finds the forward's mask (the same object, the definition's
    values); an entry is dropped when used; the oldest go beyond the byte limit."""
    cache = MaskCache(limit=1000)
    seed = np.array([5, 6], np.uint32)
    t = keep_threshold(0.25)
    want = ref_uniform(seed, 300).reshape(20, 15) >= 0.25
    first = cache.keep(seed, (20, 15), t)
    np.testing.assert_array_equal(first, want)
    assert not first.flags.writeable and cache.size == 300
    again = cache.keep(seed, (20, 15), t)
    assert again is first and cache.size == 0  # used: dropped
    third = cache.keep(seed, (20, 15), t)
    assert third is not first
    np.testing.assert_array_equal(third, want)
    # another shape, seed or ratio is another mask
    other = [cache.keep(seed, (15, 20), t), cache.keep(seed + np.uint32(1), (20, 15), t)]
    other.append(cache.keep(seed, (20, 15), keep_threshold(0.5)))
    assert cache.size <= 1000  # four masks of 300 bytes: the oldest went
    assert cache.keep(seed, (20, 15), t) is not third  # evicted: drawn again, same values
    np.testing.assert_array_equal(other[0], (ref_uniform(seed, 300) >= 0.25).reshape(15, 20))
    big = cache.keep(seed, (2000,), t)  # larger than the limit: not kept
    assert cache.size <= 1000 and cache.keep(seed, (2000,), t) is not big


def test_forward_and_gradient_share_the_mask_in_a_program() -> None:
    """A dropout and its gradient (same seed) in one program: the gradient's values are
    `dy * m` with the definition's mask, whether or not the mask was found in the cache."""
    x = np.random.default_rng(6).standard_normal((32, 16)).astype(np.float32)
    dy = np.random.default_rng(7).standard_normal((32, 16)).astype(np.float32)
    seed = np.array([3, 4], np.uint32)
    for cached in (True, False):
        MASKS.clear()
        ir = popxl.Ir()
        with ir.main_graph:
            xt = ops.host_load(popxl.h2d_stream(x.shape, popxl.float32, "x"))
            dyt = ops.host_load(popxl.h2d_stream(x.shape, popxl.float32, "dy"))
            st_ = ops.host_load(popxl.h2d_stream((2,), popxl.uint32, "seed"))
            y = ops.dropout(xt, st_, 0.4)
            g = ops.dropout(dyt, st_, 0.4)  # what autodiff builds for the gradient
            ops.host_store(popxl.d2h_stream(x.shape, popxl.float32, "y"), y)
            ops.host_store(popxl.d2h_stream(x.shape, popxl.float32, "g"), g)
        MASKS.limit = (32 << 20) if cached else 0
        try:
            out = compile_module(ir._module).run({"x": x, "dy": dy, "seed": seed})
        finally:
            MASKS.limit = 32 << 20
        assert_same_bits(out["y"], ref_dropout(x, seed, 0.4))
        assert_same_bits(out["g"], ref_dropout(dy, seed, 0.4))
        assert MASKS.size == 0
