"""popxl.transforms.decompose_sum: xl's autodiff already sums a tensor's gradient
contributions with a chain of two-input adds, so the transform returns the graph as it is;
the gradient (3 contributions) against NumPy's analytic one, the IR unchanged, errors."""

from __future__ import annotations

import numpy as np
import pytest

import popxl
import popxl.ops as ops
import popxl_addons as addons
from xl.dialects.popxl import AddOp


def test_decompose_sum_keeps_the_gradient_graph_and_its_numbers() -> None:
    rng = np.random.default_rng(0)
    x, a, dy = rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), rng.normal(size=(3, 4))

    def fn(t: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
        return ops.sin(t) + t @ w + t * t  # t used three times

    ir = popxl.Ir()
    with ir.main_graph:
        vx, vw = popxl.variable(x, popxl.float64, name="x"), popxl.variable(a, popxl.float64, name="w")
        graph = ir.create_graph(fn, vx.spec, vw.spec)
        info = ops.call_with_info(graph, vx, vw)
        grad = popxl.transforms.autodiff(graph, grads_required=[graph.inputs[0]])
        before = ir.to_mlir()
        assert popxl.transforms.decompose_sum(grad.graph) is grad.graph
        assert ir.to_mlir() == before
        adds = [op for op in grad.graph._op.walk() if isinstance(op, AddOp)]
        assert len(adds) >= 2 and all(len(op.operands) == 2 for op in adds)
        (dx,) = ops.call(grad.graph, popxl.constant(dy, popxl.float64), inputs_dict=grad.inputs_dict(info))
        out = addons.host_store(dx)
    with popxl.Session(ir, "cpu") as session:
        got = session.run()[out]
    np.testing.assert_allclose(got, dy * np.cos(x) + dy @ a.T + 2 * x * dy, rtol=1e-12)


def test_decompose_sum_refuses_what_is_not_a_graph() -> None:
    with pytest.raises(TypeError, match="decompose_sum: expected a popxl.Graph, got int"):
        popxl.transforms.decompose_sum(3)  # pyright: ignore[reportArgumentType]
