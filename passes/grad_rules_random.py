"""Gradient rules of the popxl random ops, registered by op class (see `xl.passes.grad_rules`).

The dropout mask depends only on the seed's value and the mask shape, so the gradient of
a dropout is the same dropout of `dy` (same seed, ratio and shape): `dy * mask / (1 - ratio)`.
The seed gets no gradient. The sampling ops and `modify_random_seed` declare `NoGradient`.
"""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from xl.dialects.popxl import DropoutOp, ShapedDropoutOp, op_props
from xl.passes.grad_rules import GradBuilder, Grads, grad_rule


@grad_rule(DropoutOp, ShapedDropoutOp)
def _dropout(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x, seed = op.operands
    if not b.needs(x):
        return [None, None]
    return [b.v(type(op), dy, b.fwd(seed), **op_props(op)), None]
