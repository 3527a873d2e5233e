"""popart._internal.ir: graph._pb_graph.getOps() gives one PopART op object per op of the
graph, of the class named after each xl op class's PopART type; counted by type as the
applications' graph tests do (popxl_addons.testing_utils.ops_of_type)."""

from __future__ import annotations

import numpy as np
import pytest

import popart._internal.ir as _ir
import popxl
import popxl.ops as ops
from popart._internal.ir.op import op_class, op_classes
from popxl_addons.testing_utils import ops_of_type
from xl.dialects import get_all_dialects
from xl.dialects.traits import popart_type

ALL = [(d, c) for d, f in get_all_dialects().items() if d != "rt" for c in f().operations]


@pytest.mark.parametrize(("dialect", "cls"), ALL, ids=[c.name for _, c in ALL])
def test_every_op_class_has_its_popart_class(dialect: str, cls: type) -> None:
    pb = op_class(cls)
    assert pb.opType() == popart_type(cls)
    assert issubclass(pb, _ir.Op) and getattr(_ir.op, pb.__name__) is pb
    assert pb.__name__ == {"Sub": "SubtractOp", "Neg": "NegateOp"}.get(pb.opType(), pb.__name__)
    assert pb.__name__.endswith("Op")


def test_a_layer_counted_by_type() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((4, 8), np.float32), name="x")
        w = popxl.variable(np.ones((8, 8), np.float32), name="w")

        def layer(t: popxl.Tensor, w: popxl.Tensor) -> popxl.Tensor:
            h = ops.gelu(t @ w + 1.0)  # matmul, add (the constant is no op), gelu
            h = (h @ w - t) * 0.5  # matmul, sub, mul
            return h.reshape((32,)).transpose()  # reshape, transpose

        g = ir.create_graph(layer, x.spec, w.spec)
    got = g._pb_graph.getOps()
    assert [type(o).__name__ for o in got] == [
        "MatMulOp", "AddOp", "GeluOp", "MatMulOp", "SubtractOp", "MulOp", "ReshapeOp", "TransposeOp"
    ]  # fmt: skip
    assert ops_of_type(got, _ir.op.MatMulOp) == 2
    assert ops_of_type(got, _ir.op.SubtractOp) == 1
    assert ops_of_type(got, _ir.op.ConcatOp) == 0
    assert ops_of_type(got, _ir.Op) == len(got)
    assert got[4].opType() == "Sub" and got[4].name() == "popxl.sub"
    assert g._pb_graph.getOpIds() == [o.id for o in got]
    assert g._pb_graph.id == g.name and g._pb_graph.popxl_graph is g
    main_ops = ir.main_graph._pb_graph.getOps()
    assert [type(o).__name__ for o in main_ops] == ["VariableOp", "VariableOp"]


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match=r"no 'MatmulOp'.*did you mean MatMulOp"):
        _ir.op.MatmulOp  # noqa: B018
    ir = popxl.Ir()
    with pytest.raises(AttributeError, match="it provides id, getOps"):
        ir.main_graph._pb_graph.getTensors()
    assert len(op_classes()) > 100
