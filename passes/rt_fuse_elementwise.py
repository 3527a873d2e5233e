"""`rt-fuse-elementwise`: turns chains of elementwise kernels into one `xl.fused` kernel.

A chain is a sequence of elementwise kernels of one block where each intermediate result
is read only by the next kernel of the chain and has the type of the final result. The
chain becomes one kernel at the position of its last member; its intermediates are never
materialised: every step writes the fused kernel's output buffer in place (the runtime
runs each step's own kernel code). The `steps` attribute lists, per step, the kernel
name, its arguments (`-1` is the result of the previous step, `k >= 0` the k-th input of
the fused kernel) and its attributes.

```mlir
// before
rt.kernel "popxl.add"(%mm, %b) -> (%z) : (memref<8x512xf32>, memref<512xf32>) -> memref<8x512xf32>
rt.kernel "popxl.gelu"(%z) -> (%h) : (memref<8x512xf32>) -> memref<8x512xf32>
// after `xl-opt -p rt-fuse-elementwise` (%z had no other reader)
rt.kernel "xl.fused"(%mm, %b) -> (%h) {steps = [{kernel = "popxl.add", args = array<i64: 0, 1>},
                                                {kernel = "popxl.gelu", args = array<i64: -1>}]}
    : (memref<8x512xf32>, memref<512xf32>) -> memref<8x512xf32>
```
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.rt_kernels import FusedOp, fused_source_attrs
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

FUSED = FusedOp.name


@dataclass
class _Group:
    ops: list[rt.KernelOp]
    inputs: list[SSAValue] = field(default_factory=list)  # external inputs, in order
    steps: list[tuple[str, list[int], dict[str, Attribute]]] = field(default_factory=list)
    result: SSAValue | None = None  # output of the last op
    last_pos: int = -1

    def arg(self, v: SSAValue) -> int:
        if v is self.result:
            return -1
        for k, x in enumerate(self.inputs):
            if x is v:
                return k
        self.inputs.append(v)
        return len(self.inputs) - 1

    def add(self, op: rt.KernelOp, ins: tuple[SSAValue, ...], out: SSAValue, pos: int) -> None:
        args = [self.arg(v) for v in ins]
        attrs = {k: a for k, a in op.attributes.items() if not k.startswith("ipu.")}
        self.steps.append((kernel_name(op) or "", args, attrs))
        self.ops.append(op)
        self.result = out
        self.last_pos = pos


_STEP_CACHE: dict[tuple, DictionaryAttr] = {}
_STEPS_CACHE: dict[tuple, ArrayAttr] = {}


def _steps_attr(steps: list[tuple[str, list[int], dict[str, Attribute]]]) -> ArrayAttr:
    """The `steps` attribute (memoised: building xDSL attributes costs tens of us)."""
    keys = []
    for name, args, attrs in steps:
        key = (name, tuple(args), tuple(sorted(attrs.items(), key=lambda kv: kv[0])))
        if key not in _STEP_CACHE:
            _STEP_CACHE[key] = DictionaryAttr(
                {"kernel": StringAttr(name), "args": DenseArrayBase.from_list(i64, args), **attrs}
            )
        keys.append(key)
    k = tuple(keys)
    attr = _STEPS_CACHE.get(k)
    if attr is None:
        attr = _STEPS_CACHE[k] = ArrayAttr([_STEP_CACHE[x] for x in keys])
    return attr


def _fusable(op: Operation) -> tuple[tuple[SSAValue, ...], SSAValue] | None:
    if type(op) is not rt.KernelOp or not is_elementwise_kernel(op):
        return None
    ins, outs = kernel_io(op)
    if len(outs) != 1 or outs[0] in ins or not isinstance(outs[0].owner, rt.AllocOp):
        return None
    return ins, outs[0]


def _fuse_block(block: Block, mem: Memory) -> int:
    pos = positions(block)
    by_result: dict[SSAValue, _Group] = {}  # open groups by their current result
    groups: list[_Group] = []
    for op in block.ops:
        f = _fusable(op)
        if f is None:
            continue
        ins, out = f
        p = pos[op]
        joined: _Group | None = None
        for v in ins:
            g = by_result.get(v)
            if g is None:
                continue
            users = {u.operation for u in v.uses}
            if (
                v.type == out.type
                and users == {g.ops[-1], op}
                and mem.writers.get(v) == [g.ops[-1]]
                and v not in mem.views
                and not any(written_between(mem, x, block, pos, g.last_pos + 1, p - 1) for x in g.inputs)
            ):
                joined = g
                break
        assert isinstance(op, rt.KernelOp)  # checked by _fusable
        if joined is not None:
            assert joined.result is not None  # the key it is found under
            del by_result[joined.result]
            joined.add(op, ins, out, p)
        else:
            joined = _Group([])
            joined.add(op, ins, out, p)
            groups.append(joined)
        by_result[out] = joined
    n = 0
    for g in groups:
        if len(g.ops) < 2:
            continue
        last = g.ops[-1]
        steps = _steps_attr(g.steps)
        assert g.result is not None
        fused = rt.KernelOp(FUSED, g.inputs, [g.result], {"steps": steps, **fused_source_attrs(*g.ops)})
        block.insert_op_before(fused, last)
        for op in reversed(g.ops):
            _, outs = kernel_io(op)
            op.detach()
            op.erase()
            o = outs[0]
            if o is not g.result and not o.uses:
                alloc = o.owner
                assert isinstance(alloc, Operation)
                alloc.detach()
                alloc.erase()
        n += 1
    return n


def fuse_elementwise(program: rt.ProgramOp) -> int:
    """Fuse every eligible chain in `program`; returns the number of fused kernels."""
    mem = Memory(program)
    n = 0
    for b in blocks(program, mem.ops):
        n += _fuse_block(b, mem)
    return n


@dataclass(frozen=True)
class RtFuseElementwisePass(ModulePass):
    """Fuse single-use chains of elementwise kernels into `xl.fused` kernels."""

    name = "rt-fuse-elementwise"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for program in programs(op):
            fuse_elementwise(program)
