"""`rt-fuse-softmax`: a softmax and the elementwise kernel computing its input, and a softmax
gradient and the elementwise kernel reading it, become one kernel each.

An attention's scores are `matmul -> mul(scale) -> add(mask) -> softmax`; after
`rt-fuse-elementwise` the mul and the add are one `xl.fused` kernel whose result only the
softmax reads. `xl.softmax` (`SoftmaxFusedOp`) computes those scores in its own output and
normalises them in place: the scores get no buffer of their own. Backward, the scores'
gradient is `softmax_grad` then `mul(scale)`: `xl.softmax_grad` (`SoftmaxGradFusedOp`)
applies the mul to its own output. The elementwise kernel (one kernel or an `xl.fused`
chain) becomes the fused kernel's `steps`, in `xl.fused`'s form.

Fused only when the intermediate buffer is the two kernels' own (an `rt.alloc`, no view of
it, no other reader or writer), has the type of the result, and nothing between the two
kernels writes the inputs the fused kernel reads later.

```mlir
// before (after rt-fuse-elementwise)
rt.kernel "xl.fused"(%qk, %scale, %mask) -> (%s) {steps = [{kernel = "popxl.mul", args = array<i64: 0, 1>},
                                                           {kernel = "popxl.add", args = array<i64: -1, 2>}]}
    : (memref<2x4x8x8xf32>, memref<f32>, memref<8x8xf32>) -> memref<2x4x8x8xf32>
rt.kernel "popxl.softmax"(%s) -> (%p) {axis = -1 : i64} : (memref<2x4x8x8xf32>) -> memref<2x4x8x8xf32>
// after `xl-opt -p rt-fuse-softmax`
rt.kernel "xl.softmax"(%qk, %scale, %mask) -> (%p)
    {axis = -1 : i64, steps = [{kernel = "popxl.mul", args = array<i64: 0, 1>},
                               {kernel = "popxl.add", args = array<i64: -1, 2>}]}
    : (memref<2x4x8x8xf32>, memref<f32>, memref<8x8xf32>) -> memref<2x4x8x8xf32>
```
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, DictionaryAttr, ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.popxl import SoftmaxGradOp, SoftmaxOp
from xl.dialects.rt_kernels import FusedOp, SoftmaxFusedOp, SoftmaxGradFusedOp, fused_source_attrs
from xl.passes.rt_analysis import (
    Memory,
    blocks,
    is_elementwise_kernel,
    kernel_io,
    kernel_name,
    positions,
    programs,
    written_between,
)
from xl.passes.rt_fuse_elementwise import _steps_attr


def _steps(op: rt.KernelOp) -> tuple[list[SSAValue], list[tuple[str, list[int], dict[str, Attribute]]]] | None:
    """(inputs, steps) of an elementwise kernel or `xl.fused` chain with one result that is
    not one of its inputs, in `xl.fused`'s form; None for any other op."""
    ins, outs = kernel_io(op)
    if len(outs) != 1 or outs[0] in ins:
        return None
    if kernel_name(op) == FusedOp.name:
        steps = op.attributes.get("steps")
        if not isinstance(steps, ArrayAttr):
            return None
        out = []
        for d in steps.data:
            assert isinstance(d, DictionaryAttr)
            items = dict(d.data)
            name, args = items.pop("kernel"), items.pop("args")
            assert isinstance(args, DenseArrayBase)
            out.append((getattr(name, "data", ""), [int(a) for a in args.get_values()], items))
        return list(ins), out
    if not is_elementwise_kernel(op):
        return None
    uniq: list[SSAValue] = []
    args = []
    for v in ins:
        if v not in uniq:
            uniq.append(v)
        args.append(uniq.index(v))
    attrs = {k: a for k, a in op.attributes.items() if not k.startswith(("ipu.", "rt."))}
    return uniq, [(kernel_name(op) or "", args, attrs)]


def _private(mem: Memory, v: SSAValue, writer: Operation, users: set[Operation]) -> bool:
    """`v` is an `rt.alloc` buffer written by `writer` only, used by exactly `users`, unviewed."""
    return (
        isinstance(v.owner, rt.AllocOp)
        and mem.writers.get(v) == [writer]
        and {u.operation for u in v.uses} == users
        and v not in mem.views
        and v not in mem.view_src
    )


def _unwritten(mem: Memory, vs: list[SSAValue], block: Block, pos: dict[Operation, int], a: Operation, b: Operation):
    return not any(written_between(mem, x, block, pos, pos[a] + 1, pos[b] - 1) for x in vs)


