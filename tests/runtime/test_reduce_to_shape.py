"""`popxl.reduce_to_shape` (the sum of a broadcast operand's gradient, e.g. a bias gradient)
in both plans against float64 NumPy: one `np.add.reduce` into a view of the output, or (the
optimised plan, leading axes, few columns) one gemv `ones @ x`, for leading and inner
broadcast axes, strided inputs and outputs, float16/32/64 and int32."""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.test_matmul_kernels import run_kernel
from xl.dialects.popxl import ReduceToShapeOp
from xl.runtime.codegen import Gen
from xl.runtime.plan_matmul import row_sum_lines

CASES = [
    ((64, 16), (16,)),  # a bias gradient (the optimised plan: BLAS gemv)
    ((4, 64, 24), (24,)),
    ((300, 2000), (2000,)),  # many columns: np.add.reduce
    ((2, 5, 3), (5, 1)),
    ((4, 1, 6), (1, 6)),
    ((3, 4), (3, 4)),  # nothing to reduce: a copy
    ((2, 3, 4), (1, 3, 1)),
    ((0, 4), (4,)),
]


def ref(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = x.ndim - len(shape)
    s = x.astype(np.float64).sum(axis=tuple(range(lead)))
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and s.shape[i] != 1)
    return s.sum(axis=axes, keepdims=True).reshape(shape)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
@pytest.mark.parametrize(("xs", "os"), CASES)
def test_reduce_to_shape(dtype: type, optimize: bool, xs: tuple[int, ...], os: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    for layout in ("contiguous", "transposed"):
        x = rng.standard_normal(xs).astype(dtype)
        if layout == "transposed":
            x = np.ascontiguousarray(x.T).T  # the same values, column-major
        out = np.full(os, np.nan, dtype)
        run_kernel(ReduceToShapeOp.name, [x], [out], optimize)
        n = max(x.size // max(out.size, 1), 1)
        want = ref(x, os)
        # a sum of n terms, each addition rounded in the dtype: |error| <= n u sum|x|
        unit = float(np.finfo(dtype).eps) / 2
        bound = n * unit * ref(np.abs(x), os)
        err = np.abs(out.astype(np.float64) - want)
        assert np.all(err <= bound), (layout, float((err - bound).max()))


@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_strided_output_and_ints(optimize: bool) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 5)).astype(np.float32)
    base = np.full((5, 2), np.nan, np.float32)
    out = base[:, 0]  # a strided output
    run_kernel(ReduceToShapeOp.name, [x], [out], optimize)
    np.testing.assert_allclose(out, x.astype(np.float64).sum(0), rtol=1e-6)
    assert np.isnan(base[:, 1]).all()  # nothing else written
    xi = rng.integers(-(2**30), 2**30, (6, 3), dtype=np.int32)
    oi = np.zeros((3,), np.int32)
    run_kernel(ReduceToShapeOp.name, [xi], [oi], optimize)
    wrapped = (xi.astype(np.int64).sum(0) + 2**31) % 2**32 - 2**31  # int32 sums wrap
    np.testing.assert_array_equal(oi, wrapped)


def test_bias_gradient_is_one_gemv() -> None:
    """What the optimised plan generates for `[B, T, C] -> [C]`: one matmul of a ones vector."""
    g = Gen()
    x, out = np.zeros((4, 64, 24), np.float32), np.zeros((24,), np.float32)
    lines = row_sum_lines(g, x, out, 256)
    assert lines is not None and len(lines) == 1 and "matmul" in lines[0]
    args = [g.ns[n] for n in lines[0].split("(", 1)[1].rstrip(")").split(", ")]
    assert [a.shape for a in args] == [(256,), (256, 24), (24,)] and np.all(args[0] == 1)
    assert np.shares_memory(args[1], x) and np.shares_memory(args[2], out)
    assert row_sum_lines(g, x.astype(np.float16), out.astype(np.float16), 256) is None
    assert row_sum_lines(g, np.zeros((8, 2000), np.float32), np.zeros(2000, np.float32), 8) is None
