"""Seeing a run: what each planned kernel is, its times, the trace and the per-op table.

Every kernel of a plan has a `KernelInfo` (built at compile time, profiling or not): the
popxl op it comes from (`MatMul.101`: the PopART type name and the frontend's op id, from
the `rt.source` attribute `popxl.Session` puts on the program's ops before lowering), the graph
the op was written in (`rt.graph`; calls are inlined, so this is the slice's category),
its virtual IPU (`ipu.id`) and its row in the timeline. Run-time errors name the failing
kernel with it (`KernelInfo.describe`).

With profiling on (`compile_program(..., profile=True)`), the plan records each kernel
execution as `(kernel index, start ns, end ns)` (`time.perf_counter_ns`) in one list per
replica; the executable adds one span per `run` (the step) and the collective sites. A
`Profile` reads them:

```python
exe = compile_program(program, optimize=True, profile=True)
prof = Profile(exe.profile)        # exe.profile: the Recorder the plan appends to
exe.run(inputs)
prof.export_chrome_trace("trace.json")   # Perfetto / chrome://tracing
print(prof.key_averages().table())       # time per op type
print(prof.key_averages(group_by="site").table())  # per call site (MatMul.101 in fc1)
```

Trace layout (Chrome trace event format, `ts`/`dur` in microseconds from the first
recorded event): one process per replica (`replica r`), one thread per row: `IPU k` for
kernels placed on virtual IPU k (unplaced ones on `IPU 0`, popxl's default), `copies` for `rt.copy`
(moves between buffers, IPU copies included), `host transfers` for `rt.h2d` / `rt.d2h`.
Each row has a `step` slice per run and, inside it, a slice per graph call (consecutive
kernels of one non-main graph) holding the kernel slices. When virtual IPUs run
concurrently (`xl.runtime.concurrent`), each stream's worker thread appends its events
with its own timestamps (`list.append` is atomic) and the IPU rows overlap in time; every
op then has the IPU of its stream, so copies and host transfers get a row per IPU
(`copies (IPU 1)`, `host transfers (IPU 0)`) and no row holds two threads' events.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute, Operation

from xl.dialects import rt
from xl.dialects.ipu import placement

# discardable attributes naming the source of an op (set by the frontend, kept by lowering)
SOURCE_ATTR = "rt.source"  # "MatMul.101": PopART type name and frontend op id
GRAPH_ATTR = "rt.graph"  # the graph the op was written in


def fused_source_attrs(*ops: Operation) -> dict[str, Attribute]:
    """The source attributes of a kernel an rt pass fuses from `ops` (in program order):
    their sources joined (`MatMul.101+Add.102`), the first one's graph."""
    names: list[str] = []
    for op in ops:
        name = _str_attr(op, SOURCE_ATTR)
        if name and name not in names:
            names.append(name)
    attrs: dict[str, Attribute] = {}
    if names:
        attrs[SOURCE_ATTR] = StringAttr("+".join(names))
    graph = next((g for g in (_str_attr(op, GRAPH_ATTR) for op in ops) if g), None)
    if graph:
        attrs[GRAPH_ATTR] = StringAttr(graph)
    return attrs


HOST_ROW = "host transfers"
COPY_ROW = "copies"
MAIN_GRAPHS = ("main", "main_graph")


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """What one planned kernel is (profile rows, table keys, error messages)."""

    kind: str  # "kernel", "collective", "copy", "h2d", "d2h"
    name: str  # the rt kernel name (`popxl.matmul`), op name or stream name
    op_type: str  # PopART type name (`MatMul`), `Copy`, `HostLoad`, `HostStore`
    source: str | None  # `MatMul.101` when the program says
    graph: str | None  # the graph the op was written in
    ipu: int | None

    @property
    def row(self) -> str:
        """`IPU k`; copies and host transfers on their own rows, one per IPU when the op
        runs on a known IPU (`copies (IPU 1)`: a concurrent plan's stream of IPU 1)."""
        if self.kind in ("h2d", "d2h", "copy"):
            row = HOST_ROW if self.kind != "copy" else COPY_ROW
            return row if self.ipu is None else f"{row} (IPU {self.ipu})"
        return f"IPU {self.ipu if self.ipu is not None else 0}"  # unplaced: IPU 0

    @property
    def label(self) -> str:
        """The slice name: `MatMul.101`, else the op type (`Copy`, `HostLoad image`)."""
        if self.source:
            return self.source
        if self.kind in ("h2d", "d2h"):
            return f"{self.op_type} {self.name}"
        return self.op_type

    @property
    def site(self) -> str:
        """The call site: the op and the graph it was written in."""
        return f"{self.label} @ {self.graph}" if self.graph else self.label

    def describe(self) -> str:
        """`MatMul.101 (popxl.matmul in graph fc1, IPU 0)` for error messages."""
        where = [self.name]
        if self.graph:
            where.append(f"in graph {self.graph}")
        if self.ipu is not None:
            where.append(f"on IPU {self.ipu}")
        head = self.source or self.op_type
        return f"{head} ({' '.join(where)})"


