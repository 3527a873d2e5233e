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

In the program's terms: each buffer lists the tensors written into it over the schedule
(`BufferInfo.writes`: the writing op's position, the tensor, the op), named by the caller's
`tensor_names` (`popxl.Session` passes the names `print_schedule` shows, `%3 @ main_graph`,
by the op that makes them, `MatMul.102`), else by the buffer. The report then gives the
tensors live at each IPU's activation peak (`peak_tensors`), the largest buffers
(`largest`), the variables by module (`modules`: sums over the dotted / slashed prefixes of
their names, `fc1` for `fc1.weight` and `fc1.bias`), the live bytes of each IPU over the
schedule (`liveness`, the curve of PopVision's liveness view; `write_liveness("live.svg")`
draws it, `xl.runtime.memory_plot`), all of it as text (`text()`) and as data (`as_dict()`,
`to_json()`).

```python
from xl.runtime.memory import memory_report
report = memory_report(program)     # program: an rt.ProgramOp
report.ipu(1).activations_peak      # bytes
print(report.table())               # one row per virtual IPU
print(report.text())                # the table, then the peak's tensors, the largest, the modules
report.write_liveness("live.svg")   # bytes live per IPU over the schedule (.png with matplotlib)
```
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import MemRefType, StringAttr
from xdsl.ir import Block, Operation, SSAValue

from xl.dialects import rt
from xl.dialects.ipu import placement
from xl.dialects.rt import GRAPH_ATTR, REMOTE_ATTR, SOURCE_ATTR, VIEW_ATTR
from xl.dialects.utils import dtype_of, shape_of
from xl.runtime.placement import BufferPlacement

__all__ = ["BufferInfo", "IpuMemory", "MemoryReport", "ModuleMemory", "TensorWrite", "memory_report"]

# The slots the `pipeline` pass creates for a stash (ring buffer, stash and restore counters).
_STASH_SLOT = re.compile(r"^pipeline\.stash\d+\.")

VARIABLE, STASH, CONSTANT, ACTIVATION = "variable", "stash", "constant", "activation"
REMOTE = "remote"  # a remote buffer (`rt.state` marked `rt.remote`, xl.passes.lower_remote)


@dataclass(frozen=True)
class TensorWrite:
    """A tensor written into a buffer: where (the op's position in program order), which
    tensor (`%3 @ main_graph` as `print_schedule` names it, else the buffer's name) and the
    op writing it (`MatMul.102`, `HostLoad x`, `Copy`)."""

    position: int
    tensor: str
    op: str


@dataclass(frozen=True)
class BufferInfo:
    """One buffer with storage: its kind, IPU, size, (for activations) live range, and the
    tensors written into it in program order."""

    name: str
    kind: str  # "variable", "stash", "remote", "constant" or "activation"
    ipu: int
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    live: tuple[int, int] | None = None  # first and last op position (activations)
    writes: tuple[TensorWrite, ...] = field(default=(), compare=False)

    def tensor_at(self, position: int) -> TensorWrite | None:
        """The tensor the buffer holds at `position`: the last one written there or before,
        else the first one written (None when nothing writes it)."""
        held = None
        for w in self.writes:
            if w.position > position:
                break
            held = w
        return held if held is not None else (self.writes[0] if self.writes else None)

    @property
    def tensor(self) -> str:
        """The buffer in the program's terms: its first tensor (activations) or its name."""
        if self.kind == ACTIVATION and self.writes:
            return self.writes[0].tensor
        return self.name


@dataclass(frozen=True)
class ModuleMemory:
    """The variables under one name prefix (`fc1` holds `fc1.weight` and `fc1.bias`)."""

    module: str
    depth: int  # 1 for `fc1`, 2 for `fc1.weight` (of `fc1.weight.accum`), ...
    nbytes: int
    variables: int
    ipus: tuple[int, ...]


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
    peak_position: int | None = None  # its position in program order

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
    num_ops: int = 0  # the positions of the schedule (ops of the program, nested ones included)

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

    # -- in the program's terms -------------------------------------------------------------
    def resident(self, ipu: int) -> int:
        """The bytes of IPU `ipu` live over the whole step: variables, stashes, constants."""
        m = self.ipu(ipu)
        return m.variables + m.stashes + m.constants

    def live_at(self, ipu: int, position: int) -> list[BufferInfo]:
        """The activation buffers of IPU `ipu` live at op `position`, largest first."""
        out = [
            b
            for b in self.buffers
            if b.kind == ACTIVATION and b.ipu == ipu and b.live is not None and b.live[0] <= position <= b.live[1]
        ]
        out.sort(key=lambda b: (-b.nbytes, b.name))
        return out

    def peak_tensors(self, ipu: int) -> list[tuple[BufferInfo, TensorWrite | None]]:
        """The activations live at the activation peak of IPU `ipu`, largest first, each with
        the tensor it holds there (their bytes add up to `activations_peak`)."""
        at = self.ipu(ipu).peak_position
        if at is None:
            return []
        return [(b, b.tensor_at(at)) for b in self.live_at(ipu, at)]

    def largest(self, n: int = 10, kinds: Iterable[str] | None = None) -> list[BufferInfo]:
        """The `n` largest buffers (of `kinds`, default every kind but remote), largest first."""
        wanted = set(kinds) if kinds is not None else {VARIABLE, STASH, CONSTANT, ACTIVATION}
        out = [b for b in self.buffers if b.kind in wanted]
        out.sort(key=lambda b: (-b.nbytes, b.ipu, b.name))
        return out[:n]

    def modules(self, max_depth: int | None = None) -> list[ModuleMemory]:
        """The variables (and stashes, remote buffers) by module: every proper prefix of their
        names split at `.` and `/` (`fc1`, `fc1.weight` of `fc1.weight.accum`), with the bytes
        and number of the variables under it, largest first within each parent; a name with
        no prefix counts under `(top level)`. `max_depth` limits the prefixes' depth."""
        sums: dict[str, list[Any]] = {}
        for b in self.buffers:
            if b.kind not in (VARIABLE, STASH, REMOTE):
                continue
            prefixes = [b.name[: _prefix_end(b.name, k)] for k in range(1, _depth(b.name))] or [TOP_LEVEL]
            for pre in prefixes:
                entry = sums.setdefault(pre, [0, 0, set()])
                entry[0] += b.nbytes
                entry[1] += 1
                entry[2].add(b.ipu)
        rows = [ModuleMemory(m, _depth(m), n, c, tuple(sorted(i))) for m, (n, c, i) in sums.items()]
        if max_depth is not None:
            rows = [r for r in rows if r.depth <= max_depth]
        # a tree: each module after its parent, siblings by size
        by_parent: dict[str, list[ModuleMemory]] = {}
        for r in rows:
            by_parent.setdefault(_parent(r.module), []).append(r)
        out: list[ModuleMemory] = []

        def visit(parent: str) -> None:
            for r in sorted(by_parent.get(parent, []), key=lambda r: (-r.nbytes, r.module)):
                out.append(r)
                visit(r.module)

        visit("")
        return out

    def liveness(self, ipu: int) -> list[tuple[int, int]]:
        """The bytes of activations live on IPU `ipu` over the schedule, as steps: `(position,
        bytes)` at 0 and wherever the live total changes (it holds until the next step; the
        resident bytes, `resident(ipu)`, come on top)."""
        delta: dict[int, int] = {}
        for b in self.buffers:
            if b.kind == ACTIVATION and b.ipu == ipu and b.live is not None:
                delta[b.live[0]] = delta.get(b.live[0], 0) + b.nbytes
                delta[b.live[1] + 1] = delta.get(b.live[1] + 1, 0) - b.nbytes
        steps = [(0, 0)]
        live = 0
        for p in sorted(delta):
            live += delta[p]
            if steps[-1][0] == p:
                steps[-1] = (p, live)
            elif steps[-1][1] != live:
                steps.append((p, live))
        return steps

    def details(self, top: int = 10) -> str:
        """The report in the program's terms: per IPU the tensors live at its activation
        peak, then the `top` largest buffers, then the variables by module (two levels; when
        some variable names have a prefix)."""
        out: list[str] = []
        for m in self.ipus:
            live = self.peak_tensors(m.ipu)
            if not live:
                continue
            peak = format_bytes(m.activations_peak)
            out.append(
                f"IPU {m.ipu}: the {len(live)} tensors live at the activation peak ({peak}, op {m.peak_position}):"
            )
            for b, w in live[:top]:
                out.append(f"  {format_bytes(b.nbytes):>10}  {_tensor_str(b, w)}")
            if len(live) > top:
                rest = sum(b.nbytes for b, _ in live[top:])
                out.append(f"  {format_bytes(rest):>10}  ... {len(live) - top} more")
        big = self.largest(top)
        if big:
            out.append(f"largest buffers (of {len(self.buffers)}):")
            for b in big:
                out.append(f"  {format_bytes(b.nbytes):>10}  IPU {b.ipu}  {b.kind:<10}  {_tensor_str(b, None)}")
        mods = self.modules(max_depth=2)
        if any(r.module != TOP_LEVEL for r in mods):
            out.append("variables by module:")
            for r in mods:
                ipus = ", ".join(str(i) for i in r.ipus)
                label = ("  " * (r.depth - 1)) + r.module
                out.append(f"  {format_bytes(r.nbytes):>10}  {label}  ({r.variables} buffers, IPU {ipus})")
        return "\n".join(out)

    def text(self, top: int = 10) -> str:
        """`table()`, then `details(top)`."""
        more = self.details(top)
        return self.table() + ("\n" + more if more else "")

    def as_dict(self, top: int = 10) -> dict[str, Any]:
        """The report as data (`--json`): per IPU its figures, the tensors live at its peak and
        its liveness steps; the `top` largest buffers; the variables by module; every buffer."""

        def buffer(b: BufferInfo, held: TensorWrite | None = None) -> dict[str, Any]:
            d: dict[str, Any] = {
                "name": b.name,
                "kind": b.kind,
                "ipu": b.ipu,
                "shape": list(b.shape),
                "dtype": np.dtype(b.dtype).name,
                "bytes": b.nbytes,
            }
            if b.live is not None:
                d["live"] = list(b.live)
            if held is not None:
                d["tensor"], d["op"] = held.tensor, held.op
            elif b.writes:
                d["tensors"] = sorted({w.tensor for w in b.writes})
            return d

        ipus = []
        for m in self.ipus:
            ipus.append(
                {
                    "ipu": m.ipu,
                    "variables": m.variables,
                    "stashes": m.stashes,
                    "remote": m.remote_staging,
                    "constants": m.constants,
                    "activations_peak": m.activations_peak,
                    "activations_allocated": m.activations_allocated,
                    "total": m.total,
                    "peak_at": m.peak_at,
                    "peak_position": m.peak_position,
                    "peak_tensors": [buffer(b, w) for b, w in self.peak_tensors(m.ipu)],
                    "liveness": [list(s) for s in self.liveness(m.ipu)],
                }
            )
        return {
            "replication_factor": self.replication_factor,
            "bytes_per": "replica",
            "num_ops": self.num_ops,
            "total": self.total,
            "ipus": ipus,
            "largest": [buffer(b) for b in self.largest(top)],
            "modules": [
                {"module": r.module, "depth": r.depth, "bytes": r.nbytes, "buffers": r.variables, "ipus": list(r.ipus)}
                for r in self.modules()
            ],
            "buffers": [buffer(b) for b in self.buffers],
        }

    def to_json(self, top: int = 10) -> str:
        return json.dumps(self.as_dict(top), indent=1)

    def write_liveness(self, path: str | Path) -> Path:
        """Draw the bytes live on each virtual IPU over the schedule into `path`: `.svg`
        (written directly) or `.png` (needs matplotlib: the `[plot]` extra). See
        `xl.runtime.memory_plot`."""
        from xl.runtime.memory_plot import write_liveness

        return write_liveness(self, path)  # pyright: ignore[reportArgumentType]  (checked as runtime.*, imported as xl.runtime.*: two names of one class)

    def __str__(self) -> str:
        return self.text()


TOP_LEVEL = "(top level)"  # the module of a name without a prefix


def _depth(name: str) -> int:
    """The parts of a name split at `.` and `/` (`fc1.weight`: 2); 1 for `TOP_LEVEL`."""
    return max(1, len([p for p in re.split(r"[./]", name) if p]))


def _prefix_end(name: str, k: int) -> int:
    """The end of the first `k` parts of `name` (split at `.` and `/`)."""
    seen = 0
    for i, ch in enumerate(name):
        if ch in "./" and i > 0 and name[i - 1] not in "./":
            seen += 1
            if seen == k:
                return i
    return len(name)


def _parent(module: str) -> str:
    if module == TOP_LEVEL:
        return ""
    cut = max(module.rfind("."), module.rfind("/"))
    return module[:cut] if cut > 0 else ""


def _tensor_str(b: BufferInfo, held: TensorWrite | None) -> str:
    """`%3 @ main_graph (MatMul.102) [(2, 4) float32]`, or the buffer's name and kind."""
    shape = f"[{b.shape} {np.dtype(b.dtype).name}]"
    if b.kind != ACTIVATION:
        return f"{b.name} {shape}"
    w = held if held is not None else (b.writes[0] if b.writes else None)
    if w is None:
        return f"{b.name} {shape}"
    others = len({x.tensor for x in b.writes}) - 1
    more = f", buffer shared with {others} other tensor{'s' if others != 1 else ''}" if others > 0 else ""
    return f"{w.tensor} ({w.op}) {shape}{more}"


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


def memory_report(
    program: rt.ProgramOp, tensor_names: Mapping[tuple[str | None, str], Sequence[str]] | None = None
) -> MemoryReport:
    """Memory per virtual IPU of `program` (see the module docstring). `tensor_names`: the
    names of the results of each source op, by `(graph, op)` as the `rt.graph` and
    `rt.source` attributes say (`("main_graph", "MatMul.102") -> ["%3 @ main_graph"]`;
    `(None, "HostLoad x")` for a stream's loads), used for the tensors written into buffers."""
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

    writes = _tensor_writes(layout, root, names, uses, tensor_names or {})
    buffers: list[BufferInfo] = []
    for v in storage:
        owner = v.owner
        t = v.type
        assert isinstance(t, MemRefType)
        if isinstance(owner, rt.StateOp) and REMOTE_ATTR in owner.attributes:
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
        buffers.append(
            BufferInfo(
                names[v], kind, buffers_at.ipu(v), shape_of(t), dtype_of(t), nbytes(t), live, tuple(writes.get(v, ()))
            )
        )

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
                peak_at=_peak_str(layout.ops[at], names, at) if at is not None else "",
                peak_position=at,
            )
        )
    return MemoryReport(tuple(per_ipu), tuple(buffers), program.replication_factor, len(layout.ops))


