"""The `popxl` dialect: type inference, verifier errors, syntax, `make`, memory effects."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from xdsl.dialects import test as xdsl_test
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.parser import Parser
from xdsl.transforms.common_subexpression_elimination import cse
from xdsl.transforms.dead_code_elimination import region_dce
from xdsl.utils.exceptions import VerifyException

import xl.dialects.popxl as P
from xl.dialects.effects import written_operands
from xl.dialects.utils import tensor_type
from xl.tools.context import xl_context

f32, f16, i32, u32, i1, f64 = np.float32, np.float16, np.int32, np.uint32, np.bool_, np.float64


def T(shape: Sequence[int], dt: np.dtype | type | str = f32) -> TensorType[Any]:
    return tensor_type(shape, dt)


def vals(*types):
    """SSA values of the given (shape, dtype) pairs or tensor types."""
    tys = [t if not isinstance(t, tuple) else T(*t) for t in types]
    return list(xdsl_test.TestOp.create(result_types=tys).results)


def res(op):
    return [r.type for r in op.results]


def fails(cls, operands, match, result_types=None, **props):
    with pytest.raises(VerifyException, match=match):
        op = cls.make(operands, result_types, **props)
        op.verify()


# ------------------------------------------------------------------------------------
# Every op: docstring example parses, verifies and round-trips
# ------------------------------------------------------------------------------------


def _example(cls) -> str:
    m = re.search(r"```mlir\n(.*?)```", cls.__doc__ or "", re.S)
    assert m, f"{cls.name} has no IR example in its docstring"
    return " ".join(line.strip() for line in m.group(1).strip().splitlines())


@pytest.mark.parametrize("cls", P.OPS, ids=[c.name for c in P.OPS])
def test_docstring_example_round_trips(cls):
    ctx = xl_context(allow_unregistered=True)
    line = _example(cls)
    rest = line[line.index(cls.name) + len(cls.name) :]
    operands = re.findall(r"%\w+", rest.split("{")[0].split(" : ")[0])
    ftext = rest.rsplit("} : ", 1)[1] if "} : " in rest else rest.split(" : ", 1)[1]
    ftype = Parser(ctx, ftext).parse_function_type()
    defs = ""
    if operands:
        types = ", ".join(str(t) for t in ftype.inputs.data)
        defs = f'{", ".join(operands)} = "test.op"() : () -> ({types})\n'
    text = defs + line
    module = Parser(ctx, text).parse_module()
    module.verify()
    (op,) = [o for o in module.ops if o.name == cls.name]
    printed = str(module)
    again = Parser(ctx, printed).parse_module()
    again.verify()
    assert str(again) == printed
    assert op.name == cls.name


def test_ops_list_is_complete():
    assert len({c.name for c in P.OPS}) == len(P.OPS)
    assert set(P.Popxl.operations) == set(P.OPS)


# ------------------------------------------------------------------------------------
# Shape / index ops
# ------------------------------------------------------------------------------------


def test_concat():
    a, b, c = vals(((2, 3),), ((1, 3),), ((2, 4),))
    assert res(P.ConcatOp.make([a, b], axis=0)) == [T((3, 3))]
    assert res(P.ConcatOp.make([a, c], axis=-1)) == [T((2, 7))]
    fails(P.ConcatOp, [a, c], r"popxl.concat: shapes must match except on axis 0: \(2, 3\), \(2, 4\)", axis=0)
    fails(P.ConcatOp, [a, b], "axis 2 is out of range for rank 2", axis=2)
    (d,) = vals(((2, 3), i32))
    fails(P.ConcatOp, [a, d], "operand dtypes differ: .*float32.*int32", axis=0)
    fails(P.ConcatOp, [], "at least one operand", axis=0)


def test_slice():
    (x,) = vals(((3, 4, 6),))
    assert res(P.SliceOp.make([x], start=(1,), stop=(3,))) == [T((2, 4, 6))]
    assert res(P.SliceOp.make([x], start=(-3,), stop=(100,), axes=(2,))) == [T((3, 4, 3))]
    assert res(P.SliceOp.make([x], start=(5,), stop=(-100,), step=(-2,), axes=(-1,))) == [T((3, 4, 3))]
    assert res(P.SliceOp.make([x])) == [T((3, 4, 6))]
    fails(P.SliceOp, [x], "step cannot be zero", start=(0,), stop=(1,), step=(0,))
    fails(P.SliceOp, [x], "must have equal lengths", start=(0, 1), stop=(1,))
    fails(P.SliceOp, [x], "axis 3 is out of range", start=(0,), axes=(3,))
    fails(P.SliceOp, [x], r"repeated axis", start=(0, 0), axes=(1, -2))
    bad = P.SliceOp.make([x], [T((3, 4, 5))], start=(1,), stop=(2,))
    with pytest.raises(VerifyException, match=r"popxl.slice: result types \(\(3, 4, 5\) float32\) differ"):
        bad.verify()


def test_gather():
    w, idx, fidx = vals(((10, 4),), ((2, 3), i32), ((2,), f32))
    assert res(P.GatherOp.make([w, idx], axis=0)) == [T((2, 3, 4))]
    assert res(P.GatherOp.make([w, idx], axis=-1)) == [T((10, 2, 3))]
    fails(P.GatherOp, [w, fidx], r"indices must be an integer tensor, got \(2,\) float32", axis=0)
    fails(P.GatherOp, [w, idx], "axis 2 is out of range", axis=2)


def test_where():
    c, a, b, fc = vals(((3, 1), i1), ((3, 4),), ((),), ((3, 1),))
    assert res(P.WhereOp.make([c, a, b])) == [T((3, 4))]
    fails(P.WhereOp, [fc, a, b], "condition must be a bool tensor")
    (bi,) = vals(((), i32))
    fails(P.WhereOp, [c, a, bi], "operand dtypes differ")
    (a2,) = vals(((2, 4),))
    fails(P.WhereOp, [c, a2, b], "cannot broadcast")


def test_onehot():
    idx, v, v3 = vals(((8,), i32), ((2,), f16), ((3,),))
    assert res(P.OnehotOp.make([idx, v], num_classes=10)) == [T((8, 10), f16)]
    assert res(P.OnehotOp.make([idx, v], num_classes=10, axis=0)) == [T((10, 8), f16)]
    fails(P.OnehotOp, [idx, v3], r"values must have shape \(2,\)", num_classes=10)
    fails(P.OnehotOp, [idx, v], "num_classes must be positive", num_classes=0)
    fails(P.OnehotOp, [idx, v], "axis 2 is out of range for rank 2", num_classes=3, axis=2)
    fails(P.OnehotOp, [v, v], "indices must be an integer tensor", num_classes=3)


def test_squeeze_expand_reduce_to_shape():
    (x,) = vals(((1, 3, 1),))
    assert res(P.SqueezeOp.make([x])) == [T((3,))]
    assert res(P.SqueezeOp.make([x], axes=(-1,))) == [T((1, 3))]
    fails(P.SqueezeOp, [x], r"cannot squeeze axis 1 of size 3", axes=(1,))
    (b,) = vals(((3, 1),))
    assert res(P.ExpandOp.make([b], [T((2, 3, 4))])) == [T((2, 3, 4))]
    fails(P.ExpandOp, [b], r"cannot broadcast \(3, 1\) float32 to \(2, 4\) float32", [T((2, 4))])
    fails(P.ExpandOp, [b], "dtype changes", [T((3, 1), f16)])
    fails(P.ExpandOp, [b], "result type cannot be inferred")
    (g,) = vals(((2, 3, 4),))
    assert res(P.ReduceToShapeOp.make([g], [T((3, 1))])) == [T((3, 1))]
    fails(P.ReduceToShapeOp, [g], r"\(2, 1\) float32 does not broadcast to the input", [T((2, 1))])


def test_init():
    op = P.InitOp.make([], [T((2, 3))], init_type="zero")
    op.verify()
    fails(P.InitOp, [], "init_type must be", [T((2,))], init_type="ones")
    with pytest.raises(VerifyException):
        P.InitOp.make([], [T((2,)), T((2,))], init_type="zero").verify()


def test_argmax():
    (x,) = vals(((8, 10),))
    assert res(P.ArgmaxOp.make([x], axis=1)) == [T((8,), i32)]
    assert res(P.ArgminOp.make([x], axis=0, keepdims=True)) == [T((1, 10), i32)]
    (s,) = vals(((),))
    fails(P.ArgmaxOp, [s], "rank >= 1", axis=0)


# ------------------------------------------------------------------------------------
# Losses and gradient helpers
# ------------------------------------------------------------------------------------


def test_nll_loss():
    p, y = vals(((8, 10),), ((8,), i32))
    assert res(P.NllLossOp.make([p, y], reduction="mean")) == [T(())]
    assert res(P.NllLossOp.make([p, y], reduction="none", ignore_index=0, log_prob=True)) == [T((8,))]
    y2, yf = vals(((4,), i32), ((8,),))
    fails(P.NllLossOp, [p, y2], r"labels \(4,\) int32 must have the shape of probs \(8, 10\) float32", reduction="sum")
    fails(P.NllLossOp, [p, yf], "labels must be an integer tensor", reduction="sum")
    fails(P.NllLossOp, [p, y], "reduction must be one of", reduction="avg")
    fails(P.NllLossOp, [y, y], "probs must be a floating point tensor", reduction="sum")


def test_nll_loss_with_softmax_grad():
    p, y, lg = vals(((8, 10),), ((8,), i32), ((),))
    op = P.NllLossWithSoftmaxGradOp.make([p, y], loss_grad=1.0, reduction="mean")
    assert res(op) == [T(()), T((8, 10))]
    op2 = P.NllLossWithSoftmaxGradOp.make([p, y], loss_grad=lg, reduction="sum")
    assert op2.loss_grad_tensor is lg
    assert P.op_props(op2)["operand_segments"] == (1, 1, 1)
    fails(P.NllLossWithSoftmaxGradOp, [p, y, lg], "loss_grad is given both", loss_grad=1.0, reduction="sum")
    (lg2,) = vals(((2,),))
    fails(
        P.NllLossWithSoftmaxGradOp,
        [p, y, lg2],
        "loss_grad_tensor must be a numeric tensor with one element",
        reduction="sum",
    )


def test_grad_helpers():
    dy, x, h = vals(((4,),), ((4,),), ((4,), f16))
    assert res(P.GeluGradOp.make([dy, x])) == [T((4,))]
    assert res(P.ReluGradOp.make([dy, x])) == [T((4,))]
    fails(P.GeluGradOp, [h, x], "dy .* and x .* must have the same type")
    (m,) = vals(((2, 4),))
    assert res(P.SoftmaxGradOp.make([m, m], axis=1)) == [T((2, 4))]
    fails(P.SoftmaxGradOp, [m, m], "axis 2 is out of range", axis=2)
    p, y, dl, dln = vals(((8, 10),), ((8,), i32), ((),), ((8,),))
    assert res(P.NllLossGradOp.make([p, y, dl], reduction="mean")) == [T((8, 10))]
    assert res(P.NllLossGradOp.make([p, y, dln], reduction="none")) == [T((8, 10))]
    fails(P.NllLossGradOp, [p, y, dln], r"dloss \(8,\) float32 must have the loss type \(\) float32", reduction="sum")
    g, idx = vals(((2, 3, 4),), ((2, 3), i32))
    assert res(P.GatherGradOp.make([g, idx], [T((10, 4))], axis=0)) == [T((10, 4))]
    fails(P.GatherGradOp, [g, idx], r"is not the gather of \(10, 5\) float32", [T((10, 5))], axis=0)
    (s,) = vals(((2, 2),))
    assert res(P.SliceGradOp.make([s], [T((2, 4))], start=(1,), stop=(3,), axes=(1,))) == [T((2, 4))]
    fails(P.SliceGradOp, [s], r"is not the slice of \(2, 4\) float32", [T((2, 4))], start=(1,), axes=(1,))
    x3, y3, y3k = vals(((2, 3),), ((2,),), ((2, 1),))
    assert res(P.ReduceMaxGradOp.make([x3, y3, y3], axis=(1,))) == [T((2, 3))]
    assert res(P.ReduceMaxGradOp.make([x3, y3k, y3k], axis=(1,), keepdims=True)) == [T((2, 3))]
    fails(P.ReduceMaxGradOp, [x3, y3k, y3k], "must have the reduced type", axis=(1,))


# ------------------------------------------------------------------------------------
# In-place updates
# ------------------------------------------------------------------------------------


def test_accumulate_family():
    t, x, xb, h, f = vals(((3, 4),), ((3, 4),), ((4,),), ((3, 4), f16), ((),))
    for cls in (P.AccumulateOp, P.AccumulateSquareOp, P.AccumulateMovingAverageOp, P.AccumulateMovingAverageSquareOp):
        op = cls.make([t, x], f=0.9)
        op.verify()
        assert res(op) == [] and written_operands(op) == (0,)
        cls.make([h, xb], f=f).verify()  # float16 state, broadcast X, tensor factor
    P.AccumulateOp.make([t, x]).verify()  # f defaults to 1
    fails(P.AccumulateMovingAverageOp, [t, x], r"f is required \(a property or a tensor operand\)")
    fails(P.AccumulateOp, [xb, t], r"cannot update \(4,\) float32 in place with X \(3, 4\) float32")
    fails(P.AccumulateOp, [t, x, f], "f is given both", f=1.0)
    P.AccumulateMeanOp.make([t, x], step=f).verify()
    P.AccumulateMeanOp.make([t, x], step=3).verify()  # int coerced to f64
    fails(P.AccumulateMeanOp, [t, x], "step is required")
    P.AccumulatorScaleOp.make([t], f=0.0).verify()
    fails(P.AccumulatorScaleOp, [t], "f is required")
    P.AccumulatorZeroOp.make([t]).verify()
    (b,) = vals(((3, 4), i1))
    fails(P.AccumulatorZeroOp, [b], "the updated tensor must be a numeric tensor")


def test_sparse_copy_increment_dynamic():
    t, x, idx = vals(((10, 4),), ((3, 4),), ((3,), i32))
    P.SparseAccumulateOp.make([t, x, idx], axis=0, f=0.5).verify()
    (x2,) = vals(((2, 4),))
    fails(P.SparseAccumulateOp, [t, x2, idx], r"X \(2, 4\) float32 must have the shape \(3, 4\)", axis=0)
    P.CopyVarUpdateOp.make([t, t]).verify()
    c, cu = vals(((1,), u32), ((1,), u32))
    assert res(P.IncrementModOp.make([c], increment=1.0, modulus=3.0)) == [T((1,), u32)]
    P.IncrementModInplaceOp.make([c], increment=1, modulus=3).verify()
    fails(P.IncrementModOp, [c], "modulus cannot be zero", increment=1.0, modulus=0.0)
    s, i1_, i2_, u = vals(((4, 3),), ((1,), u32), ((2,), u32), ((1, 3),))
    assert res(P.DynamicSliceOp.make([s, i1_], axes=(0,), sizes=(1,))) == [T((1, 3))]
    fails(
        P.DynamicSliceOp, [s, i2_], r"index \(2,\) uint32 must have one element per axis \(1\)", axes=(0,), sizes=(1,)
    )
    fails(P.DynamicSliceOp, [s, i1_], "size 5 is out of range", axes=(0,), sizes=(5,))
    fails(P.DynamicSliceOp, [s, s], "index must be an integer tensor", axes=(0,), sizes=(1,))
    assert res(P.DynamicUpdateOp.make([s, i1_, u], axes=(0,), sizes=(1,))) == [T((4, 3))]
    P.DynamicUpdateInplaceOp.make([s, i1_, u], axes=(0,), sizes=(1,)).verify()
    fails(
        P.DynamicUpdateInplaceOp,
        [s, i1_, s],
        r"update \(4, 3\) float32 must have the slice shape",
        axes=(0,),
        sizes=(1,),
    )
    del cu


def test_scaled_add_inplace_mixed_float():
    w, g16, gi = vals(((4,),), ((4,), f16), ((4,), i32))
    P.ScaledAddInplaceOp.make([w, g16], a=1.0, b=-0.1).verify()
    fails(P.ScaledAddInplaceOp, [w, gi], "operand dtypes differ", a=1.0, b=1.0)


# ------------------------------------------------------------------------------------
# Optimiser maths and optional operands
# ------------------------------------------------------------------------------------


def test_adam_updater_operands_and_writes():
    m, v, w, step, b2 = vals(((4,), f16), ((4,),), ((4,),), ((),), ((),))
    op = P.AdamUpdaterOp.make([m, v, w, step], beta1=0.9, beta2=0.999)
    op.verify()
    assert res(op) == [T((4,))]
    assert op.weight is w and op.time_step is step and written_operands(op) == (3,)
    assert P.op_props(op)["operand_segments"] == (1, 1, 1, 1, 0, 0, 0, 0)
    op2 = P.AdamUpdaterOp.make([m, v, None, step], beta1=0.9, beta2=b2)
    op2.verify()
    assert op2.weight is None and op2.beta2_tensor is b2 and written_operands(op2) == (2,)
    op3 = P.AdamUpdaterOp.make([m, v], time_step=step, beta1=0.9, beta2=0.99)
    assert written_operands(op3) == (2,) and op3.time_step is step
    op4 = P.AdamUpdaterOp.make([m, v])
    assert written_operands(op4) == ()
    # same op rebuilt from flat operands + op_props
    again = P.AdamUpdaterOp.make(list(op2.operands), **P.op_props(op2))
    again.verify()
    assert again.beta2_tensor is b2 and again.weight is None


def test_updater_errors():
    m, v, w, step, wv = vals(((4,),), ((4,),), ((4,),), ((),), ((5,),))
    fails(P.AdamUpdaterOp, [m, v, None, step], "bias correction .* needs beta1")
    fails(P.AdamUpdaterOp, [m, v, None, step], "needs beta2", beta1=0.9)
    fails(P.AdamUpdaterOp, [m, v], "weight_decay needs the weight operand", weight_decay=0.01)
    fails(P.AdamUpdaterOp, [m, v, wv], r"m and weight: shapes differ: \(4,\) float32 vs \(5,\) float32")
    fails(P.AdamUpdaterOp, [m, wv], "m and v: shapes differ")
    fails(P.AdamUpdaterOp, [m, v, w, wv], r"time_step must be a numeric tensor with one element")
    P.AdamaxUpdaterOp.make([m, v, w, step], beta1=0.9).verify()  # no beta2
    P.LambUpdaterOp.make([m, v, w, step], beta1=0.9, beta2=0.999, weight_decay=0.1).verify()
    with pytest.raises(VerifyException, match="has no operand named 'beta2'"):
        P.AdamaxUpdaterOp.make([m, v], beta2=step)
    with pytest.raises(VerifyException, match="given twice"):
        P.AdamUpdaterOp.make([m, v, w], weight=w)


def test_adam_var_update():
    t, x, r1, r2, lr = vals(((4,),), ((4,),), ((),), ((),), ((),))
    op = P.AdamVarUpdateOp.make([t, x, r1, r2], learning_rate=lr, max_weight_norm=1.0)
    op.verify()
    assert op.learning_rate_tensor is lr and written_operands(op) == (0,) and res(op) == []
    fails(P.AdamVarUpdateOp, [t, x, r1, r2], "learning_rate is required")
    fails(P.AdamVarUpdateOp, [t, x, t, r2], "r1 must be a numeric tensor with one element", learning_rate=0.1)


def test_greedy_segments():
    assert P.AdamUpdaterOp.greedy_segments(3) == (1, 1, 1, 0, 0, 0, 0, 0)
    assert P.AdamUpdaterOp.greedy_segments(1) is None
    assert P.AdamUpdaterOp.greedy_segments(9) is None
    assert P.ConcatOp.greedy_segments(3) == (3,)
    assert P.AddOp.greedy_segments(2) == (1, 1)


# ------------------------------------------------------------------------------------
# Syntax
# ------------------------------------------------------------------------------------

ROUND_TRIP = """
%m, %v, %w, %t, %b = "test.op"() : () -> (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>)
%u = popxl.adam_updater %m, %v, %w, %t {beta1 = 9.000000e-01 : f64, beta2 = 9.990000e-01 : f64} : (tensor<4xf16>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
%u2 = popxl.adam_updater %m, %v, %t, %b {beta1 = 9.000000e-01 : f64, operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1, 0>} : (tensor<4xf16>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> tensor<4xf32>
popxl.accumulate_ %v, %w, %b : (tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> ()
%z = popxl.init {init_type = "zero"} : () -> tensor<2xf32>
%l, %dx = popxl.nll_loss_with_softmax_grad %w, %t {reduction = "sum"} : (tensor<4xf32>, tensor<f32>) -> (tensor<f32>, tensor<4xf32>)
"""


def _parse(text):
    ctx = xl_context(allow_unregistered=True)
    return Parser(ctx, text).parse_module()


def test_custom_syntax_segments():
    text = ROUND_TRIP.replace("%l, %dx = popxl.nll_loss_with_softmax_grad %w, %t", "//")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("//"))
    module = _parse(text)
    module.verify()
    ops = list(module.ops)
    u, u2 = ops[1], ops[2]
    assert isinstance(u, P.AdamUpdaterOp) and isinstance(u2, P.AdamUpdaterOp)
    assert u.time_step is not None and u.weight is not None
    assert u2.weight is None and u2.time_step is not None and u2.beta2_tensor is not None
    printed = str(module)
    assert "operandSegmentSizes" not in printed.splitlines()[2]  # greedy: elided
    assert "operandSegmentSizes = array<i32: 1, 1, 0, 1, 0, 0, 1, 0>" in printed
    assert str(_parse(printed)) == printed


def test_parse_errors():
    from xdsl.utils.exceptions import ParseError

    with pytest.raises(ParseError, match="cannot match 1 operands"):
        _parse('%m = "test.op"() : () -> tensor<4xf32>\n%u = popxl.adam_updater %m : (tensor<4xf32>) -> tensor<4xf32>')
    with pytest.raises(ParseError, match="2 operands but 1 operand types"):
        _parse('%a = "test.op"() : () -> tensor<4xf32>\n%u = popxl.add %a, %a : (tensor<4xf32>) -> tensor<4xf32>')


# ------------------------------------------------------------------------------------
# Memory effects
# ------------------------------------------------------------------------------------


def test_effects_dce_cse():
    (x, m, v, step) = vals(((4,),), ((4,),), ((4,),), ((),))
    # two identical inits are never merged; an unused one is removed
    z1 = P.InitOp.make([], [T((4,))], init_type="zero")
    z2 = P.InitOp.make([], [T((4,))], init_type="zero")
    dead = P.InitOp.make([], [T((4,))], init_type="zero")
    acc = P.AccumulateOp.make([z1, x])
    acc2 = P.AccumulateOp.make([z2, x])
    # adam_updater writes time_step and has a result: kept even when the result is unused
    upd = P.AdamUpdaterOp.make([m, v, None, step], beta1=0.9, beta2=0.999)
    # pure ops: duplicates merged, unused removed
    n1, n2 = P.NegOp.make([x]), P.NegOp.make([x])
    use = P.AddOp.make([n1, n2])
    sink = P.AccumulateOp.make([z1, use])
    unused = P.ExpOp.make([x])
    src = x.owner
    module = ModuleOp([src, z1, z2, dead, acc, acc2, upd, n1, n2, use, sink, unused])
    module.verify()
    assert P.is_written(z1.results[0]) and P.is_written(step)
    assert not P.is_written(x)
    cse(module)
    region_dce(module.body)
    names = [o.name for o in module.ops]
    assert names.count("popxl.init") == 2
    assert "popxl.adam_updater" in names
    assert names.count("popxl.neg") == 1
    assert "popxl.exp" not in names


def test_operand_positions_and_greedy_matching() -> None:
    from xl.dialects.popxl_operands import greedy_segments, operand_positions

    n_defs = len(P.AdamUpdaterOp.operand_names())
    segs = greedy_segments(P.AdamUpdaterOp, 3)
    assert segs is not None
    assert segs == (1, 1, 1) + (0,) * (n_defs - 3)
    pos = operand_positions(P.AdamUpdaterOp, segs)
    assert (pos["m"], pos["v"], pos["weight"], pos["time_step"]) == (0, 1, 2, -1)
    seg4 = (1, 1, 0, 1) + (0,) * (n_defs - 4)
    pos4 = operand_positions(P.AdamUpdaterOp, seg4)
    assert (pos4["weight"], pos4["time_step"]) == (-1, 2)
    assert greedy_segments(P.AdamUpdaterOp, 1) is None  # m and v are required
    with pytest.raises(ValueError, match=r"popxl.adam_updater: operand_segments \(1, 1\) do not match"):
        operand_positions(P.AdamUpdaterOp, (1, 1))
