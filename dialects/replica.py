"""The `replica` dialect: collectives between the replicas of a replicated program.

A program with `replication_factor = R` on its `graph.main` runs as R replicas that
execute the same ops on their own data. A collective exchanges data between the
replicas of each group of a replica grouping, `#replica.grouping<stride = S, group_size = G>`
(PopXL's `ReplicaGrouping`): replica `r` belongs to group `r % S + S * (r // (S * G))`,
and the members of a group are `S` apart. A grouping that is not of that form carries
its assignment explicitly: `#replica.grouping<assignment = [0, 1, 1, 0]>`.

```mlir
graph.main attributes {replication_factor = 4 : i64} {
  %w = graph.variable "w" = dense<1.0> : tensor<4xf32>
  %s = replica.all_reduce %w {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"}
      : (tensor<4xf32>) -> tensor<4xf32>
  %g = replica.all_gather %w {axis = 0 : i64, grouping = #replica.grouping<stride = 2, group_size = 2>,
      new_axis = false}
      : (tensor<4xf32>) -> tensor<8xf32>
  replica.all_reduce_ %w {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "mean"} : (tensor<4xf32>) -> ()
}
```

The reductions (`op`) are `add`, `mean`, `mul` (the product: unlike upstream PopXL, which
maps `mul` to `mean`), `min`, `max`, `and`, `or` (on bool tensors) and `square_add` (the
sum of squares). Every collective class has the `CrossReplica` trait; that is how the
lowering and the runtime recognise one. Gradient rules: `xl.passes.grad_rules_replica`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, IntAttr, IntegerAttr, StringAttr, TensorType
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute
from xdsl.irdl import (
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from xl.dialects.effects import PartialWrite, WritesOperands
from xl.dialects.popxl import PopxlOp
from xl.dialects.traits import AcceptsViews, CrossReplica, NotDifferentiable, PopartType
from xl.dialects.utils import dtype_of, fmt_type, shape_of, tensor_type

COLLECTIVE_OPS = ("add", "mean", "mul", "min", "max", "and", "or", "square_add")
"""The reductions a collective's `op` may name."""

LOGICAL_OPS = ("and", "or")
"""Reductions defined on bool tensors only."""

LINEAR_OPS = ("add", "mean")
"""Reductions linear in their inputs: the gradient of such an all-reduce is the same
all-reduce of the gradients, and `rt-fold-all-reduce` folds it into a weight update."""


