"""Gradient rule of `popxl.custom`: a `popxl.custom_grad` of the same op type and
attributes, given the output gradients (zeros for outputs without one) and the forward
inputs; its results are the inputs' gradients (the user's `grad`, run by the kernel). An
op type whose definition has no `grad` is refused, naming it, when a gradient must flow
through it."""

from __future__ import annotations

from xdsl.ir import Operation, SSAValue

from xl.dialects.custom_ops import CustomOpError, custom_op_definition
from xl.dialects.popxl import CustomGradOp, CustomOp
from xl.passes.autodiff_info import AutodiffError
from xl.passes.grad_rules import GradBuilder, Grads, grad_rule


@grad_rule(CustomOp)
def _custom(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    assert isinstance(op, CustomOp)
    needed = [b.needs(x) for x in op.operands]
    if not any(needed) or all(dy is None for dy in dys):
        return [None] * len(op.operands)
    op_type = op.op_type.data
    try:
        definition = custom_op_definition(op_type)
    except CustomOpError as e:
        raise AutodiffError(f"autodiff: {e}") from None
    if definition.grad is None:
        raise AutodiffError(
            f"autodiff: custom op {op_type!r} has no gradient registered (give grad=... to its definition), "
            "and a gradient must flow through it"
        )
    output_grads = [dy if dy is not None else b.zeros(r.type) for dy, r in zip(dys, op.results)]
    inputs = [b.fwd(x) for x in op.operands]
    grad = b.op(
        CustomGradOp,
        *output_grads,
        *inputs,
        result_types=[x.type for x in op.operands],
        op_type=op_type,
        attrs=op.attrs,
        num_output_grads=len(output_grads),
    )
    return [r if need else None for r, need in zip(grad.results, needed)]
