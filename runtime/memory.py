"""Memory per virtual IPU, read from a compiled (lowered, `rt-optimize`d) `rt.program`.

No run is needed: every buffer of an `rt` program is explicit. For each virtual IPU the
report gives, in bytes per replica:

- `variables`: the `rt.state` slots (weights, optimiser state, accumulators, counters);
- `stashes`: the pipeline stash ring buffers and their counters (the `rt.state` slots the
  `pipeline` pass names `pipeline.stash<k>.*`);
- `remote_staging`: the remote buffers (`rt.state` marked `rt.remote`, `[entries, *shape]`
  per replica): memory off the IPU, so not part of `total` (the resident bytes);
- `constants`: the `rt.const` buffers;
- `activations_peak`: the largest total size of the temporaries (`rt.alloc` buffers that
  own storage: not views) live at the same time, after buffer reuse. A temporary lives from
  its first use to its last use in program order; a use inside an `rt.loop` / `rt.if`
  counts over the whole loop / branch of the block the buffer is allocated in, so a buffer
  used across iterations is live over the whole loop; a use of a view is a use of the
  viewed buffer. A function's own temporaries (`rt.alloc` in an `rt.func` body, allocated
  once and shared by its calls) live from its first call to its last (a call inside
  another function counts over that function's calls); the buffers a call passes live
  as any buffer does at that call;
- `activations_allocated`: the total size of those temporaries (the NumPy runtime
  preallocates all of them once, so this is what it holds).

The IPU of a buffer is its defining op's `ipu.id` when it has one, else that of the first op
(program order) with an `ipu.id` that writes it, else of the first such op that reads it;
a buffer no placed op touches takes the IPU of a buffer it is copied from or into
(`rt.copy`), and otherwise IPU 0 (where unplaced ops run): `xl.runtime.placement`, the rule
the concurrent plan places unplaced ops by.

```python
from xl.runtime.memory import memory_report
report = memory_report(program)     # program: an rt.ProgramOp
report.ipu(1).activations_peak      # bytes
print(report.table())
```
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Block, Operation, SSAValue

from xl.dialects import rt
from xl.dialects.ipu import placement
from xl.dialects.utils import dtype_of, shape_of
from xl.runtime.placement import BufferPlacement

__all__ = ["BufferInfo", "IpuMemory", "MemoryReport", "memory_report"]

# `rt.kernel` with this unit attribute writes its output as a view of its input (no storage).
# The slots the `pipeline` pass creates for a stash (ring buffer, stash and restore counters).
_STASH_SLOT = re.compile(r"^pipeline\.stash\d+\.")

VARIABLE, STASH, CONSTANT, ACTIVATION = "variable", "stash", "constant", "activation"
REMOTE = "remote"  # a remote buffer (`rt.state` marked `rt.remote`, xl.passes.lower_remote)
_REMOTE_ATTR = "rt.remote"


@dataclass(frozen=True)
class BufferInfo:
    """One buffer with storage: its kind, IPU, size and (for activations) live range."""

    name: str
    kind: str  # "variable", "stash", "remote", "constant" or "activation"
    ipu: int
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    live: tuple[int, int] | None = None  # first and last op position (activations)


@dataclass(frozen=True)
class IpuMemory:
    """Bytes per replica on one virtual IPU."""

    ipu: int
    variables: int
    stashes: int
    remote_staging: int
    constants: int
    activations_peak: int
    activations_allocated: int
    peak_at: str  # the op at which the activation peak is reached ("" when none)

    @property
    def total(self) -> int:
        """The resident bytes: variables, stashes, constants and the activation peak (remote
        buffers live off the IPU: `remote_staging`)."""
        return self.variables + self.stashes + self.constants + self.activations_peak


@dataclass(frozen=True)
class MemoryReport:
    """Memory per virtual IPU of a compiled program (see the module docstring)."""

    ipus: tuple[IpuMemory, ...]
    buffers: tuple[BufferInfo, ...]
    replication_factor: int

    def ipu(self, ipu: int) -> IpuMemory:
        for m in self.ipus:
            if m.ipu == ipu:
                return m
        raise KeyError(f"memory report: no virtual IPU {ipu} (IPUs: {', '.join(str(m.ipu) for m in self.ipus)})")

    @property
    def total(self) -> int:
        """The sum of every IPU's total, per replica."""
        return sum(m.total for m in self.ipus)

    def table(self) -> str:
        """The report as a text table (one row per virtual IPU, then the totals)."""
        cols = (
            "variables",
            "stashes",
            "remote_staging",
            "constants",
            "activations_peak",
            "activations_allocated",
            "total",
        )
        heads = (
            "IPU",
            "variables",
            "stashes",
            "remote (off-chip)",
            "constants",
            "activations (peak)",
            "(allocated)",
            "total (resident)",
        )
        rows = [[str(m.ipu), *(format_bytes(getattr(m, c)) for c in cols)] for m in self.ipus]
        if len(self.ipus) > 1:
            rows.append(["all", *(format_bytes(sum(getattr(m, c) for m in self.ipus)) for c in cols)])
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
        line = "  ".join(h.rjust(w) for h, w in zip(heads, widths))
        out = [
            f"memory per virtual IPU (bytes per replica; {self.replication_factor} replica"
            f"{'s' if self.replication_factor != 1 else ''}), from the compiled program",
            line,
            "-" * len(line),
        ]
        out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
        for m in self.ipus:
            if m.peak_at:
                out.append(f"IPU {m.ipu}: activation peak at {m.peak_at}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def format_bytes(n: int) -> str:
    """`512 B`, `3 KiB`, `1.53 MiB` (1024-based, 3 significant digits)."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{value / 1024:.0f} TiB"


def nbytes(t: MemRefType) -> int:
    """Bytes of a buffer of memref type `t`."""
    return int(np.prod(shape_of(t), dtype=np.int64)) * np.dtype(dtype_of(t)).itemsize


def _describe(op: Operation, names: dict[SSAValue, str]) -> str:
    if isinstance(op, rt.KernelOp):
        ins, outs = op.io()
        return f'rt.kernel "{op.kernel.data}" -> ({", ".join(names.get(v, "?") for v in outs)})'
    if isinstance(op, rt.CopyOp):
        return f"rt.copy {names.get(op.source, '?')} -> {names.get(op.dest, '?')}"
    if isinstance(op, rt.H2DOp | rt.D2HOp):
        return f'{op.name} "{op.stream.data}"'
    return op.name


class _Layout:
    """Positions of the ops in program order, and the extent of each op's regions."""

    def __init__(self, program: rt.ProgramOp):
        self._calls_span: dict[str, tuple[int, int] | None] = {}  # by function name
        self.pos: dict[Operation, int] = {}
        self.end: dict[Operation, int] = {}
        self.ops: list[Operation] = []
        self._number(program.body.block)

    def _number(self, block: Block) -> None:
        for op in block.ops:
            self.pos[op] = len(self.ops)
            self.ops.append(op)
            for region in op.regions:
                for b in region.blocks:
                    self._number(b)
            self.end[op] = len(self.ops) - 1

    def span_in(self, op: Operation, block: Block) -> tuple[int, int] | None:
        """The positions covered by the ancestor of `op` that is directly in `block`."""
        cur: Operation | None = op
        while cur is not None and cur.parent is not block:
            cur = cur.parent_op()
        if cur is None:
            return None
        return self.pos[cur], self.end[cur]

    def calls_span(self, func: rt.FuncOp, calls: dict[str, list[rt.CallOp]]) -> tuple[int, int] | None:
        """The positions of the program body from the first call of `func` to the last one
        (a call made inside another function counts with that function's calls); None when
        it is never called."""
        memo = self._calls_span
        name = func.func_name
        if name in memo:
            return memo[name]
        memo[name] = None  # a call cycle (rejected by the verifier) adds nothing
        spans: list[tuple[int, int]] = []
        for call in calls.get(name, ()):
            outer = call.parent_op()
            while outer is not None and not isinstance(outer, rt.FuncOp | rt.ProgramOp):
                outer = outer.parent_op()
            if isinstance(outer, rt.FuncOp):
                span = self.calls_span(outer, calls)
            else:
                block = outer.body.block if isinstance(outer, rt.ProgramOp) else None
                span = self.span_in(call, block) if block is not None else None
            if span is not None:
                spans.append(span)
        result = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None
        memo[name] = result
        return result


def memory_report(program: rt.ProgramOp) -> MemoryReport:
    """Memory per virtual IPU of `program` (see the module docstring)."""
    layout = _Layout(program)
    buffers_at = BufferPlacement(layout.ops)
    view_src, root = buffers_at.view_src, buffers_at.root

    # the buffers with storage, with their uses (of any alias) in program order
    storage: list[SSAValue] = []
    for op in layout.ops:
        if isinstance(op, rt.StateOp | rt.ConstOp) or (isinstance(op, rt.AllocOp) and op.result not in view_src):
            storage.append(op.results[0])
    uses: dict[SSAValue, list[Operation]] = {v: [] for v in storage}
    calls: dict[str, list[rt.CallOp]] = {}
    for op in layout.ops:
        if isinstance(op, rt.CallOp):
            calls.setdefault(op.callee_name, []).append(op)
    for op in layout.ops:
        for v in dict.fromkeys(root(x) for x in op.operands):
            if v in uses:
                uses[v].append(op)

    names: dict[SSAValue, str] = {}
    for k, v in enumerate(storage):
        owner = v.owner
        if isinstance(owner, rt.StateOp):
            names[v] = owner.slot.data
        else:
            names[v] = f"%{v.name_hint}" if v.name_hint else f"%buffer{k}"

    buffers: list[BufferInfo] = []
    for v in storage:
        owner = v.owner
        t = v.type
        assert isinstance(t, MemRefType)
        if isinstance(owner, rt.StateOp) and _REMOTE_ATTR in owner.attributes:
            kind = REMOTE
        elif isinstance(owner, rt.StateOp):
            kind = STASH if _STASH_SLOT.match(owner.slot.data) else VARIABLE
        elif isinstance(owner, rt.ConstOp):
            kind = CONSTANT
        else:
            kind = ACTIVATION
        live: tuple[int, int] | None = None
        if kind == ACTIVATION and uses[v]:
            assert isinstance(owner, Operation)
            block = owner.parent
            assert block is not None, "a buffer is allocated inside the program"
            func = block.parent_op()
            if isinstance(func, rt.FuncOp):  # a function's own buffer: live over its calls
                live = layout.calls_span(func, calls)
            else:
                spans = [s for op in uses[v] if (s := layout.span_in(op, block)) is not None]
                if spans:
                    live = (min(s[0] for s in spans), max(s[1] for s in spans))
        buffers.append(BufferInfo(names[v], kind, buffers_at.ipu(v), shape_of(t), dtype_of(t), nbytes(t), live))

    ids = sorted({b.ipu for b in buffers} | {p for op in layout.ops if (p := placement(op)) is not None} or {0})
    per_ipu: list[IpuMemory] = []
    for i in ids:
        mine = [b for b in buffers if b.ipu == i]
        peak, at = _peak(b for b in mine if b.kind == ACTIVATION and b.live is not None)
        per_ipu.append(
            IpuMemory(
                ipu=i,
                variables=sum(b.nbytes for b in mine if b.kind == VARIABLE),
                stashes=sum(b.nbytes for b in mine if b.kind == STASH),
                remote_staging=sum(b.nbytes for b in mine if b.kind == REMOTE),
                constants=sum(b.nbytes for b in mine if b.kind == CONSTANT),
                activations_peak=peak,
                activations_allocated=sum(b.nbytes for b in mine if b.kind == ACTIVATION),
                peak_at=_describe(layout.ops[at], names) + f" (op {at})" if at is not None else "",
            )
        )
    return MemoryReport(tuple(per_ipu), tuple(buffers), program.replication_factor)


def _peak(activations: Iterable[BufferInfo]) -> tuple[int, int | None]:
    """The largest total size of buffers live at one position, and the first such position."""
    delta: dict[int, int] = {}
    for b in activations:
        assert b.live is not None
        first, last = b.live
        delta[first] = delta.get(first, 0) + b.nbytes
        delta[last + 1] = delta.get(last + 1, 0) - b.nbytes
    live = peak = 0
    at: int | None = None
    for p in sorted(delta):
        live += delta[p]
        if live > peak:
            peak, at = live, p
    return peak, at
