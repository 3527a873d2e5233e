"""Which virtual IPU each buffer and each executed op of an `rt.program` lives on.

One rule for buffers, shared by the memory report (`xl.runtime.memory`) and the concurrent
plan (`xl.runtime.concurrent`), so that both see the same IPU for a buffer: a buffer (seen
through `rt.view` kernels, which alias their input) belongs to

1. its defining op's `ipu.id`, else
2. that of the first placed op (program order) writing it, else
3. that of the first placed op reading it, else
4. through `rt.copy` ops, that of the nearest buffer it is copied from or into, else
5. IPU 0 (popxl's default IPU).

The ops without an `ipu.id` run (`op_placement`, for the concurrent plan):

- a kernel on the IPU of its first output buffer;
- `rt.copy` (IPU copies, pipeline register moves) on the IPU of its destination;
- `rt.h2d` / `rt.d2h` on the IPU of their buffer.

```python
bp = BufferPlacement(ops)        # the program's ops in program order
bp.root(v)                       # the buffer with storage that v views
bp.ipu(v)                        # the IPU of that buffer
op_placement(program)            # {op: IPU} of the executed ops (None: run serially)
stream_of_ipus({0, 1, 2}, 2)     # {0: 0, 1: 1, 2: 0}: IPU -> worker stream
```
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import Operation, SSAValue

from xl.dialects import rt
from xl.dialects.ipu import placement
from xl.dialects.rt import VIEW_ATTR
from xl.dialects.rt_kernels import kernel_class
from xl.runtime.kernels.collectives import is_collective


def written_buffers(op: Operation) -> tuple[SSAValue, ...]:
    """The buffers `op` writes (all its operands when its effects are not known here)."""
    if isinstance(op, rt.KernelOp):
        return op.io()[1]
    if isinstance(op, rt.CopyOp):
        return (op.dest,)
    if isinstance(op, rt.H2DOp):
        return (op.buffer,)
    if isinstance(op, rt.D2HOp | rt.IfOp | rt.LoopOp):
        return ()
    return tuple(op.operands)


class BufferPlacement:
    """The IPU of every buffer touched by `ops` (an `rt.program`'s ops in program order,
    nested ones included), by the rule of the module docstring."""

    def __init__(self, ops: Sequence[Operation]) -> None:
        self.view_src: dict[SSAValue, SSAValue] = {}
        for op in ops:
            if isinstance(op, rt.KernelOp) and VIEW_ATTR in op.attributes:
                ins, outs = op.io()
                if ins and outs:
                    self.view_src[outs[0]] = ins[0]
        self._writer: dict[SSAValue, int] = {}
        self._reader: dict[SSAValue, int] = {}
        self._links: dict[SSAValue, list[SSAValue]] = {}
        for op in ops:
            if isinstance(op, rt.CopyOp):
                a, b = self.root(op.source), self.root(op.dest)
                self._links.setdefault(a, []).append(b)
                self._links.setdefault(b, []).append(a)
            p = placement(op)
            if p is None:
                continue
            written = {self.root(v) for v in written_buffers(op)}
            for v in op.operands:
                r = self.root(v)
                (self._writer if r in written else self._reader).setdefault(r, p)
        self._cache: dict[SSAValue, int] = {}

    def root(self, v: SSAValue) -> SSAValue:
        """The buffer with storage that `v` is (a view of)."""
        while v in self.view_src:
            v = self.view_src[v]
        return v

    def _placed(self, r: SSAValue) -> int | None:
        owner = r.owner
        p = placement(owner) if isinstance(owner, Operation) else None
        if p is None:
            p = self._writer.get(r)
        if p is None:
            p = self._reader.get(r)
        return p

    def ipu(self, v: SSAValue) -> int:
        """The virtual IPU of buffer `v` (of the buffer it views)."""
        r = self.root(v)
        cached = self._cache.get(r)
        if cached is not None:
            return cached
        p = self._placed(r)
        seen, frontier = {r}, [r]
        while p is None and frontier:  # through copies, nearest first
            nxt: list[SSAValue] = []
            for w in frontier:
                for u in self._links.get(w, ()):
                    if u not in seen:
                        seen.add(u)
                        nxt.append(u)
            for u in nxt:
                p = self._placed(u)
                if p is not None:
                    break
            frontier = nxt
        self._cache[r] = p if p is not None else 0
        return self._cache[r]


def op_placement(program: rt.ProgramOp) -> dict[Operation, int] | None:
    """The virtual IPU of every executed op (kernels, copies, host transfers) by the rule
    of the module docstring, or None when the program runs serially anyway: fewer than two
    IPUs, replica collectives, or `rt.func` / `rt.call`."""
    ops = [op for op in program.walk() if op is not program]
    for op in ops:
        if isinstance(op, rt.CallOp | rt.FuncOp):
            return None  # rt functions (single-IPU programs by lowering): serial plan
        if isinstance(op, rt.KernelOp):
            cls = kernel_class(op.kernel.data)
            if cls is not None and is_collective(cls):
                return None
    buffer_ipu = BufferPlacement(ops).ipu
    where: dict[Operation, int] = {}
    for op in ops:
        if isinstance(op, rt.KernelOp):
            p = placement(op)
            if p is None:
                outs = op.io()[1]
                p = buffer_ipu(outs[0]) if outs else 0
        elif isinstance(op, rt.CopyOp):
            p = buffer_ipu(op.dest)
        elif isinstance(op, rt.H2DOp | rt.D2HOp):
            p = buffer_ipu(op.buffer)
        else:
            continue
        where[op] = p
    if len(set(where.values())) < 2:
        return None
    return where


def stream_of_ipus(ipus: set[int], workers: int) -> dict[int, int]:
    """IPU -> stream (worker): the IPUs in increasing order, dealt round-robin."""
    return {ipu: i % workers for i, ipu in enumerate(sorted(ipus))}
