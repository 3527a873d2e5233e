"""relu, relu_grad (one function each in `xl.runtime.kernels.core`, called by the kernel and
by the template beside it) and reduce_sum / max / min (one ufunc each, from
`REDUCE_UFUNCS`, read by the kernels and the templates) in both plans: against float64
NumPy written from the definitions, and the two plans give the same bits (the maths
exists once). The optimised plan takes the template for each case checked here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.helpers.one_kernel import run_kernel
from xl.dialects.popxl import ReduceMaxOp, ReduceMinOp, ReduceSumOp, ReluGradOp, ReluOp
from xl.dialects.rt_kernels import KernelClass
from xl.runtime import codegen
from xl.runtime.kernels.core import REDUCE_UFUNCS

FLOATS = [np.float16, np.float32, np.float64]


def _values(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape) * 4
    x.reshape(-1)[:4] = [0.0, -0.0, np.inf, -np.inf]
    return x.astype(dtype)


def _both_plans(
    cls: KernelClass, ins: list[np.ndarray], props: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> np.ndarray:
    """The result in the straightforward plan, checked equal (bits) to the optimised plan's,
    which must come from the template."""
    used: list[bool] = []
    inner = codegen.TEMPLATES[cls]

    def spy(*a: Any) -> list[str] | None:
        lines = inner(*a)
        used.append(lines is not None)
        return lines

    monkeypatch.setitem(codegen.TEMPLATES, cls, spy)
    plain = run_kernel(cls, ins, props, False)[0]
    optimised = run_kernel(cls, ins, props, True)[0]
    assert used == [True]
    assert plain.dtype == optimised.dtype and plain.tobytes() == optimised.tobytes()
    return plain


@pytest.mark.parametrize("dtype", FLOATS)
def test_relu(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    x = _values((6, 7), dtype, 0)
    x[1, 1] = np.nan
    got = _both_plans(ReluOp, [x], {}, monkeypatch)
    want = np.array([[v if v > 0 or np.isnan(v) else 0.0 for v in row] for row in x.astype(np.float64)])
    np.testing.assert_array_equal(got.astype(np.float64), want)


@pytest.mark.parametrize("dtype", FLOATS)
def test_relu_grad(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    x, dy = _values((5, 9), dtype, 1), _values((5, 9), dtype, 2)
    # dy where x > 0, else 0: also an infinite or NaN dy where x <= 0 (or x is NaN) gives 0, not NaN
    dy[0, 5], x[0, 5] = np.nan, -1.0
    dy[0, 6], x[0, 6] = 1.0, np.nan
    got = _both_plans(ReluGradOp, [dy, x], {}, monkeypatch)
    want = np.array([[float(d) if v > 0 else 0.0 for d, v in zip(dr, xr)] for dr, xr in zip(dy, x)])
    assert np.isinf(dy[0, 3]) and x[0, 3] < 0 and want[0, 3] == 0.0  # the case a product gets wrong
    np.testing.assert_array_equal(got.astype(np.float64), want)


def test_reduce_table_covers_the_templates() -> None:
    assert set(REDUCE_UFUNCS) == {ReduceSumOp, ReduceMaxOp, ReduceMinOp}
    assert all(cls in codegen.TEMPLATES for cls in REDUCE_UFUNCS)


@pytest.mark.parametrize("dtype", [*FLOATS, np.int32])
@pytest.mark.parametrize("cls", [ReduceSumOp, ReduceMaxOp, ReduceMinOp], ids=lambda c: c.name)
@pytest.mark.parametrize(("axis", "keep"), [(None, False), ([0], True), ([2], False), ([0, 2], True), ([1], False)])
def test_reductions(cls: KernelClass, dtype: Any, axis: list[int] | None, keep: bool, monkeypatch) -> None:
    x = (np.random.default_rng(3).standard_normal((4, 5, 6)) * 8).astype(dtype)
    props: dict[str, Any] = {"keepdims": keep}
    if axis is not None:
        props["axis"] = axis
    got = _both_plans(cls, [x], props, monkeypatch)
    axes = tuple(range(3)) if axis is None else tuple(axis)
    x64 = x.astype(np.float64)
    shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape))
    want = np.empty(shape)
    for idx in np.ndindex(*shape):
        sl = tuple(slice(None) if d in axes else i for d, i in enumerate(idx))
        vals = x64[sl].reshape(-1)
        want[idx] = sum(vals) if cls is ReduceSumOp else (max(vals) if cls is ReduceMaxOp else min(vals))
    if not keep:
        want = want.reshape([n for d, n in enumerate(shape) if d not in axes])
    assert got.dtype == np.dtype(dtype) and got.shape == want.shape
    tol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-12}.get(dtype, 0)
    if cls is ReduceSumOp and tol:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.abs(x64).sum())
    else:  # max / min pick an element; integer sums are exact
        np.testing.assert_array_equal(got.astype(np.float64), want)
