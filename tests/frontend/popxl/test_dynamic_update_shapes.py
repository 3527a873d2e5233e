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


def test_sparse_accumulate_of_another_shape_is_built_then_refused() -> None:
    """Also `var_updates.sparse_accumulate_`: an axis beyond the tensor's rank or an update
    that is not the gathered shape builds (PopART's PopartSparseAccumulate) and is refused
    when compiled."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(np.array([2.0, 2.0], np.float32), name="a")
        b = popxl.variable(np.array([2.0, 2.0], np.float32), name="b")
        idx = popxl.constant(np.array([1], np.int32))
        r = ops.var_updates.sparse_accumulate_(a, b, idx, 1)
    assert r.shape == a.shape and r in g.tensors
    with pytest.raises(ValueError, match=re.escape("popxl.sparse_accumulate_: X (2,) float32 cannot be accumulated")):
        popxl.Session(ir, "ipu_model")


def test_sparse_accumulate_of_the_gathered_shape_runs() -> None:
    ir = popxl.Ir()
    with ir.main_graph, popxl.in_sequence():
        a = popxl.variable(np.zeros((3, 2), np.float32), name="a")
        r = ops.var_updates.sparse_accumulate_(
            a, popxl.constant(np.ones((3, 2), np.float32)), popxl.constant(np.array([0, 0], np.int32)), 1, f=0.5
        )
        out = popxl.d2h_stream(r.shape, r.dtype)
        ops.host_store(out, r)
    expected = np.zeros((3, 2), np.float32)
    expected[:, 0] = 1.0  # two updates of 0.5 into column 0
    with popxl.Session(ir, "ipu_model") as s:
        np.testing.assert_array_equal(s.run()[out], expected)
