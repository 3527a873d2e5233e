"""`rt-reuse-buffers`: shares storage between temporaries whose lifetimes do not overlap.

Per block, each `rt.alloc` buffer lives from its first use to its last use (uses nested
in a loop or branch count at the position of that op; uses of views count as uses of the
viewed buffer). A buffer whose first use overwrites it completely (a kernel known to fill
its outputs, `rt.copy`, `rt.h2d`) takes the storage of a dead buffer of the same type on
the same virtual IPU (the `ipu.id` of the first placed op using it, else IPU 0: memory is
per IPU, and buffers of different IPUs stay apart so that IPUs can run concurrently), most recently
freed first, unless that would raise the block's peak: taken storage stays held over the gap
between its last user and its new first user (the memory report counts a buffer from its
first use to its last), so it is taken only when the bytes the block's buffers hold over
the gap, plus its size, stay within the most the block holds at once without reuse (in
the program's body, with the buffers of functions over their calls and those of loops and
branches at their op, as the report counts them; function bodies are exempt: a function's
buffers are held over all its calls anyway). An
elementwise kernel may also write into an input that dies
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

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import FixedBitwidthType, MemRefType, ModuleOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from xl.dialects import rt
from xl.dialects.ipu import IPU_ATTR, placement
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


class CallFills:
    """The destinations each call overwrites completely: a destination (no other operand
    of the call) whose argument's first use in the function body overwrites it. Asked once
    per (function, argument) and once per call, so a call costs O(operands) however large
    its function; valid while the program is not edited (`reuse_buffers` plans every
    block before renaming anything)."""

    def __init__(self, program: rt.ProgramOp | None):
        self.functions = rt.FuncSummaries(program)  # for the lookup of callees by name
        self._args: dict[tuple[rt.FuncOp, int], bool] = {}
        self._calls: dict[rt.CallOp, frozenset[SSAValue]] = {}
        self._positions: dict[Block, dict[Operation, int]] = {}

    def filled(self, call: rt.CallOp) -> frozenset[SSAValue]:
        """The buffers `call` overwrites completely without reading them."""
        done = self._calls.get(call)
        if done is None:
            done = self._calls[call] = self._call_fills(call)
        return done

    def _call_fills(self, call: rt.CallOp) -> frozenset[SSAValue]:
        func = self.functions.func(call.callee.root_reference.data)
        if func is None or func.is_ancestor(call):
            return frozenset()
        ins, outs = call.io()
        count: dict[SSAValue, int] = {}
        for v in ins + outs:
            count[v] = count.get(v, 0) + 1
        n = len(ins)
        return frozenset(v for j, v in enumerate(outs) if count[v] == 1 and self.arg_filled(func, n + j))

    def arg_filled(self, func: rt.FuncOp, i: int) -> bool:
        """Whether the first op of `func`'s body using argument `i` overwrites it completely."""
        key = (func, i)
        done = self._args.get(key)
        if done is None:
            self._args[key] = False  # asked again while answering (recursive functions): no
            done = self._args[key] = self._first_use_fills(func, i)
        return done

    def _first_use_fills(self, func: rt.FuncOp, i: int) -> bool:
        block = func.body.block
        arg = block.args[i]
        pos = self._positions.get(block)
        if pos is None:
            pos = self._positions[block] = positions(block)
        first: Operation | None = None
        for use in arg.uses:
            anc = ancestor_in(use.operation, block)
            if anc is None:
                return False
            if first is None or pos[anc] < pos[first]:
                first = anc
        return first is not None and _full_write(first, arg, self)


def _full_write(op: Operation, v: SSAValue, fills: CallFills) -> bool:
    """Whether `op` overwrites all of `v` without reading it (a call: `v` is one of its
    destinations, and no other operand, and the first op of the function body using that
    argument overwrites it)."""
    t = type(op)
    if t is rt.KernelOp:
        if not is_full_write_kernel(op):
            return False
        ins, outs = kernel_io(cast(rt.KernelOp, op))
        return v in outs and v not in ins and outs.count(v) == 1
    if t is rt.CopyOp:
        op = cast(rt.CopyOp, op)
        return op.dest is v and op.source is not v
    if t is rt.H2DOp:
        return cast(rt.H2DOp, op).buffer is v
    if t is rt.CallOp:
        return v in fills.filled(cast(rt.CallOp, op))
    return False


@dataclass
class _Life:
    value: SSAValue
    first: int
    last: int
    first_op: Operation
    ipu: int = 0  # the `ipu.id` of the first placed op using it (0: popxl's default IPU)
    type_key: int = -1  # equal for buffers of equal types (`_TypeKeys`)
    fills: bool = True  # its first use overwrites it completely: it may take dead storage


