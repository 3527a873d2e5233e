"""`rt-views`: marks reshapes and transposes whose output can be a view of their input.

A `popxl.reshape` / `popxl.squeeze` / `popxl.transpose` kernel gets the unit attribute
`rt.view` when copying is unobservable: its output is written by nothing else, and its
input's storage is not written from the kernel to the last use of the output. The
runtime then binds the output to a NumPy view of the input and runs nothing (if NumPy
cannot express the view, e.g. reshaping a transposed view, it copies as before).
Running a marked kernel as a copy is still correct, so every plan accepts the output.

```mlir
// before
rt.kernel "popxl.transpose"(%w) -> (%wt) {perm = array<i64: 1, 0>} : (memref<512x10xf32>) -> memref<10x512xf32>
// after `xl-opt -p rt-views`
rt.kernel "popxl.transpose"(%w) -> (%wt) {perm = array<i64: 1, 0>, rt.view} : (memref<512x10xf32>) -> memref<10x512xf32>
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xl.dialects import rt
from xl.dialects.utils import dtype_of
from xl.passes.rt_analysis import (
    VIEW_ATTR,
    VIEW_KERNELS,
    Memory,
    ancestor_in,
    kernel_io,
    kernel_name,
    parent_positions,
    programs,
    written_between,
)


def mark_views(program: rt.ProgramOp) -> int:
    mem = Memory(program)
    pos_cache: dict[Block, dict[Operation, int]] = {}
    n = 0
    for op in list(program.walk()):
        if not (
            isinstance(op, rt.KernelOp)
            and kernel_name(op) in VIEW_KERNELS
            and VIEW_ATTR not in op.attributes
        ):
            continue
        ins, outs = kernel_io(op)
        if len(ins) != 1 or len(outs) != 1:
            continue
        src, dst = ins[0], outs[0]
        if (
            src is dst
            or not isinstance(dst.owner, rt.AllocOp)
            or not isinstance(src.owner, rt.AllocOp | rt.StateOp | rt.ConstOp)
            or dtype_of(src.type) != dtype_of(dst.type)
            or mem.writers.get(dst) != [op]
            or dst in mem.unknown
            or src in mem.unknown
        ):
            continue
        block, pos = parent_positions(op, pos_cache)
        last = pos[op]
        ok = True
        for use in dst.uses:
            anc = ancestor_in(use.operation, block)
            if anc is None:
                ok = False
                break
            last = max(last, pos[anc])
        if not ok or written_between(mem, src, block, pos, pos[op], last):
            continue
        op.attributes[VIEW_ATTR] = UnitAttr()
        mem.add_view(op)
        n += 1
    return n


@dataclass(frozen=True)
class RtViewsPass(ModulePass):
    """Mark reshape/transpose kernels whose output can alias their input (`rt.view`)."""

    name = "rt-views"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            mark_views(program)
