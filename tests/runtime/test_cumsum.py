"""`popxl.cumsum`, added as the example of a new differentiable op: dialect class, kernel,
gradient rule (checked against central differences), frontend function."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
from popxl import ops
from tests.passes.test_grad_rules import check_grads, rand
from xl.compiler import compile_module


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum_gradient_matches_finite_differences(dim: int) -> None:
    check_grads(lambda e, c, x: [e("popxl.cumsum", x, dim=dim)], [rand((3, 4))])


def test_reverse_cumsum_gradient_and_chain() -> None:
    check_grads(lambda e, c, x: [e("popxl.cumsum", x, dim=0, reverse=True)], [rand((4, 2))])
    # a cumsum feeding a nonlinearity: the rule composes with the others
    check_grads(lambda e, c, x: [e("popxl.tanh", e("popxl.cumsum", x, dim=1))], [rand((2, 5), low=-0.5, high=0.5)])


@pytest.mark.parametrize("optimize", [True, False])
def test_ops_cumsum_runs(optimize: bool) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.host_load(popxl.h2d_stream((2, 3), popxl.float32, "x"))
        y = ops.cumsum(x)  # upstream default dim=0
        z = ops.cumsum(x, dim=1)
        ops.host_store(popxl.d2h_stream(y.shape, y.dtype, "y"), y)
        ops.host_store(popxl.d2h_stream(z.shape, z.dtype, "z"), z)
    a = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]], np.float32)
    out = compile_module(ir._module, optimize=optimize).run({"x": a})
    np.testing.assert_array_equal(out["y"], [[1, 2, 3], [11, 22, 33]])
    np.testing.assert_array_equal(out["z"], [[1, 3, 6], [10, 30, 60]])


def test_ops_cumsum_bad_dim_names_the_op() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 3), np.float32), name="x")
        with pytest.raises(Exception, match=r"cumsum.*out of range"):
            ops.cumsum(x, dim=2)
