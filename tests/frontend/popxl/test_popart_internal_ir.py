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
    # variables (like constants) are tensors in PopART, not ops: the main graph has none
    assert ir.main_graph._pb_graph.getOps() == []


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match=r"no 'MatmulOp'.*did you mean MatMulOp"):
        _ir.op.MatmulOp  # noqa: B018
    ir = popxl.Ir()
    with pytest.raises(AttributeError, match="it provides id, getOps"):
        ir.main_graph._pb_graph.getTensors()
    assert len(op_classes()) > 100


def test_split_is_one_split_op() -> None:
    """PopART builds `ops.split` as one SplitOp with one output per part; xl builds slices,
    which `getOps()` reports as that one op (parts of two splits stay two ops, slices the
    program wrote itself stay slices), and the values are NumPy's split."""
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(data, name="x")

        def layer(t: popxl.Tensor) -> tuple[popxl.Tensor, ...]:
            a, b, c = ops.split(t, 3, axis=-1)  # one Split
            d, e = ops.split(t, [1, 3], axis=0)  # another, right after the first
            f = ops.slice(t, start=0, stop=2, axis=1)  # two slices the program wrote
            g = ops.slice(t, start=2, stop=6, axis=1)
            return a, b + 1.0, c, d, e, f, g

        graph = ir.create_graph(layer, x.spec)
        outs = ops.call(graph, x)
        streams = [popxl.d2h_stream(o.shape, o.dtype) for o in outs]
        for s, o in zip(streams, outs, strict=True):
            ops.host_store(s, o)
    got = graph._pb_graph.getOps()
    assert [type(o).__name__ for o in got] == ["SplitOp", "SplitOp", "SliceOp", "SliceOp", "AddOp"]
    assert ops_of_type(got, _ir.op.SplitOp) == 2 and _ir.op.SplitOp.opType() == "Split"
    assert [len(o.xl_ops) for o in got] == [3, 2, 1, 1, 1]
    assert got[0].id == 0 and got[1].id == 3  # numbered as the first part
    with popxl.Session(ir, "ipu_model") as session:
        res = session.run()
    want = [*np.split(data, 3, axis=-1), *np.split(data, [1], axis=0), data[:, :2], data[:, 2:]]
    want[1] = want[1] + 1.0
    for s, w in zip(streams, want, strict=True):
        np.testing.assert_array_equal(res[s], w)
    # the marks are IR: the module prints and parses back with them
    from xdsl.parser import Parser

    from popxl import bridge
    from xl.dialects import xl_context

    text = str(bridge.module_of(ir))
    assert text.count('popart.op = ["Split", 0 : i64, 3 : i64]') == 1
    assert str(Parser(xl_context(), text).parse_module()) == text
