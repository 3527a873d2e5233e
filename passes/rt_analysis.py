"""Memory-effect and liveness helpers shared by the `rt` optimisation passes.

The `rt` dialect is flat: buffers are SSA values defined by `rt.alloc`, `rt.state` or
`rt.const` (and, in an `rt.func` body, its arguments), and every op says which buffers it
reads and writes (an `rt.call` reads its inputs and writes its destinations and the inputs
its function writes). Passes reason about
one block at a time: an op nested in a `rt.loop` / `rt.if` counts as a use at the
position of its ancestor in the block being analysed (so a buffer used inside a loop is
live over the whole loop).

A kernel carrying the unit attribute `rt.view` produces its output as a *view* of its
input (no copy). Its output never has storage of its own; the view's uses are uses of
the viewed buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeGuard, cast

import numpy as np
from xdsl.dialects.builtin import MemRefType, ModuleOp, StringAttr
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from xl.dialects import rt
from xl.dialects.popxl import from_attr
from xl.dialects.rt import VIEW_ATTR
from xl.dialects.rt_kernels import KernelClass, kernel_class, view_array, writes_results_fully
from xl.dialects.traits import accepts_views, is_elementwise, is_view_like
from xl.dialects.utils import dtype_of, shape_of


def kernel_class_of(op: Operation) -> KernelClass | None:
    """The op class an `rt.kernel` implements (`xl.dialects.rt_kernels`); None for other ops."""
    if type(op) is not rt.KernelOp:
        return None
    return kernel_class(cast(StringAttr, op.properties["kernel"]).data)


# what the kernels of each class are, from its traits (fixed per class), asked once per class:
# (elementwise, view-like, accepts views, writes its results fully)
_KINDS: dict[KernelClass | None, tuple[bool, bool, bool, bool]] = {None: (False, False, False, False)}


def _kind(cls: KernelClass | None) -> tuple[bool, bool, bool, bool]:
    kind = _KINDS.get(cls)
    if kind is None:
        assert cls is not None
        kind = _KINDS[cls] = (is_elementwise(cls), is_view_like(cls), accepts_views(cls), writes_results_fully(cls))
    return kind


def is_view_kernel(op: Operation) -> bool:
    """A kernel whose output may be a NumPy view of its single input (`ViewLike`)."""
    return _kind(kernel_class_of(op))[1]


def is_elementwise_kernel(op: Operation) -> bool:
    """An elementwise kernel (`Elementwise` trait): its output may share storage with an
    input of the same type (every result element depends only on the same element of
    the inputs), and it may be fused."""
    return _kind(kernel_class_of(op))[0]


def accepts_views_kernel(op: Operation) -> bool:
    """A kernel that reads its operands through any NumPy strides (`AcceptsViews`)."""
    return _kind(kernel_class_of(op))[2]


def is_full_write_kernel(op: Operation) -> bool:
    """A kernel that overwrites every element of each result without reading it first
    (`writes_results_fully`: no operand updated in place, no `PartialWrite`)."""
    return _kind(kernel_class_of(op))[3]


def readers_accept_views(v: SSAValue, producer: Operation, seen: set[SSAValue] | None = None) -> bool:
    """Whether every op reading buffer `v` (but its `producer`) may be given a strided
    view of it: kernels that declare `AcceptsViews`, copies, stores to the host and
    branch conditions (NumPy reads any strides), and calls whose function's readers of
    the argument all may (checked through nested calls). A kernel that does not declare
    it must get a contiguous buffer."""
    seen = set() if seen is None else seen
    if v in seen:
        return True
    seen.add(v)
    for use in v.uses:
        user = use.operation
        if user is producer:
            continue
        t = type(user)
        if t is rt.KernelOp:
            if not accepts_views_kernel(user):
                return False
        elif t is rt.CallOp:
            func = rt.lookup_func(user, cast(rt.CallOp, user).callee_name)
            if func is None or not readers_accept_views(func.body.block.args[use.index], user, seen):
                return False
        elif t not in (rt.CopyOp, rt.D2HOp, rt.IfOp):
            return False
    return True


def transpose_perm(op: rt.KernelOp) -> tuple[int, ...] | None:
    attr: Attribute | None = op.attributes.get("perm")
    return None if attr is None else tuple(int(a) for a in from_attr(attr))


def standin(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """A C-contiguous array of `shape` that owns no storage of that size (strides only):
    for reasoning about layouts of arbitrarily large buffers. Never read or write it."""
    itemsize = np.dtype(dtype).itemsize
    strides: list[int] = []
    acc = itemsize
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(d), 1)
    return np.lib.stride_tricks.as_strided(
        np.empty(1, dtype), shape=tuple(shape), strides=tuple(reversed(strides)), writeable=False
    )


def programs(module: ModuleOp) -> list[rt.ProgramOp]:
    return [op for op in module.ops if isinstance(op, rt.ProgramOp)]


def kernel_io(op: rt.KernelOp) -> tuple[tuple[SSAValue, ...], tuple[SSAValue, ...]]:
    """(ins, outs) of a kernel; much cheaper than the `ins` / `outs` accessors."""
    return op.io()


def _call_effects(op: rt.CallOp, summaries: rt.FuncSummaries | None) -> tuple[Sequence[SSAValue], Sequence[SSAValue]]:
    # reads its inputs; writes its destinations and the inputs the function writes
    if summaries is None:
        summaries = rt.FuncSummaries(rt.enclosing_program(op))
    return summaries.call_effects(op)


_NO_EFFECTS: tuple[tuple[SSAValue, ...], tuple[SSAValue, ...]] = ((), ())

# The effects of each rt op class (by exact class: a dictionary lookup instead of a chain
# of isinstance checks on every op of every analysis).
_EFFECTS: dict[type[Operation], Callable[[Any, rt.FuncSummaries | None], Any]] = {
    rt.KernelOp: lambda op, _: op.io(),
    rt.CopyOp: lambda op, _: ((op.source,), (op.dest,)),
    rt.H2DOp: lambda op, _: ((), (op.buffer,)),
    rt.D2HOp: lambda op, _: ((op.buffer,), ()),
    rt.IfOp: lambda op, _: ((op.condition,), ()),
    rt.CallOp: _call_effects,
    **{c: lambda op, _: _NO_EFFECTS for c in (rt.LoopOp, rt.AllocOp, rt.StateOp, rt.ConstOp, rt.FuncOp)},
}


# ops that only define a buffer (`effects` says they read and write none)
_DEFINES_ONLY = frozenset((rt.AllocOp, rt.StateOp, rt.ConstOp))


def effects(
    op: Operation, summaries: rt.FuncSummaries | None = None
) -> tuple[Sequence[SSAValue], Sequence[SSAValue]] | None:
    """(buffers read, buffers written) by `op` itself (not its regions); None if unknown.
    An `rt.call`'s come from `summaries` (the written arguments of the program's functions)
    when given, else are computed afresh."""
    fn = _EFFECTS.get(type(op))
    return None if fn is None else fn(op, summaries)


def kernel_name(op: Operation) -> str | None:
    return op.kernel.data if type(op) is rt.KernelOp else None


def is_view(op: Operation) -> TypeGuard[rt.KernelOp]:
    return type(op) is rt.KernelOp and VIEW_ATTR in op.attributes


def walk_ops(program: rt.ProgramOp) -> list[Operation]:
    """Every op nested in `program` (not the program itself), in the order of
    `program.walk()`, as a list (`rt.nested_ops`: several times faster than xDSL's `walk`)."""
    return rt.nested_ops(program.body.block)


def blocks(program: rt.ProgramOp, ops: Sequence[Operation] | None = None) -> list[Block]:
    """Every block of the program (the body first, then nested blocks in the order of
    their ops in `ops`, the program's `walk_ops` when not given)."""
    out = [program.body.block]
    for op in walk_ops(program) if ops is None else ops:
        if op.regions:
            for region in op.regions:
                out.extend(region.blocks)
    return out


def ancestor_in(op: Operation, block: Block) -> Operation | None:
    """`op` or the ancestor of `op` that is directly in `block` (None if outside it)."""
    cur: Operation | None = op
    while cur is not None:
        if cur.parent is block:
            return cur
        cur = cur.parent_op()
    return None


class Memory:
    """Writers and view structure of every buffer of a program (computed once).

    `ops` is the program's ops when it was computed (`walk_ops`; passes reuse it instead
    of walking again; it is not updated when they edit the program)."""

    def __init__(self, program: rt.ProgramOp, ops: list[Operation] | None = None):
        self.ops = walk_ops(program) if ops is None else ops
        self.writers: dict[SSAValue, list[Operation]] = {}
        self.unknown: set[SSAValue] = set()  # used by an op with unknown effects
        self.view_src: dict[SSAValue, SSAValue] = {}  # view output -> viewed buffer
        self.views: dict[SSAValue, list[SSAValue]] = {}  # buffer -> its direct views
        self.view_op: dict[SSAValue, rt.KernelOp] = {}  # view output -> its kernel
        # what each function writes, asked once per function for all its calls (a snapshot:
        # only used while the writers are collected, before any pass edits the program)
        summaries = rt.FuncSummaries(program)
        writers = self.writers
        for op in self.ops:
            t = type(op)
            if t in _DEFINES_ONLY:
                continue  # the most common ops: no effects on buffers
            if t is rt.KernelOp:
                written = cast(rt.KernelOp, op).io()[1]
                if VIEW_ATTR in op.attributes:
                    self.add_view(cast(rt.KernelOp, op))
            else:
                eff = effects(op, summaries)
                if eff is None:
                    for v in op.operands:
                        self.unknown.add(v)
                        writers.setdefault(v, []).append(op)
                    continue
                written = eff[1]
            for v in written:
                w = writers.get(v)
                if w is None:
                    writers[v] = [op]
                else:
                    w.append(op)

    def add_view(self, op: rt.KernelOp) -> None:
        ins, outs = kernel_io(op)
        src, dst = ins[0], outs[0]
        self.view_src[dst] = src
        self.view_op[dst] = op
        self.views.setdefault(src, []).append(dst)

    def remove_view(self, op: rt.KernelOp) -> None:
        """Undo `add_view(op)`."""
        ins, outs = kernel_io(op)
        src, dst = ins[0], outs[0]
        del self.view_src[dst]
        del self.view_op[dst]
        self.views[src].remove(dst)

    def layout(self, v: SSAValue) -> np.ndarray | None:
        """A stride-only stand-in of `v` as the runtime binds it: the root buffer is
        C-contiguous and every view kernel of the chain applies `view_array`. None if
        some link of the chain cannot be a view."""
        chain: list[SSAValue] = []
        while v in self.view_src:
            chain.append(v)
            v = self.view_src[v]
        if not is_buffer(v):
            return None
        arr: np.ndarray | None = standin(shape_of(v.type), dtype_of(v.type))
        for dst in reversed(chain):
            owner = self.view_op.get(dst)
            if owner is None or arr is None:
                return None
            arr = view_array(kernel_class_of(owner), arr, shape_of(dst.type), transpose_perm(owner))
        return arr

    def root(self, v: SSAValue) -> SSAValue:
        while v in self.view_src:
            v = self.view_src[v]
        return v

    def aliases(self, v: SSAValue) -> list[SSAValue]:
        """`v` and every view (transitively) of it."""
        out = [v]
        i = 0
        while i < len(out):
            out.extend(self.views.get(out[i], ()))
            i += 1
        return out


def positions(block: Block) -> dict[Operation, int]:
    return {op: i for i, op in enumerate(block.ops)}


def parent_positions(op: Operation, cache: dict[Block, dict[Operation, int]]) -> tuple[Block, dict[Operation, int]]:
    """The block of `op` and `positions` of that block, computed once per block into
    `cache` (a caller that rewrites the block keeps the cached map valid)."""
    block = op.parent
    assert block is not None
    pos = cache.get(block)
    if pos is None:
        pos = cache[block] = positions(block)
    return block, pos


def written_between(mem: Memory, v: SSAValue, block: Block, pos: dict[Operation, int], lo: int, hi: int) -> bool:
    """Whether some op of `block` at a position in [lo, hi] (or nested in one) writes `v`'s storage."""
    for a in mem.aliases(mem.root(v)):
        for w in mem.writers.get(a, ()):
            if a in mem.view_src and is_view(w):
                continue  # creating a view does not touch the storage
            anc = ancestor_in(w, block)
            if anc is not None and lo <= pos[anc] <= hi:
                return True
    return False


def is_function_arg(v: SSAValue) -> bool:
    """An argument of an `rt.func` (the buffer of the caller bound at each call)."""
    return isinstance(v, BlockArgument) and isinstance(v.block.parent_op(), rt.FuncOp)


def is_buffer(v: SSAValue) -> bool:
    return isinstance(v.type, MemRefType)