@irdl_attr_definition
class ReplicaGroupingAttr(ParametrizedAttribute):
    """Which replicas form the groups of a collective (PopXL's `ReplicaGrouping`).

    `#replica.grouping<stride = 2, group_size = 2>` groups, for 8 replicas,
    {0, 2}, {1, 3}, {4, 6}, {5, 7}; `#replica.grouping<assignment = [0, 0, 1, 1]>` gives
    the group of each replica explicitly (groups numbered from 0 in order of first
    appearance, all of one size). A (stride, group_size) grouping fits any replication
    factor divisible by `stride * group_size`; an explicit one only its own length.
    """

    name = "replica.grouping"

    stride: IntAttr
    group_size: IntAttr
    explicit: ArrayAttr[IntAttr]

    def __init__(self, stride: int = 1, group_size: int = 1, assignment: Sequence[int] | None = None):
        if assignment is not None:
            a = [int(v) for v in assignment]
            sizes = {a.count(g) for g in set(a)}
            group_size = sizes.pop() if len(sizes) == 1 else 0
            stride = 1
        else:
            a = []
            if group_size == 1:
                stride = 1
        super().__init__(IntAttr(stride), IntAttr(group_size), ArrayAttr([IntAttr(v) for v in a]))

    # -- syntax ----------------------------------------------------------------------
    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            if parser.parse_optional_keyword("assignment") is not None:
                parser.parse_punctuation("=")
                values = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
                return ReplicaGroupingAttr(assignment=values).parameters
            parser.parse_keyword("stride")
            parser.parse_punctuation("=")
            stride = parser.parse_integer(allow_boolean=False, allow_negative=False)
            parser.parse_punctuation(",")
            parser.parse_keyword("group_size")
            parser.parse_punctuation("=")
            size = parser.parse_integer(allow_boolean=False, allow_negative=False)
        return (IntAttr(stride), IntAttr(size), ArrayAttr([]))

    def print_parameters(self, printer: Printer) -> None:
        if self.explicit.data:
            values = ", ".join(str(v.data) for v in self.explicit.data)
            printer.print_string(f"<assignment = [{values}]>")
        else:
            printer.print_string(f"<stride = {self.stride.data}, group_size = {self.group_size.data}>")

    def verify(self) -> None:
        if self.explicit.data:
            a = [v.data for v in self.explicit.data]
            order: list[int] = []
            for v in a:
                if v not in order:
                    order.append(v)
            if order != list(range(len(order))):
                raise VerifyException(
                    f"replica.grouping: assignment {a} must number its groups 0, 1, ... in order of first appearance"
                )
            if self.group_size.data == 0:
                raise VerifyException(f"replica.grouping: the groups of assignment {a} differ in size")
            return
        if self.stride.data < 1 or self.group_size.data < 1:
            raise VerifyException(
                f"replica.grouping: stride ({self.stride.data}) and group_size "
                f"({self.group_size.data}) must be positive"
            )
        if self.group_size.data == 1 and self.stride.data != 1:
            raise VerifyException("replica.grouping: a group_size of 1 needs stride = 1")

    # -- queries -----------------------------------------------------------------------
    @property
    def is_explicit(self) -> bool:
        """Whether the grouping is an explicit assignment (not stride / group_size)."""
        return bool(self.explicit.data)

    def fit_error(self, replication_factor: int) -> str | None:
        """Why the grouping does not fit `replication_factor` replicas (None: it does)."""
        rf = replication_factor
        if self.is_explicit:
            n = len(self.explicit.data)
            if n != rf:
                return f"{self} assigns {n} replicas, but the replication factor is {rf}"
            return None
        s, g = self.stride.data, self.group_size.data
        if rf % (s * g):
            return f"{self}: the replication factor {rf} is not divisible by stride * group_size = {s * g}"
        return None

    def check(self, replication_factor: int) -> None:
        """Raises `ValueError` when the grouping does not fit `replication_factor`."""
        err = self.fit_error(replication_factor)
        if err is not None:
            raise ValueError(err)

    def assignment(self, replication_factor: int) -> list[int]:
        """The group index of each replica (as `popxl.ReplicaGrouping.assignment`)."""
        self.check(replication_factor)
        if self.is_explicit:
            return [v.data for v in self.explicit.data]
        s, g = self.stride.data, self.group_size.data
        return [r % s + s * (r // (s * g)) for r in range(replication_factor)]

    def group_of(self, replica: int, replication_factor: int) -> int:
        """The group index of one replica (`assignment(replication_factor)[replica]`, in O(1))."""
        self.check(replication_factor)
        if self.is_explicit:
            return self.explicit.data[replica].data
        s, g = self.stride.data, self.group_size.data
        return replica % s + s * (replica // (s * g))

    def groups(self, replication_factor: int) -> list[list[int]]:
        """Each group's replica indices, ascending; groups in index order."""
        out: list[list[int]] = [[] for _ in range(self.num_groups(replication_factor))]
        for r, grp in enumerate(self.assignment(replication_factor)):
            out[grp].append(r)
        return out

    def num_groups(self, replication_factor: int) -> int:
        self.check(replication_factor)
        return replication_factor // self.group_size.data

    def size(self) -> int:
        """Replicas per group."""
        return self.group_size.data

    def __str__(self) -> str:
        if self.is_explicit:
            return f"#replica.grouping<assignment = {[v.data for v in self.explicit.data]}>"
        return f"#replica.grouping<stride = {self.stride.data}, group_size = {self.group_size.data}>"


def replication_factor_of(op: Operation) -> int | None:
    """The `replication_factor` of the `graph.main` of the module holding `op`
    (None when `op` is not inside a module with a `graph.main`)."""
    from xl.dialects.graph import MainGraphOp

    p: Operation | None = op
    top: Operation | None = None
    while p is not None:
        if isinstance(p, MainGraphOp):
            return p.replication_factor
        top = p
        p = p.parent_op()
    if top is None or not top.regions:
        return None
    for region in top.regions:
        for block in region.blocks:
            for o in block.ops:
                if isinstance(o, MainGraphOp):
                    return o.replication_factor
    return None


class CollectiveOp(PopxlOp):
    """Base of the replica collectives: one tensor operand, a `grouping` property, the
    `popxl` operand / attribute-dictionary / function-type syntax."""

    input = operand_def(TensorType)
    grouping = prop_def(ReplicaGroupingAttr)

    @classmethod
    def group_size(cls, props: dict[str, Any]) -> int:
        g = props.get("grouping")
        if not isinstance(g, ReplicaGroupingAttr):
            raise cls.fail("needs a 'grouping' property (#replica.grouping<...>)")
        return g.size()

    @classmethod
    def check_op_kind(cls, props: dict[str, Any], dtype: Any) -> None:
        kind = props.get("op")
        if kind not in COLLECTIVE_OPS:
            raise cls.fail(f"op {kind!r} is not a collective reduction; one of {', '.join(COLLECTIVE_OPS)}")
        is_bool = np.dtype(dtype) == np.bool_
        if kind in LOGICAL_OPS and not is_bool:
            raise cls.fail(f"op {kind!r} needs a bool tensor, got {dtype}")
        if kind not in LOGICAL_OPS and is_bool:
            raise cls.fail(f"op {kind!r} is not defined on bool tensors (use 'and' / 'or')")

    def verify_(self) -> None:
        super().verify_()
        rf = replication_factor_of(self)
        if rf is not None:
            err = self.grouping.fit_error(rf)
            if err is not None:
                raise VerifyException(f"{self.name}: grouping {err}")


class _ReduceOp(CollectiveOp):
    op = prop_def(StringAttr)

    @classmethod
    def make(cls, operands, result_types=None, *, reduction: str | None = None, **props):
        """`PopxlOp.make`; the reduction may also be given as `reduction=` (builders whose
        own first parameter is called `op`, like `GradBuilder.v`, cannot pass `op=`)."""
        if reduction is not None:
            props["op"] = reduction
        return super().make(operands, result_types, **props)

    @classmethod
    def infer(cls, types, props):
        (t,) = types
        cls.group_size(props)
        cls.check_op_kind(props, dtype_of(t))
        return [t]


@irdl_op_definition
class AllReduceOp(_ReduceOp):
    """`t` reduced with `op` over the replicas of each group; every member gets the result
    (`ops.collectives.replicated_all_reduce`).

    ```mlir
    %y = replica.all_reduce %x {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "mean"}
        : (tensor<3xf32>) -> tensor<3xf32>
    ```
    """

    name = "replica.all_reduce"
    result = result_def(TensorType)
    traits = traits_def(AcceptsViews(), CrossReplica(), PopartType("ReplicatedAllReduce"))


@irdl_op_definition
class AllReduceInplaceOp(_ReduceOp):
    """`replica.all_reduce` writing the result into its operand
    (`ops.collectives.replicated_all_reduce_`).

    ```mlir
    replica.all_reduce_ %x {grouping = #replica.grouping<stride = 1, group_size = 4>, op = "add"}
        : (tensor<3xf32>) -> ()
    ```
    """

    name = "replica.all_reduce_"
    traits = traits_def(
        AcceptsViews(), CrossReplica(), WritesOperands((0,)), NotDifferentiable(),
        PopartType("ReplicatedAllReduceInplace"),
    )  # fmt: skip

    @classmethod
    def infer(cls, types, props):
        super().infer(types, props)
        return []


@irdl_op_definition
class AllReduceIdenticalInputsOp(_ReduceOp):
    """An all-reduce whose inputs are known to be identical on the replicas of a group:
    the value is the input (an identity); the gradient is the all-reduce of the gradients
    (popxl.addons' `replicated_all_reduce_identical_inputs`, used in tensor parallelism).

    ```mlir
    %y = replica.all_reduce_identical_inputs %x {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"}
        : (tensor<3xf32>) -> tensor<3xf32>
    ```
    """

    name = "replica.all_reduce_identical_inputs"
    result = result_def(TensorType)
    traits = traits_def(AcceptsViews(), CrossReplica(), PopartType("ReplicatedAllReduce"))


@irdl_op_definition
class AllReduceIdenticalGradInputsOp(_ReduceOp):
    """An all-reduce whose gradients are known to be identical on the replicas of a group:
    the value is the all-reduce; the gradient is the incoming gradient (an identity).

    ```mlir
    %y = replica.all_reduce_identical_grad_inputs %x {grouping = #replica.grouping<stride = 1, group_size = 2>,
        op = "add"}
        : (tensor<3xf32>) -> tensor<3xf32>
    ```
    """

    name = "replica.all_reduce_identical_grad_inputs"
    result = result_def(TensorType)
    traits = traits_def(AcceptsViews(), CrossReplica(), PopartType("ReplicatedAllReduce"))


def _axis(cls: type[PopxlOp], axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise cls.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    """The tensors of all replicas of each group, in replica order: concatenated along
    `axis`, or stacked on a new leading axis with `new_axis = true`
    (`ops.collectives.replicated_all_gather`).

    ```mlir
    %y = replica.all_gather %x {axis = 1 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>,
        new_axis = false}
        : (tensor<2x3xf32>) -> tensor<2x6xf32>
    %z = replica.all_gather %x {axis = 0 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>,
        new_axis = true}
        : (tensor<2x3xf32>) -> tensor<2x2x3xf32>
    ```
    """

    name = "replica.all_gather"
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    new_axis = prop_def(IntegerAttr)
    traits = traits_def(AcceptsViews(), CrossReplica(), PopartType("ReplicatedAllGather"))

    @classmethod
    def infer(cls, types, props):
        (t,) = types
        g = cls.group_size(props)
        shape = list(shape_of(t))
        if props.get("new_axis", False):
            out = [g, *shape]
        else:
            if not shape:
                raise cls.fail("cannot concatenate scalars; use new_axis = true")
            ax = _axis(cls, int(props.get("axis", 0)), len(shape))
            shape[ax] *= g
            out = shape
        return [tensor_type(out, dtype_of(t))]


@irdl_op_definition
class ReduceScatterOp(_ReduceOp):
    """`t` flattened and reduced with `op` over the replicas of each group; member `i` of a
    group gets the `i`-th of `group_size` equal 1-D shards of `ceil(nelms / group_size)`
    elements, the result zero-padded at its end (`ops.collectives.replicated_reduce_scatter`).

    ```mlir
    %y = replica.reduce_scatter %x {grouping = #replica.grouping<stride = 1, group_size = 2>, op = "add"}
        : (tensor<2x3xf32>) -> tensor<3xf32>
    ```
    """

    name = "replica.reduce_scatter"
    result = result_def(TensorType)
    traits = traits_def(AcceptsViews(), CrossReplica(), PopartType("ReplicatedReduceScatter"))

    @classmethod
    def infer(cls, types, props):
        (t,) = types
        g = cls.group_size(props)
        cls.check_op_kind(props, dtype_of(t))
        return [tensor_type((shard_size(math.prod(shape_of(t)), g),), dtype_of(t))]


def shard_size(elements: int, shards: int) -> int:
    """Elements per shard of a value of `elements` elements flattened and cut into `shards`
    equal pieces: `ceil(elements / shards)`; the last shards are zero-padded when the
    elements do not divide evenly (as PopART)."""
    return -(-elements // shards)


@irdl_op_definition
class ShardedSliceOp(CollectiveOp):
    """Member `i` of each group takes the `i`-th of `group_size` equal 1-D shards of `t`
    flattened, zero-padded at the end when they do not divide evenly
    (`ops.collectives.replica_sharded_slice`; no data moves between replicas).

    ```mlir
    %y = replica.sharded_slice %x {grouping = #replica.grouping<stride = 1, group_size = 2>}
        : (tensor<2x3xf32>) -> tensor<3xf32>
    ```
    """

    name = "replica.sharded_slice"
    result = result_def(TensorType)
    # its kernel writes the padding of the last shard once, when the plan is built
    traits = traits_def(CrossReplica(), PopartType("ReplicatedReduceScatter"), PartialWrite())

    @classmethod
    def infer(cls, types, props):
        (t,) = types
        return [tensor_type((shard_size(math.prod(shape_of(t)), cls.group_size(props)),), dtype_of(t))]


@irdl_op_definition
class SliceOp(CollectiveOp):
    """Member `i` of each group takes the `i`-th of `group_size` equal slices of `t` along
    `axis` (`ops.collectives.replicated_slice`); as upstream, a slice of size 1 drops the
    axis.

    ```mlir
    %y = replica.slice %x {axis = 0 : i64, grouping = #replica.grouping<stride = 1, group_size = 2>}
        : (tensor<4x3xf32>) -> tensor<2x3xf32>
    ```
    """

    name = "replica.slice"
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    traits = traits_def(AcceptsViews(), CrossReplica(), PopartType("ReplicatedSlice"))

    @classmethod
    def infer(cls, types, props):
        (t,) = types
        g = cls.group_size(props)
        shape = list(shape_of(t))
        if not shape:
            raise cls.fail("cannot slice a scalar")
        ax = _axis(cls, int(props.get("axis", 0)), len(shape))
        if shape[ax] % g:
            raise cls.fail(f"axis {ax} of {fmt_type(t)} (size {shape[ax]}) is not divisible by the group size {g}")
        if shape[ax] == g:
            del shape[ax]
        else:
            shape[ax] //= g
        return [tensor_type(shape, dtype_of(t))]


COLLECTIVES: tuple[type[CollectiveOp], ...] = (
    AllReduceOp,
    AllReduceInplaceOp,
    AllReduceIdenticalInputsOp,
    AllReduceIdenticalGradInputsOp,
    AllGatherOp,
    ReduceScatterOp,
    ShardedSliceOp,
    SliceOp,
)

Replica = Dialect("replica", list(COLLECTIVES), [ReplicaGroupingAttr])
