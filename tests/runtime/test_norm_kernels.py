"""popxl.group_norm / group_norm_grad (`xl.runtime.kernels.norm`) in both plans: the
straightforward plan's kernel and the generated plan's template call one function each,
checked against float64 NumPy written from the definition and the gradient against central
differences of that function. Layer norm (one group over `(N, C)` rows), group norm over
`(N, C, H, W)`, float32 / float64 and float16 (statistics in float32, through copies).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.one_kernel import run_kernel
from xl.dialects.popxl import GroupNormGradOp, GroupNormOp

PLANS = pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
SHAPES = pytest.mark.parametrize(
    ("shape", "groups"), [((16, 8), 1), ((3, 4, 5, 2), 2), ((2, 6, 3), 3), ((5, 7, 1), 1)], ids=str
)
EPS = 1e-5


def group_norm64(x: np.ndarray, w: np.ndarray, b: np.ndarray, groups: int) -> tuple[np.ndarray, ...]:
    x = np.asarray(x, np.float64)
    n, c = x.shape[:2]
    xg = x.reshape(n, groups, -1)
    mean = xg.mean(-1, keepdims=True)
    var = ((xg - mean) ** 2).mean(-1, keepdims=True)
    inv = 1.0 / np.sqrt(var + EPS)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    y = ((xg - mean) * inv).reshape(x.shape) * np.reshape(w, bshape) + np.reshape(b, bshape)
    return y, mean.reshape(-1), inv.reshape(-1)


def _data(shape: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # rows with an offset far from 0: the variance comes from the centred values
    x = rng.standard_normal(shape) * 3 + 50.0
    return x, rng.standard_normal(shape[1]), rng.standard_normal(shape[1])


def _props(groups: int) -> dict:
    return {"num_groups": groups, "epsilon": EPS}


@PLANS
@SHAPES
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_group_norm(shape: tuple[int, ...], groups: int, dtype: type, optimize: bool) -> None:
    x, w, b = (a.astype(dtype) for a in _data(shape))
    y, mean, inv = run_kernel(GroupNormOp, [x, w, b], _props(groups), optimize)
    want = group_norm64(x, w, b, groups)
    tol = 1e-2 if dtype is np.float16 else 2e-5
    for got, ref in zip((y, mean, inv), want):
        np.testing.assert_allclose(np.asarray(got, np.float64), ref, rtol=tol, atol=tol)


@PLANS
@SHAPES
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_group_norm_grad_against_differences(shape: tuple[int, ...], groups: int, dtype: type, optimize: bool) -> None:
    x, w, b = _data(shape, 1)
    dy = np.random.default_rng(2).standard_normal(shape)
    _, mean, inv = group_norm64(x, w, b, groups)
    cast = [a.astype(dtype) for a in (x, w, mean, inv, dy)]
    dx, dw, db = run_kernel(GroupNormGradOp, cast, _props(groups), optimize)

    def loss(x_: np.ndarray, w_: np.ndarray, b_: np.ndarray) -> float:
        return float((dy * group_norm64(x_, w_, b_, groups)[0]).sum())

    def numeric(a: np.ndarray, f) -> np.ndarray:
        g = np.empty_like(a)
        for i in np.ndindex(*a.shape):
            e = np.zeros_like(a)
            e[i] = h = 1e-5 * max(1.0, abs(a[i]))
            g[i] = (f(a + e) - f(a - e)) / (2 * h)
        return g

    tol = 1e-4 if dtype is np.float32 else 1e-6
    np.testing.assert_allclose(dx, numeric(x, lambda a: loss(a, w, b)), rtol=tol, atol=tol)
    np.testing.assert_allclose(dw, numeric(w, lambda a: loss(x, a, b)), rtol=tol, atol=tol)
    np.testing.assert_allclose(db, numeric(b, lambda a: loss(x, w, a)), rtol=tol, atol=tol)
