"""Gradient rules of the replica collectives (`xl.dialects.replica`), registered by op class.

As in PopXL, the gradient of a collective is again a collective over the same grouping:

| forward | gradient of the operand |
|---|---|
| `all_reduce` (`add`, `mean`) | the same all-reduce of the gradients |
| `all_reduce` (`square_add`, `mul`, `min`, `max`) | `2x * S`, `S * y / x`, `S * (x == y)` (upstream: no rule) |
| `all_reduce_identical_inputs` | the all-reduce (`op`) of the gradients |
| `all_reduce_identical_grad_inputs` | the gradient itself |
| `reduce_scatter` | the all-gather of the gradients (divided by the group size for `mean`), reshaped |
| `all_gather` | the replicated slice of the gradient |
| `slice` | the all-gather of the gradients |
| `sharded_slice` | the all-gather of the gradients, reshaped |

(`S` is the all-reduce `add` of the gradients.)

The two conventions of PopXL meet here: an op whose inputs differ per replica and whose
result is the same on every member of a group (`all_gather`) counts the loss downstream
once (its gradient is a slice); the reductions count every replica's loss (the
all-reduce of the gradients is the gradient of their sum). `tests/frontend/popxl/test_replica_grad.py`
checks each rule against finite differences of the matching objective.
"""

from __future__ import annotations

import math
from typing import Any

from xdsl.ir import Operation, SSAValue

from xl.dialects.popxl import CastOp, DivOp, EqualOp, MulOp, ReshapeOp, op_props
from xl.dialects.popxl import SliceOp as PSliceOp
from xl.dialects.replica import (
    LINEAR_OPS,
    AllGatherOp,
    AllReduceIdenticalGradInputsOp,
    AllReduceIdenticalInputsOp,
    AllReduceOp,
    ReduceScatterOp,
    ShardedSliceOp,
    SliceOp,
)
from xl.dialects.utils import dtype_of, shape_of, tensor_type
from xl.passes.grad_rules import GradBuilder, Grads, grad_rule


def _reshape(b: GradBuilder, v: SSAValue, shape: tuple[int, ...]) -> SSAValue:
    if shape_of(v.type) == tuple(shape):
        return v
    return b.v(ReshapeOp, v, result_type=tensor_type(shape, dtype_of(v.type)))


def _gather_flat(b: GradBuilder, v: SSAValue, grouping: Any, shape: tuple[int, ...]) -> SSAValue:
    """The 1-D shards `v` of the members of each group, concatenated, the padding of the
    last shards dropped, and reshaped."""
    g = b.v(AllGatherOp, v, grouping=grouping, axis=0, new_axis=False)
    n = math.prod(shape)
    if shape_of(g.type)[0] != n:
        g = b.v(PSliceOp, g, start=(0,), stop=(n,), axes=(0,))
    return _reshape(b, g, shape)


def _reduction_grad(
    b: GradBuilder, op: Operation, kind: str, x: SSAValue, total: SSAValue, y_full: SSAValue | None
) -> SSAValue:
    """dx of `y = reduce_kind(x over a group)` given `total`, the gradient summed over the
    group at the positions of `x`, and `y_full`, the reduction at those positions."""
    dt = dtype_of(x.type)
    if kind == "add":
        return total
    if kind == "mean":
        size = op_props(op)["grouping"].size()
        return b.v(MulOp, total, b.const(1.0 / size, dt))
    xf = b.fwd(x)
    if kind == "square_add":
        return b.v(MulOp, total, b.v(MulOp, xf, b.const(2.0, dt)))
    assert y_full is not None
    if kind == "mul":
        return b.v(MulOp, total, b.v(DivOp, y_full, xf))
    if kind in ("min", "max"):
        hit = b.v(EqualOp, xf, y_full)
        mask = b.v(CastOp, hit, result_type=tensor_type(shape_of(x.type), dt))
        return b.v(MulOp, total, mask)
    raise ValueError(f"{op.name}: op {kind!r} has no gradient (logical reduction)")


@grad_rule(AllReduceOp)
def _all_reduce(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    props = op_props(op)
    kind, grouping = props["op"], props["grouping"]
    if kind in LINEAR_OPS:
        return [b.v(AllReduceOp, dy, grouping=grouping, reduction=kind)]
    total = b.v(AllReduceOp, dy, grouping=grouping, reduction="add")
    y = b.fwd(op.results[0]) if kind not in ("square_add",) else None
    return [_reduction_grad(b, op, kind, op.operands[0], total, y)]


@grad_rule(AllReduceIdenticalInputsOp)
def _all_reduce_identical_inputs(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    props = op_props(op)
    return [b.v(AllReduceOp, dy, grouping=props["grouping"], reduction=props["op"])]


@grad_rule(AllReduceIdenticalGradInputsOp)
def _all_reduce_identical_grad_inputs(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    return [dy]


@grad_rule(ReduceScatterOp)
def _reduce_scatter(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    props = op_props(op)
    kind, grouping = props["op"], props["grouping"]
    x = op.operands[0]
    shape = shape_of(x.type)
    total = _gather_flat(b, dy, grouping, shape)
    y_full = None
    if kind in ("mul", "min", "max"):
        y_full = _gather_flat(b, b.fwd(op.results[0]), grouping, shape)
    return [_reduction_grad(b, op, kind, x, total, y_full)]


@grad_rule(ShardedSliceOp)
def _sharded_slice(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    x = op.operands[0]
    return [_gather_flat(b, dy, op_props(op)["grouping"], shape_of(x.type))]


@grad_rule(SliceOp)
def _slice(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    props = op_props(op)
    x = op.operands[0]
    xs = shape_of(x.type)
    axis = props["axis"] % len(xs)
    piece = list(xs)
    piece[axis] //= props["grouping"].size()
    dy = _reshape(b, dy, tuple(piece))  # restores an axis the slice dropped
    return [b.v(AllGatherOp, dy, grouping=props["grouping"], axis=axis, new_axis=False)]


@grad_rule(AllGatherOp)
def _all_gather(b: GradBuilder, op: Operation, dys: list[SSAValue | None]) -> Grads:
    (dy,) = dys
    assert dy is not None
    props = op_props(op)
    x = op.operands[0]
    axis = 0 if props["new_axis"] else props["axis"]
    dx = b.v(SliceOp, dy, grouping=props["grouping"], axis=axis)
    return [_reshape(b, dx, shape_of(x.type))]