def _ipu_attrs(op: Operation) -> dict[str, Attribute]:
    return {k: a for k, a in op.attributes.items() if k.startswith("ipu.")}


def _replace(
    block: Block, mem: Memory, pos: dict[Operation, int], new: rt.KernelOp, old: list[Operation], dead: SSAValue
) -> None:
    """`new` in place of the `old` kernels (at the last one's position), `dead` (their
    intermediate buffer) gone; `mem` and `pos` see `new` as the writer of its results."""
    block.insert_op_before(new, old[-1])
    pos[new] = pos[old[-1]]
    for v in kernel_io(new)[1]:
        mem.writers[v] = [new if w in old else w for w in mem.writers.get(v, [])]
    mem.writers.pop(dead, None)
    for op in reversed(old):
        op.detach()
        op.erase()
    alloc = dead.owner
    assert isinstance(alloc, Operation)
    alloc.detach()
    alloc.erase()


def _fuse_forward(block: Block, mem: Memory, pos: dict[Operation, int], sm: rt.KernelOp) -> bool:
    (v,), (y,) = kernel_io(sm)
    prod = mem.writers.get(v, [None])[0]
    if not isinstance(prod, rt.KernelOp) or prod.parent is not block or v.type != y.type:
        return False
    form = _steps(prod)
    if form is None or not _private(mem, v, prod, {prod, sm}):
        return False
    ins, steps = form
    if mem.root(y) in {mem.root(x) for x in ins} or not _unwritten(mem, ins, block, pos, prod, sm):
        return False
    attrs = {"axis": sm.attributes["axis"], "steps": _steps_attr(steps), **_ipu_attrs(sm)}
    attrs.update(fused_source_attrs(prod, sm))
    _replace(block, mem, pos, rt.KernelOp(SoftmaxFusedOp.name, ins, [y], attrs), [prod, sm], v)
    return True


def _fuse_backward(block: Block, mem: Memory, pos: dict[Operation, int], sg: rt.KernelOp) -> bool:
    ins, (g,) = kernel_io(sg)
    if len(ins) != 2 or g in ins:
        return False
    users = [u.operation for u in g.uses if u.operation is not sg]
    if len(users) != 1 or not isinstance(users[0], rt.KernelOp) or users[0].parent is not block:
        return False
    cons = users[0]
    form = _steps(cons)
    if form is None or not _private(mem, g, sg, {sg, cons}):
        return False
    cins, steps = form
    (h,) = kernel_io(cons)[1]
    if h.type != g.type or pos[cons] < pos[sg]:
        return False
    # g is the first step's: later steps see the output as the previous result (-1)
    gi = cins.index(g)
    if any(gi in args for _, args, _ in steps[1:]):
        return False
    others = [x for x in cins if x is not g]
    new_ins = [*ins, *others]
    if mem.root(h) in {mem.root(x) for x in new_ins} or not _unwritten(mem, new_ins, block, pos, sg, cons):
        return False
    remap = {k: (-1 if x is g else 2 + others.index(x)) for k, x in enumerate(cins)}
    new_steps = [(name, [a if a < 0 else remap[a] for a in args], at) for name, args, at in steps]
    attrs = {"axis": sg.attributes["axis"], "steps": _steps_attr(new_steps), **_ipu_attrs(sg)}
    attrs.update(fused_source_attrs(sg, cons))
    _replace(block, mem, pos, rt.KernelOp(SoftmaxGradFusedOp.name, new_ins, [h], attrs), [sg, cons], g)
    return True


def fuse_softmax(program: rt.ProgramOp) -> int:
    """Fuse every eligible softmax and softmax gradient of `program`; returns how many."""
    mem = Memory(program)
    n = 0
    for block in blocks(program, mem.ops):
        pos = positions(block)
        for op in list(block.ops):
            if type(op) is not rt.KernelOp or op.parent is not block:
                continue
            name = kernel_name(op)
            if name == SoftmaxOp.name:
                n += _fuse_forward(block, mem, pos, op)
            elif name == SoftmaxGradOp.name:
                n += _fuse_backward(block, mem, pos, op)
    return n


@dataclass(frozen=True)
class RtFuseSoftmaxPass(ModulePass):
    """Fuse softmax with its elementwise prologue and softmax_grad with its elementwise epilogue."""

    name = "rt-fuse-softmax"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            fuse_softmax(program)
