"""The index of ops.dynamic_slice / dynamic_update / dynamic_update_ as PopART reads it: a tensor
of any shape holding one start per axis (PopART reshapes it to [len(axes)]), so a [2, 1] or
[1, 2] index of two axes is the same as a [2] one; any other element count is refused when the
op is built, naming the op (a per-sample index of shape [batch, 1] for two axes, as Llama's
cached inference builds with a micro batch of 4, has no meaning there: PopART's lowering cannot
reshape it). Results vs NumPy slicing."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import popxl
import popxl.ops as ops

AXES, SIZES = [0, 2], [1, 3]
START = (1, 2)


def _run(build: Callable[[], popxl.Tensor]) -> np.ndarray:
    ir = popxl.Ir()
    with ir.main_graph:
        y = build()
        s = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(s, y)
    with popxl.Session(ir, "ipu_model") as session:
        return session.run()[s]


@pytest.mark.parametrize("index_shape", [(2,), (2, 1), (1, 2), (1, 1, 2)])
def test_one_start_per_axis_in_any_shape(index_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    data = rng.standard_normal((3, 4, 5)).astype(np.float32)
    upd = rng.standard_normal((1, 4, 3)).astype(np.float32)
    index = np.array(START, np.int32).reshape(index_shape)
    region = (slice(1, 2), slice(None), slice(2, 5))  # START along AXES, SIZES long

    got = _run(lambda: ops.dynamic_slice(popxl.variable(data), popxl.constant(index), AXES, SIZES, True))
    np.testing.assert_array_equal(got, data[region])

    want = data.copy()
    want[region] = upd
    for fn in (ops.dynamic_update, ops.dynamic_update_):
        got = _run(
            lambda fn=fn: fn(popxl.variable(data), popxl.constant(index), popxl.constant(upd), AXES, SIZES, True)
        )
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("index_shape", [(4, 1), (1,), (3,)])
def test_other_element_counts_are_refused(index_shape: tuple[int, ...]) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((4, 2, 8, 16), np.float32))
        index = popxl.constant(np.zeros(index_shape, np.int32))
        update = popxl.constant(np.zeros((4, 2, 8, 1), np.float32))
        with pytest.raises(ValueError, match=r"popxl\.dynamic_update_: index .* must have one element per axis \(2\)"):
            ops.dynamic_update_(t, index, update, [0, 3], [4, 1], True)
