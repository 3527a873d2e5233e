"""`rt-broadcast-operands`: elementwise kernels read a broadcast operand as it is, not a copy.

A `popxl.expand` materialises a broadcast (`np.broadcast_to` copied into a buffer of the
full shape); autodiff makes one for the gradient of every reduction (`reduce_sum`,
`reduce_mean`, `reduce_to_shape`). Kernels of `Elementwise` op classes broadcast their
operands as NumPy ufuncs do (the trait: each result element depends on the same
*broadcast* element of the operands), so when every reader of the expanded buffer is such
a kernel, the readers can read the expand's input instead and the copy goes. A reader
qualifies when:

- it is an elementwise `rt.kernel` of the expand's block, after it, that only reads the
  buffer (never writes it in place);
- its operands, with the expand's input in place of the buffer, still broadcast to the
  shape of each of its results (so a unary kernel, or one whose every operand would be
  smaller, keeps the copy);
- none of its results shares storage with the expand's input.

The expanded buffer must be an `rt.alloc` written only by the expand (no views of it, no
op with unknown effects), of the input's dtype, and nothing may write the input from the
expand to the last reader (the readers now read it later than the copy did). The expand
and its buffer are then erased. An expand read by anything else (a matmul, a gemm's
accumulator fill from `rt-fold-update`, a host store, a call) is left alone.

```mlir
// before
%b = rt.alloc : memref<3xf32>
%x = rt.alloc : memref<4x3xf32>
%e = rt.alloc : memref<4x3xf32>
rt.kernel "popxl.expand"(%b) -> (%e) : (memref<3xf32>) -> memref<4x3xf32>
%y = rt.alloc : memref<4x3xf32>
rt.kernel "popxl.mul"(%x, %e) -> (%y) : (memref<4x3xf32>, memref<4x3xf32>) -> memref<4x3xf32>
// after `xl-opt -p rt-broadcast-operands`
%b = rt.alloc : memref<3xf32>
%x = rt.alloc : memref<4x3xf32>
%y = rt.alloc : memref<4x3xf32>
rt.kernel "popxl.mul"(%x, %b) -> (%y) : (memref<4x3xf32>, memref<3xf32>) -> memref<4x3xf32>
```
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.popxl import ExpandOp
from xl.dialects.utils import dtype_of, shape_of
from xl.passes.rt_analysis import (
    Memory,
    is_elementwise_kernel,
    kernel_class_of,
    kernel_io,
    parent_positions,
    programs,
    walk_ops,
    written_between,
)


def _reads_broadcast(reader: Operation, buf: SSAValue, src: SSAValue, mem: Memory) -> bool:
    """Whether elementwise `reader` may read `src` where it reads `buf` (see the module docstring)."""
    if type(reader) is not rt.KernelOp or not is_elementwise_kernel(reader):
        return False
    ins, outs = kernel_io(reader)
    if buf in outs or buf not in ins:
        return False
    shapes = [shape_of(src.type) if v is buf else shape_of(v.type) for v in ins]
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return False
    root = mem.root(src)
    return all(shape_of(o.type) == shape and mem.root(o) is not root for o in outs)


def broadcast_operands(program: rt.ProgramOp) -> int:
    """Let elementwise readers of expanded buffers read the expands' inputs; returns the
    number of expands removed."""
    ops = walk_ops(program)
    expands = [op for op in ops if type(op) is rt.KernelOp and kernel_class_of(op) is ExpandOp]
    if not expands:
        return 0
    mem = Memory(program, ops)
    pos_cache: dict[Block, dict[Operation, int]] = {}
    n = 0
    for e in expands:
        ins, outs = kernel_io(e)
        if len(ins) != 1 or len(outs) != 1:
            continue
        src, buf = ins[0], outs[0]
        if (
            src is buf
            or not isinstance(buf.owner, rt.AllocOp)
            or mem.writers.get(buf) != [e]
            or buf in mem.unknown
            or src in mem.unknown
            or mem.views.get(buf)
            or dtype_of(src.type) != dtype_of(buf.type)
        ):
            continue
        block, pos = parent_positions(e, pos_cache)
        readers = {u.operation for u in buf.uses} - {e}
        if not readers or any(r.parent is not block or pos[r] < pos[e] for r in readers):
            continue
        last = max(pos[r] for r in readers)
        if written_between(mem, src, block, pos, pos[e] + 1, last):
            continue
        if not all(_reads_broadcast(r, buf, src, mem) for r in readers):
            continue
        for r in readers:
            r.operands = [src if v is buf else v for v in r.operands]
        e.detach()
        e.erase()
        alloc = buf.owner
        assert isinstance(alloc, rt.AllocOp)  # checked above
        alloc.detach()
        alloc.erase()
        n += 1
    return n


@dataclass(frozen=True)
class RtBroadcastOperandsPass(ModulePass):
    """Elementwise kernels read a broadcast operand instead of an expanded copy."""

    name = "rt-broadcast-operands"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            broadcast_operands(program)
