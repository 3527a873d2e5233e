"""`ops.gather` / `groupedgather` with indices out of range, forward and gradient.

Upstream (PopART's gather): with `zero_OOR=True` every index outside `[0, n)` gives zeros,
negative ones too (tensor-parallel embeddings shift token ids per shard and rely on it);
without it the values are undefined. xl gives zeros there too, and takes `[-n, n)` as in
range without `zero_OOR` (negative indices count from the end, ONNX Gather). Nothing
raises and no index reads another row. The gradient (scatter-add) skips the same indices.
References are written element by element in NumPy; the gradients are also checked
against finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popxl import ops
from tests.helpers.nn_testing import run_fwd, run_fwd_bwd


def _valid(i: int, n: int, zero_oor: bool) -> bool:
    return 0 <= i < n if zero_oor else -n <= i < n


def _np_gather(x: np.ndarray, idx: np.ndarray, axis: int, zero_oor: bool) -> np.ndarray:
    a = axis % x.ndim
    n = x.shape[a]
    out = np.zeros(x.shape[:a] + idx.shape + x.shape[a + 1 :], x.dtype)
    for before in np.ndindex(x.shape[:a]):
        for pos in np.ndindex(idx.shape):
            i = int(idx[pos])
            if _valid(i, n, zero_oor):
                out[before + pos] = x[before + (i % n,)]
    return out


def _np_gather_grad(x: np.ndarray, idx: np.ndarray, axis: int, zero_oor: bool, dy: np.ndarray) -> np.ndarray:
    a = axis % x.ndim
    n = x.shape[a]
    dx = np.zeros_like(x)
    for before in np.ndindex(x.shape[:a]):
        for pos in np.ndindex(idx.shape):
            i = int(idx[pos])
            if _valid(i, n, zero_oor):
                dx[before + (i % n,)] += dy[before + pos]
    return dx


def _fd(f, x: np.ndarray, dy: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    """Central differences of sum(f(x) * dy)."""
    g = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (np.sum(f(xp) * dy) - np.sum(f(xm) * dy)) / (2 * eps)
    return g


@pytest.mark.parametrize("zero_oor", [True, False])
def test_negative_and_large_indices(zero_oor: bool) -> None:
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    idx = np.array([[-1, 0], [4, 5], [-5, -6], [2, -3]], np.int32)
    y, (dx,), dy = run_fwd_bwd(lambda t: ops.gather(t, idx, zero_OOR=zero_oor), [x])
    np.testing.assert_array_equal(y, _np_gather(x, idx, 0, zero_oor))
    np.testing.assert_allclose(dx, _np_gather_grad(x, idx, 0, zero_oor, dy), rtol=1e-6)
    if zero_oor:  # -1, -5, -6, -3 and 5 all give zeros and get no gradient
        assert not y[0, 0].any() and not y[2].any() and not y[1, 1].any()
        np.testing.assert_array_equal(dx[4], dy[1, 0])  # row 4: only from index 4, not -1
    else:  # -1 is the last row, -5 the first; -6 and 5 give zeros
        np.testing.assert_array_equal(y[0, 0], x[4])
        np.testing.assert_array_equal(y[2, 0], x[0])
        assert not y[2, 1].any() and not y[1, 1].any()


@pytest.mark.parametrize("zero_oor", [True, False])
def test_gradient_matches_finite_differences(zero_oor: bool) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    idx = np.array([[3, -1, 4], [0, 0, -4]], np.int32)
    y, (dx,), dy = run_fwd_bwd(lambda t: ops.gather(t, idx, axis=1, zero_OOR=zero_oor), [x])
    ref = _fd(lambda v: _np_gather(v, idx, 1, zero_oor), x.astype(np.float64), dy.astype(np.float64))
    np.testing.assert_allclose(dx, ref, rtol=1e-4, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    axis_pick=st.integers(0, 5),
    idx_shape=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    zero_oor=st.booleans(),
    data=st.data(),
)
def test_gather_matches_numpy(shape, axis_pick, idx_shape, zero_oor, data) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1.0
    axis = axis_pick % len(shape) - (len(shape) if axis_pick > 2 else 0)  # negative axes too
    n = shape[axis]
    idx = np.array(
        data.draw(
            st.lists(st.integers(-2 * n - 1, 2 * n), min_size=int(np.prod(idx_shape)), max_size=int(np.prod(idx_shape)))
        ),
        np.int32,
    ).reshape(idx_shape)
    y, (dx,), dy = run_fwd_bwd(lambda t: ops.gather(t, idx, axis=axis, zero_OOR=zero_oor), [x])
    np.testing.assert_array_equal(y, _np_gather(x, idx, axis, zero_oor))
    np.testing.assert_allclose(dx, _np_gather_grad(x, idx, axis, zero_oor, dy), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("zero_oor", [True, False])
def test_groupedgather_out_of_range(zero_oor: bool) -> None:
    x = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    gi = np.array([[-1, 3], [2, -4]], np.int32)
    y, (dx,), dy = run_fwd_bwd(lambda t: ops.groupedgather(t, gi, group_size=2, zero_OOR=zero_oor), [x])
    want = np.stack([_np_gather(x[g], gi[g], 0, zero_oor) for g in range(2)])
    np.testing.assert_array_equal(y, want)
    dwant = np.stack([_np_gather_grad(x[g], gi[g], 0, zero_oor, dy[g]) for g in range(2)])
    np.testing.assert_allclose(dx, dwant, rtol=1e-6)
    if zero_oor:
        assert not y[0, 0].any()  # -1: zeros, not the last row of group 0
    else:
        np.testing.assert_array_equal(y[0, 0], x[0, 2])


def test_tied_gather_and_indexing_follow_gather() -> None:
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    idx = np.array([-1, 4, 1], np.int32)
    np.testing.assert_array_equal(
        run_fwd(lambda t: ops.tied_gather(t, idx, zero_OOR=True), [x]), _np_gather(x, idx, 0, True)
    )
    np.testing.assert_array_equal(run_fwd(lambda t: t[idx], [x]), _np_gather(x, idx, 0, False))
