"""`rt-reuse-buffers`: shares storage between temporaries whose lifetimes do not overlap.

Per block, each `rt.alloc` buffer lives from its first use to its last use (uses nested
in a loop or branch count at the position of that op; uses of views count as uses of the
viewed buffer). A buffer whose first use overwrites it completely (a kernel known to fill
its outputs, `rt.copy`, `rt.h2d`) takes the storage of a dead buffer of the same type on
the same virtual IPU (the `ipu.id` of the first placed op using it, else IPU 0: memory is
per IPU, and buffers of different IPUs stay apart so that IPUs can run concurrently), most recently
freed first. An elementwise kernel may also write into an input that dies
at that kernel (in-place). Reused buffers are replaced by the buffer that owns the
storage and their `rt.alloc` is erased. State, constants and views are never touched.
Function bodies (`rt.func`) are blocks like any other; an `rt.call` overwrites a
destination completely when the first op of the body using it does.

```mlir
// before
%a = rt.alloc : memref<8x512xf32>
rt.kernel "popxl.matmul"(%x, %w) -> (%a) : ...
%b = rt.alloc : memref<8x512xf32>
rt.kernel "popxl.gelu"(%a) -> (%b) : ...
// after `xl-opt -p rt-reuse-buffers` (%a is dead after the gelu: it is updated in place)
%a = rt.alloc : memref<8x512xf32>
rt.kernel "popxl.matmul"(%x, %w) -> (%a) : ...
rt.kernel "popxl.gelu"(%a) -> (%a) : ...
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.ipu import placement
from xl.passes.rt_analysis import (
    Memory,
    ancestor_in,
    blocks,
    is_elementwise_kernel,
    is_full_write_kernel,
    kernel_io,
    positions,
    programs,
)


def _full_write(op: Operation, v: SSAValue) -> bool:
    """Whether `op` overwrites all of `v` without reading it."""
    if isinstance(op, rt.KernelOp):
        if not is_full_write_kernel(op):
            return False
        ins, outs = kernel_io(op)
        return v in outs and v not in ins and outs.count(v) == 1
    if isinstance(op, rt.CopyOp):
        return op.dest is v and op.source is not v
    if isinstance(op, rt.H2DOp):
        return op.buffer is v
    if isinstance(op, rt.CallOp):
        return _call_fills(op, v)
    return False


def _call_fills(call: rt.CallOp, v: SSAValue) -> bool:
    """Whether `call` overwrites all of `v` without reading it: `v` is one of its
    destinations (and no other operand), and the first op of the function body using that
    argument overwrites it completely."""
    operands = list(call.operands)
    n_in = len(call.ins)
    if operands.count(v) != 1 or operands.index(v) < n_in:
        return False
    func = rt.lookup_func(call, call.callee_name)
    if func is None or func.is_ancestor(call):
        return False
    arg = func.body.block.args[operands.index(v)]
    block = func.body.block
    first: Operation | None = None
    for use in arg.uses:
        anc = ancestor_in(use.operation, block)
        if anc is None:
            return False
        if first is None or block.get_operation_index(anc) < block.get_operation_index(first):
            first = anc
    return first is not None and _full_write(first, arg)


@dataclass
class _Life:
    value: SSAValue
    first: int
    last: int
    first_op: Operation
    ipu: int = 0  # the `ipu.id` of the first placed op using it (0: popxl's default IPU)


def _lifetimes(block: Block, mem: Memory) -> tuple[list[Operation], list[_Life]]:
    ops = list(block.ops)
    pos = positions(block)
    lives: list[_Life] = []
    for op in ops:
        if not isinstance(op, rt.AllocOp):
            continue
        v = op.result
        if v in mem.view_src:
            continue
        aliases = mem.aliases(v)
        if any(a in mem.unknown for a in aliases):
            continue
        first, last = len(ops), -1
        first_op: Operation | None = None
        ok = True
        placed: tuple[int, int] | None = None  # (position, ipu) of the first placed user
        for a in aliases:
            for use in a.uses:
                anc = ancestor_in(use.operation, block)
                if anc is None:
                    ok = False
                    break
                p = pos[anc]
                if p < first:
                    first, first_op = p, anc
                last = max(last, p)
                ipu = placement(use.operation)
                if ipu is not None and (placed is None or p < placed[0]):
                    placed = (p, ipu)
            if not ok:
                break
        if not ok or first_op is None or not _full_write(first_op, v):
            continue
        lives.append(_Life(v, first, last, first_op, placed[1] if placed is not None else 0))
    return ops, lives


def plan_block(block: Block, mem: Memory) -> dict[SSAValue, SSAValue]:
    """buffer -> buffer whose storage it takes, for the allocs of `block`."""
    ops, lives = _lifetimes(block, mem)
    starts: dict[int, list[_Life]] = {}
    ends: dict[int, list[_Life]] = {}
    for life in lives:
        starts.setdefault(life.first, []).append(life)
        ends.setdefault(life.last, []).append(life)
    phys: dict[SSAValue, SSAValue] = {}
    pool: dict[tuple[Attribute, int], list[SSAValue]] = {}
    ipu_of = {life.value: life.ipu for life in lives}
    consumed: set[SSAValue] = set()
    for i in sorted(set(starts) | set(ends)):
        op = ops[i]
        for life in starts.get(i, ()):
            rep: SSAValue | None = None
            if is_elementwise_kernel(op) and isinstance(op, rt.KernelOp):
                op_ins, op_outs = kernel_io(op)
                for d in ends.get(i, ()):
                    if (
                        d.value not in consumed
                        and d.value.type == life.value.type
                        and d.ipu == life.ipu
                        and d.first < i
                        and d.value in op_ins
                        and d.value not in op_outs
                        and not any(a in op_ins for a in mem.aliases(d.value)[1:])
                    ):
                        rep = phys[d.value]
                        consumed.add(d.value)
                        break
            if rep is None:
                free = pool.get((life.value.type, life.ipu))
                if free:
                    rep = free.pop()
            phys[life.value] = rep if rep is not None else life.value
        for life in ends.get(i, ()):
            if life.value not in consumed:
                pool.setdefault((life.value.type, ipu_of[life.value]), []).append(phys[life.value])
    return {v: r for v, r in phys.items() if r is not v}


def reuse_buffers(program: rt.ProgramOp) -> int:
    mem = Memory(program)
    renames: dict[SSAValue, SSAValue] = {}
    for block in list(blocks(program)):
        renames.update(plan_block(block, mem))
    for v, r in renames.items():
        v.replace_all_uses_with(r)
        alloc = v.owner
        assert isinstance(alloc, rt.AllocOp)
        alloc.detach()
        alloc.erase()
    return len(renames)


@dataclass(frozen=True)
class RtReuseBuffersPass(ModulePass):
    """Share storage between `rt.alloc` buffers with disjoint lifetimes."""

    name = "rt-reuse-buffers"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            reuse_buffers(program)
