"""Gradient rules of the popxl neural-network ops, registered by op class (see `xl.passes.grad_rules`)."""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from xl.dialects.popxl import (
    AveragePoolGradOp,
    AveragePoolOp,
    ConvOp,
    ConvTransposeOp,
    ConvWeightGradOp,
    MaxPoolGradOp,
    MaxPoolOp,
    op_props,
)
from xl.dialects.utils import shape_of
from xl.passes.grad_rules import GradBuilder, Grads, grad_rule

_CONV_PROPS = ("stride", "pads", "dilation", "groups")
_POOL_PROPS = ("kernel", "stride", "pads", "dilation", "ceil_mode")


def _props(op: Operation, names: tuple[str, ...]) -> dict[str, object]:
    p = op_props(op)
    return {k: p[k] for k in names if k in p}


def _conv_output_padding(x: SSAValue, dy: SSAValue, w: SSAValue, props: dict[str, object]) -> tuple[int, ...]:
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
            ConvTransposeOp, dy, b.fwd(w), **props,
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
    out: list[SSAValue | None] = [None, None]
    if b.needs(x):
        out[0] = b.v(ConvOp, dy, b.fwd(w), **props)
    if b.needs(w):
        out[1] = b.v(ConvWeightGradOp, b.fwd(x), dy, kernel=shape_of(w.type)[2:], **props)
    return out


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
