"""A running mean of weight gradients folded into one accumulating gemm (`rt-fold-update`,
`xl.gemm_acc` with a step counter): both plans against a float64 NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.helpers.plan_tolerance import PLAN_TOL
from xl.compiler import DEFAULT_PIPELINE, compile_module, lower
from xl.dialects import rt
from xl.runtime.blas import gemm_acc_mean
from xl.runtime.kernels.core import accumulate_mean_

STEPS = 5


def _program(dtype: type, counter_dtype: type) -> popxl.Ir:
    """Per step: acc <- running mean of x^T @ dy (counter `n`), then n += 1."""
    ir = popxl.Ir()
    with ir.main_graph:
        acc = popxl.variable(np.full((16, 12), 0.5, dtype), name="acc")
        n = popxl.variable(np.zeros((), counter_dtype), name="n")
        x = ops.host_load(popxl.h2d_stream((8, 16), popxl.dtypes.dtype.as_dtype(dtype), "x"))
        dy = ops.host_load(popxl.h2d_stream((8, 12), popxl.dtypes.dtype.as_dtype(dtype), "dy"))
        ops.var_updates.accumulate_mean_(acc, ops.transpose(x) @ dy, n)
        ops.var_updates.accumulate_(n, popxl.constant(np.ones((), counter_dtype)))
    return ir


def _feeds(dtype: type) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [
        {"x": rng.normal(size=(8, 16)).astype(dtype), "dy": rng.normal(size=(8, 12)).astype(dtype)}
        for _ in range(STEPS)
    ]


def _reference(feeds: list[dict[str, np.ndarray]]) -> np.ndarray:
    acc = np.full((16, 12), 0.5)
    for s, f in enumerate(feeds):
        g = f["x"].astype(np.float64).T @ f["dy"].astype(np.float64)
        acc = acc * s / (s + 1) + g / (s + 1)
    return acc


@pytest.mark.parametrize("counter_dtype", [np.float32, np.int32])
def test_running_mean_folded_matches_reference(counter_dtype: type):
    dtype = np.float32
    ir = _program(dtype, counter_dtype)
    low = lower(ir._module, f"{DEFAULT_PIPELINE},rt-optimize")
    ks = [op for op in low.walk() if isinstance(op, rt.KernelOp)]
    names = [k.kernel.data for k in ks]
    assert "popxl.accumulate_mean_" not in names and "popxl.matmul" not in names
    (gemm,) = [k for k in ks if k.kernel.data == "xl.gemm_acc"]
    assert len(gemm.ins) == 4 and "alpha" not in gemm.attributes
    feeds = _feeds(dtype)
    plain, opt = compile_module(ir._module, optimize=False), compile_module(ir._module)
    want = _reference(feeds)
    for k, feed in enumerate(feeds):
        plain.run(feed)
        opt.run(feed)
        np.testing.assert_allclose(opt.state["acc"], plain.state["acc"], **PLAN_TOL, err_msg=f"step {k}")
        assert opt.state["n"] == plain.state["n"] == k + 1
    # float32 rounding of each step's product and scales against float64 maths
    np.testing.assert_allclose(opt.state["acc"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(plain.state["acc"], want, rtol=1e-5, atol=1e-5)


def test_float16_running_mean_is_not_folded():
    ir = _program(np.float16, np.float16)
    names = [
        op.kernel.data
        for op in lower(ir._module, f"{DEFAULT_PIPELINE},rt-optimize").walk()
        if isinstance(op, rt.KernelOp)
    ]
    assert "popxl.accumulate_mean_" in names and "xl.gemm_acc" not in names


def test_gemm_acc_mean_reads_the_counter_when_called():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(5, 7)), rng.normal(size=(6, 5))
    c0 = rng.normal(size=(7, 6))
    for counter in (np.zeros((), np.float32), np.zeros((1,), np.int64)):
        c = c0.copy()
        call = gemm_acc_mean(a, b, c, counter, trans_a=True, trans_b=True)
        want = c0.copy()
        for s in (0.0, 3.0, 10.0):
            counter[...] = s
            call()
            want = want * s / (s + 1) + (a.T @ b.T) / (s + 1)
            np.testing.assert_allclose(c, want, rtol=1e-13, atol=1e-13)
    with pytest.raises(ValueError, match="one element"):
        gemm_acc_mean(a, b, c0, np.zeros(2), trans_a=True, trans_b=True)


def test_gemm_acc_mean_rounds_as_matmul_then_accumulate_mean():
    """Bit for bit the unfused kernels' result (a gemm with `beta` would round otherwise,
    which Adam magnifies: `test_outline_functions`' mnist_rts compares the two)."""
    rng = np.random.default_rng(5)
    for rows in (1, 32):
        x = rng.normal(size=(rows, 96)).astype(np.float32)
        dy = rng.normal(size=(rows, 40)).astype(np.float32)
        fused, unfused = np.full((96, 40), 0.3, np.float32), np.full((96, 40), 0.3, np.float32)
        counter = np.zeros((), np.float32)
        call = gemm_acc_mean(x, dy, fused, counter, trans_a=True)
        for s in range(6):
            counter[...] = s
            call()
            g = np.matmul(x.T, dy)
            accumulate_mean_(unfused, g, np.empty_like(g), float(s))
            np.testing.assert_array_equal(fused, unfused, err_msg=f"rows {rows}, step {s}")