class _TypeKeys:
    """A small int per buffer type, equal for equal types: hashing or comparing a memref
    type walks its parameters, so each type object is hashed once (looked up by id after)."""

    def __init__(self) -> None:
        self._by_value: dict[Attribute, int] = {}
        self._by_id: dict[int, tuple[Attribute, int]] = {}

    def __call__(self, t: Attribute) -> int:
        known = self._by_id.get(id(t))
        if known is not None and known[0] is t:
            return known[1]
        k = self._by_value.setdefault(t, len(self._by_value))
        self._by_id[id(t)] = (t, k)
        return k


def _lifetimes(block: Block, mem: Memory, fills: CallFills) -> tuple[list[Operation], list[_Life]]:
    ops = list(block.ops)
    pos = {id(op): i for i, op in enumerate(ops)}  # by id: ops hash in Python, ids in C
    view_src, views, unknown = mem.view_src, mem.views, mem.unknown
    lives: list[_Life] = []
    for op in ops:
        if type(op) is not rt.AllocOp:
            continue
        v = op.results[0]
        if v in view_src:
            continue
        aliases = mem.aliases(v) if v in views else (v,)
        if unknown and any(a in unknown for a in aliases):
            continue
        first, last = len(ops), -1
        first_op: Operation | None = None
        ok = True
        placed: tuple[int, int] | None = None  # (position, ipu) of the first placed user
        for a in aliases:
            for use in a.uses:
                user = use.operation
                anc = user if user.parent is block else ancestor_in(user, block)
                if anc is None:
                    ok = False
                    break
                p = pos[id(anc)]
                if p < first:
                    first, first_op = p, anc
                if p > last:
                    last = p
                if IPU_ATTR in user.attributes:
                    ipu = placement(user)
                    if ipu is not None and (placed is None or p < placed[0]):
                        placed = (p, ipu)
            if not ok:
                break
        if not ok or first_op is None:
            continue
        ipu = placed[1] if placed is not None else 0
        lives.append(_Life(v, first, last, first_op, ipu, fills=_full_write(first_op, v, fills)))
    return ops, lives


