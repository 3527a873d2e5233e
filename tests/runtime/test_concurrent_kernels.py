"""The accumulator templates of the generated plan (`xl.runtime.plan_templates`) give the
bits of the kernels they replace (`xl.runtime.kernels`), on hard values: zeros of both
signs, infinities, float16 overflow and subnormals (float16 Adam moments of small
gradients, as in seed 003's pipelined MNIST, where the kernels' half loops were most of the
step). Each template is run on its own generated lines and compared with the kernel."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from xdsl.dialects.builtin import MemRefType, f16, f32

from xl.dialects import rt
from xl.dialects.rt_kernels import kernel_class
from xl.runtime import plan_templates as _plan_templates  # noqa: F401  (registers the templates)
from xl.runtime.codegen import TEMPLATES, Gen, K
from xl.runtime.float16 import half_rounder
from xl.runtime.kernels import KERNELS


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    a = (rng.standard_normal(shape) * 10.0 ** rng.integers(-30, 6, shape)).astype(np.float32)
    a.flat[:6] = [0.0, -0.0, np.inf, -np.inf, 65504.0, 1e-8]
    with np.errstate(over="ignore"):
        return a.astype(dtype)


CASES = [
    ("popxl.accumulate_moving_average_", np.float16, {"f": 0.9}),
    ("popxl.accumulate_moving_average_", np.float32, {"f": 0.9}),
    ("popxl.accumulate_moving_average_square_", np.float16, {"f": 0.999}),
    ("popxl.accumulate_moving_average_square_", np.float32, {"f": 0.999}),
    ("popxl.accumulate_mean_", np.float32, {"step": 3.0}),
    ("popxl.accumulate_", np.float32, {"f": 0.5}),
    ("popxl.accumulate_", np.float32, {}),
]


@pytest.mark.parametrize("name,dtype,props", CASES)
def test_accumulator_template_bits_equal_the_kernel(name: str, dtype: Any, props: dict[str, Any]) -> None:
    rng = np.random.default_rng(0)
    shape = (37, 65)
    t0, x = _values(rng, shape, dtype), _values(rng, shape, np.float32)
    cls = kernel_class(name)
    assert cls is not None
    p = {**props, "operand_segments": (1, 1, 0)}
    expected = t0.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inf * 0 and overflow, in both
        KERNELS[cls](dict(p))(expected, x, expected)
        g = Gen()
        tv = rt.AllocOp(MemRefType(f16 if dtype == np.float16 else f32, shape)).result
        xv = rt.AllocOp(MemRefType(f32, shape)).result
        got = t0.copy()
        g.set_buffer(tv, got)
        g.set_buffer(xv, x)
        lines = TEMPLATES[cls](g, K(name, cls, [tv, xv], [tv]), [g.buf(tv), g.buf(xv)], [g.buf(tv)], dict(p))
        assert lines is not None  # the template applies
        exec("\n".join(lines), dict(g.ns))
    bits = np.uint16 if dtype == np.float16 else np.uint32
    np.testing.assert_array_equal(got.view(bits), expected.view(bits))
    assert not np.array_equal(got, t0)  # it did update


def test_half_rounder_equals_numpy_cast() -> None:
    """float32 -> float16 by integer passes == NumPy's cast, bit for bit: random bit
    patterns (every class: NaN, infinities, overflow, normal, subnormal, zero, both signs)
    and every float32 in windows around each float16 exponent boundary."""
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)]
    for e in range(100, 145):  # float32 exponents around the float16 range
        base = np.uint32(e << 23)
        parts.append(np.arange(base - 4096, base + 4096, dtype=np.uint64).astype(np.uint32))
        parts.append(parts[-1] | np.uint32(0x80000000))
    bits = np.concatenate(parts)
    w = bits.view(np.float32)
    with np.errstate(all="ignore"):
        expected = w.astype(np.float16)
        got = np.empty_like(expected)
        half_rounder(w.size)(w, got)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(np.uint16)[~nan], expected.view(np.uint16)[~nan])