def _str_attr(op: Operation, key: str) -> str | None:
    a = op.attributes.get(key)
    return a.data if isinstance(a, StringAttr) else None


def _writer_label(op: Operation) -> str:
    """The op that writes a tensor, as profiles name it: `MatMul.102`, `HostLoad x`, `Copy`,
    else the kernel's name."""
    source = _str_attr(op, SOURCE_ATTR)
    if source:
        return source
    if isinstance(op, rt.H2DOp):
        return f"HostLoad {op.stream.data}"
    if isinstance(op, rt.CopyOp):
        return "Copy"
    if isinstance(op, rt.KernelOp):
        return op.kernel.data
    return op.name


def _peak_str(op: Operation, names: dict[SSAValue, str], at: int) -> str:
    source = _str_attr(op, SOURCE_ATTR)
    return f"{source + ': ' if source else ''}{_describe(op, names)} (op {at})"


def _tensor_writes(
    layout: _Layout,
    root: Any,
    names: dict[SSAValue, str],
    uses: dict[SSAValue, list[Operation]],
    tensor_names: Mapping[tuple[str | None, str], Sequence[str]],
) -> dict[SSAValue, list[TensorWrite]]:
    """Per buffer with storage, the tensors written into it in program order. A kernel's
    last outs are the results of its source op (the last op of a fused kernel's sources),
    named by `tensor_names`, and the outs before them operands it updates in place; a copy
    writes the tensor its source holds; otherwise the tensor is named after the buffer."""
    out: dict[SSAValue, list[TensorWrite]] = {}
    held: dict[SSAValue, str] = {}
    for pos, op in enumerate(layout.ops):
        label = _writer_label(op)
        written: list[tuple[SSAValue, str | None]] = []
        if isinstance(op, rt.KernelOp):
            if VIEW_ATTR in op.attributes:
                continue  # a view: no data written
            _, outs = op.io()
            graph = _str_attr(op, GRAPH_ATTR)
            last = label.split("+")[-1]
            found = tensor_names.get((graph, last)) or tensor_names.get((None, last))
            if found is None:
                written += [(v, None) for v in outs]
            else:
                # the results are the last outs; the ones before are operands updated in
                # place (the tensor they hold keeps its name)
                skip = len(outs) - len(found)
                written += [(v, found[i - skip]) for i, v in enumerate(outs) if i >= skip]
        elif isinstance(op, rt.CopyOp):
            written.append((op.dest, held.get(root(op.source))))
        elif isinstance(op, rt.H2DOp):
            found = tensor_names.get((None, label))
            written.append((op.buffer, found[0] if found else None))
        for v, tensor in written:
            r = root(v)
            if r not in uses:  # not a buffer with storage (a function's argument)
                continue
            name = tensor if tensor is not None else names[r]
            held[r] = name
            out.setdefault(r, []).append(TensorWrite(pos, name, label))
    return out


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
