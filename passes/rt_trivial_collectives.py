"""`rt-trivial-collectives`: removes replica collectives that leave every value unchanged.

An all-reduce (`add`, `mean`, `mul`, `min`, `max`, `and`, `or`) over groups of one replica
returns its input (with `replication_factor = 1`, or a grouping of group size 1); so does
`all_reduce_identical_inputs` on any grouping (its forward is the identity). Such a
kernel writing its own input (in place) is erased; one writing a fresh buffer becomes an
`rt.copy`. The program then needs no lockstep stop there, and the update after it can be
folded into its gemm (`rt-fold-update`): a data-parallel program run on one replica costs
what the same program without the all-reduce costs. `square_add` (the sum of squares) is
never the identity and stays. A grouping that does not fit the replication factor (groups
of 2 on one replica) is no identity either: the kernel stays and building the plan reports
it, as without the pass.

```mlir
// before (replication_factor = 1)
rt.kernel "replica.all_reduce_"(%g) -> (%g) {grouping = #replica.grouping<stride = 1, group_size = 1>, op = "mean"}
    : (memref<4xf32>) -> memref<4xf32>
// after `xl-opt -p rt-trivial-collectives`: nothing
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.replica import (
    AllReduceIdenticalGradInputsOp,
    AllReduceIdenticalInputsOp,
    AllReduceInplaceOp,
    AllReduceOp,
    ReplicaGroupingAttr,
)
from xl.passes.rt_analysis import kernel_class_of, programs, walk_ops

# all-reduces: the identity over groups of one replica (unless they square)
_REDUCTIONS = (AllReduceOp, AllReduceInplaceOp, AllReduceIdenticalGradInputsOp)
_NOT_IDENTITY_ALONE = ("square_add",)


def _is_identity(op: rt.KernelOp, replication_factor: int) -> bool:
    cls = kernel_class_of(op)
    if cls is AllReduceIdenticalInputsOp:
        return True
    if cls not in _REDUCTIONS:
        return False
    params = op.params
    if params.get("op") in _NOT_IDENTITY_ALONE:
        return False
    grouping = params.get("grouping")
    if grouping is None:
        return replication_factor == 1
    if not isinstance(grouping, ReplicaGroupingAttr) or grouping.fit_error(replication_factor) is not None:
        return False  # a grouping that does not fit the replicas: kept, for the plan to report
    return grouping.size() == 1


def drop_trivial_collectives(program: rt.ProgramOp) -> int:
    """Erase / turn into copies the identity collectives of `program`; returns how many."""
    r = program.replication_factor
    n = 0
    for op in walk_ops(program):
        if type(op) is not rt.KernelOp or not _is_identity(op, r):
            continue
        ins, outs = op.io()
        if len(ins) != 1 or len(outs) != 1 or ins[0].type != outs[0].type:
            continue
        if ins[0] is not outs[0]:
            block = op.parent_block()
            assert block is not None
            block.insert_op_before(rt.CopyOp(ins[0], outs[0]), op)
        op.detach()
        op.erase()
        n += 1
    return n


@dataclass(frozen=True)
class RtTrivialCollectivesPass(ModulePass):
    """Remove replica collectives that are the identity (see module docstring)."""

    name = "rt-trivial-collectives"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            drop_trivial_collectives(program)
