"""Public ops that xl builds from several ops where PopART has one (`@composed`: `ops.isinf`
is `abs`, a constant and `equal`; PopART has one `IsInf` op) show as PopXL shows them:
`graph.tensors` lists the graph's other tensors and what the call returned (its steps
are not tensors of PopART's graph), constants made of the call's arguments stay, and
`graph._pb_graph.getOps()` gives one op of the PopART type. Values are unchanged (NumPy).

The cases are derived from the registry `popxl.ops._utils.COMPOSED_TYPES`: a function
added to it without a case below fails `test_every_composed_op_has_a_case`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from xdsl.parser import Parser

import popart._internal.ir as _ir
import popxl
from popxl import ops
from popxl.ops._utils import COMPOSED_TYPES
from xl.tools.context import xl_context

X = np.array([[0.5, -1.5, 2.0], [np.inf, 3.0, -np.inf]], np.float32)
Y = np.array([[1.0, 2.0, -0.5], [0.25, 1.0, 4.0]], np.float32)
FINITE = np.where(np.isfinite(X), X, 1.0).astype(np.float32)

# name -> (build from the variables x, y (2x3 float32: x holds +-inf) -> result,
#          NumPy value of the result or None (no value to compare),
#          the number of tensors the call adds to the graph)
Build = Callable[[popxl.Tensor, popxl.Tensor], popxl.Tensor | list[popxl.Tensor] | None]
CASES: dict[str, tuple[Build, np.ndarray | None, int]] = {
    "isinf": (lambda x, y: ops.isinf(x), np.isinf(X), 1),
    "isnan": (lambda x, y: ops.isnan(x), np.isnan(X), 1),
    "add_": (lambda x, y: ops.add_(y, 2.0), Y + 2, 2),  # the constant 2.0 and the output
    "exp_": (lambda x, y: ops.exp_(y), np.exp(Y), 1),
    "relu_": (lambda x, y: ops.relu_(y), np.maximum(Y, 0), 1),
    "gelu_": (lambda x, y: ops.gelu_(y), None, 1),
    "geluerf_": (lambda x, y: ops.geluerf_(y), None, 1),
    "swish_": (lambda x, y: ops.swish_(y), Y / (1 + np.exp(-Y)), 1),
    "sumsquare": (lambda x, y: ops.sumsquare(y, 1), (Y * Y).sum(1), 1),
    "l2": (lambda x, y: ops.l2(y), np.sqrt((Y * Y).sum()), 1),
    "l1": (lambda x, y: ops.l1(y, 0), np.abs(Y).sum(0), 1),
    "logsum": (lambda x, y: ops.logsum(ops.abs(y), 1), np.log(np.abs(Y).sum(1)), 2),  # abs, logsum
    "logsumexp": (lambda x, y: ops.logsumexp(y, 1), np.log(np.exp(Y).sum(1)), 1),
    "matmul": (
        lambda x, y: ops.matmul(y, ops.transpose(y), output_type=popxl.float16),
        (Y @ Y.T).astype(np.float16),
        2,  # the transpose, the product
    ),
    "batch_norm_inference": (
        lambda x, y: ops.batch_norm_inference(
            y,
            popxl.constant(np.full(3, 2.0, np.float32)),
            popxl.constant(np.ones(3, np.float32)),
            popxl.constant(np.zeros(3, np.float32)),
            popxl.constant(np.ones(3, np.float32)),
            0.0,
        ),
        None,  # (N, C) input: C = 3, checked below
        5,  # four constants, the output
    ),
    "lamb_square": (lambda x, y: ops.lamb_square(y), (Y * Y).sum(), 1),
    "scaled_add": (
        lambda x, y: ops.scaled_add(y, y, popxl.constant(2.0), popxl.constant(3.0)),
        5 * Y,
        3,
    ),
    "scaled_add_": (lambda x, y: ops.scaled_add_(y, y, popxl.constant(2.0), 3.0), 5 * Y, 2),
    "all_reduce": (lambda x, y: ops.collectives.all_reduce([y], ipus=[0]), Y, 1),
    "all_reduce_identical_inputs": (lambda x, y: ops.collectives.all_reduce_identical_inputs([y], ipus=[0]), Y, 1),
    "all_reduce_identical_grad_inputs": (
        lambda x, y: ops.collectives.all_reduce_identical_grad_inputs([y], ipus=[0]),
        Y,
        1,
    ),
    "remote_load": (
        lambda x, y: ops.remote_load(popxl.remote_buffer((2, 3), popxl.float32, 2), popxl.constant([1])),
        None,
        2,  # the offset constant, the output
    ),
    "remote_load_": (
        lambda x, y: ops.remote_load_(popxl.remote_buffer((2, 3), popxl.float32, 2), popxl.constant([1]), y),
        None,
        2,
    ),
    "remote_store": (
        lambda x, y: ops.remote_store(popxl.remote_buffer((2, 3), popxl.float32, 2), popxl.constant([1]), y),
        None,
        1,
    ),
    # view-changing in-place ops: one op of xl's, PopART's in-place variant
    "reshape_": (lambda x, y: ops.reshape_(y, (3, 2)), Y.reshape(3, 2), 1),
    "flatten_": (lambda x, y: ops.flatten_(y), Y.reshape(-1), 1),
    "transpose_": (lambda x, y: ops.transpose_(y), Y.T, 1),
    "slice_": (lambda x, y: ops.slice_(y, 1, 3, axis=1), Y[:, 1:3], 1),
    "detach_": (lambda x, y: ops.detach_(y), Y, 1),
    "subsample": (lambda x, y: ops.subsample(y, (1, 2)), Y[:, ::2], 1),
    "tied_gather": (lambda x, y: ops.tied_gather(y, popxl.constant(np.array([1, 0], np.int32))), Y[[1, 0]], 2),
    "_conv_transpose_grown": (  # ops.conv_transpose with an output_shape beyond the convolution
        lambda x, y: ops.conv_transpose(
            ops.reshape(y, (1, 2, 3, 1)), popxl.constant(np.ones((2, 1, 1, 1), np.float32)), output_shape=(4, 2)
        ),
        # negative padding -1 on each dim, halved toward 0: a zero row on top, a zero column on the left
        np.pad((Y[0] + Y[1]).reshape(1, 1, 3, 1), ((0, 0), (0, 0), (1, 0), (1, 0))),
        3,  # the reshape, the weight, the output
    ),
}
BATCH_NORM = 2 * Y / np.sqrt(1.0) + 1


def test_every_composed_op_has_a_case() -> None:
    assert sorted(set(COMPOSED_TYPES) - set(CASES)) == []
    assert sorted(set(CASES) - set(COMPOSED_TYPES)) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_composed_op_shows_as_one_popart_op(name: str) -> None:
    build, expected, added = CASES[name]
    ir = popxl.Ir()
    g = ir.main_graph
    with g, popxl.in_sequence():
        x = popxl.variable(X, name="x")
        y = popxl.variable(Y, name="y")
        before = len(g.tensors)
        out = build(x, y)
        outs = [] if out is None else list(out) if isinstance(out, list) else [out]
        tensors = g.tensors
        assert len(tensors) == before + added
        assert all(o in tensors for o in outs)
        assert len({t.id for t in tensors}) == len(tensors)
        streams = []
        for o in outs:
            d2h = popxl.d2h_stream(o.shape, o.dtype)
            ops.host_store(d2h, o)
            streams.append(d2h)
    type_name = COMPOSED_TYPES[name]
    pb_ops = [o for o in g._pb_graph.getOps() if o.opType() == type_name]
    assert len(pb_ops) == 1
    assert isinstance(pb_ops[0], getattr(_ir.op, type(pb_ops[0]).__name__))
    # the marks are IR: printed and parsed back
    Parser(xl_context(), ir.to_mlir()).parse_module().verify()
    if name == "batch_norm_inference":
        expected = BATCH_NORM
    with popxl.Session(ir, "ipu_model") as s:
        res = s.run()
    if expected is not None:
        np.testing.assert_allclose(res[streams[0]].astype(np.float32), np.asarray(expected, np.float32), rtol=2e-3)


def test_composed_op_inside_another_counts_once() -> None:
    """`ops.l2` uses `ops.sumsquare`: one ReduceL2, no ReduceSumSquare."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        y = popxl.variable(Y, name="y")
        ops.l2(y)
    types = [o.opType() for o in g._pb_graph.getOps()]
    assert types == ["ReduceL2"]


