"""popxl.gather_grad's kernel (a sort by index and one `np.add.reduceat`) against a loop of
float64 NumPy written from the definition: dy added into zeros at each index along `axis`,
repeated indices accumulating, indices outside the gathered range contributing nothing
(`zero_oor`: outside `[0, n)`, else outside `[-n, n)`, negatives counting from the end),
an infinity or NaN in dy reaching only its own row. Both plans."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.one_kernel import run_kernel
from xl.dialects.popxl import GatherGradOp


def gather_grad64(dy: np.ndarray, idx: np.ndarray, n: int, axis: int, zero_oor: bool) -> np.ndarray:
    dy = np.asarray(dy, np.float64)
    shape = list(dy.shape[:axis]) + [n] + list(dy.shape[axis + idx.ndim :])
    out = np.zeros(shape)
    for pos in np.ndindex(*idx.shape):
        i = int(idx[pos])
        if i >= n or i < (0 if zero_oor else -n):
            continue
        src = (slice(None),) * axis + pos
        out[(slice(None),) * axis + (i % n,)] += dy[src]
    return out


@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
@pytest.mark.parametrize("zero_oor", [False, True])
@pytest.mark.parametrize(
    ("axis", "dy_shape", "idx_shape", "n"), [(0, (4, 6, 5), (4, 6), 7), (1, (3, 2, 4, 2), (2, 4), 5)]
)
def test_gather_grad(axis: int, dy_shape: tuple, idx_shape: tuple, n: int, zero_oor: bool, optimize: bool) -> None:
    rng = np.random.default_rng(0)
    dy = rng.standard_normal(dy_shape).astype(np.float32)
    idx = rng.integers(-n - 2, n + 2, idx_shape).astype(np.int32)
    idx.reshape(-1)[:3] = 1  # repeated
    want = gather_grad64(dy, idx, n, axis, zero_oor)
    props = {"axis": axis, "zero_oor": zero_oor}
    got = run_kernel(GatherGradOp, [dy, idx], props, optimize, result_types=[(want.shape, np.float32)])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("optimize", [False, True], ids=["straightforward", "optimised"])
def test_gather_grad_non_finite_stays_in_its_row(optimize: bool) -> None:
    dy = np.ones((6, 3), np.float32)
    dy[2, 0] = np.inf
    dy[4, 1] = np.nan
    idx = np.array([0, 1, 2, 0, 3, 1], np.int32)
    want = gather_grad64(dy, idx, 5, 0, False)
    props = {"axis": 0, "zero_oor": False}
    got = run_kernel(GatherGradOp, [dy, idx], props, optimize, result_types=[(want.shape, np.float32)])[0]
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert np.isfinite(got[[0, 1, 4]]).all()  # inf went to row 2, NaN to row 3
