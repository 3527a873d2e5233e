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
print(prof.key_averages(group_by_input_shape=True).table(sort_by="flops", row_limit=10))
```

What each kernel reads and does is worked out with its `KernelInfo`, once: the shapes and
dtypes of its inputs (torch.profiler's `record_shapes`) and, for kernels whose op class
declares `Flops` (matrix products, convolutions, the folded `xl.gemm_acc`), its
floating-point operations per execution (`with_flops`). Kernel slices carry them as
`args` (`"Input Dims"`, `"Input type"`, `"flops"`, as torch's traces do); the table sums
the FLOPs of each row and sorts by torch's column names (`sort_by="self_cpu_time_total"`,
`"cpu_time_total"`, `"cpu_time"`, `"count"`, `"flops"`); `OpTable.as_dict()` /
`to_json()` give the rows as data.

Trace layout (Chrome trace event format, `ts`/`dur` in microseconds from the first
recorded event): one process per replica (`replica r`), one thread per row: `IPU k` for
kernels placed on virtual IPU k (unplaced ones on `IPU 0`, popxl's default), `copies` for `rt.copy`
(moves between buffers, IPU copies included), `host transfers` for `rt.h2d` / `rt.d2h`.
Each row has a `step` slice per run and, inside it, a slice per graph call (consecutive
kernels of one non-main graph) holding the kernel slices. When virtual IPUs run
concurrently (`xl.runtime.concurrent`), each stream's worker thread appends its events
with its own timestamps (`list.append` is atomic) and the IPU rows overlap in time; every
op then has the IPU of its stream, so copies and host transfers get a row per IPU
(`copies (IPU 1)`, `host transfers (IPU 0)`), an op of one IPU that another IPU's worker
runs (`xl.runtime.stream_balance`) is on a row of its own (`IPU 0 on worker 1`), and no row
holds two threads' events.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation, SSAValue

from xl.dialects import rt
from xl.dialects.ipu import placement
from xl.dialects.rt import GRAPH_ATTR, SOURCE_ATTR
from xl.dialects.traits import Flops, flop_count
from xl.dialects.utils import dtype_of, shape_of

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
    # the shape and dtype name of each input, in operand order (`((2, 4), "float32")`)
    inputs: tuple[tuple[tuple[int, ...], str], ...] = ()
    flops: int | None = None  # per execution, when the op class declares `Flops`
    # the worker (stream) of a concurrent step running it when that is not its IPU's
    # (`xl.runtime.stream_balance`): its own row, `IPU 0 on worker 1`
    worker: int | None = None

    @property
    def input_shapes(self) -> list[list[int]]:
        """The input shapes as torch.profiler's `input_shapes` lists them."""
        return [list(shape) for shape, _ in self.inputs]

    @property
    def input_dtypes(self) -> list[str]:
        return [dtype for _, dtype in self.inputs]

    @property
    def row(self) -> str:
        """`IPU k`; copies and host transfers on their own rows, one per IPU when the op
        runs on a known IPU (`copies (IPU 1)`: a concurrent plan's stream of IPU 1)."""
        if self.kind in ("h2d", "d2h", "copy"):
            row = HOST_ROW if self.kind != "copy" else COPY_ROW
            row = row if self.ipu is None else f"{row} (IPU {self.ipu})"
        else:
            row = f"IPU {self.ipu if self.ipu is not None else 0}"  # unplaced: IPU 0
        return row if self.worker is None else f"{row} on worker {self.worker}"

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


def _inputs(values: Sequence[SSAValue]) -> tuple[tuple[tuple[int, ...], str], ...]:
    return tuple((shape_of(v.type), np.dtype(dtype_of(v.type)).name) for v in values)


def kernel_info(op: Operation) -> KernelInfo:
    """The `KernelInfo` of an executed `rt` op (kernel, copy, h2d, d2h): what it is, its
    inputs' shapes and dtypes, and its FLOPs when its op class declares them."""
    from xl.dialects.rt_kernels import kernel_class
    from xl.dialects.traits import popart_type
    from xl.runtime.kernels.collectives import is_collective

    ipu = placement(op)
    source, graph = _str_attr(op, SOURCE_ATTR), _str_attr(op, GRAPH_ATTR)
    if isinstance(op, rt.KernelOp):
        name = op.kernel.data
        cls = kernel_class(name)
        op_type = popart_type(cls) if cls is not None else name  # `xl.gemm_acc`: GemmAcc
        kind = "collective" if cls is not None and is_collective(cls) else "kernel"
        ins, outs = op.io()
        inputs = _inputs(ins)
        flops = None
        if cls is not None and cls.has_trait(Flops):
            flops = flop_count(cls, [s for s, _ in inputs], [shape_of(v.type) for v in outs], op.params)
        return KernelInfo(kind, name, op_type, source, graph, ipu, inputs, flops)
    if isinstance(op, rt.H2DOp):
        return KernelInfo("h2d", op.stream.data, "HostLoad", source, graph, ipu)
    if isinstance(op, rt.D2HOp):
        return KernelInfo("d2h", op.stream.data, "HostStore", source, graph, ipu, _inputs([op.buffer]))
    if isinstance(op, rt.CopyOp):
        return KernelInfo("copy", op.name, "Copy", source, graph, ipu, _inputs([op.source]))
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
    def key_averages(self, group_by: str = "type", group_by_input_shape: bool = False) -> OpTable:
        """Time per op type (`group_by="type"`: `MatMul`), per call site (`"site"`:
        `MatMul.101 @ fc1_subgraph(0)`), per graph (`"graph"`) or per row (`"row"`),
        over every replica; sorted by total time. `group_by_input_shape=True` (as
        torch.profiler) splits each row by the shapes of the kernels' inputs."""
        keys = {
            "type": lambda i: i.op_type,
            "site": lambda i: i.site,
            "graph": lambda i: i.graph or "main",
            "row": lambda i: i.row,
        }
        if group_by not in keys:
            raise ValueError(f"key_averages: group_by must be one of {sorted(keys)}, got {group_by!r}")
        key = keys[group_by]
        totals: dict[tuple[str, str], list[int]] = {}
        for e in self.events():
            shapes = _shapes_str(e.info) if group_by_input_shape else ""
            t = totals.setdefault((key(e.info), shapes), [0, 0, 0])
            t[0] += 1
            t[1] += e.duration_ns
            t[2] += e.info.flops or 0
        rows = [
            OpRow(k, c, t, f, shapes if group_by_input_shape else None) for (k, shapes), (c, t, f) in totals.items()
        ]
        rows.sort(key=lambda r: (-r.total_ns, r.key, r.input_shapes or ""))
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
                if i.inputs:  # torch.profiler's record_shapes keys
                    args["Input Dims"] = i.input_shapes
                    args["Input type"] = i.input_dtypes
                if i.flops is not None:
                    args["flops"] = i.flops
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

    def table(self, group_by: str = "type", row_limit: int | None = None, sort_by: str = "total") -> str:
        return self.key_averages(group_by).table(row_limit=row_limit, sort_by=sort_by)


def _shapes_str(info: KernelInfo) -> str:
    """The input shapes as torch's table prints them: `[[2, 4], [4, 4]]`."""
    return str(info.input_shapes)


def _row_order(row: str) -> int:
    """Thread ids: IPU k -> k; copies, host transfers after the IPUs (per IPU: the
    copies and transfers of IPU k at 1001 + 10 k and 1002 + 10 k); a row of ops another
    worker runs (`... on worker w`): 100000 (w + 1) + the row's own."""
    head, on, w = row.rpartition(" on worker ")
    if on and w.isdigit():
        return 100_000 * (int(w) + 1) + _row_order(head)
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
    """One row of `key_averages`: the kernels of one key, their count, total time and total
    FLOPs. The torch.profiler names of the figures (`cpu_time_total`, in microseconds, ...)
    are properties; a kernel has no children, so its self time is its time."""

    key: str
    count: int
    total_ns: int
    flops: int = 0  # summed over the executions (0: no kernel of the row declares FLOPs)
    input_shapes: str | None = None  # with group_by_input_shape: `[[2, 4], [4, 4]]`

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0

    @property
    def cpu_time_total(self) -> float:
        return self.total_ns / 1000.0

    @property
    def self_cpu_time_total(self) -> float:
        return self.total_ns / 1000.0

    @property
    def cpu_time(self) -> float:
        """The mean time per execution (microseconds)."""
        return self.mean_ns / 1000.0

    @property
    def self_cpu_time(self) -> float:
        return self.mean_ns / 1000.0

    @property
    def flops_per_second(self) -> float:
        return self.flops * 1e9 / self.total_ns if self.total_ns else 0.0


# `table(sort_by=...)`: xl's names and torch.profiler's column names (times in the table
# are the kernels' own, so self and total times are the same figure)
SORT_KEYS: dict[str, Any] = {
    "total": lambda r: r.total_ns,
    "cpu_time_total": lambda r: r.total_ns,
    "self_cpu_time_total": lambda r: r.total_ns,
    "mean": lambda r: r.mean_ns,
    "cpu_time": lambda r: r.mean_ns,
    "self_cpu_time": lambda r: r.mean_ns,
    "count": lambda r: r.count,
    "flops": lambda r: r.flops,
}


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

    def sorted_rows(self, sort_by: str = "total", row_limit: int | None = None) -> list[OpRow]:
        """The rows, largest first by `sort_by` (a key of `SORT_KEYS`: "total", "mean",
        "count", "flops" or torch's "self_cpu_time_total", "cpu_time_total", "cpu_time",
        "self_cpu_time"), the first `row_limit` of them."""
        if sort_by not in SORT_KEYS:
            extra = ""
            if "cuda" in sort_by or "device" in sort_by or "xpu" in sort_by:
                extra = " (xl's kernels run on the host: their time is the CPU time)"
            elif "memory" in sort_by:
                extra = " (memory is reported per buffer by session.memory_report(), not per kernel)"
            raise ValueError(f"table: sort_by must be one of {', '.join(SORT_KEYS)}, got {sort_by!r}{extra}")
        if row_limit is not None and (not isinstance(row_limit, int) or isinstance(row_limit, bool) or row_limit < 0):
            raise ValueError(f"table: row_limit must be a non-negative int, got {row_limit!r}")
        key = SORT_KEYS[sort_by]
        rows = sorted(self.rows, key=lambda r: (-key(r), r.key, r.input_shapes or ""))
        return rows if row_limit is None else rows[:row_limit]

    def table(self, row_limit: int | None = None, sort_by: str = "total") -> str:
        """The rows as text, sorted by `sort_by` (see `sorted_rows`), the first `row_limit`
        of them; the Total line covers every row. FLOPs columns when a row has FLOPs, an
        input shapes column with `group_by_input_shape`."""
        rows = self.sorted_rows(sort_by, row_limit)
        total = self.total_ns
        head = {"type": "Op type", "site": "Call site", "graph": "Graph", "row": "Row"}[self.group_by]
        width = max([len(head)] + [len(r.key) for r in rows])
        with_flops = any(r.flops for r in self.rows)
        shapes = any(r.input_shapes is not None for r in self.rows)
        cols = f"{head:<{width}}  {'Count':>8}  {'Total':>11}  {'Mean':>11}  {'%':>6}"
        if with_flops:
            cols += f"  {'FLOPs':>10}  {'FLOP/s':>10}"
        if shapes:
            cols += "  Input shapes"
        lines = [cols, "-" * len(cols)]
        for r in rows:
            pct = 100.0 * r.total_ns / total if total else 0.0
            line = f"{r.key:<{width}}  {r.count:>8}  {_fmt_ns(r.total_ns):>11}  {_fmt_ns(r.mean_ns):>11}  {pct:>5.1f}%"
            if with_flops:
                rate = (_fmt_si(r.flops), _fmt_si(r.flops_per_second)) if r.flops else ("", "")
                line += f"  {rate[0]:>10}  {rate[1]:>10}"
            if shapes:
                line += f"  {r.input_shapes}"
            lines.append(line.rstrip())
        lines.append("-" * len(cols))
        last = f"{'Total':<{width}}  {sum(r.count for r in self.rows):>8}  {_fmt_ns(total):>11}"
        if with_flops:
            flops = sum(r.flops for r in self.rows)
            last += f"  {'':>11}  {'':>6}  {_fmt_si(flops):>10}"
        lines.append(last)
        return "\n".join(lines)

    def as_dict(self, sort_by: str = "total", row_limit: int | None = None) -> dict[str, Any]:
        """The table as data (`--json`): the grouping, the total time and count, and the
        rows (key, count, total and mean time in microseconds, share of the total, FLOPs,
        input shapes when grouped by them), sorted as `table`."""
        total = self.total_ns
        rows: list[dict[str, Any]] = []
        for r in self.sorted_rows(sort_by, row_limit):
            row: dict[str, Any] = {
                "key": r.key,
                "count": r.count,
                "total_us": r.total_ns / 1000.0,
                "mean_us": r.mean_ns / 1000.0,
                "percent": 100.0 * r.total_ns / total if total else 0.0,
                "flops": r.flops,
            }
            if r.input_shapes is not None:
                row["input_shapes"] = r.input_shapes
            rows.append(row)
        return {
            "group_by": self.group_by,
            "total_us": total / 1000.0,
            "count": sum(r.count for r in self.rows),
            "flops": sum(r.flops for r in self.rows),
            "rows": rows,
        }

    def to_json(self, sort_by: str = "total", row_limit: int | None = None) -> str:
        return json.dumps(self.as_dict(sort_by, row_limit), indent=1)

    def __str__(self) -> str:
        return self.table()


def _fmt_si(x: float) -> str:
    """`512`, `3.25K`, `1.53G` (1000-based, 3 significant digits)."""
    for unit in ("", "K", "M", "G", "T"):
        if abs(x) < 1000 or unit == "T":
            return f"{x:.0f}{unit}" if unit == "" else f"{x:.3g}{unit}"
        x /= 1000.0
    return f"{x:.3g}P"


def _fmt_ns(ns: float) -> str:
    if ns >= 1e9:
        return f"{ns / 1e9:.3f}s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f}ms"
    return f"{ns / 1e3:.3f}us"
