"""Canonicalization patterns of the `popxl` dialect (picked up by `canonicalize`).

Each pattern only fires when no tensor involved is updated in place later
(`is_written`): under the program-order semantics, forwarding a value past an
in-place update would change what a reader sees.

```mlir
%a = popxl.reshape %x : (tensor<2x3xf32>) -> tensor<6xf32>
%b = popxl.reshape %a : (tensor<6xf32>) -> tensor<3x2xf32>
// canonicalizes to
%b = popxl.reshape %x : (tensor<2x3xf32>) -> tensor<3x2xf32>
```
"""

from __future__ import annotations

from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern, op_type_rewrite_pattern

from xl.dialects.effects import is_written
from xl.dialects.popxl import CastOp, ReshapeOp, TransposeOp


def _frozen(*values: SSAValue) -> bool:
    """None of the values is updated in place anywhere."""
    return not any(is_written(v) for v in values)


class RemoveNoopShapeOp(RewritePattern):
    """`reshape`/`cast` to the input's own type is the input itself."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReshapeOp | CastOp, rewriter: PatternRewriter) -> None:
        if op.input.type == op.result.type and _frozen(op.input, op.result):
            rewriter.replace(op, [], [op.input])


class FoldReshapeChain(RewritePattern):
    """`reshape(reshape(x))` is one reshape of `x`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReshapeOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if isinstance(inner, ReshapeOp) and _frozen(inner.input, inner.result, op.result):
            rewriter.replace(op, ReshapeOp.make([inner.input], [op.result.type]))


class FoldTransposeChain(RewritePattern):
    """`transpose(transpose(x, p), q)` is `transpose(x, p∘q)`, or `x` for the identity."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: TransposeOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if isinstance(inner, TransposeOp) and _frozen(inner.input, inner.result, op.result):
            # perm is an i64 array (the op's property constraint); get_values is typed for int arrays
            p = tuple(inner.perm.get_values())  # pyright: ignore[reportAttributeAccessIssue]
            q = tuple(op.perm.get_values())  # pyright: ignore[reportAttributeAccessIssue]
            perm = tuple(p[i] for i in q)
            if perm == tuple(range(len(perm))):
                rewriter.replace(op, [], [inner.input])
            else:
                rewriter.replace(op, TransposeOp.make([inner.input], perm=perm))