def _str_attr(op: Operation, key: str) -> str | None:
    a = op.attributes.get(key)
    return a.data if isinstance(a, StringAttr) else None


def kernel_info(op: Operation) -> KernelInfo:
    """The `KernelInfo` of an executed `rt` op (kernel, copy, h2d, d2h)."""
    from xl.dialects.traits import popart_type
    from xl.runtime.collectives import is_collective
    from xl.runtime.registry import kernel_class

    ipu = placement(op)
    source, graph = _str_attr(op, SOURCE_ATTR), _str_attr(op, GRAPH_ATTR)
    if isinstance(op, rt.KernelOp):
        name = op.kernel.data
        cls = kernel_class(name)
        if isinstance(cls, type) and issubclass(cls, Operation):
            op_type = popart_type(cls)
        elif cls is not None:  # a runtime kernel class (`xl.*`): GemmAccKernel -> GemmAcc
            op_type = cls.__name__.removesuffix("Kernel")
        else:
            op_type = name
        kind = "collective" if cls is not None and is_collective(cls) else "kernel"
        return KernelInfo(kind, name, op_type, source, graph, ipu)
    if isinstance(op, rt.H2DOp):
        return KernelInfo("h2d", op.stream.data, "HostLoad", source, graph, ipu)
    if isinstance(op, rt.D2HOp):
        return KernelInfo("d2h", op.stream.data, "HostStore", source, graph, ipu)
    return KernelInfo("copy", op.name, "Copy", source, graph, ipu)


def failure_message(info: KernelInfo, replica: int, replicas: int, error: BaseException) -> str:
    """The message of a kernel failing at run time: the op, then what the kernel said."""
    rep = f" on replica {replica}" if replicas > 1 else ""
    return f"{info.describe()}{rep} failed: {error}"


def renamed(error: BaseException, message: str) -> BaseException:
    """`error` as the same exception type with `message` (a note on the original when the
    type cannot be built from one message)."""
    try:
        new = type(error)(message)
    except Exception:
        new = None
    if new is None or str(new) != message:
        error.add_note(message)
        return error
    return new.with_traceback(error.__traceback__)


# ------------------------------------------------------------------------------------
# Recording
# ------------------------------------------------------------------------------------


@dataclass
class Recorder:
    """The events of a profiled executable: per local replica, the kernel table and the
    list the plan appends `(kernel index, start ns, end ns)` to; the step spans."""

    replicas: list[int]  # global replica indices
    infos: list[list[KernelInfo]]
    events: list[list[tuple[int, int, int]]]
    steps: list[tuple[int, int]] = field(default_factory=list)

    def clear(self) -> None:
        for ev in self.events:
            ev.clear()
        self.steps.clear()

    def mark(self) -> tuple[int, list[int]]:
        """Where the recording is now (see `Profile`)."""
        return len(self.steps), [len(ev) for ev in self.events]


