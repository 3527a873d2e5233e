"""All-reduces for tensor parallelism (popxl.addons' `replicated_all_reduce_TP`), as ops of
the `replica` dialect. Each differs from the others in its gradient:

| function | value | gradient |
|---|---|---|
| `replicated_all_reduce` | the all-reduce of `t` | the all-reduce of the gradients |
| `replicated_all_reduce_identical_inputs` | `t` (the inputs are identical) | the all-reduce of the gradients |
| `replicated_all_reduce_identical_grad_inputs` | the all-reduce of `t` | the gradient (identical on every replica) |

Upstream implements the three as one PopART op whose identical-input form needs PopART's
`OpToIdentityPattern` (`popxl_addons.patterns.apply_pre_alias_patterns`); here each is an
op with its own kernel and gradient rule, so no pattern is needed."""

from __future__ import annotations

from typing import Any

import popxl
from popxl import bridge
from popxl.ops.collectives import CollectiveOps
from xl.dialects.replica import (
    AllReduceIdenticalGradInputsOp,
    AllReduceIdenticalInputsOp,
    AllReduceOp,
    ReplicaGroupingAttr,
)

__all__ = [
    "replicated_all_reduce",
    "replicated_all_reduce_identical_grad_inputs",
    "replicated_all_reduce_identical_inputs",
]


def _emit(cls: Any, what: str, t: popxl.Tensor, op: str, group: Any) -> popxl.Tensor:
    if not isinstance(t, popxl.Tensor):
        raise TypeError(f"{what}: t must be a popxl Tensor, got {type(t).__name__}")
    if op not in CollectiveOps:
        raise ValueError(f"{what}: not a valid op: {op!r}. Must choose from: {', '.join(CollectiveOps)}")
    ir = t.ir
    group = ir.replica_grouping() if group is None else group
    if not isinstance(group, popxl.ReplicaGrouping):
        raise TypeError(f"{what}: group must be a popxl.ReplicaGrouping, got {type(group).__name__}")
    if len(group.assignment) != ir.replication_factor:
        raise ValueError(
            f"{what}: {group!r} was made for {len(group.assignment)} replicas, but the "
            f"replication factor is {ir.replication_factor}"
        )
    if group.is_const:
        grouping = ReplicaGroupingAttr(group.stride, group.group_size)
    else:
        grouping = ReplicaGroupingAttr(assignment=group.assignment)
    try:
        new = cls.make([bridge.value_of(t)], grouping=grouping, op=op)
    except bridge.VerifyException as e:
        raise ValueError(f"{what}: {e}") from None
    (out,) = bridge.append_op(new)
    return out


def replicated_all_reduce_identical_inputs(t: popxl.Tensor, op: str = "add", group: Any = None) -> popxl.Tensor:
    """An all-reduce over the replicas of `group` whose inputs are identical: the value is
    `t` (an identity); the gradient is the `replicated_all_reduce` (`op`) of the gradients."""
    return _emit(AllReduceIdenticalInputsOp, "addons.ops.replicated_all_reduce_identical_inputs", t, op, group)


def replicated_all_reduce_identical_grad_inputs(t: popxl.Tensor, op: str = "add", group: Any = None) -> popxl.Tensor:
    """An all-reduce over the replicas of `group` whose gradients are identical: the value
    is the `replicated_all_reduce` (`op`) of `t`; the gradient is the incoming gradient."""
    return _emit(AllReduceIdenticalGradInputsOp, "addons.ops.replicated_all_reduce_identical_grad_inputs", t, op, group)


def replicated_all_reduce(t: popxl.Tensor, op: str = "add", group: Any = None) -> popxl.Tensor:
    """The all-reduce (`op`) of `t` over the replicas of `group` (default: all replicas),
    differentiable: the gradient is the same all-reduce of the gradients (each replica's
    result feeds its own loss). As `popxl.ops.collectives.replicated_all_reduce`."""
    return _emit(AllReduceOp, "addons.ops.replicated_all_reduce", t, op, group)
