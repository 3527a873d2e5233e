"""`rt-views`: marks reshapes and transposes whose output can be a view of their input.

A `popxl.reshape` / `popxl.squeeze` / `popxl.transpose` kernel gets the unit attribute
`rt.view` when binding its output to a NumPy view of its input is unobservable and
possible:

- its output is written by nothing else, and every use of the output is after the
  kernel in the same block (or nested in an op after it), so no use can see a value
  the copy would not have had;
- no op from the kernel to the last use of the output writes the viewed storage (the
  root buffer and all its views), whether directly, in place, or nested in a loop/if;
- every reader of the output may read a strided array: a kernel whose op class declares
  `AcceptsViews` (`xl.dialects.traits`), a copy, a store to the host, or a call whose
  function's readers of that argument all may (`readers_accept_views`). A kernel that
  does not declare it gets a contiguous buffer: the reshape/transpose stays a copy;
- the whole chain of views (root buffer, C-contiguous, then each view kernel) can be
  expressed by NumPy without copying (`Memory.layout`, the same `view_array` the
  runtime binds with): a transpose is always a view, but reshaping a transposed view
  into a flat vector is not, so that reshape stays a copying kernel.

The viewed buffer is an `rt.alloc`, `rt.state` or `rt.const`, or an argument of an
`rt.func` (the runtime binds the view at each call, to that call's array; where the
caller's array cannot be viewed so, that call's kernel copies instead).

Marks already present are dropped and recomputed, so a hand-written `rt.view` never
makes an unsound plan. The runtime then binds the output and runs nothing.

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
    Memory,
    ancestor_in,
    is_function_arg,
    is_view_kernel,
    kernel_io,
    parent_positions,
    programs,
    readers_accept_views,
    walk_ops,
    written_between,
)


def mark_views(program: rt.ProgramOp) -> int:
    ops = walk_ops(program)
    for op in ops:
        if type(op) is rt.KernelOp and VIEW_ATTR in op.attributes:
            del op.attributes[VIEW_ATTR]
    mem = Memory(program, ops)
    pos_cache: dict[Block, dict[Operation, int]] = {}
    n = 0
    for op in ops:
        if not (type(op) is rt.KernelOp and is_view_kernel(op) and VIEW_ATTR not in op.attributes):
            continue
        ins, outs = kernel_io(op)
        if len(ins) != 1 or len(outs) != 1:
            continue
        src, dst = ins[0], outs[0]
        if (
            src is dst
            or not isinstance(dst.owner, rt.AllocOp)
            or not (isinstance(src.owner, rt.AllocOp | rt.StateOp | rt.ConstOp) or is_function_arg(src))
            or dtype_of(src.type) != dtype_of(dst.type)
            or mem.writers.get(dst) != [op]
            or dst in mem.unknown
            or src in mem.unknown
            or not readers_accept_views(dst, op)
        ):
            continue
        block, pos = parent_positions(op, pos_cache)
        last = pos[op]
        ok = True
        for use in dst.uses:
            anc = ancestor_in(use.operation, block)
            if anc is None or pos[anc] < pos[op]:
                # outside the block, or read before the kernel (a previous loop iteration)
                ok = False
                break
            last = max(last, pos[anc])
        if not ok or written_between(mem, src, block, pos, pos[op], last):
            continue
        mem.add_view(op)
        if mem.layout(dst) is None:
            mem.remove_view(op)
            continue
        op.attributes[VIEW_ATTR] = UnitAttr()
        n += 1
    return n


@dataclass(frozen=True)
class RtViewsPass(ModulePass):
    """Mark reshape/transpose kernels whose output can alias their input (`rt.view`)."""

    name = "rt-views"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            mark_views(program)