@dataclass(frozen=True, slots=True)
class Event:
    """One kernel execution."""

    replica: int
    info: KernelInfo
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class Profile:
    """The recorded runs of a profiled executable (since `start`, a `Recorder.mark()`, up
    to `stop` or now): kernel events, the trace, the tables."""

    def __init__(self, recorder: Recorder, start: tuple[int, list[int]] | None = None) -> None:
        self.recorder = recorder
        self._start = start or (0, [0] * len(recorder.events))
        self._stop: tuple[int, list[int]] | None = None

    def stop(self) -> None:
        """Freeze the profile at what was recorded so far."""
        self._stop = self.recorder.mark()

    def _range(self) -> tuple[tuple[int, list[int]], tuple[int, list[int]]]:
        return self._start, self._stop if self._stop is not None else self.recorder.mark()

    def events(self) -> list[Event]:
        """Every kernel execution, per replica in order."""
        (_, s), (_, e) = self._range()
        r = self.recorder
        out = []
        for i, (rep, infos, ev) in enumerate(zip(r.replicas, r.infos, r.events)):
            out += [Event(rep, infos[k], t0, t1) for k, t0, t1 in ev[s[i] : e[i]]]
        return out

    def steps(self) -> list[tuple[int, int]]:
        """The (start ns, end ns) of each run."""
        (s, _), (e, _) = self._range()
        return self.recorder.steps[s:e]

    # -- the per-op table -------------------------------------------------------------------
    def key_averages(self, group_by: str = "type") -> OpTable:
        """Time per op type (`group_by="type"`: `MatMul`), per call site (`"site"`:
        `MatMul.101 @ fc1_subgraph(0)`), per graph (`"graph"`) or per row (`"row"`),
        over every replica; sorted by total time."""
        keys = {
            "type": lambda i: i.op_type,
            "site": lambda i: i.site,
            "graph": lambda i: i.graph or "main",
            "row": lambda i: i.row,
        }
        if group_by not in keys:
            raise ValueError(f"key_averages: group_by must be one of {sorted(keys)}, got {group_by!r}")
        key = keys[group_by]
        totals: dict[str, list[int]] = {}
        for e in self.events():
            t = totals.setdefault(key(e.info), [0, 0])
            t[0] += 1
            t[1] += e.duration_ns
        rows = [OpRow(k, c, t) for k, (c, t) in totals.items()]
        rows.sort(key=lambda r: (-r.total_ns, r.key))
        return OpTable(group_by, rows)

    # -- the trace ----------------------------------------------------------------------
    def chrome_trace(self) -> dict[str, Any]:
        """The trace as a Chrome trace event format object (`{"traceEvents": [...]}`)."""
        events = self.events()
        steps = self.steps()
        t_first = min([e.start_ns for e in events] + [s for s, _ in steps], default=0)

        def us(ns: int) -> float:
            return (ns - t_first) / 1000.0

        out: list[dict[str, Any]] = []
        rows: dict[tuple[int, str], int] = {}

        def tid(replica: int, row: str) -> int:
            key = (replica, row)
            if key not in rows:
                rows[key] = _row_order(row)
            return rows[key]

        by_row: dict[tuple[int, str], list[Event]] = {}
        for e in events:
            by_row.setdefault((e.replica, e.info.row), []).append(e)
        for evs in by_row.values():  # (threads of a concurrent plan append in any order)
            evs.sort(key=lambda e: e.start_ns)
        for (rep, row), evs in by_row.items():
            t = tid(rep, row)
            for s0, s1 in steps:
                out.append(_complete("step", "step", rep, t, us(s0), (s1 - s0) / 1000.0, {}))
            for graph, run in _graph_runs(evs, [s0 for s0, _ in steps]):
                g0, g1 = run[0].start_ns, run[-1].end_ns
                out.append(
                    _complete(
                        graph, "graph call", rep, t, us(g0), (g1 - g0) / 1000.0, {"graph": graph, "kernels": len(run)}
                    )
                )
            for e in evs:
                i = e.info
                args: dict[str, Any] = {"op": i.name, "type": i.op_type}
                if i.source:
                    args["source"] = i.source
                if i.graph:
                    args["graph"] = i.graph
                if i.ipu is not None:
                    args["ipu"] = i.ipu
                out.append(_complete(i.label, i.graph or i.kind, rep, t, us(e.start_ns), e.duration_ns / 1000.0, args))
        meta: list[dict[str, Any]] = []
        for rep in sorted({r for r, _ in rows}):
            meta.append({"ph": "M", "name": "process_name", "pid": rep, "tid": 0, "args": {"name": f"replica {rep}"}})
            meta.append({"ph": "M", "name": "process_sort_index", "pid": rep, "tid": 0, "args": {"sort_index": rep}})
        for (rep, row), t in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[1])):
            meta.append({"ph": "M", "name": "thread_name", "pid": rep, "tid": t, "args": {"name": row}})
            meta.append({"ph": "M", "name": "thread_sort_index", "pid": rep, "tid": t, "args": {"sort_index": t}})
        return {"traceEvents": meta + out, "displayTimeUnit": "ms"}

    def export_chrome_trace(self, path: str | Path) -> None:
        """Write the trace (Chrome trace event format JSON: Perfetto, chrome://tracing)."""
        Path(path).write_text(json.dumps(self.chrome_trace()))

    def table(self, group_by: str = "type", row_limit: int | None = None) -> str:
        return self.key_averages(group_by).table(row_limit=row_limit)


