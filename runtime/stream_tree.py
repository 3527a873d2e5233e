"""The tree of executed ops of a concurrent step, each op with its stream and memory accesses.

`StreamBuilder` walks an `rt.program` once for one replica (the shared `ProgramWalk`, through
`PlanBuilder`, so buffers, kernels, templates and error names are exactly those of the serial
plan), but instead of one straight-line step it records the executed ops as a tree: an
`OpNode` per kernel, copy or host transfer (its code lines, its stream, the memory it reads
and writes), a `LoopNode` per `rt.loop` and an `IfNode` per `rt.if`. A stream is the code of
the virtual IPUs given to one worker thread (`xl.runtime.placement.stream_of_ipus`).

Memory accesses come from the arrays actually bound at compile time (`region`: base array
and byte range, so views and reused buffers that share memory are seen as such; constants,
never written, are left out); scratch buffers are per stream and never shared; the host
stream entries, whose `index` counts transfers, are one resource each; an `rt.if` condition
is read by each stream that has code in the branch, into a local, just before the `if`:

```python
b = StreamBuilder(placement, stream_of, StreamIn, StreamOut, replica, replicas, shared, profile)
for op in program.body.block.ops:
    b.visit(op, 0)
b.root  # [OpNode | LoopNode | IfNode, ...] in program order
```

The dependencies between streams are `xl.runtime.stream_deps`'s, the code of each stream
`xl.runtime.stream_emit`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from xdsl.ir import Operation, SSAValue

from xl.dialects import rt
from xl.dialects.rt_kernels import kernel_class
from xl.runtime.parallel_kernels import HALF_COST, kernel_cost, region  # a kernel's rough time, an array's memory
from xl.runtime.plan import PlanBuilder
from xl.runtime.profile import kernel_info

Region = tuple[Any, int, int]  # (base key, first byte, end byte): an array's `region`, or a host stream's


@dataclass(eq=False)
class OpNode:
    """An executed kernel, copy or host transfer (or the read of an `rt.if` condition) on
    `stream`; `signal`, `end` and `waits` are filled by `xl.runtime.stream_deps.analyse`."""

    k: int | None  # `infos` index (None: an `rt.if` condition read)
    stream: int
    lines: list[str]
    acc: list[tuple[Region, bool]]  # (region, writes)
    op: Operation | None = None  # the executed op (None: an `rt.if` condition read)
    cost: float = 0.0  # its rough time (`kernel_cost` units), for `xl.runtime.stream_balance`
    signal: bool = False
    end: list[int] = field(default_factory=list)
    waits: dict[int, set[tuple[int, Any, Any]]] = field(default_factory=dict)


@dataclass(eq=False)
class LoopNode:
    """An `rt.loop` of `count` iterations (loop variable `var` in the generated code)."""

    count: int
    body: list[Any]
    var: str
    streams: set[int] = field(default_factory=set)
    per_iter: list[int] = field(default_factory=list)  # bumps per iteration, per stream
    end: list[int] = field(default_factory=list)
    waits: dict[int, set[tuple[int, Any, Any]]] = field(default_factory=dict)


@dataclass(eq=False)
class IfNode:
    """An `rt.if`; `pad_then` / `pad_other` even out the counter bumps of its branches."""

    cond: str  # the local holding the condition read
    then: list[Any]
    other: list[Any]
    streams: set[int] = field(default_factory=set)
    pad_then: list[int] = field(default_factory=list)
    pad_other: list[int] = field(default_factory=list)
    end: list[int] = field(default_factory=list)
    waits: dict[int, set[tuple[int, Any, Any]]] = field(default_factory=dict)


Node = OpNode | LoopNode | IfNode


def streams_in(nodes: list[Any]) -> set[int]:
    out: set[int] = set()
    for n in nodes:
        if isinstance(n, OpNode):
            out.add(n.stream)
        else:
            out |= n.streams
    return out


class StreamBuilder(PlanBuilder):
    """`PlanBuilder` recording a tree of executed ops with their streams and accesses."""

    def __init__(
        self,
        placement: dict[Operation, int],
        stream_of: dict[int, int],
        *args: Any,
        moved: dict[Operation, int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.placement = placement
        self.stream_of = stream_of
        self.moved = moved or {}  # ops run by another stream than their IPU's (`stream_balance`)
        self.root: list[Any] = []
        self._cur = self.root
        self._ids = 0

    def _fresh(self, hint: str) -> str:
        self._ids += 1
        return f"_{hint}{self._ids}"

    def stream(self, op: Operation) -> int:
        """The stream running `op`: its IPU's, unless `moved` says another."""
        moved = self.moved.get(op)
        return moved if moved is not None else self.stream_of[self.placement[op]]

    def visit(self, op: Operation, at: int) -> None:
        if op in self.placement:
            self.g.stream = self.stream(op)  # scratch buffers are per stream
        super().visit(op, at)

    def emit(self, line: str, depth: int) -> None:  # pragma: no cover - never reached
        raise AssertionError("the concurrent plan emits per stream")

    def emit_kernel(self, op: Any, lines: list[str], depth: int, name: str) -> None:
        k = len(self.infos)
        info = kernel_info(op)
        if info.ipu is None:  # the op runs on its stream's IPU (placement rule)
            info = replace(info, ipu=self.placement[op])
        if op in self.moved:  # another IPU's worker runs it: a row of its own
            info = replace(info, worker=self.moved[op])
        self.infos.append(info)
        if self.profile is not None:
            lines = [f"_t = _pc()  # {name}", *lines, f"_ev(({k}, _t, _pc()))  # {name}"]
        self._cur.append(OpNode(k, self.stream(op), list(lines), self._accesses(op), op, self._cost(op)))

    def _cost(self, op: Operation) -> float:
        """The op's rough time in `kernel_cost` units: products by their FLOPs, other
        kernels the elements they read and write, a float16 element `HALF_COST` times a
        float32 one."""
        if isinstance(op, rt.KernelOp):
            ins, outs = op.io()
            arrays = [self.array(v) for v in ins], [self.array(v) for v in outs]
            return kernel_cost(kernel_class(op.kernel.data), op.params, *arrays, half_cost=HALF_COST)
        if isinstance(op, rt.CopyOp):
            return 2.0 * self.array(op.source).size
        if isinstance(op, rt.H2DOp | rt.D2HOp):
            return 2.0 * self.array(op.buffer).size
        return 0.0

    def _accesses(self, op: Operation) -> list[tuple[Region, bool]]:
        reads: tuple[SSAValue, ...] = ()
        writes: tuple[SSAValue, ...] = ()
        acc: list[tuple[Region, bool]] = []
        if isinstance(op, rt.KernelOp):
            reads, writes = op.io()
        elif isinstance(op, rt.CopyOp):
            reads, writes = (op.source,), (op.dest,)
        elif isinstance(op, rt.H2DOp):
            writes = (op.buffer,)
            acc.append(((("h2d", op.stream.data), 0, 1), True))
        elif isinstance(op, rt.D2HOp):
            reads = (op.buffer,)
            acc.append(((("d2h", op.stream.data), 0, 1), True))
        for vals, w in ((reads, False), (writes, True)):
            for v in vals:
                a = self.array(v)
                if not w and not a.flags.writeable:
                    continue  # constants: nobody writes them
                r = region(a)
                if r is not None:
                    acc.append((r, w))
        return acc

    def loop(self, op: rt.LoopOp, depth: int) -> None:
        node = LoopNode(op.count.value.data, [], self._fresh("l"))
        saved, self._cur = self._cur, node.body
        self.walk(op.body.block, depth + 1)
        self._cur = saved
        node.streams = streams_in(node.body)
        if node.streams:
            self._cur.append(node)

    def branch(self, op: rt.IfOp, depth: int) -> None:
        node = IfNode(self._fresh("cv"), [], [])
        saved, self._cur = self._cur, node.then
        self.walk(op.then_region.block, depth + 1)
        self._cur = node.other
        self.walk(op.else_region.block, depth + 1)
        self._cur = saved
        node.streams = streams_in(node.then) | streams_in(node.other)
        if not node.streams:
            return
        cond = self.array(op.condition)
        r = region(cond)
        name = self.g.buf(op.condition)
        for s in sorted(node.streams):  # each stream reads the condition into a local first
            acc = [(r, False)] if r is not None else []
            self._cur.append(OpNode(None, s, [f"{node.cond} = {self.g.fn(bool)}({name})"], acc))
        self._cur.append(node)

    def collective(self, op: rt.KernelOp, site: int, depth: int) -> None:
        raise AssertionError("programs with collectives run serially")  # op_placement said so