def _nbytes(t: Attribute) -> int:
    """The bytes of a buffer of type `t` (a memref of static shape)."""
    if not isinstance(t, MemRefType):
        return 0
    elem = cast(MemRefType[Attribute], t).element_type
    width = elem.bitwidth if isinstance(elem, FixedBitwidthType) else 64
    return math.prod(t.get_shape()) * max(1, (width + 7) // 8)


class _LiveBytes:
    """The bytes of the block's buffers live at each op of the block, per IPU, in the
    memory report's terms (a buffer's storage is held from its first use to its last),
    and the most the block holds at once without reuse. Taking dead storage keeps it
    held over the gap between its last user and its new first user: `fits` says whether
    that stays within the block's peak."""

    def __init__(self, n: int, lives: list[_Life], outside: dict[int, np.ndarray] | None = None):
        self._n = n
        self._live: dict[int, np.ndarray] = {ipu: a.copy() for ipu, a in (outside or {}).items()}
        for life in lives:
            self.add(life.ipu, life.first, life.last + 1, _nbytes(life.value.type))
        self._bound = {ipu: int(a.max(initial=0)) for ipu, a in self._live.items()}

    def add(self, ipu: int, start: int, stop: int, nbytes: int) -> None:
        live = self._live.get(ipu)
        if live is None:
            live = self._live[ipu] = np.zeros(self._n + 1, dtype=np.int64)
        live[start:stop] += nbytes

    def fits(self, ipu: int, start: int, stop: int, nbytes: int) -> bool:
        if start >= stop:
            return True
        return int(self._live[ipu][start:stop].max()) + nbytes <= self._bound[ipu]


def _held_outside(program: rt.ProgramOp, mem: Memory, fills: CallFills) -> dict[int, np.ndarray]:
    """Per IPU, the bytes held at each op of the program's body by buffers allocated
    elsewhere, as the memory report counts them: a function's buffers from its first call
    to its last (a call inside another function counts over that function's calls), a
    loop's or branch's buffers (outside functions) at that op."""
    body = program.body.block
    ops = list(body.ops)
    pos = {id(op): i for i, op in enumerate(ops)}
    out: dict[int, np.ndarray] = {}

    def add(ipu: int, start: int, stop: int, nbytes: int) -> None:
        a = out.get(ipu)
        if a is None:
            a = out[ipu] = np.zeros(len(ops) + 1, dtype=np.int64)
        a[start:stop] += nbytes

    calls: dict[str, list[rt.CallOp]] = {}
    for op in mem.ops:
        if isinstance(op, rt.CallOp):
            calls.setdefault(op.callee_name, []).append(op)
    spans: dict[str, tuple[int, int] | None] = {}

    def span(name: str) -> tuple[int, int] | None:
        if name in spans:
            return spans[name]
        spans[name] = None  # a call cycle (rejected by the verifier) adds nothing
        found: list[tuple[int, int]] = []
        for call in calls.get(name, ()):
            func = _enclosing_func(call)
            if func is not None:
                s = span(func.func_name)
            else:
                anc = ancestor_in(call, body)
                s = (pos[id(anc)], pos[id(anc)]) if anc is not None else None
            if s is not None:
                found.append(s)
        spans[name] = result = (min(f[0] for f in found), max(f[1] for f in found)) if found else None
        return result

    for block in blocks(program, mem.ops)[1:]:
        owner = block.parent_op()
        if isinstance(owner, rt.FuncOp):
            where = span(owner.func_name)
        elif owner is None or _enclosing_func(owner) is not None:
            continue
        else:
            anc = ancestor_in(owner, body)
            where = (pos[id(anc)], pos[id(anc)]) if anc is not None else None
        if where is None:
            continue
        for life in _lifetimes(block, mem, fills)[1]:
            add(life.ipu, where[0], where[1] + 1, _nbytes(life.value.type))
    return out


def _enclosing_func(op: Operation) -> rt.FuncOp | None:
    cur = op.parent_op()
    while cur is not None and not isinstance(cur, rt.FuncOp):
        cur = cur.parent_op()
    return cur


def plan_block(
    block: Block, mem: Memory, fills: CallFills, outside: dict[int, np.ndarray] | None = None
) -> dict[SSAValue, SSAValue]:
    """buffer -> buffer whose storage it takes, for the allocs of `block` (`fills`: what the
    calls of the program fill, shared by the blocks of the unedited program; `outside`: for
    the program's body, what `_held_outside` says)."""
    ops, every = _lifetimes(block, mem, fills)
    # a function's buffers are held over all its calls whatever their uses: no gap counts
    held = None if isinstance(block.parent_op(), rt.FuncOp) else _LiveBytes(len(ops), every, outside)
    lives = [life for life in every if life.fills]
    starts: dict[int, list[_Life]] = {}
    ends: dict[int, list[_Life]] = {}
    type_key = _TypeKeys()
    for life in lives:
        life.type_key = type_key(life.value.type)
        starts.setdefault(life.first, []).append(life)
        ends.setdefault(life.last, []).append(life)
    phys: dict[SSAValue, SSAValue] = {}
    # (type key, IPU) -> free storage, each with the position of its last use
    pool: dict[tuple[int, int], list[tuple[SSAValue, int]]] = {}
    consumed: set[SSAValue] = set()
    for i in sorted(set(starts) | set(ends)):
        op = ops[i]
        for life in starts.get(i, ()):
            rep: SSAValue | None = None
            if type(op) is rt.KernelOp and is_elementwise_kernel(op):
                op_ins, op_outs = kernel_io(cast(rt.KernelOp, op))
                for d in ends.get(i, ()):
                    if (
                        d.value not in consumed
                        and d.type_key == life.type_key
                        and d.ipu == life.ipu
                        and d.first < i
                        and d.value in op_ins
                        and d.value not in op_outs
                        and not any(a in op_ins for a in mem.aliases(d.value)[1:])
                    ):
                        rep = phys[d.value]
                        consumed.add(d.value)
                        if held is not None:  # one storage where there were two at `i`
                            held.add(life.ipu, i, i + 1, -_nbytes(life.value.type))
                        break
            if rep is None:
                free = pool.get((life.type_key, life.ipu))
                # the most recently freed storage has the shortest gap (within the others')
                if free:
                    storage, freed = free[-1]
                    size = _nbytes(life.value.type)
                    if held is None or held.fits(life.ipu, freed + 1, i, size):
                        free.pop()
                        rep = storage
                        if held is not None:
                            held.add(life.ipu, freed + 1, i, size)
            phys[life.value] = rep if rep is not None else life.value
        for life in ends.get(i, ()):
            if life.value not in consumed:
                pool.setdefault((life.type_key, life.ipu), []).append((phys[life.value], i))
    return {v: r for v, r in phys.items() if r is not v}


def reuse_buffers(program: rt.ProgramOp) -> int:
    mem = Memory(program)
    fills = CallFills(program)
    renames: dict[SSAValue, SSAValue] = {}
    body = program.body.block
    outside = _held_outside(program, mem, fills)
    for block in blocks(program, mem.ops):
        renames.update(plan_block(block, mem, fills, outside if block is body else None))
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
