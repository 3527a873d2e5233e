"""`rt-keep-gelu-tanh`: a GELU keeps the `tanh` it computes for its gradient.

`popxl.gelu(x)` (tanh approximation) computes `t = tanh(sqrt(2/pi) (x + 0.044715 x^3))`,
and `popxl.gelu_grad(dy, x)` computes the same `t` from the same `x` again: the tanh and
the four operations before it are a third of the gradient's work. Where a gelu kernel and
gradient kernels of its input are in one block, in that order, and nothing between them
writes the input, the gelu becomes `xl.gelu_tanh` (`GeluTanhOp`), which also writes `t`
into a new buffer, and each such gradient becomes `xl.gelu_grad_tanh` (`GeluGradTanhOp`),
which reads it. Both compute with the same NumPy operations in the same order as the
kernels they replace: the same bits. The cost is `t`'s buffer, held from the forward to
the backward kernel.

Only float buffers, and a gelu that does not write its own input.

```mlir
// before
%y = rt.alloc : memref<2x3xf32>
rt.kernel "popxl.gelu"(%x) -> (%y) : (memref<2x3xf32>) -> memref<2x3xf32>
%dx = rt.alloc : memref<2x3xf32>
rt.kernel "popxl.gelu_grad"(%dy, %x) -> (%dx) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
// after `xl-opt -p rt-keep-gelu-tanh`
%y = rt.alloc : memref<2x3xf32>
%t = rt.alloc : memref<2x3xf32>
rt.kernel "xl.gelu_tanh"(%x) -> (%y, %t) : (memref<2x3xf32>) -> (memref<2x3xf32>, memref<2x3xf32>)
%dx = rt.alloc : memref<2x3xf32>
rt.kernel "xl.gelu_grad_tanh"(%dy, %x, %t) -> (%dx)
    : (memref<2x3xf32>, memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import AnyFloat, MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.rt_kernels import GeluGradTanhOp, GeluTanhOp
from xl.passes.rt_analysis import Memory, kernel_io, kernel_name, positions, programs, walk_ops, written_between

FORWARD = GeluTanhOp.REPLACES.name
BACKWARD = GeluGradTanhOp.REPLACES.name


def _float_buffer(v: SSAValue) -> MemRefType | None:
    """A contiguous buffer type of `v`'s shape and element type, when that is a float."""
    t = v.type
    if not isinstance(t, MemRefType) or not isinstance(t.element_type, AnyFloat):
        return None
    return MemRefType(t.element_type, t.get_shape())


def _swap(mem: Memory, old: rt.KernelOp, new: rt.KernelOp) -> None:
    """`new` in place of `old`; `mem` sees it as the writer of its results."""
    block = old.parent
    assert isinstance(block, Block)
    block.insert_op_before(new, old)
    for v in kernel_io(new)[1]:
        mem.writers[v] = [new if w is old else w for w in mem.writers.get(v, [old])]
    old.detach()
    old.erase()


def keep_gelu_tanh(program: rt.ProgramOp) -> int:
    """Rewrite every eligible gelu of `program` and its gradients; returns how many gelus."""
    ops = walk_ops(program)
    gelus: list[rt.KernelOp] = []
    grads: dict[SSAValue, list[rt.KernelOp]] = {}  # input x -> the gradient kernels reading it
    for op in ops:
        if type(op) is not rt.KernelOp:
            continue
        name = kernel_name(op)
        if name == FORWARD:
            gelus.append(op)
        elif name == BACKWARD:
            ins, outs = kernel_io(op)
            if len(ins) == 2 and len(outs) == 1:
                grads.setdefault(ins[1], []).append(op)
    if not gelus or not grads:
        return 0
    mem = Memory(program, ops)
    pos_of: dict[Block, dict[Operation, int]] = {}
    n = 0
    for gelu in gelus:
        ins, outs = kernel_io(gelu)
        block = gelu.parent
        if len(ins) != 1 or len(outs) != 1 or ins[0] not in grads or not isinstance(block, Block):
            continue
        (x,), (y,) = ins, outs
        t_type = _float_buffer(y)
        if t_type is None or mem.root(x) is mem.root(y):
            continue
        pos = pos_of.get(block)
        if pos is None:
            pos = pos_of[block] = positions(block)
        here = pos[gelu]
        later = [
            g
            for g in grads[x]
            if g.parent is block
            and pos[g] > here
            and kernel_io(g)[1][0].type == y.type
            and not written_between(mem, x, block, pos, here + 1, pos[g] - 1)
        ]
        if not later:
            continue
        t = rt.AllocOp(t_type)
        block.insert_op_before(t, gelu)
        _swap(mem, gelu, rt.KernelOp(GeluTanhOp.name, [x], [y, t.result], dict(gelu.attributes)))
        for g in later:
            (dy, _), (dx,) = kernel_io(g)
            _swap(mem, g, rt.KernelOp(GeluGradTanhOp.name, [dy, x, t.result], [dx], dict(g.attributes)))
        pos_of.pop(block)  # positions moved
        n += 1
    return n


@dataclass(frozen=True)
class RtKeepGeluTanhPass(ModulePass):
    """A gelu writes the tanh it computes; its gradients in the same block read it."""

    name = "rt-keep-gelu-tanh"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            keep_gelu_tanh(program)