def _row_order(row: str) -> int:
    """Thread ids: IPU k -> k; copies, host transfers after the IPUs (per IPU: the
    copies and transfers of IPU k at 1001 + 10 k and 1002 + 10 k)."""
    if row.startswith("IPU ") and row[4:].isdigit():
        return int(row[4:])
    head, _, ipu = row.partition(" (IPU ")
    k = int(ipu[:-1]) if ipu.endswith(")") and ipu[:-1].isdigit() else 0
    return {COPY_ROW: 1001, HOST_ROW: 1002}.get(head, 1009) + 10 * k


def _graph_runs(evs: Sequence[Event], step_starts: Sequence[int]) -> Iterator[tuple[str, list[Event]]]:
    """Maximal runs of consecutive events of one non-main graph on a row (one graph call's
    kernels), never crossing the start of a step (`step_starts`, ascending)."""
    run: list[Event] = []
    step = -1
    for e in evs:
        g = e.info.graph
        s = bisect.bisect_right(step_starts, e.start_ns)
        if run and (g != run[0].info.graph or s != step):
            yield run[0].info.graph or "", run
            run = []
        step = s
        if g and g not in MAIN_GRAPHS:
            run.append(e)
    if run:
        yield run[0].info.graph or "", run


def _complete(name: str, cat: str, pid: int, tid: int, ts: float, dur: float, args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": max(dur, 0.0), "args": args}


@dataclass(frozen=True, slots=True)
class OpRow:
    key: str
    count: int
    total_ns: int

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


@dataclass
class OpTable:
    """Rows of `Profile.key_averages`, sorted by total time; `table()` prints them as
    torch.profiler's `key_averages().table()` does."""

    group_by: str
    rows: list[OpRow]

    @property
    def total_ns(self) -> int:
        return sum(r.total_ns for r in self.rows)

    def __iter__(self) -> Iterator[OpRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def table(self, row_limit: int | None = None, sort_by: str = "total") -> str:
        """The rows as text, sorted by `sort_by` ("total", "mean" or "count", largest
        first), the first `row_limit` of them; the Total line covers every row."""
        keys = {"total": lambda r: r.total_ns, "mean": lambda r: r.mean_ns, "count": lambda r: r.count}
        if sort_by not in keys:
            raise ValueError(f"table: sort_by must be one of {sorted(keys)}, got {sort_by!r}")
        rows = sorted(self.rows, key=lambda r: (-keys[sort_by](r), r.key))
        rows = rows if row_limit is None else rows[:row_limit]
        total = self.total_ns
        head = {"type": "Op type", "site": "Call site", "graph": "Graph", "row": "Row"}[self.group_by]
        width = max([len(head)] + [len(r.key) for r in rows])
        cols = f"{head:<{width}}  {'Count':>8}  {'Total':>11}  {'Mean':>11}  {'%':>6}"
        lines = [cols, "-" * len(cols)]
        for r in rows:
            pct = 100.0 * r.total_ns / total if total else 0.0
            lines.append(
                f"{r.key:<{width}}  {r.count:>8}  {_fmt_ns(r.total_ns):>11}  {_fmt_ns(r.mean_ns):>11}  {pct:>5.1f}%"
            )
        lines.append("-" * len(cols))
        lines.append(f"{'Total':<{width}}  {sum(r.count for r in self.rows):>8}  {_fmt_ns(total):>11}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f}ms"
    return f"{ns / 1e3:.3f}us"
