"""`rt-keep-gelu-factor`: a GELU keeps the factor its gradient computes again.

Both GELUs and their gradients compute the same factor of `x` from the same `x`:
`t = tanh(sqrt(2/pi) (x + 0.044715 x^3))` for `popxl.gelu` / `popxl.gelu_grad` (a third of
the gradient's work), `h = 0.5 (1 + erf(x / sqrt(2)))` for `popxl.geluerf` /
`popxl.geluerf_grad` (the erf, evaluated in float64: most of the gradient's work). Where a
gelu kernel and gradient kernels of its input are in one block, in that order, and nothing
between them writes the input, the gelu becomes its keeping kernel, which also writes the
factor into a new buffer, and each such gradient becomes the kernel that reads it:

| gelu | keeps | its gradient reads it |
|---|---|---|
| `popxl.gelu` -> `xl.gelu_tanh` (`GeluTanhOp`) | `t`, the result's type | `xl.gelu_grad_tanh` |
| `popxl.geluerf` -> `xl.geluerf_keep` (`GeluErfKeepOp`) | `h`, float64 | `xl.geluerf_grad_kept` |

(the op classes say which kernels they replace: `REPLACES`, `GRADIENT`, `KEEPS_FLOAT64`).
The new kernels compute with the same NumPy operations in the same order as the kernels
they replace: the same bits. The cost is the factor's buffer, held from the forward kernel
to the last gradient. Only float buffers, gradients whose result has the gelu's type, and
a gelu that does not write its own input.

```mlir
// before
%y = rt.alloc : memref<2x3xf32>
rt.kernel "popxl.gelu"(%x) -> (%y) : (memref<2x3xf32>) -> memref<2x3xf32>
%dx = rt.alloc : memref<2x3xf32>
rt.kernel "popxl.gelu_grad"(%dy, %x) -> (%dx) : (memref<2x3xf32>, memref<2x3xf32>) -> memref<2x3xf32>
// after `xl-opt -p rt-keep-gelu-factor`
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
from xdsl.dialects.builtin import AnyFloat, Float64Type, MemRefType, ModuleOp, NoneAttr
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.rt_kernels import KEEPING_GELUS, GeluErfKeepOp, GeluTanhOp
from xl.passes.rt_analysis import Memory, kernel_io, kernel_name, positions, programs, walk_ops, written_between

Keeper = type[GeluTanhOp] | type[GeluErfKeepOp]

# replaced gelu kernel name -> (its keeping class, replaced gradient kernel name)
KEEPERS: dict[str, tuple[Keeper, str]] = {c.REPLACES.name: (c, c.GRADIENT.REPLACES.name) for c in KEEPING_GELUS}


def _factor_buffer(y: SSAValue, keeper: Keeper, made: dict[tuple[Attribute, bool], MemRefType]) -> MemRefType | None:
    """The kept factor's buffer type: `y`'s shape, `y`'s float type or float64 (one type
    object per shape in `made`); None when `y` is not a float buffer."""
    t = y.type
    if not isinstance(t, MemRefType) or not isinstance(t.element_type, AnyFloat):
        return None
    if not keeper.KEEPS_FLOAT64 and isinstance(t.layout, NoneAttr):
        return t
    key = (t, keeper.KEEPS_FLOAT64)
    if key not in made:
        made[key] = MemRefType(Float64Type() if keeper.KEEPS_FLOAT64 else t.element_type, t.get_shape())
    return made[key]


def _swap(mem: Memory, pos: dict[Operation, int], old: rt.KernelOp, new: rt.KernelOp) -> None:
    """`new` in place of `old`; `mem` sees it as the writer of its results, `pos` at `old`'s position."""
    block = old.parent
    assert isinstance(block, Block)
    block.insert_op_before(new, old)
    pos[new] = pos.pop(old)
    for v in kernel_io(new)[1]:
        mem.writers[v] = [new if w is old else w for w in mem.writers.get(v, [old])]
    old.detach()
    old.erase()


def keep_gelu_factors(program: rt.ProgramOp) -> int:
    """Rewrite every eligible gelu of `program` and its gradients; returns how many gelus."""
    ops = walk_ops(program)
    gelus: list[rt.KernelOp] = []
    grads: dict[tuple[str, SSAValue], list[rt.KernelOp]] = {}  # (kernel, input x) -> gradients
    backward = {b for _, b in KEEPERS.values()}
    for op in ops:
        if type(op) is not rt.KernelOp:
            continue
        name = kernel_name(op) or ""
        if name in KEEPERS:
            gelus.append(op)
        elif name in backward:
            ins, outs = kernel_io(op)
            if len(ins) == 2 and len(outs) == 1:
                grads.setdefault((name, ins[1]), []).append(op)
    if not gelus or not grads:
        return 0
    mem = Memory(program, ops)
    made: dict[tuple[Attribute, bool], MemRefType] = {}
    pos_of: dict[Block, dict[Operation, int]] = {}  # kept valid through the rewrites (a new kernel at the old one's)
    n = 0
    for gelu in gelus:
        keeper, grad_name = KEEPERS[kernel_name(gelu) or ""]
        ins, outs = kernel_io(gelu)
        block = gelu.parent
        if len(ins) != 1 or len(outs) != 1 or (grad_name, ins[0]) not in grads or not isinstance(block, Block):
            continue
        (x,), (y,) = ins, outs
        kept_type = _factor_buffer(y, keeper, made)
        if kept_type is None or mem.root(x) is mem.root(y):
            continue
        pos = pos_of.get(block)
        if pos is None:
            pos = pos_of[block] = positions(block)
        here = pos[gelu]
        later = [
            g
            for g in grads[grad_name, x]
            if g.parent is block
            and pos[g] > here
            and kernel_io(g)[1][0].type == y.type
            and not written_between(mem, x, block, pos, here + 1, pos[g] - 1)
        ]
        if not later:
            continue
        kept = rt.AllocOp(kept_type)
        block.insert_op_before(kept, gelu)
        _swap(mem, pos, gelu, rt.KernelOp(keeper.name, [x], [y, kept.result], dict(gelu.attributes)))
        for g in later:
            (dy, _), (dx,) = kernel_io(g)
            _swap(mem, pos, g, rt.KernelOp(keeper.GRADIENT.name, [dy, x, kept.result], [dx], dict(g.attributes)))
        n += 1
    return n


@dataclass(frozen=True)
class RtKeepGeluFactorPass(ModulePass):
    """A gelu writes the factor of x it computes; its gradients in the same block read it."""

    name = "rt-keep-gelu-factor"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            keep_gelu_factors(program)
