"""`ops.dynamic_update` / `dynamic_update_` with an update whose shape is not the slice's
are built, as in PopXL (the result has `t`'s type), and the program is refused when a
`Session` compiles it, naming the op and both shapes. A matching update runs (NumPy)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import popxl
import popxl.ops as ops


@pytest.mark.parametrize("inplace", [False, True])
def test_update_of_another_shape_is_built_then_refused(inplace: bool) -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        t = popxl.variable(np.zeros((3, 5, 7), np.float32), name="t")
        index = popxl.variable(np.array([1, 2], np.uint32), name="index")
        update = popxl.variable(np.ones((1, 3), np.float32), name="update")
        fn = ops.dynamic_update_ if inplace else ops.dynamic_update
        c = fn(t, index, update, [0, 2], [1, 3], True)
    assert c.shape == t.shape and c.dtype == t.dtype
    assert len(g.tensors) == 4
    name = "popxl.dynamic_update_" if inplace else "popxl.dynamic_update"
    message = f"{name}: update (1, 3) float32 must have the slice shape (1, 5, 3) of (3, 5, 7) float32"
    with pytest.raises(ValueError, match=re.escape(message)):
        popxl.Session(ir, "ipu_model")


def test_update_of_the_slice_shape_runs() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(np.zeros((3, 5, 7), np.float32), name="t")
        index = popxl.constant(np.array([1, 2], np.uint32))
        c = ops.dynamic_update(t, index, popxl.constant(np.ones((1, 5, 3), np.float32)), [0, 2], [1, 3], True)
        out = popxl.d2h_stream(c.shape, c.dtype)
        ops.host_store(out, c)
    expected = np.zeros((3, 5, 7), np.float32)
    expected[1:2, :, 2:5] = 1
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_array_equal(s.run()[out], expected)
