"""Gradient rules of the popxl neural-network ops, registered by op class (see `xl.passes.grad_rules`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.ir import Operation, SSAValue

from xl.dialects.popxl import (
    AddOp,
    AveragePoolGradOp,
    AveragePoolOp,
    ConvOp,
    ConvTransposeOp,
    ConvWeightGradOp,
    CumsumOp,
    EqualOp,
    ExpOp,
    GroupNormGradOp,
    GroupNormOp,
    InterpolateGradOp,
    InterpolateOp,
    LogSoftmaxOp,
    MaxPoolGradOp,
    MaxPoolOp,
    MulOp,
    ReduceProdGradOp,
    ReduceProdOp,
    ReduceSumOp,
    ReshapeOp,
    RoiAlignGradOp,
    RoiAlignOp,
    ScatterOp,
    ScatterReduceGradOp,
    ScatterReduceOp,
    SliceOp,
    SubOp,
    TakeAlongAxisOp,
    TopkOp,
    WhereOp,
    op_props,
)
from xl.dialects.utils import shape_of, tensor_type
from xl.passes.autodiff_info import AutodiffError
from xl.passes.grad_rules import GradBuilder, Grads, grad_rule

_CONV_PROPS = ("stride", "pads", "dilation", "groups")
_POOL_PROPS = ("kernel", "stride", "pads", "dilation", "ceil_mode")


def _props(op: Operation, names: tuple[str, ...]) -> dict[str, Any]:
    p = op_props(op)
    return {k: p[k] for k in names if k in p}


def _conv_output_padding(x: SSAValue, dy: SSAValue, w: SSAValue, props: dict[str, Any]) -> tuple[int, ...]:
    """The `output_padding` that makes the transposed convolution of `dy` as large as `x`
    (the input elements after the last full window of the forward conv)."""
    xs, ys, ws = shape_of(x.type), shape_of(dy.type), shape_of(w.type)
    nd = len(xs) - 2
    stride = props.get("stride") or (1,) * nd
    pads = props.get("pads") or (0,) * (2 * nd)
    dil = props.get("dilation") or (1,) * nd
    out = []
    for i in range(nd):
        size = (ys[2 + i] - 1) * stride[i] - pads[i] - pads[nd + i] + dil[i] * (ws[2 + i] - 1) + 1
        out.append(xs[2 + i] - size)
    return tuple(out)


@grad_rule(ConvOp)
def _conv(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """dx: the transposed convolution of dy with the same weight; dw: `conv_weight_grad`."""
    (dy,) = dys
    assert dy is not None
    x, w = op.operands
    props = _props(op, _CONV_PROPS)
    out: list[SSAValue | None] = [None, None]
    if b.needs(x):
        opad = _conv_output_padding(x, dy, w, props)
        out[0] = b.v(
            ConvTransposeOp,
            dy,
            b.fwd(w),
            **props,
            output_padding=opad if any(opad) else None,
        )
    if b.needs(w):
        out[1] = b.v(ConvWeightGradOp, dy, b.fwd(x), kernel=shape_of(w.type)[2:], **props)
    return out


@grad_rule(ConvTransposeOp)
def _conv_transpose(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """`conv_transpose(x, w)` is the adjoint of `conv(., w)`: dx = conv(dy, w); dw is the
    conv weight gradient with the roles of x and dy swapped."""
    (dy,) = dys
    assert dy is not None
    x, w = op.operands
    props = _props(op, _CONV_PROPS)
    dy, props = _without_extra_outputs(b, x, dy, props, op_props(op).get("output_padding"))
    out: list[SSAValue | None] = [None, None]
    if b.needs(x):
        out[0] = b.v(ConvOp, dy, b.fwd(w), **props)
    if b.needs(w):
        out[1] = b.v(ConvWeightGradOp, b.fwd(x), dy, kernel=shape_of(w.type)[2:], **props)
    return out


def _without_extra_outputs(
    b: GradBuilder, x: SSAValue, dy: SSAValue, props: dict[str, Any], output_padding: Any
) -> tuple[SSAValue, dict[str, Any]]:
    """An `output_padding` of a stride or more (allowed when smaller than the dilation)
    adds `floor(op / stride)` whole strides of outputs no input position reaches; a conv of
    `dy` would have that many extra positions. They are taken off the end padding, and
    what the end padding cannot absorb is sliced off the end of `dy` (only zero-weight
    positions: beyond the last one any window of `x` reads)."""
    xs = shape_of(x.type)
    nd = len(xs) - 2
    opad = tuple(output_padding or (0,) * nd)
    stride = tuple(props.get("stride") or (1,) * nd)
    pads: list[int] = list(props.get("pads") or (0,) * (2 * nd))
    crop: dict[int, int] = {}
    for i in range(nd):
        extra = opad[i] // stride[i] * stride[i]
        if extra:
            cut = min(extra, pads[nd + i])
            pads[nd + i] -= cut
            if extra > cut:
                crop[2 + i] = shape_of(dy.type)[2 + i] - (extra - cut)
    if not crop and tuple(pads) == tuple(props.get("pads") or (0,) * (2 * nd)):
        return dy, props
    if crop:
        dy = b.v(SliceOp, dy, start=(0,) * len(crop), stop=tuple(crop.values()), axes=tuple(crop))
    return dy, {**props, "pads": tuple(pads)}


@grad_rule(MaxPoolOp)
def _max_pool(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    return [b.v(MaxPoolGradOp, dy, b.fwd(x), **_props(op, _POOL_PROPS))]


@grad_rule(AveragePoolOp)
def _average_pool(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    props = _props(op, (*_POOL_PROPS, "count_include_pad"))
    return [b.v(AveragePoolGradOp, dy, result_type=x.type, **props)]


@grad_rule(TopkOp)
def _topk(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """dy of the values goes back to the positions they were taken from."""
    dy = dys[0]
    x = op.operands[0]
    if dy is None or not b.needs(x):
        return [None]
    p = op_props(op)
    axis = p["axis"] % len(shape_of(x.type))
    return [
        b.v(ScatterReduceOp, dy, b.fwd(op.results[1]), axis=axis, axis_size=shape_of(x.type)[axis], reduction="sum")
    ]


@grad_rule(ScatterOp)
def _scatter(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """data: dy with the written positions zeroed (a scatter of zeros); values: dy read
    back at the indices."""
    (dy,) = dys
    assert dy is not None
    data, idx, vals = op.operands
    axis = op_props(op)["axis"]
    out: list[SSAValue | None] = [None, None, None]
    if b.needs(data):
        out[0] = b.v(ScatterOp, dy, b.fwd(idx), b.zeros(vals.type), axis=axis)
    if b.needs(vals):
        g = b.v(TakeAlongAxisOp, dy, b.fwd(idx), axis=axis)
        out[2] = b.v(WhereOp, _scatter_winners(b, data, idx, vals, axis), g, b.zeros(vals.type))
    return out


def _scatter_winners(b: GradBuilder, data: SSAValue, idx: SSAValue, vals: SSAValue, axis: object) -> SSAValue:
    """True where a value of `scatter(data, idx, vals)` is the one left in the result (with
    repeated indices the last write wins; the others get no gradient): every value's
    number (1, 2, ... in C order) is scattered, read back at its index and compared."""
    shape = shape_of(vals.type)
    n = 1
    for d in shape:
        n *= d
    i32 = tensor_type((n,), np.int32)
    ids = b.v(CumsumOp, b.v(AddOp, b.zeros(i32), b.const(1, np.int32)), dim=0)
    ids = b.v(ReshapeOp, ids, result_type=tensor_type(shape, np.int32))
    written = b.v(ScatterOp, b.zeros(tensor_type(shape_of(data.type), np.int32)), b.fwd(idx), ids, axis=axis)
    return b.v(EqualOp, b.v(TakeAlongAxisOp, written, b.fwd(idx), axis=axis), ids)


@grad_rule(ScatterReduceOp)
def _scatter_reduce(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    data, idx = op.operands[0], op.operands[1]
    init = op.operands[2] if len(op.operands) == 3 else None
    p = {k: v for k, v in op_props(op).items() if k in ("axis", "axis_size", "reduction")}
    fwd = [b.fwd(data), b.fwd(idx), b.fwd(op.results[0])]
    if init is not None:
        fwd.append(b.fwd(init))
    out: list[SSAValue | None] = [None] * len(op.operands)
    if b.needs(data):
        out[0] = b.v(ScatterReduceGradOp, dy, *fwd, wrt="data", **p)
    if init is not None and b.needs(init):
        out[2] = dy if p["reduction"] == "sum" else b.v(ScatterReduceGradOp, dy, *fwd, wrt="initial", **p)
    return out


@grad_rule(ReduceProdOp)
def _reduce_prod(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    p = {k: v for k, v in op_props(op).items() if k in ("axis", "keepdims")}
    return [b.v(ReduceProdGradOp, b.fwd(x), dy, **p)]


@grad_rule(LogSoftmaxOp)
def _log_softmax(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """dx = dy - softmax(x) * sum(dy) along the axis (softmax = exp of the result)."""
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    axis = op_props(op)["axis"] % len(shape_of(x.type))
    total = b.v(ReduceSumOp, dy, axis=(axis,), keepdims=True)
    soft = b.v(ExpOp, b.fwd(op.results[0]))
    return [b.v(SubOp, dy, b.v(MulOp, soft, total))]


@grad_rule(InterpolateOp)
def _interpolate(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    if not b.needs(x):
        return [None]
    return [b.v(InterpolateGradOp, dy, result_type=x.type, **op_props(op))]


@grad_rule(RoiAlignOp)
def _roi_align(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """The input's gradient; none for the RoI boxes and the batch indices (as upstream)."""
    (dy,) = dys
    assert dy is not None
    x, rois, bidx = op.operands
    if not b.needs(x):
        return [None, None, None]
    return [b.v(RoiAlignGradOp, dy, b.fwd(rois), b.fwd(bidx), result_type=x.type, **op_props(op)), None, None]


@grad_rule(GroupNormOp)
def _group_norm(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    """`popxl.group_norm_grad` from the forward's statistics (its `mean` and `inv_std_dev`
    results become activations of the gradient graph, as in PopART). A gradient reaching
    the statistics themselves is refused: no rule propagates it."""
    dy, dmean, dinv = dys
    if dmean is not None or dinv is not None:
        raise AutodiffError(
            "autodiff: a gradient flows into the mean / inv_std_dev results of popxl.group_norm, "
            "which have no gradient rule"
        )
    x, w, bias = op.operands
    if dy is None or not any(b.needs(v) for v in (x, w, bias)):
        return [None, None, None]
    p = op_props(op)
    g = b.op(
        GroupNormGradOp,
        b.fwd(x),
        b.fwd(w),
        b.fwd(op.results[1]),
        b.fwd(op.results[2]),
        dy,
        num_groups=p["num_groups"],
        epsilon=p["epsilon"],
    )
    return [r if b.needs(v) else None for r, v in zip(g.results, (x, w, bias))]
