"""The implementation of `popxl.ops.collectives` (re-exported there, with its documentation).

The replica collectives build ops of the `replica` dialect (`xl.dialects.replica`); the
all-reduce across the IPUs of one replica (`all_reduce` and its two variants) is built
from ordinary ops and `ipu.copy`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from popxl import context
from popxl._checks import check_int, describe
from popxl.context import gcg
from popxl.ops._utils import as_int, check_in_graph, composed, current_op, emit1, emit_inplace, wrap_public_ops
from popxl.tensor import Tensor
from xl.dialects.popxl import MinimumOp
from xl.dialects.replica import (
    COLLECTIVE_OPS,
    LINEAR_OPS,
    LOGICAL_OPS,
    AllGatherOp,
    AllReduceInplaceOp,
    AllReduceOp,
    ReduceScatterOp,
    ShardedSliceOp,
    SliceOp,
)

__all__ = [
    "CommGroup",
    "CommGroupType",
    "all_reduce",
    "all_reduce_identical_grad_inputs",
    "all_reduce_identical_inputs",
    "replica_sharded_slice",
    "replicated_all_gather",
    "replicated_all_reduce",
    "replicated_all_reduce_",
    "replicated_reduce_scatter",
    "replicated_slice",
    "CollectiveOps",
]

# The reductions a collective's `op` may name (the replica dialect's list).
CollectiveOps = COLLECTIVE_OPS


class CommGroupType:
    """How replicas are grouped for a collective (legacy PopART API)."""

    __module__ = "popxl.ops.collectives"

    All = 0
    """One group of all replicas."""
    Consecutive = 1
    """Groups of `replicaGroupSize` consecutive replicas."""
    Orthogonal = 2
    """Groups of replicas `replicaGroupSize` apart."""
    Ungrouped = 3
    """Each replica on its own."""


class CommGroup:
    """A replica group for a collective (legacy PopART API; prefer `popxl.ReplicaGrouping`):
    a `CommGroupType` and the group size."""

    __module__ = "popxl.ops.collectives"

    def __init__(self, type: int = CommGroupType.All, replicaGroupSize: int = 0):
        self.type = check_int(type, "CommGroup", "type", minimum=0)
        self.replicaGroupSize = check_int(replicaGroupSize, "CommGroup", "replicaGroupSize", minimum=0)


# ---------------------------------------------------------------------------------------
# argument checks
# ---------------------------------------------------------------------------------------


def _check_op(op: Any) -> str:
    if not isinstance(op, str) or op not in CollectiveOps:
        raise ValueError(f"{current_op()}: not a valid op: {op!r}. Must choose from: {', '.join(CollectiveOps)}")
    return op


def _grouping(group: Any) -> Any:
    """The `#replica.grouping` attribute of `group` (default: all replicas) for the current Ir."""
    from popxl.replica_grouping import ReplicaGrouping

    ir = gcg()._ir
    what = current_op()
    rf = ir.replication_factor
    if group is None:
        group = ir.replica_grouping()
    elif isinstance(group, CommGroup):
        size = group.replicaGroupSize
        if group.type == CommGroupType.All:
            group = ir.replica_grouping()
        elif group.type == CommGroupType.Ungrouped:
            group = ir.replica_grouping(1, 1)
        elif group.type in (CommGroupType.Consecutive, CommGroupType.Orthogonal):
            if not isinstance(size, int) or size < 1 or rf % size:
                raise ValueError(
                    f"{what}: CommGroup replicaGroupSize {size!r} does not divide the replication factor {rf}"
                )
            if group.type == CommGroupType.Consecutive:
                group = ir.replica_grouping(1, size)
            else:
                group = ir.replica_grouping(rf // size, size)
        else:
            raise ValueError(f"{what}: unknown CommGroupType {group.type!r}")
    if not isinstance(group, ReplicaGrouping):
        raise TypeError(
            f"{what}: group must be a popxl.ReplicaGrouping (ir.replica_grouping(...)), got {describe(group)}"
        )
    group._check_ir(ir, what)
    return group._to_attr()


def _tensor(t: Any, arg: str = "t") -> Tensor:
    if not isinstance(t, Tensor):
        raise TypeError(f"{current_op()}: {arg} must be a popxl Tensor, got {describe(t)}")
    return t


def _axis(t: Tensor, axis: Any) -> int:
    axis = as_int(axis, "axis")
    rank = len(t.shape)
    if not -rank <= axis < rank:
        raise ValueError(f"{current_op()}: axis {axis} is out of range for {t.id} of shape {t.shape}")
    return axis % rank


# ---------------------------------------------------------------------------------------
# collectives between replicas
# ---------------------------------------------------------------------------------------


def replicated_all_reduce(t: Tensor, op: str = "add", group: Any = None) -> Tensor:
    """`t` reduced with `op` over the replicas of each group of `group` (a
    `popxl.ReplicaGrouping`, default all replicas); every replica gets its group's result.

    `op`: 'add', 'mean', 'mul' (the product; upstream computes a mean), 'min', 'max', 'and',
    'or' (bool tensors) or 'square_add' (sum of squares). Differentiable: the gradient is the
    same all-reduce of the gradients for 'add' / 'mean' (see `xl.passes.grad_rules_replica`).
    """
    t = _tensor(t)
    return emit1(AllReduceOp, [t], grouping=_grouping(group), name=f"{t.name}_all_reduce", op=_check_op(op))


def replicated_all_reduce_(t: Tensor, op: str = "add", group: Any = None) -> Tensor:
    """`replicated_all_reduce` in place: `t` holds the reduction; returns the updated `t` (a new tensor aliasing it)."""
    t = _tensor(t)
    return emit_inplace(AllReduceInplaceOp, [t], grouping=_grouping(group), op=_check_op(op))


def replicated_reduce_scatter(
    t: Tensor,
    op: str = "add",
    group: Any = None,
    configure_output_for_replicated_tensor_sharding: bool = False,
) -> Tensor:
    """`t` (flattened) reduced with `op` over the replicas of each group; the `i`-th member of
    a group gets the `i`-th of `group_size` equal 1-D shards of the result, `ceil(nelms /
    group_size)` elements each, zero-padded at the end (as upstream). With
    `configure_output_for_replicated_tensor_sharding` the result is an RTS shard: its
    `meta_shape` is `t.shape` (the shards are in element order either way)."""
    t = _tensor(t)
    op = _check_op(op)
    grouping = _grouping(group)
    out = emit1(ReduceScatterOp, [t], grouping=grouping, name=f"{t.name}_reduce_scattered", op=op)
    if configure_output_for_replicated_tensor_sharding:  # an RTS shard of `t`
        out._meta_shape = tuple(t.shape)
    return out


def replicated_all_gather(t: Tensor, axis: int = 0, group: Any = None, output_shape: str = "auto") -> Tensor:
    """The tensors `t` of all replicas of each group, in replica order. `output_shape`:

    - 'concat': concatenated along `axis`;
    - 'new_axis': stacked on a new leading axis, shape `(group_size, *t.shape)`;
    - 'meta_shape': the gathered elements reshaped to `t.meta_shape` (a sharded tensor);
    - 'auto' (default): 'meta_shape' when `t` has a meta shape, else 'concat'.

    Differentiable: the gradient is the replicated slice of the gradient.
    """
    t = _tensor(t)
    grouping = _grouping(group)
    meta: tuple[int, ...] = tuple(t.meta_shape or ())
    if output_shape == "auto":
        output_shape = "meta_shape" if meta else "concat"
    if output_shape == "new_axis":
        return emit1(AllGatherOp, [t], grouping=grouping, name=f"{t.name}_all_gathered", axis=0, new_axis=True)
    if output_shape == "concat":
        if not t.shape:
            raise ValueError(f"{current_op()}: cannot concatenate scalars ({t.id}); use output_shape='new_axis'")
        return emit1(
            AllGatherOp, [t], grouping=grouping, name=f"{t.name}_all_gathered", axis=_axis(t, axis), new_axis=False
        )
    if output_shape == "meta_shape":
        if not meta:
            raise ValueError(f"{current_op()}: output_shape='meta_shape' but {t.id} has no meta shape")
        from popxl import ops

        flat = ops.reshape(t, (-1,)) if len(t.shape) != 1 else t
        out = emit1(AllGatherOp, [flat], grouping=grouping, name=f"{t.name}_all_gathered", axis=0, new_axis=False)
        n = 1
        for d in meta:
            n *= d
        pad = out.shape[0] - n  # the zeros padding the last shards
        if not 0 <= pad < grouping.size():
            raise ValueError(
                f"{current_op()}: gathering {t.id} {t.shape} over groups of "
                f"{grouping.size()} gives {out.shape[0]} elements, but its meta shape "
                f"{meta} has {n}"
            )
        if pad:
            out = ops.slice(out, [0], [n], axis=[0])
        return ops.reshape(out, meta)
    raise ValueError(
        f"{current_op()}: output_shape must equal one of 'new_axis', 'concat', 'meta_shape', "
        f"'auto'. Value: {output_shape!r}"
    )


def replica_sharded_slice(t: Tensor, group: Any = None) -> Tensor:
    """This replica's 1-D shard of `t` (flattened) for replicated tensor sharding: the `i`-th
    member of each group takes the `i`-th of `group_size` equal shards (zero-padded at the
    end when they do not divide evenly); its `meta_shape` is `t.shape`. Differentiable: the
    gradient is the all-gather of the gradients.

    The collectives name their result after their input as upstream (`<t.name>_sharded_slice`,
    `_reduce_scattered`, `_all_gathered`, `_all_reduce`, `_replicated_slice`): programs that
    order tensors by name (`NamedTensors.tensors`) see them in their inputs' order."""
    t = _tensor(t)
    grouping = _grouping(group)
    out = emit1(ShardedSliceOp, [t], grouping=grouping, name=f"{t.name}_sharded_slice")
    out._meta_shape = tuple(t.shape)  # an RTS shard of `t`
    return out


