"""The values PopXL programs read from PopART's op objects (`graph._pb_graph.getOps()`):
`getAxis()` and `getFactor()` (an `OptimizerValue`: the number when constant, 0.0 and not
const when the factor is a tensor; accumulator zeroing scales by 0), as PopXL documents for
its variable updates."""

from __future__ import annotations

import numpy as np
import pytest

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops


def _only_op(build) -> _ir.Op:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(np.zeros((3, 2), np.float32), name="a")
        build(a)
    return g._pb_graph.getOps()[-1]


@pytest.mark.parametrize(
    ("build", "type_name", "value", "const"),
    [
        (lambda a: ops.var_updates.accumulator_scale_(a, 0.125), "AccumulatorScale", 0.125, True),
        (lambda a: ops.var_updates.accumulator_scale_(a, popxl.variable(0.125)), "AccumulatorScale", 0.0, False),
        (lambda a: ops.var_updates.accumulator_zero_(a), "AccumulatorScale", 0.0, True),
        (
            lambda a: ops.var_updates.accumulate_(a, popxl.constant(np.ones((3, 2), np.float32)), 0.5),
            "Accumulate",
            0.5,
            True,
        ),
        (
            lambda a: ops.var_updates.accumulate_(a, popxl.constant(np.ones((3, 2), np.float32))),
            "Accumulate",
            1.0,
            True,
        ),
    ],
)
def test_get_factor(build, type_name: str, value: float, const: bool) -> None:
    op = _only_op(build)
    assert op.opType() == type_name
    f = op.getFactor()
    assert f.val() == value and f.isConst() is const


def test_sparse_accumulate_axis_and_factor() -> None:
    def build(a: popxl.Tensor) -> None:
        ops.var_updates.sparse_accumulate_(
            a, popxl.constant(np.ones((3, 1), np.float32)), popxl.constant(np.array([1], np.int32)), 1, 0.25
        )

    op = _only_op(build)
    assert op.opType() == "PopartSparseAccumulate" and isinstance(op, _ir.op.SparseAccumulateOp)
    assert op.getAxis() == 1 and op.getFactor().val() == 0.25


def test_ops_without_axis_or_factor_say_so() -> None:
    op = _only_op(lambda a: ops.relu(a))
    with pytest.raises(AttributeError, match="ReluOp has no axis"):
        op.getAxis()
    with pytest.raises(AttributeError, match="ReluOp has no factor"):
        op.getFactor()