def test_op_ids_follow_popart() -> None:
    """The parts share one op id; the next op gets the id after it."""
    ir = popxl.Ir()
    with ir.main_graph:
        y = popxl.variable(Y, name="y")
        a = ops.isinf(y)
        b = ops.relu(y)
    from popxl.bridge import op_id

    ids = {o.xl_op: op_id(ir, o.xl_op) for o in ir.main_graph._pb_graph.getOps()}
    (isinf,) = [o for o in ir.main_graph._pb_graph.getOps() if o.opType() == "IsInf"]
    assert {op_id(ir, part) for part in isinf.xl_ops} == {ids[isinf.xl_op]}
    assert op_id(ir, b._value.owner) == ids[isinf.xl_op] + 1  # pyright: ignore[reportArgumentType]
    assert a in ir.main_graph.tensors


def test_cast_names_its_output_after_its_input() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(Y, name="weight")
        b = ops.cast(a, popxl.float16)
    assert b.name == "weight_float16"


def test_slice_without_bounds_is_its_input() -> None:
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        a = popxl.variable(Y, name="a")
        assert ops.slice(a, axis=0) is a
    assert len(g.tensors) == 1


@pytest.mark.parametrize(
    ("build", "type_name", "cls_name"),
    [
        (lambda y: ops.var_updates.accumulator_zero_(y), "AccumulatorScale", "AccumulatorScaleOp"),
        (
            lambda y: ops.onehot(
                popxl.constant(np.array([0, 2], np.int32)), popxl.constant(3), popxl.constant([0.0, 1.0])
            ),
            "OneHot",
            "OnehotOp",
        ),
        (lambda y: ops.squeeze(ops.reshape(y, (1, 2, 3))), "Reshape", "ReshapeOp"),
        (lambda y: ops.argmax(y, 1), "ArgMax", "ArgMaxOp"),
        (lambda y: ops.argmin(y, 1), "ArgMin", "ArgMinOp"),
    ],
)
def test_ops_are_the_popart_ops_popxl_builds(
    build: Callable[[popxl.Tensor], object], type_name: str, cls_name: str
) -> None:
    """PopXL zeroes an accumulator with AccumulatorScale, builds onehot as OneHot (class
    OnehotOp), squeeze as a Reshape, argmax / argmin as ArgMax / ArgMin."""
    ir = popxl.Ir()
    g = ir.main_graph
    with g:
        y = popxl.variable(Y, name="y")
        build(y)
    last = g._pb_graph.getOps()[-1]
    assert last.opType() == type_name and isinstance(last, getattr(_ir.op, cls_name))


def test_print_schedule_shows_one_line_per_popart_op() -> None:
    """As PopART's printSchedule: a composed op is one line of its type, reading the call's
    inputs and giving what it returned (its steps and their constants are not shown)."""
    from popxl.printing import schedule_str

    ir = popxl.Ir()
    with ir.main_graph:
        y = popxl.variable(Y, name="y")
        ops.isinf(y)
        ops.l2(y)
        ops.exp_(y)
        ops.relu(y)
    lines = schedule_str(ir.main_graph).splitlines()[2:-1]
    kinds = [line.split(".")[0].strip() for line in lines]
    assert kinds == ["IsInf", "ReduceL2", "ExpInplace", "Relu"]
    assert lines[0].strip().endswith("(%1 [(2, 3) float32]) -> (%4 [(2, 3) bool])")
    assert "-> ()" in lines[2]  # in-place