def replicated_slice(t: Tensor, axis: int = 0, group: Any = None) -> Tensor:
    """This replica's slice of `t` along `axis`: the `i`-th member of each group takes the
    `i`-th of `group_size` equal slices (the axis must divide by the group size; as upstream,
    a slice of size 1 drops the axis). Differentiable: the gradient is the all-gather of the
    gradients."""
    t = _tensor(t)
    if not t.shape:
        raise ValueError(f"{current_op()}: cannot slice the scalar {t.id}")
    ax = _axis(t, axis)
    grouping = _grouping(group)
    if t.shape[ax] % grouping.size():
        raise ValueError(
            f"{current_op()}: replicated slice must equally divide axis {ax} of {t.id} "
            f"{t.shape}. Axis size: {t.shape[ax]}. Replica group size: {grouping.size()}"
        )
    return emit1(SliceOp, [t], grouping=grouping, name=f"{t.name}_replicated_slice", axis=ax)


# ---------------------------------------------------------------------------------------
# all-reduce across the IPUs of one replica
# ---------------------------------------------------------------------------------------


def _ipus_of(ts: Sequence[Any], ipus: Sequence[int] | None) -> tuple[list[Tensor], list[int]]:
    what = current_op()
    if not isinstance(ts, list | tuple) or not ts:
        raise TypeError(f"{what}: ts must be a non-empty list of Tensors, got {describe(ts)}")
    ts = [_tensor(t, f"ts[{i}]") for i, t in enumerate(ts)]
    check_in_graph(gcg(), ts, what)
    if ipus is None:
        found = [t._ipu_or_none for t in ts]
        if any(i is None for i in found):
            raise ValueError(
                f"{what}: could not infer the IPU of all input tensors `ts` "
                f"({', '.join(t.id for t, i in zip(ts, found) if i is None)}); pass `ipus`"
            )
        ipus = [int(i) for i in found]
    else:
        ipus = [as_int(i, "ipus") for i in ipus]
    if len(ts) != len(ipus):
        raise ValueError(
            f"{what}: number of specified tensors does not equal number of specified IPUs. {len(ts)} != {len(ipus)}"
        )
    if len(set(ipus)) != len(ipus):
        raise ValueError(f"{what}: each tensor must be on its own IPU, got ipus {ipus}")
    first = ts[0]
    for t in ts[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(
                f"{what}: all tensors must have one shape and dtype: {first.id} is "
                f"{first.shape} {first.dtype.name}, {t.id} is {t.shape} {t.dtype.name}"
            )
    return ts, ipus


def _on(t: Tensor, src: int, dst: int) -> Tensor:
    from popxl import ops

    return t if src == dst else ops.ipu_copy(t, dst, src)


def _reduce(values: list[Tensor], op: str) -> Tensor:
    """`values` (one IPU) reduced with `op`, in order."""
    from popxl import ops

    if op == "square_add":
        acc = values[0] * values[0]
        for v in values[1:]:
            acc = acc + v * v
        return acc
    combine: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
        "add": operator.add,
        "mean": operator.add,
        "mul": operator.mul,
        "max": ops.maximum,
        "min": lambda a, b: emit1(MinimumOp, [a, b]),
        "and": ops.logical_and,
        "or": ops.logical_or,
    }
    acc = values[0]
    for v in values[1:]:
        acc = combine[op](acc, v)
    if op == "mean":
        acc = acc * (1.0 / len(values))
    return acc


def _all_reduce(ts: list[Tensor], ipus: list[int], op: str, mode: str) -> list[Tensor]:
    """`mode`: 'plain' (all-reduce, gradients by autodiff through the ops), 'identical_inputs'
    (value: the input; gradient: the all-reduce) or 'identical_grad_inputs' (value: the
    all-reduce; gradient: the identity)."""
    from popxl import ops

    outs = []
    for i, dst in enumerate(ipus):
        with context.ipu(dst):
            gathered = [_on(t, src, dst) for t, src in zip(ts, ipus)]
            r = _reduce(gathered, op)
            if mode == "identical_inputs":
                # x + (r - detach(r)): the value of x exactly, the gradient of r
                r = ops.detach(gathered[i]) + (r - ops.detach(r))
            elif mode == "identical_grad_inputs" and op not in LOGICAL_OPS:
                # detach(r) + (x - detach(x)): the value of r exactly, the gradient of x
                x = gathered[i]
                r = ops.detach(r) + (x - ops.detach(x))
            if r is ts[i]:  # a single input: the output is still a tensor of its own, as in PopXL
                r = ops.identity(r)
            outs.append(r)
    return outs


@composed("AllReduce")
def all_reduce(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """The tensors `ts` (one per IPU of `ipus`, within one replica; default: the IPU of each
    tensor) reduced with `op`; one copy of the result per IPU. Built from `ipu.copy` and
    elementwise ops, so autodiff differentiates it (for every numeric `op`)."""
    op = _check_op(op)
    ts, ipus = _ipus_of(ts, ipus)
    return _all_reduce(ts, ipus, op, "plain")


@composed("AllReduce")
def all_reduce_identical_inputs(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """`all_reduce` whose inputs are known to be identical: each output is its own input (an
    identity), and the gradient of each input is the all-reduce of the output gradients.
    `op` must be 'add' or 'mean' (the ops upstream autodiff supports for it)."""
    op = _check_op(op)
    if op not in LINEAR_OPS:
        raise ValueError(
            f"{current_op()}: op {op!r} has no gradient here; use 'add' or 'mean' (or all_reduce for a plain reduction)"
        )
    ts, ipus = _ipus_of(ts, ipus)
    return _all_reduce(ts, ipus, op, "identical_inputs")


@composed("AllReduce")
def all_reduce_identical_grad_inputs(ts: list[Tensor], ipus: list[int] | None = None, op: str = "add") -> list[Tensor]:
    """`all_reduce` whose output gradients are known to be identical: each output is the
    all-reduce, and the gradient of each input is the gradient of its own output (an
    identity)."""
    op = _check_op(op)
    ts, ipus = _ipus_of(ts, ipus)
    return _all_reduce(ts, ipus, op, "identical_grad_inputs")


wrap_public_ops(globals(), __all__, "popxl.ops.collectives")
